//! The NBD wire protocol, as the NBD protocol document defines it
//! (`NetworkBlockDevice/nbd`, `doc/proto.md`): encode and decode only, no
//! I/O, no unsafe code.
//!
//! In the order a connection meets them:
//!
//! - [`handshake`]: fixed newstyle greeting, client flags, options and
//!   option replies, `OPT_GO`/`OPT_INFO` and their `NBD_INFO_*` items,
//!   meta context requests and replies.
//! - [`negotiate`]: the server's negotiation as a state machine (exports,
//!   TLS modes, structured replies, `base:allocation`); unknown options
//!   are answered `NBD_REP_ERR_UNSUP`.
//! - [`transmission`]: request headers, simple replies, structured reply
//!   chunks and their payloads.
//! - [`command`]: checking a request against the session (framing, flags,
//!   range, alignment, read-only), with the protocol's error values.
//!
//! Every decoder takes arbitrary bytes without panicking; [`replay`] runs a
//! raw client byte stream through them, and the fuzz targets and a
//! property test hold it to that.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod consts;
pub mod error;
pub mod wire;

pub mod handshake;
pub mod negotiate;

pub mod transmission;

pub mod command;

pub mod replay;

pub use command::{check, payload_len, Command};
pub use error::{NbdErrno, WireError};
pub use handshake::{
    BlockSize, Info, InfoRequest, MetaContextRequest, OptionHeader, OptionReplyHeader,
};
pub use negotiate::{ExportInfo, Negotiation, Session, Step, TlsMode};
pub use transmission::{ChunkHeader, Descriptor, ErrorPayload, ReplyHeader, Request};
