//! Fuzz transmission-phase request parsing and checking: the first byte
//! picks the session (flags, structured replies, meta context), the rest
//! is the client's request stream.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqblk_nbd_proto::replay::{request_stream, sample_exports};
use mqblk_nbd_proto::Session;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let ex = sample_exports();
    let e = &ex[(sel & 1) as usize];
    let s = Session {
        export: (sel & 1) as usize,
        size: e.size,
        flags: e.flags | u16::from(sel >> 2) << 4,
        structured: sel & 2 != 0,
        base_allocation: (sel & 2 != 0).then_some(1),
        block_size: e.block_size,
    };
    request_stream(rest, &s);
});
