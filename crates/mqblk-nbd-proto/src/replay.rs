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
