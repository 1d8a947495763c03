//! Fuzz the modern half of negotiation and transmission: structured
//! replies and `base:allocation` negotiated with fuzzed meta-context
//! queries and option order, then a request stream with `BLOCK_STATUS`;
//! and, on the client's side, a structured reply stream (`OFFSET_DATA`,
//! `OFFSET_HOLE`, `BLOCK_STATUS`, error chunks).
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqblk_nbd_proto::replay::{reply_stream, structured_stream};

fuzz_target!(|data: &[u8]| {
    let _ = structured_stream(data);
    reply_stream(data);
});
