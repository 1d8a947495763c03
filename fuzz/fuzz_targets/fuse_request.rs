//! Fuzz the FUSE request parser (`mqblk_fuse::request::parse`): any bytes
//! read from `/dev/fuse` are a request, a malformed request (answered by
//! its unique) or a broken message, never a panic; a request's header
//! states the length read, and a write's data is what follows its prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqblk_fuse::abi::WRITE_PREFIX_LEN;
use mqblk_fuse::request::{parse, Op, Parsed};

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Parsed::Request(h, op) => {
            assert_eq!(h.len as usize, data.len());
            if let Op::Write { size, .. } = op {
                assert_eq!(data.len() - WRITE_PREFIX_LEN, size as usize);
            }
        }
        Parsed::Malformed(h, _) => assert_eq!(h.len as usize, data.len()),
        Parsed::Broken(_) => {}
    }
});
