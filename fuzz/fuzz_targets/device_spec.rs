//! Fuzz the device spec parser and the option takers: any string either
//! parses or gives a typed error, and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = mqblk_core::spec::parse(s) {
        let mut o = spec.options;
        let _ = o.take_size("size");
        let _ = o.take_u64("hw_queues");
        let _ = o.take_bool("plug");
        let _ = o.take_f64("x");
        let _ = o.take_str("completion");
        let mut cfg = mqblk_core::DeviceConfig::new("fuzz", 1 << 20);
        let _ = cfg.take_common(&mut o);
        let _ = o.finish();
    }
});
