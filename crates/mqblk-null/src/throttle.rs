//! The bandwidth limit of the null device (Linux null_blk's `mbps`, its
//! `cur_bytes` budget refilled by an hrtimer every millisecond).
//!
//! Sits at the door of the driver's `queue_rq` when `mbps` is set: a
//! request is admitted while the device-wide byte budget is positive, and
//! answered busy otherwise, so the core keeps it and retries. The budget is
//! refilled from the coarse clock (a memory read in the vDSO) instead of a
//! timer, and it is shared by every hardware queue through two atomics: no
//! lock. A request larger than one millisecond's budget still passes when
//! the budget is positive; it leaves a debt that the next refills pay off,
//! so the average rate holds for any request size.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Most milliseconds of budget the bucket holds (the longest jiffy).
const BUCKET_MS: i64 = 10;

/// A device-wide token bucket, refilled every millisecond.
#[derive(Debug)]
pub(crate) struct Throttle {
    bytes_per_ms: i64,
    tokens: AtomicI64,
    last_refill_ms: AtomicU64,
}

impl Throttle {
    /// A bucket for `mbps` MiB/s (non-zero), full at `now_ms`.
    pub(crate) fn new(mbps: u64, now_ms: u64) -> Throttle {
        debug_assert!(mbps > 0);
        debug_assert!(mbps <= crate::config::MAX_MBPS);
        let bytes_per_ms = ((mbps << 20) / 1000).max(1) as i64;
        Throttle {
            bytes_per_ms,
            tokens: AtomicI64::new(bytes_per_ms),
            last_refill_ms: AtomicU64::new(now_ms),
        }
    }

    /// Admit `len_bytes` at time `now_ms` (coarse milliseconds), or refuse.
    #[inline]
    pub(crate) fn admit(&self, len_bytes: u64, now_ms: u64) -> bool {
        let last = self.last_refill_ms.load(Ordering::Relaxed);
        if now_ms > last
            && self
                .last_refill_ms
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // One refiller per tick: the exchange above elects it. The
            // coarse clock moves in jiffies (1 to 10 ms), so the bucket
            // holds up to 10 ms of budget: smaller, and every tick longer
            // than a millisecond would lose budget and undershoot `mbps`.
            let add = ((now_ms - last).min(1000) as i64) * self.bytes_per_ms;
            let cap = self.bytes_per_ms * BUCKET_MS;
            let _ = self
                .tokens
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                    Some((t + add).min(cap))
                });
        }
        let len = len_bytes.min(i64::MAX as u64 / 2) as i64;
        let before = self.tokens.fetch_sub(len, Ordering::Relaxed);
        if before > 0 {
            true
        } else {
            self.tokens.fetch_add(len, Ordering::Relaxed);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_per_millisecond() {
        // 1000 MiB/s = 1048576 bytes per ms.
        let t = Throttle::new(1000, 10);
        let mut admitted = 0u64;
        while t.admit(4096, 10) {
            admitted += 4096;
        }
        assert_eq!(admitted, 1_048_576, "one tick's budget at t=10");
        assert!(!t.admit(4096, 10), "still empty in the same tick");
        assert!(t.admit(4096, 11), "refilled at the next tick");
    }

    #[test]
    fn large_requests_pass_and_leave_a_debt() {
        // 1 MiB/s = 1048 bytes per ms; a 64 KiB request still passes once.
        let t = Throttle::new(1, 0);
        assert!(t.admit(65536, 0));
        assert!(!t.admit(512, 0));
        assert!(!t.admit(512, 30), "debt of ~64 KiB needs ~63 ticks");
        assert!(
            t.admit(512, 30 + 1000),
            "refill is capped per call but pays the debt"
        );
    }
}
