//! Handshake messages of fixed newstyle negotiation: the server greeting,
//! the client flags, options and their replies, and the payloads of
//! `OPT_GO`/`OPT_INFO`, `OPT_*_META_CONTEXT`, `REP_SERVER`, `REP_INFO` and
//! `REP_META_CONTEXT`.
//!
//! Decoders take the received bytes and never panic; encoders append to a
//! `Vec<u8>`.

use crate::consts::{handshake_flags, info, rep, IHAVEOPT, MAX_OPTION_DATA, NBDMAGIC, REPLY_MAGIC};
use crate::error::WireError;
use crate::wire::{Put, Reader};

/// Bytes of the server greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
pub const GREETING_LEN: usize = 18;
/// Bytes of an option header: `IHAVEOPT`, option, length.
pub const OPTION_HEADER_LEN: usize = 16;
/// Bytes of an option reply header: magic, option, type, length.
pub const OPTION_REPLY_HEADER_LEN: usize = 20;

/// Encode the server greeting.
pub fn encode_greeting(flags: u16) -> [u8; GREETING_LEN] {
    let mut b = [0u8; GREETING_LEN];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&flags.to_be_bytes());
    b
}

/// Decode the server greeting; returns the handshake flags. Oldstyle
/// servers (`cliserv_magic` instead of `IHAVEOPT`) are refused.
pub fn decode_greeting(b: &[u8]) -> Result<u16, WireError> {
    let mut r = Reader::new(b);
    let m = r.u64()?;
    if m != NBDMAGIC {
        return Err(WireError::BadMagic {
            expected: NBDMAGIC,
            found: m,
        });
    }
    let m = r.u64()?;
    if m != IHAVEOPT {
        return Err(WireError::BadMagic {
            expected: IHAVEOPT,
            found: m,
        });
    }
    r.u16()
}

/// The client flags, checked against what the server offered. Unknown
/// flags, or flags the server did not offer, are an error (the server
/// must drop the connection).
pub fn decode_client_flags(b: &[u8], offered: u16) -> Result<u32, WireError> {
    let flags = Reader::new(b).u32()?;
    let mut allowed = crate::consts::client_flags::C_FIXED_NEWSTYLE;
    if offered & handshake_flags::NO_ZEROES != 0 {
        allowed |= crate::consts::client_flags::C_NO_ZEROES;
    }
    if flags & !allowed != 0 {
        return Err(WireError::BadClientFlags(flags));
    }
    Ok(flags)
}

/// An option header as the client sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    /// Option type (`consts::opt`).
    pub opt: u32,
    /// Bytes of option data that follow.
    pub len: u32,
}

impl OptionHeader {
    /// Decode, checking the magic and that the data length is one a
    /// server can afford to read ([`MAX_OPTION_DATA`]).
    pub fn decode(b: &[u8]) -> Result<OptionHeader, WireError> {
        let mut r = Reader::new(b);
        let m = r.u64()?;
        if m != IHAVEOPT {
            return Err(WireError::BadMagic {
                expected: IHAVEOPT,
                found: m,
            });
        }
        let opt = r.u32()?;
        let len = r.u32()?;
        if len > MAX_OPTION_DATA {
            return Err(WireError::TooLong {
                what: "option data",
                len: len.into(),
                max: MAX_OPTION_DATA.into(),
            });
        }
        Ok(OptionHeader { opt, len })
    }
}

/// Append an option (header and data).
pub fn encode_option(opt: u32, data: &[u8], out: &mut Vec<u8>) {
    out.put_u64(IHAVEOPT);
    out.put_u32(opt);
    out.put_u32(data.len() as u32);
    out.extend_from_slice(data);
}

/// An option reply header as the server sends it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionReplyHeader {
    /// The option this answers.
    pub opt: u32,
    /// Reply type (`consts::rep`).
    pub reply_type: u32,
    /// Bytes of reply data that follow.
    pub len: u32,
}

impl OptionReplyHeader {
    /// Decode, checking the magic and bounding the data length.
    pub fn decode(b: &[u8]) -> Result<OptionReplyHeader, WireError> {
        let mut r = Reader::new(b);
        let m = r.u64()?;
        if m != REPLY_MAGIC {
            return Err(WireError::BadMagic {
                expected: REPLY_MAGIC,
                found: m,
            });
        }
        let opt = r.u32()?;
        let reply_type = r.u32()?;
        let len = r.u32()?;
        if len > MAX_OPTION_DATA {
            return Err(WireError::TooLong {
                what: "option reply data",
                len: len.into(),
                max: MAX_OPTION_DATA.into(),
            });
        }
        Ok(OptionReplyHeader {
            opt,
            reply_type,
            len,
        })
    }

    /// True for error replies (bit 31).
    pub fn is_error(&self) -> bool {
        self.reply_type & rep::FLAG_ERROR != 0
    }
}

/// Append an option reply (header and data).
pub fn encode_option_reply(opt: u32, reply_type: u32, data: &[u8], out: &mut Vec<u8>) {
    out.put_u64(REPLY_MAGIC);
    out.put_u32(opt);
    out.put_u32(reply_type);
    out.put_u32(data.len() as u32);
    out.extend_from_slice(data);
}

/// Append the reply to `OPT_EXPORT_NAME`: size, flags, and 124 zero bytes
/// unless the client negotiated `C_NO_ZEROES`.
pub fn encode_export_name_reply(size: u64, flags: u16, no_zeroes: bool, out: &mut Vec<u8>) {
    out.put_u64(size);
    out.put_u16(flags);
    if !no_zeroes {
        out.extend_from_slice(&[0u8; 124]);
    }
}

/// The data of `OPT_INFO` and `OPT_GO`: an export name and the
/// information types the client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    /// Export name (empty: the default export).
    pub name: &'a str,
    /// Requested `NBD_INFO_*` types.
    pub requests: Vec<u16>,
}

impl<'a> InfoRequest<'a> {
    /// Decode option data.
    pub fn decode(data: &'a [u8]) -> Result<InfoRequest<'a>, WireError> {
        let mut r = Reader::new(data);
        let name = r.string32("export name")?;
        let n = r.u16()? as usize;
        if r.remaining() != 2 * n {
            return Err(WireError::Invalid {
                what: "information request count",
                why: "does not match the option length",
            });
        }
        let mut requests = Vec::with_capacity(n);
        for _ in 0..n {
            requests.push(r.u16()?);
        }
        Ok(InfoRequest { name, requests })
    }

    /// Encode as option data.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.name.len() as u32);
        out.extend_from_slice(self.name.as_bytes());
        out.put_u16(self.requests.len() as u16);
        for &t in &self.requests {
            out.put_u16(t);
        }
    }
}

/// The data of `OPT_LIST_META_CONTEXT` and `OPT_SET_META_CONTEXT`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaContextRequest<'a> {
    /// Export name.
    pub export: &'a str,
    /// Queries, such as `base:allocation`.
    pub queries: Vec<&'a str>,
}

impl<'a> MetaContextRequest<'a> {
    /// Decode option data.
    pub fn decode(data: &'a [u8]) -> Result<MetaContextRequest<'a>, WireError> {
        let mut r = Reader::new(data);
        let export = r.string32("export name")?;
        let n = r.u32()?;
        // Each query takes at least its 4-byte length: a count larger than
        // that is a lie, and must not size an allocation.
        if n as usize > r.remaining() / 4 {
            return Err(WireError::Invalid {
                what: "meta context query count",
                why: "larger than the option data can hold",
            });
        }
        let mut queries = Vec::with_capacity(n as usize);
        for _ in 0..n {
            queries.push(r.string32("meta context query")?);
        }
        r.finish("meta context request")?;
        Ok(MetaContextRequest { export, queries })
    }

    /// Encode as option data.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.export.len() as u32);
        out.extend_from_slice(self.export.as_bytes());
        out.put_u32(self.queries.len() as u32);
        for q in &self.queries {
            out.put_u32(q.len() as u32);
            out.extend_from_slice(q.as_bytes());
        }
    }
}

/// One `NBD_REP_INFO` item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Info<'a> {
    /// `INFO_EXPORT`: size and transmission flags.
    Export {
        /// Export size in bytes.
        size: u64,
        /// Transmission flags.
        flags: u16,
    },
    /// `INFO_NAME`: canonical name.
    Name(&'a str),
    /// `INFO_DESCRIPTION`.
    Description(&'a str),
    /// `INFO_BLOCK_SIZE`.
    BlockSize(BlockSize),
    /// An information type this crate does not know (clients ignore it).
    Unknown(u16),
}

/// Size constraints (`INFO_BLOCK_SIZE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize {
    /// Minimum block size: the smallest addressable length and alignment.
    pub min: u32,
    /// Preferred block size.
    pub preferred: u32,
    /// Maximum payload of one request.
    pub max_payload: u32,
}

impl BlockSize {
    /// Check the protocol's rules: powers of two, min ≤ 64 KiB, preferred
    /// ≥ max(min, 512), max payload ≥ preferred.
    pub fn check(&self) -> Result<(), WireError> {
        let bad = |why| {
            Err(WireError::Invalid {
                what: "block size",
                why,
            })
        };
        if !self.min.is_power_of_two() || self.min > 65536 {
            return bad("minimum must be a power of two up to 64 KiB");
        }
        if !self.preferred.is_power_of_two() || self.preferred < self.min.max(512) {
            return bad("preferred must be a power of two at least max(minimum, 512)");
        }
        if self.max_payload < self.preferred {
            return bad("maximum payload must be at least the preferred size");
        }
        Ok(())
    }
}

impl<'a> Info<'a> {
    /// Decode the data of an `NBD_REP_INFO` reply.
    pub fn decode(data: &'a [u8]) -> Result<Info<'a>, WireError> {
        let mut r = Reader::new(data);
        let t = r.u16()?;
        let v = match t {
            info::EXPORT => {
                let size = r.u64()?;
                let flags = r.u16()?;
                r.finish("INFO_EXPORT")?;
                Info::Export { size, flags }
            }
            info::NAME => Info::Name(r.string(r.remaining(), "INFO_NAME")?),
            info::DESCRIPTION => Info::Description(r.string(r.remaining(), "INFO_DESCRIPTION")?),
            info::BLOCK_SIZE => {
                let b = BlockSize {
                    min: r.u32()?,
                    preferred: r.u32()?,
                    max_payload: r.u32()?,
                };
                r.finish("INFO_BLOCK_SIZE")?;
                Info::BlockSize(b)
            }
            other => Info::Unknown(other),
        };
        Ok(v)
    }

    /// Encode as the data of an `NBD_REP_INFO` reply.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Info::Export { size, flags } => {
                out.put_u16(info::EXPORT);
                out.put_u64(*size);
                out.put_u16(*flags);
            }
            Info::Name(s) => {
                out.put_u16(info::NAME);
                out.extend_from_slice(s.as_bytes());
            }
            Info::Description(s) => {
                out.put_u16(info::DESCRIPTION);
                out.extend_from_slice(s.as_bytes());
            }
            Info::BlockSize(b) => {
                out.put_u16(info::BLOCK_SIZE);
                out.put_u32(b.min);
                out.put_u32(b.preferred);
                out.put_u32(b.max_payload);
            }
            Info::Unknown(t) => out.put_u16(*t),
        }
    }
}

/// Encode the data of `NBD_REP_SERVER`: a name and an optional description.
pub fn encode_rep_server(name: &str, description: &str, out: &mut Vec<u8>) {
    out.put_u32(name.len() as u32);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(description.as_bytes());
}

/// Decode the data of `NBD_REP_SERVER` into (name, description).
pub fn decode_rep_server(data: &[u8]) -> Result<(&str, &str), WireError> {
    let mut r = Reader::new(data);
    let name = r.string32("export name")?;
    let desc = r.string(r.remaining(), "export description")?;
    Ok((name, desc))
}

/// Encode the data of `NBD_REP_META_CONTEXT`.
pub fn encode_rep_meta_context(id: u32, name: &str, out: &mut Vec<u8>) {
    out.put_u32(id);
    out.extend_from_slice(name.as_bytes());
}

/// Decode the data of `NBD_REP_META_CONTEXT` into (id, name).
pub fn decode_rep_meta_context(data: &[u8]) -> Result<(u32, &str), WireError> {
    let mut r = Reader::new(data);
    let id = r.u32()?;
    let name = r.string(r.remaining(), "meta context name")?;
    Ok((id, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consts::opt;

    #[test]
    fn greeting_round_trip() {
        let g = encode_greeting(3);
        assert_eq!(decode_greeting(&g).unwrap(), 3);
        let mut bad = g;
        bad[9] ^= 1;
        assert!(matches!(
            decode_greeting(&bad),
            Err(WireError::BadMagic { .. })
        ));
    }

    #[test]
    fn client_flags_must_be_offered() {
        assert_eq!(decode_client_flags(&[0, 0, 0, 3], 3).unwrap(), 3);
        assert!(decode_client_flags(&[0, 0, 0, 3], 1).is_err());
        assert!(decode_client_flags(&[0, 0, 0, 4], 3).is_err());
    }

    #[test]
    fn option_round_trip_and_limits() {
        let mut v = Vec::new();
        InfoRequest {
            name: "disk",
            requests: vec![info::BLOCK_SIZE, info::NAME],
        }
        .encode(&mut v);
        let mut o = Vec::new();
        encode_option(opt::GO, &v, &mut o);
        let h = OptionHeader::decode(&o[..16]).unwrap();
        assert_eq!(h.opt, opt::GO);
        assert_eq!(h.len as usize, v.len());
        let r = InfoRequest::decode(&o[16..]).unwrap();
        assert_eq!(r.name, "disk");
        assert_eq!(r.requests, vec![info::BLOCK_SIZE, info::NAME]);
        // A huge option length is refused before anything is read.
        let mut big = o[..16].to_vec();
        big[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            OptionHeader::decode(&big),
            Err(WireError::TooLong { .. })
        ));
    }

    #[test]
    fn meta_context_request_round_trip() {
        let req = MetaContextRequest {
            export: "",
            queries: vec!["base:allocation", "qemu:dirty-bitmap:x"],
        };
        let mut v = Vec::new();
        req.encode(&mut v);
        assert_eq!(MetaContextRequest::decode(&v).unwrap(), req);
        // A lying count cannot make the decoder allocate.
        let mut lie = Vec::new();
        lie.put_u32(0);
        lie.put_u32(u32::MAX);
        assert!(MetaContextRequest::decode(&lie).is_err());
    }

    #[test]
    fn info_round_trip() {
        for i in [
            Info::Export {
                size: 1 << 30,
                flags: 0x1ff,
            },
            Info::Name("n"),
            Info::Description("d"),
            Info::BlockSize(BlockSize {
                min: 512,
                preferred: 4096,
                max_payload: 1 << 25,
            }),
        ] {
            let mut v = Vec::new();
            i.encode(&mut v);
            assert_eq!(Info::decode(&v).unwrap(), i);
        }
    }
}
