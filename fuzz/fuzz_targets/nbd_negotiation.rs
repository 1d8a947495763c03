//! Fuzz the server's fixed newstyle negotiation (and, when the bytes reach
//! `OPT_GO`/`OPT_EXPORT_NAME`, the requests after it) with a raw client
//! byte stream, in every TLS mode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mqblk_nbd_proto::replay::client_stream;
use mqblk_nbd_proto::TlsMode;

fuzz_target!(|data: &[u8]| {
    for mode in [TlsMode::Off, TlsMode::On, TlsMode::Require] {
        client_stream(data, mode);
    }
});
