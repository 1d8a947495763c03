//! Transmission-phase messages: the request header, the simple reply, and
//! structured reply chunks with their payloads (`OFFSET_DATA`,
//! `OFFSET_HOLE`, `BLOCK_STATUS`, `ERROR`, `ERROR_OFFSET`).
//!
//! Headers are fixed-size arrays, so a server can encode them into a reply
//! queue without allocating; data payloads travel separately (the caller
//! writes the buffer after the header).

use crate::consts::{
    reply_flags, reply_type, REQUEST_MAGIC, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_MAGIC,
};
use crate::error::{NbdErrno, WireError};
use crate::wire::{Put, Reader};

/// Bytes of a request header.
pub const REQUEST_LEN: usize = 28;
/// Bytes of a simple reply header.
pub const SIMPLE_REPLY_LEN: usize = 16;
/// Bytes of a structured reply chunk header.
pub const CHUNK_HEADER_LEN: usize = 20;
/// Bytes of an `OFFSET_DATA` chunk before its data: header and offset.
pub const OFFSET_DATA_PREFIX_LEN: usize = CHUNK_HEADER_LEN + 8;
/// Bytes of one block status descriptor.
pub const DESCRIPTOR_LEN: usize = 8;

/// A request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Request {
    /// Command flags (`consts::cmd_flags`).
    pub flags: u16,
    /// Command type (`consts::cmd`).
    pub cmd: u16,
    /// Opaque cookie, echoed in the reply.
    pub cookie: u64,
    /// Byte offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl Request {
    /// Decode a header; only a bad magic (or too few bytes) fails.
    pub fn decode(b: &[u8]) -> Result<Request, WireError> {
        let mut r = Reader::new(b);
        let m = r.u32()?;
        if m != REQUEST_MAGIC {
            return Err(WireError::BadMagic {
                expected: REQUEST_MAGIC.into(),
                found: m.into(),
            });
        }
        Ok(Request {
            flags: r.u16()?,
            cmd: r.u16()?,
            cookie: r.u64()?,
            offset: r.u64()?,
            len: r.u32()?,
        })
    }

    /// Encode a header.
    pub fn encode(&self) -> [u8; REQUEST_LEN] {
        let mut b = [0u8; REQUEST_LEN];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.cmd.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// Encode a simple reply header (the read data, if any, follows).
pub fn encode_simple_reply(cookie: u64, error: u32) -> [u8; SIMPLE_REPLY_LEN] {
    let mut b = [0u8; SIMPLE_REPLY_LEN];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// Encode a structured chunk header.
pub fn encode_chunk_header(cookie: u64, flags: u16, typ: u16, len: u32) -> [u8; CHUNK_HEADER_LEN] {
    let mut b = [0u8; CHUNK_HEADER_LEN];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&typ.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// Encode the header and offset of a final `OFFSET_DATA` chunk carrying
/// `data_len` bytes read at `offset`; the data follows.
pub fn encode_offset_data_prefix(
    cookie: u64,
    offset: u64,
    data_len: u32,
) -> [u8; OFFSET_DATA_PREFIX_LEN] {
    let mut b = [0u8; OFFSET_DATA_PREFIX_LEN];
    let h = encode_chunk_header(
        cookie,
        reply_flags::DONE,
        reply_type::OFFSET_DATA,
        data_len.saturating_add(8),
    );
    b[..CHUNK_HEADER_LEN].copy_from_slice(&h);
    b[CHUNK_HEADER_LEN..].copy_from_slice(&offset.to_be_bytes());
    b
}

/// Append an `OFFSET_HOLE` chunk.
pub fn encode_offset_hole(cookie: u64, done: bool, offset: u64, len: u32, out: &mut Vec<u8>) {
    let flags = if done { reply_flags::DONE } else { 0 };
    out.extend_from_slice(&encode_chunk_header(
        cookie,
        flags,
        reply_type::OFFSET_HOLE,
        12,
    ));
    out.put_u64(offset);
    out.put_u32(len);
}

/// Append a final `NONE` chunk.
pub fn encode_none(cookie: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&encode_chunk_header(
        cookie,
        reply_flags::DONE,
        reply_type::NONE,
        0,
    ));
}

/// Append an `ERROR` chunk (final) with a human-readable message
/// (truncated to what the 16-bit length field and the protocol allow).
pub fn encode_error_chunk(cookie: u64, errno: NbdErrno, msg: &str, out: &mut Vec<u8>) {
    let msg = truncate_utf8(msg, 4096);
    out.extend_from_slice(&encode_chunk_header(
        cookie,
        reply_flags::DONE,
        reply_type::ERROR,
        6 + msg.len() as u32,
    ));
    out.put_u32(errno.code());
    out.put_u16(msg.len() as u16);
    out.extend_from_slice(msg.as_bytes());
}

fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One block status descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Length in bytes (nonzero).
    pub len: u32,
    /// Status flags (`consts::state` for `base:allocation`).
    pub flags: u32,
}

/// Append a final `BLOCK_STATUS` chunk for context `ctx_id`.
pub fn encode_block_status(cookie: u64, ctx_id: u32, descs: &[Descriptor], out: &mut Vec<u8>) {
    let len = 4 + DESCRIPTOR_LEN * descs.len();
    out.extend_from_slice(&encode_chunk_header(
        cookie,
        reply_flags::DONE,
        reply_type::BLOCK_STATUS,
        len as u32,
    ));
    out.put_u32(ctx_id);
    for d in descs {
        out.put_u32(d.len);
        out.put_u32(d.flags);
    }
}

/// The first 4 bytes of a server reply tell its kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyHeader {
    /// A simple reply: error and cookie (16 bytes in all).
    Simple {
        /// Error value (0: success).
        error: u32,
        /// Cookie of the request.
        cookie: u64,
    },
    /// A structured chunk header (20 bytes in all).
    Chunk(ChunkHeader),
}

/// A structured reply chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Reply flags (`consts::reply_flags`).
    pub flags: u16,
    /// Chunk type (`consts::reply_type`).
    pub typ: u16,
    /// Cookie of the request.
    pub cookie: u64,
    /// Payload length.
    pub len: u32,
}

impl ChunkHeader {
    /// True if this is the last chunk of its reply.
    pub fn done(&self) -> bool {
        self.flags & reply_flags::DONE != 0
    }
}

/// Bytes of a reply header, from its magic: 16 (simple) or 20 (chunk).
pub fn reply_header_len(magic: u32) -> Result<usize, WireError> {
    match magic {
        SIMPLE_REPLY_MAGIC => Ok(SIMPLE_REPLY_LEN),
        STRUCTURED_REPLY_MAGIC => Ok(CHUNK_HEADER_LEN),
        m => Err(WireError::BadMagic {
            expected: STRUCTURED_REPLY_MAGIC.into(),
            found: m.into(),
        }),
    }
}

impl ReplyHeader {
    /// Decode a whole reply header (its length from [`reply_header_len`]).
    pub fn decode(b: &[u8]) -> Result<ReplyHeader, WireError> {
        let mut r = Reader::new(b);
        let m = r.u32()?;
        match m {
            SIMPLE_REPLY_MAGIC => Ok(ReplyHeader::Simple {
                error: r.u32()?,
                cookie: r.u64()?,
            }),
            STRUCTURED_REPLY_MAGIC => Ok(ReplyHeader::Chunk(ChunkHeader {
                flags: r.u16()?,
                typ: r.u16()?,
                cookie: r.u64()?,
                len: r.u32()?,
            })),
            m => Err(WireError::BadMagic {
                expected: STRUCTURED_REPLY_MAGIC.into(),
                found: m.into(),
            }),
        }
    }
}

/// The payload of an error chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorPayload<'a> {
    /// The error.
    pub errno: NbdErrno,
    /// The message (possibly empty).
    pub message: &'a str,
    /// For `ERROR_OFFSET`, where.
    pub offset: Option<u64>,
}

impl<'a> ErrorPayload<'a> {
    /// Decode the payload of an error chunk of type `typ`. Unknown error
    /// types keep only the error and message.
    pub fn decode(typ: u16, payload: &'a [u8]) -> Result<ErrorPayload<'a>, WireError> {
        let mut r = Reader::new(payload);
        let code = r.u32()?;
        let mlen = r.u16()? as usize;
        if mlen > r.remaining() {
            return Err(WireError::Invalid {
                what: "error chunk",
                why: "message longer than the chunk",
            });
        }
        let msg_bytes = r.bytes(mlen)?;
        let message = std::str::from_utf8(msg_bytes).unwrap_or("(message not UTF-8)");
        let offset = if typ == reply_type::ERROR_OFFSET {
            Some(r.u64()?)
        } else {
            None
        };
        Ok(ErrorPayload {
            errno: NbdErrno::from_code(code),
            message,
            offset,
        })
    }
}

/// Decode the payload of a `BLOCK_STATUS` chunk into its context id and
/// descriptors (appended to `out`).
pub fn decode_block_status(payload: &[u8], out: &mut Vec<Descriptor>) -> Result<u32, WireError> {
    let mut r = Reader::new(payload);
    let id = r.u32()?;
    if r.remaining() == 0 || !r.remaining().is_multiple_of(DESCRIPTOR_LEN) {
        return Err(WireError::Invalid {
            what: "block status chunk",
            why: "length must be 4 plus a positive multiple of 8",
        });
    }
    while r.remaining() > 0 {
        out.push(Descriptor {
            len: r.u32()?,
            flags: r.u32()?,
        });
    }
    Ok(id)
}

/// Decode the payload of an `OFFSET_HOLE` chunk into (offset, length).
pub fn decode_offset_hole(payload: &[u8]) -> Result<(u64, u32), WireError> {
    let mut r = Reader::new(payload);
    let off = r.u64()?;
    let len = r.u32()?;
    r.finish("offset hole chunk")?;
    if len == 0 {
        return Err(WireError::Invalid {
            what: "offset hole chunk",
            why: "zero length",
        });
    }
    Ok((off, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::cmd;

    #[test]
    fn request_round_trip() {
        let r = Request {
            flags: 1,
            cmd: cmd::WRITE,
            cookie: 0xdead_beef_0000_0001,
            offset: 4096,
            len: 512,
        };
        assert_eq!(Request::decode(&r.encode()).unwrap(), r);
        let mut b = r.encode();
        b[0] = 0;
        assert!(matches!(
            Request::decode(&b),
            Err(WireError::BadMagic { .. })
        ));
        assert!(matches!(
            Request::decode(&r.encode()[..10]),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn replies_decode() {
        let s = encode_simple_reply(7, 22);
        assert_eq!(
            reply_header_len(u32::from_be_bytes([s[0], s[1], s[2], s[3]])).unwrap(),
            16
        );
        assert_eq!(
            ReplyHeader::decode(&s).unwrap(),
            ReplyHeader::Simple {
                error: 22,
                cookie: 7
            }
        );
        let mut v = Vec::new();
        encode_error_chunk(9, NbdErrno::Perm, "read-only", &mut v);
        let ReplyHeader::Chunk(h) = ReplyHeader::decode(&v[..20]).unwrap() else {
            panic!("chunk expected");
        };
        assert!(h.done());
        assert_eq!(h.typ, reply_type::ERROR);
        let e = ErrorPayload::decode(h.typ, &v[20..]).unwrap();
        assert_eq!(e.errno, NbdErrno::Perm);
        assert_eq!(e.message, "read-only");
        let mut v = Vec::new();
        let d = [
            Descriptor {
                len: 4096,
                flags: 3,
            },
            Descriptor {
                len: 8192,
                flags: 0,
            },
        ];
        encode_block_status(1, 5, &d, &mut v);
        let mut got = Vec::new();
        assert_eq!(decode_block_status(&v[20..], &mut got).unwrap(), 5);
        assert_eq!(got, d);
    }
}
