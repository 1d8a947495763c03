//! Flush and FUA ordering (Linux `block/blk-flush.c`).
//!
//! A write with PREFLUSH, or with FUA on a device whose write cache has no
//! FUA, runs as a sequence: PREFLUSH → DATA → POSTFLUSH. A pure flush is one
//! flush stage. On a device without a volatile write cache, flushes complete
//! at once and the flags are dropped, as Linux does. Flush stages wait in a
//! flush queue: while one flush runs, every stage that arrives waits for the
//! next one, so concurrent flushes are combined into one (Linux keeps one
//! flush queue per hardware queue; mqblk keeps one per context, which is
//! finer and needs no lock).

use crate::bio::{BioFlags, Op};
use crate::limits::Features;

/// Stage bits of a sequence.
pub(crate) const PREFLUSH: u8 = 1;
/// The data stage.
pub(crate) const DATA: u8 = 2;
/// A flush after the data (FUA emulation).
pub(crate) const POSTFLUSH: u8 = 4;

/// What a bio needs from the flush machinery (Linux `blk_flush_policy`):
/// `0` means complete at once, `DATA` alone means an ordinary bio.
#[inline]
pub(crate) fn policy(op: Op, flags: BioFlags, features: &Features) -> u8 {
    if op == Op::Flush {
        return if features.write_cache { PREFLUSH } else { 0 };
    }
    if !features.write_cache {
        return DATA;
    }
    let mut p = DATA;
    if flags.contains(BioFlags::PREFLUSH) {
        p |= PREFLUSH;
    }
    if flags.contains(BioFlags::FUA) && !features.fua {
        p |= POSTFLUSH;
    }
    p
}

/// The flags a request keeps once the sequence is handled by the layer.
#[inline]
pub(crate) fn request_flags(flags: BioFlags, features: &Features) -> BioFlags {
    let mut f = BioFlags::NONE;
    if flags.contains(BioFlags::NOMERGE) {
        f |= BioFlags::NOMERGE;
    }
    if flags.contains(BioFlags::FUA) && features.write_cache && features.fua {
        f |= BioFlags::FUA;
    }
    f
}

/// A context's flush queue: the bios waiting on the running flush, and
/// those waiting on the next one.
#[derive(Debug)]
pub(crate) struct FlushQueue {
    pub(crate) running: bool,
    pub(crate) waiting_running: Vec<u32>,
    pub(crate) pending: Vec<u32>,
    /// Flush requests issued (for tests and stats).
    pub(crate) issued: u64,
}

impl FlushQueue {
    pub(crate) fn new(capacity: usize) -> FlushQueue {
        FlushQueue {
            running: false,
            waiting_running: Vec::with_capacity(capacity),
            pending: Vec::with_capacity(capacity),
            issued: 0,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        let wc = Features {
            write_cache: true,
            ..Features::default()
        };
        let wc_fua = Features {
            write_cache: true,
            fua: true,
            ..Features::default()
        };
        let none = Features::default();
        assert_eq!(policy(Op::Flush, BioFlags::NONE, &none), 0);
        assert_eq!(policy(Op::Flush, BioFlags::NONE, &wc), PREFLUSH);
        assert_eq!(policy(Op::Write, BioFlags::FUA, &none), DATA);
        assert_eq!(policy(Op::Write, BioFlags::FUA, &wc), DATA | POSTFLUSH);
        assert_eq!(policy(Op::Write, BioFlags::FUA, &wc_fua), DATA);
        assert_eq!(
            policy(Op::Write, BioFlags::FUA | BioFlags::PREFLUSH, &wc),
            PREFLUSH | DATA | POSTFLUSH
        );
        assert!(request_flags(BioFlags::FUA, &wc_fua).contains(BioFlags::FUA));
        assert!(!request_flags(BioFlags::FUA, &wc).contains(BioFlags::FUA));
        assert!(!request_flags(BioFlags::PREFLUSH, &wc).contains(BioFlags::PREFLUSH));
    }
}
