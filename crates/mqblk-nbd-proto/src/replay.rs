//! Replaying a raw client byte stream through the server's parsers, with
//! no socket: the entry points of the fuzz targets (`fuzz/`) and of the
//! no-panic property test. Whatever the bytes, these must return.

use crate::consts::transmission_flags as tf;
use crate::handshake::{BlockSize, OptionHeader, OPTION_HEADER_LEN};
use crate::negotiate::{ExportInfo, Negotiation, Session, Step, TlsMode};
use crate::transmission::{Request, REQUEST_LEN};
use crate::{check, payload_len};

/// The export table the replays negotiate against.
pub fn sample_exports() -> Vec<ExportInfo> {
    vec![
        ExportInfo {
            name: "disk".into(),
            description: "sample".into(),
            size: 1 << 30,
            flags: tf::SEND_FLUSH
                | tf::SEND_FUA
                | tf::SEND_TRIM
                | tf::SEND_WRITE_ZEROES
                | tf::SEND_CACHE,
            block_size: BlockSize {
                min: 512,
                preferred: 4096,
                max_payload: 1 << 25,
            },
        },
        ExportInfo {
            name: "ro".into(),
            description: String::new(),
            size: 1 << 20,
            flags: tf::READ_ONLY,
            block_size: BlockSize {
                min: 4096,
                preferred: 4096,
                max_payload: 1 << 20,
            },
        },
    ]
}

/// Feed `data` to the server's negotiation as the client's bytes: flags,
/// then options; if negotiation reaches transmission, the rest is parsed
/// as requests. Returns the number of options handled.
pub fn client_stream(data: &[u8], tls: TlsMode) -> usize {
    let ex = sample_exports();
    let mut n = Negotiation::new(&ex, tls);
    if data.len() < 4 || n.client_flags(&data[..4]).is_err() {
        return 0;
    }
    let mut rest = &data[4..];
    let mut out = Vec::new();
    let mut handled = 0;
    while rest.len() >= OPTION_HEADER_LEN {
        let Ok(h) = OptionHeader::decode(&rest[..OPTION_HEADER_LEN]) else {
            return handled;
        };
        rest = &rest[OPTION_HEADER_LEN..];
        let len = (h.len as usize).min(rest.len());
        out.clear();
        let step = n.handle_option(h.opt, &rest[..len], &mut out);
        handled += 1;
        rest = &rest[len..];
        match step {
            Step::Continue => {}
            Step::StartTls => n.tls_started(),
            Step::Abort | Step::Close(_) => return handled,
            Step::Transmission(s) => {
                request_stream(rest, &s);
                return handled;
            }
        }
    }
    handled
}

/// Parse `data` as a stream of requests (headers and write payloads)
/// against session `s`, as the server's transmission loop does. Returns
/// the number of requests that passed every check.
pub fn request_stream(mut data: &[u8], s: &Session) -> usize {
    let mut ok = 0;
    while data.len() >= REQUEST_LEN {
        let Ok(r) = Request::decode(&data[..REQUEST_LEN]) else {
            return ok;
        };
        data = &data[REQUEST_LEN..];
        let Ok(p) = payload_len(s, &r) else {
            return ok;
        };
        data = &data[(p as usize).min(data.len())..];
        if check(s, &r).is_ok() {
            ok += 1;
        }
    }
    ok
}

/// Negotiate structured replies and `base:allocation` with well-formed
/// options whose contents come from `data` (the export, the meta-context
/// queries, the order of the options, whether `LIST_META_CONTEXT` comes
/// first), then replay the rest of `data` as requests, `BLOCK_STATUS`
/// included. Returns the number of requests that passed every check, or
/// `None` if negotiation did not reach transmission.
pub fn structured_stream(data: &[u8]) -> Option<usize> {
    use crate::consts::{client_flags, opt};
    use crate::handshake::{InfoRequest, MetaContextRequest};
    let (&sel, rest) = data.split_first()?;
    // Queries: up to 4 strings of the next bytes, split at NUL; the rest
    // after the second NUL run is the request stream.
    let (qbytes, requests) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut queries: Vec<&str> = qbytes
        .split(|&b| b == 0)
        .take(4)
        .map(|q| std::str::from_utf8(q).unwrap_or("base:allocation"))
        .collect();
    if sel & 8 != 0 {
        queries.push(crate::consts::BASE_ALLOCATION);
    }
    let ex = sample_exports();
    let export = if sel & 1 == 0 { "disk" } else { "ro" };
    let mut n = Negotiation::new(&ex, TlsMode::Off);
    let flags = client_flags::C_FIXED_NEWSTYLE | client_flags::C_NO_ZEROES;
    n.client_flags(&flags.to_be_bytes()).ok()?;
    let mut meta = Vec::new();
    MetaContextRequest {
        export,
        queries: queries.clone(),
    }
    .encode(&mut meta);
    let mut go = Vec::new();
    InfoRequest {
        name: export,
        requests: vec![],
    }
    .encode(&mut go);
    let mut order: Vec<(u32, &[u8])> = Vec::with_capacity(4);
    if sel & 4 != 0 {
        order.push((opt::LIST_META_CONTEXT, &meta));
    }
    if sel & 2 != 0 {
        order.push((opt::STRUCTURED_REPLY, &[]));
        order.push((opt::SET_META_CONTEXT, &meta));
    } else {
        order.push((opt::SET_META_CONTEXT, &meta));
        order.push((opt::STRUCTURED_REPLY, &[]));
    }
    if sel & 16 != 0 {
        // A second STRUCTURED_REPLY must be refused, and change nothing.
        order.push((opt::STRUCTURED_REPLY, &[]));
    }
    order.push((opt::GO, &go));
    let mut out = Vec::new();
    for (o, d) in order {
        out.clear();
        match n.handle_option(o, d, &mut out) {
            Step::Continue => {}
            Step::Transmission(s) => return Some(request_stream(requests, &s)),
            _ => return None,
        }
    }
    None
}

/// Parse `data` as a server's reply stream, as a client does: simple
/// replies and structured chunks, with the payloads of `OFFSET_DATA`,
/// `OFFSET_HOLE`, `BLOCK_STATUS` and error chunks decoded. Returns the
/// number of replies and chunks that decoded.
pub fn reply_stream(mut data: &[u8]) -> usize {
    use crate::consts::reply_type;
    use crate::transmission::{
        decode_block_status, decode_offset_hole, reply_header_len, ErrorPayload, ReplyHeader,
    };
    let mut ok = 0;
    let mut descs = Vec::new();
    while data.len() >= 4 {
        let magic = u32::from_be_bytes(data[..4].try_into().expect("4 bytes"));
        let Ok(hl) = reply_header_len(magic) else {
            return ok;
        };
        if data.len() < hl {
            return ok;
        }
        let Ok(h) = ReplyHeader::decode(&data[..hl]) else {
            return ok;
        };
        data = &data[hl..];
        let ReplyHeader::Chunk(c) = h else {
            ok += 1;
            continue;
        };
        let plen = (c.len as usize).min(data.len());
        let payload = &data[..plen];
        data = &data[plen..];
        let decoded = match c.typ {
            reply_type::NONE => payload.is_empty(),
            reply_type::OFFSET_DATA => payload.len() >= 8,
            reply_type::OFFSET_HOLE => decode_offset_hole(payload).is_ok(),
            reply_type::BLOCK_STATUS => {
                descs.clear();
                decode_block_status(payload, &mut descs).is_ok()
            }
            t if t & reply_type::FLAG_ERROR != 0 => ErrorPayload::decode(t, payload).is_ok(),
            _ => false,
        };
        if decoded {
            ok += 1;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_negotiation_reaches_transmission_with_base_allocation() {
        // sel: export "disk", STRUCTURED first, base:allocation added.
        let mut d = vec![2 | 8];
        d.extend_from_slice(b"base:allocation");
        d.push(0xff);
        let req = crate::transmission::Request {
            flags: 0,
            cmd: crate::consts::cmd::BLOCK_STATUS,
            cookie: 1,
            offset: 0,
            len: 4096,
        };
        d.extend_from_slice(&req.encode());
        assert_eq!(structured_stream(&d), Some(1));
    }

    #[test]
    fn reply_stream_decodes_what_the_server_encodes() {
        use crate::transmission::*;
        let mut v = Vec::new();
        encode_offset_hole(1, false, 0, 4096, &mut v);
        v.extend_from_slice(&encode_offset_data_prefix(1, 4096, 4));
        v.extend_from_slice(&[1, 2, 3, 4]);
        encode_block_status(2, 1, &[Descriptor { len: 512, flags: 3 }], &mut v);
        encode_error_chunk(3, crate::NbdErrno::Io, "bad", &mut v);
        v.extend_from_slice(&encode_simple_reply(4, 0));
        assert_eq!(reply_stream(&v), 5);
    }

    #[test]
    fn arbitrary_bytes_return() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for len in 0..512 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let _ = structured_stream(&v);
            let _ = reply_stream(&v);
        }
    }
}
