//! The protocol's numbers: magics, flags, option and reply types,
//! information types, commands and error values, with the names the NBD
//! protocol document (`doc/proto.md`) gives them.

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle greeting, and the prefix of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of an option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flags (server, 16 bits).
pub mod handshake_flags {
    /// The server speaks fixed newstyle.
    pub const FIXED_NEWSTYLE: u16 = 1 << 0;
    /// The server can omit the 124 zero bytes after `OPT_EXPORT_NAME`.
    pub const NO_ZEROES: u16 = 1 << 1;
}

/// Client flags (32 bits).
pub mod client_flags {
    /// The client speaks fixed newstyle.
    pub const C_FIXED_NEWSTYLE: u32 = 1 << 0;
    /// The client wants no zero padding after `OPT_EXPORT_NAME`.
    pub const C_NO_ZEROES: u32 = 1 << 1;
}

/// Transmission flags (16 bits), sent with the export's size.
pub mod transmission_flags {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// The export refuses writes.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `CMD_FLUSH` is supported.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `CMD_FLAG_FUA` is supported.
    pub const SEND_FUA: u16 = 1 << 3;
    /// The export is rotational.
    pub const ROTATIONAL: u16 = 1 << 4;
    /// `CMD_TRIM` is supported.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `CMD_WRITE_ZEROES` (and `CMD_FLAG_NO_HOLE`) is supported.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// `CMD_FLAG_DF` is supported (structured replies only).
    pub const SEND_DF: u16 = 1 << 7;
    /// Several connections to the export see each other's writes, and a
    /// flush on one covers all.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
    /// `CMD_CACHE` is understood.
    pub const SEND_CACHE: u16 = 1 << 10;
    /// `CMD_FLAG_FAST_ZERO` is supported.
    pub const SEND_FAST_ZERO: u16 = 1 << 11;
}

/// Option types (`NBD_OPT_*`).
pub mod opt {
    /// Choose an export and enter transmission (no error reply possible).
    pub const EXPORT_NAME: u32 = 1;
    /// End negotiation.
    pub const ABORT: u32 = 2;
    /// List exports.
    pub const LIST: u32 = 3;
    /// Upgrade to TLS.
    pub const STARTTLS: u32 = 5;
    /// Describe an export.
    pub const INFO: u32 = 6;
    /// Describe an export and enter transmission.
    pub const GO: u32 = 7;
    /// Use structured replies.
    pub const STRUCTURED_REPLY: u32 = 8;
    /// List metadata contexts.
    pub const LIST_META_CONTEXT: u32 = 9;
    /// Select metadata contexts.
    pub const SET_META_CONTEXT: u32 = 10;
    /// Extended headers (experimental; answered `ERR_UNSUP`).
    pub const EXTENDED_HEADERS: u32 = 11;
}

/// Option reply types (`NBD_REP_*`).
pub mod rep {
    /// Success, or the end of a list.
    pub const ACK: u32 = 1;
    /// One export of `OPT_LIST`.
    pub const SERVER: u32 = 2;
    /// One information item of `OPT_INFO`/`OPT_GO`.
    pub const INFO: u32 = 3;
    /// One metadata context.
    pub const META_CONTEXT: u32 = 4;
    /// Bit 31 marks an error reply.
    pub const FLAG_ERROR: u32 = 1 << 31;
    /// The option is unknown.
    pub const ERR_UNSUP: u32 = FLAG_ERROR | 1;
    /// Forbidden by policy.
    pub const ERR_POLICY: u32 = FLAG_ERROR | 2;
    /// Syntactically or semantically invalid.
    pub const ERR_INVALID: u32 = FLAG_ERROR | 3;
    /// Not supported on this platform.
    pub const ERR_PLATFORM: u32 = FLAG_ERROR | 4;
    /// TLS must be started first.
    pub const ERR_TLS_REQD: u32 = FLAG_ERROR | 5;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = FLAG_ERROR | 6;
    /// The server is shutting down.
    pub const ERR_SHUTDOWN: u32 = FLAG_ERROR | 7;
    /// The client must ask for `INFO_BLOCK_SIZE`.
    pub const ERR_BLOCK_SIZE_REQD: u32 = FLAG_ERROR | 8;
    /// The request or reply is too large.
    pub const ERR_TOO_BIG: u32 = FLAG_ERROR | 9;
}

/// Information types of `NBD_REP_INFO` (`NBD_INFO_*`).
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// Canonical name.
    pub const NAME: u16 = 1;
    /// Human-readable description.
    pub const DESCRIPTION: u16 = 2;
    /// Minimum, preferred and maximum block sizes.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Command types (`NBD_CMD_*`).
pub mod cmd {
    /// Read.
    pub const READ: u16 = 0;
    /// Write (a payload follows the header).
    pub const WRITE: u16 = 1;
    /// Disconnect (no reply).
    pub const DISC: u16 = 2;
    /// Flush.
    pub const FLUSH: u16 = 3;
    /// Trim (discard).
    pub const TRIM: u16 = 4;
    /// Cache (prefetch hint).
    pub const CACHE: u16 = 5;
    /// Write zeroes.
    pub const WRITE_ZEROES: u16 = 6;
    /// Block status.
    pub const BLOCK_STATUS: u16 = 7;
}

/// Command flags (`NBD_CMD_FLAG_*`).
pub mod cmd_flags {
    /// Force unit access.
    pub const FUA: u16 = 1 << 0;
    /// Write zeroes must not punch a hole.
    pub const NO_HOLE: u16 = 1 << 1;
    /// Read: at most one content chunk.
    pub const DF: u16 = 1 << 2;
    /// Block status: one extent.
    pub const REQ_ONE: u16 = 1 << 3;
    /// Write zeroes: fail fast unless fast.
    pub const FAST_ZERO: u16 = 1 << 4;
}

/// Structured reply flags.
pub mod reply_flags {
    /// The last chunk of a reply.
    pub const DONE: u16 = 1 << 0;
}

/// Structured reply chunk types (`NBD_REPLY_TYPE_*`).
pub mod reply_type {
    /// No payload; the final chunk.
    pub const NONE: u16 = 0;
    /// Data at an offset.
    pub const OFFSET_DATA: u16 = 1;
    /// Zeros at an offset.
    pub const OFFSET_HOLE: u16 = 2;
    /// Block status descriptors of one metadata context.
    pub const BLOCK_STATUS: u16 = 5;
    /// Bit 15 marks an error chunk.
    pub const FLAG_ERROR: u16 = 1 << 15;
    /// An error.
    pub const ERROR: u16 = FLAG_ERROR | 1;
    /// An error at an offset.
    pub const ERROR_OFFSET: u16 = FLAG_ERROR | 2;
}

/// `base:allocation` status flags.
pub mod state {
    /// Not allocated.
    pub const HOLE: u32 = 1 << 0;
    /// Reads as zeros.
    pub const ZERO: u32 = 1 << 1;
}

/// The only metadata context this crate knows.
pub const BASE_ALLOCATION: &str = "base:allocation";

/// Longest string the protocol allows (export names, messages, queries).
pub const MAX_STRING: usize = 4096;
/// Default TCP port.
pub const DEFAULT_PORT: u16 = 10809;
/// The maximum payload every implementation should accept (32 MiB).
pub const DEFAULT_MAX_PAYLOAD: u32 = 1 << 25;
/// Largest option data a server reads before it calls the option a
/// denial of service: room for a name, a few queries and info requests.
pub const MAX_OPTION_DATA: u32 = 64 * 1024;
