//! The parsers take arbitrary bytes without panicking: the same entry
//! points as the cargo-fuzz targets in `fuzz/`, under proptest, so the
//! property is checked by every `cargo test`.

use mqblk_nbd_proto::consts::{cmd, opt, transmission_flags as tf};
use mqblk_nbd_proto::handshake::{decode_rep_meta_context, decode_rep_server};
use mqblk_nbd_proto::replay::{client_stream, request_stream, sample_exports};
use mqblk_nbd_proto::transmission::{decode_block_status, decode_offset_hole};
use mqblk_nbd_proto::*;
use proptest::prelude::*;

fn session(flags: u16, base: bool) -> Session {
    Session {
        export: 0,
        size: 1 << 30,
        flags: tf::HAS_FLAGS | flags,
        structured: true,
        base_allocation: base.then_some(1),
        block_size: BlockSize {
            min: 512,
            preferred: 4096,
            max_payload: 1 << 25,
        },
    }
}

/// A client stream with valid framing: flags, options with their magic
/// and a truthful length, `OPT_GO` to the sample export, then requests
/// with the request magic. Random content inside valid frames reaches far
/// deeper than random bytes.
fn framed_stream(options: &[(u32, Vec<u8>)], requests: &[(u16, u16, u64, u32)]) -> Vec<u8> {
    use mqblk_nbd_proto::handshake::encode_option;
    let mut v = vec![0, 0, 0, 3];
    for (o, d) in options {
        encode_option(*o, d, &mut v);
    }
    let mut go = Vec::new();
    InfoRequest {
        name: "disk",
        requests: vec![3],
    }
    .encode(&mut go);
    encode_option(opt::GO, &go, &mut v);
    for &(flags, c, offset, len) in requests {
        let r = Request {
            flags,
            cmd: c,
            cookie: 7,
            offset: offset & !511,
            len: len & 0xfffff,
        };
        v.extend_from_slice(&r.encode());
        if c == cmd::WRITE {
            v.extend(std::iter::repeat_n(0u8, (r.len as usize).min(4096)));
        }
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn negotiation_never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        client_stream(&data, TlsMode::Off);
        client_stream(&data, TlsMode::Require);
    }

    #[test]
    fn structured_options_never_panic(
        opt_code in prop_oneof![Just(opt::GO), Just(opt::INFO), Just(opt::LIST_META_CONTEXT),
                                Just(opt::SET_META_CONTEXT), Just(opt::LIST), any::<u32>()],
        data in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let ex = sample_exports();
        let mut n = Negotiation::new(&ex, TlsMode::On);
        let mut out = Vec::new();
        n.handle_option(opt::STRUCTURED_REPLY, &[], &mut out);
        n.handle_option(opt_code, &data, &mut out);
    }

    #[test]
    fn requests_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600), flags in any::<u16>(), base in any::<bool>()) {
        request_stream(&data, &session(flags, base));
    }

    #[test]
    fn checked_requests_stay_in_range(
        c in 0u16..10, f in any::<u16>(), offset in any::<u64>(), len in any::<u32>(), flags in any::<u16>(),
    ) {
        let s = session(flags, true);
        let r = Request { flags: f, cmd: c, cookie: 1, offset, len };
        match check(&s, &r) {
            Ok(Command::Read { offset, len }) | Ok(Command::Write { offset, len, .. })
            | Ok(Command::Trim { offset, len, .. }) | Ok(Command::Cache { offset, len })
            | Ok(Command::WriteZeroes { offset, len, .. }) | Ok(Command::BlockStatus { offset, len, .. }) => {
                prop_assert!(offset + u64::from(len) <= s.size);
                prop_assert_eq!(offset % 512, 0);
                prop_assert_eq!(len % 512, 0);
                if c == cmd::WRITE || c == cmd::TRIM || c == cmd::WRITE_ZEROES {
                    prop_assert!(s.flags & tf::READ_ONLY == 0);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn reply_decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200), typ in any::<u16>()) {
        let _ = ReplyHeader::decode(&data);
        let _ = ErrorPayload::decode(typ, &data);
        let mut v = Vec::new();
        let _ = decode_block_status(&data, &mut v);
        let _ = decode_offset_hole(&data);
        let _ = Info::decode(&data);
        let _ = decode_rep_server(&data);
        let _ = decode_rep_meta_context(&data);
        let _ = OptionReplyHeader::decode(&data);
        let _ = handshake::decode_greeting(&data);
    }

    #[test]
    fn framed_streams_never_panic(
        options in proptest::collection::vec(
            (prop_oneof![0u32..12, any::<u32>()], proptest::collection::vec(any::<u8>(), 0..64)), 0..8),
        requests in proptest::collection::vec((0u16..32, 0u16..9, 0u64..(1 << 31), any::<u32>()), 0..16),
    ) {
        let v = framed_stream(&options, &requests);
        client_stream(&v, TlsMode::Off);
        client_stream(&v, TlsMode::On);
    }
}
