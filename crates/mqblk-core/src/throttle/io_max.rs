//! `io.max` (Linux blk-throttle): read and write limits in I/Os and bytes
//! per second, as token buckets that every context of a device (or of a
//! group) shares. A bio over the limit waits in its context, without a tag,
//! until the bucket's time comes (see the module above).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use super::token_bucket::TokenBucket;
use crate::bio::Op;

/// The four `io.max` limits; 0 is no limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoMaxLimits {
    /// Reads per second.
    pub riops: u64,
    /// Writes (and discards and write-zeroes) per second.
    pub wiops: u64,
    /// Bytes read per second.
    pub rbps: u64,
    /// Bytes written per second.
    pub wbps: u64,
}

impl IoMaxLimits {
    /// True if any limit is set.
    pub fn any(&self) -> bool {
        self.riops | self.wiops | self.rbps | self.wbps != 0
    }
}

/// The default burst window: what an idle bucket lets through at once.
pub const DEFAULT_BURST_MS: u64 = 10;

/// A device's count of limited io.max buckets (0: no bio is charged), and
/// the device's gate word, whose generation moves when the count does.
#[derive(Clone, Debug)]
pub(crate) struct QosWatch {
    pub(crate) count: Arc<AtomicU32>,
    pub(crate) gate: Arc<crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>>,
}

impl QosWatch {
    /// The count changed: move the gate's generation (bit 0, frozen, is
    /// left as it is).
    fn moved(&self) {
        self.gate.fetch_add(2, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The buckets of one `io.max`, shared by the contexts it throttles.
#[derive(Debug)]
pub struct IoMax {
    /// Any limit is set.
    limited: AtomicBool,
    /// The device's count of limited buckets and its gate, kept up to date
    /// here: a change of the count moves the gate, so contexts look at the
    /// count again at their next bio, and an unlimited device pays nothing
    /// per bio for all of its groups' limits and its own.
    watch: OnceLock<QosWatch>,
    riops: TokenBucket,
    wiops: TokenBucket,
    rbps: TokenBucket,
    wbps: TokenBucket,
}

impl IoMax {
    /// Limits with a burst window of `burst_ms`.
    pub fn new(limits: IoMaxLimits, burst_ms: u64) -> Arc<IoMax> {
        Arc::new(IoMax::unshared(limits, burst_ms))
    }

    /// The same, to be placed inside its owner.
    pub(crate) fn unshared(limits: IoMaxLimits, burst_ms: u64) -> IoMax {
        let w = burst_ms.saturating_mul(1_000_000);
        IoMax {
            limited: AtomicBool::new(limits.any()),
            watch: OnceLock::new(),
            riops: TokenBucket::new(limits.riops, w),
            wiops: TokenBucket::new(limits.wiops, w),
            rbps: TokenBucket::new(limits.rbps, w),
            wbps: TokenBucket::new(limits.wbps, w),
        }
    }

    /// The limits now.
    pub fn limits(&self) -> IoMaxLimits {
        IoMaxLimits {
            riops: self.riops.rate(),
            wiops: self.wiops.rate(),
            rbps: self.rbps.rate(),
            wbps: self.wbps.rate(),
        }
    }

    /// Change the limits, under load: the next bio is charged at the new
    /// rates.
    pub fn set_limits(&self, l: IoMaxLimits) {
        self.riops.set_rate(l.riops);
        self.wiops.set_rate(l.wiops);
        self.rbps.set_rate(l.rbps);
        self.wbps.set_rate(l.wbps);
        let now = l.any();
        if self.limited.swap(now, Relaxed) != now {
            if let Some(w) = self.watch.get() {
                if now {
                    w.count.fetch_add(1, Relaxed);
                } else {
                    w.count.fetch_sub(1, Relaxed);
                }
                w.moved();
            }
        }
    }

    /// Report to `counter` whether limits are set (once, when the device
    /// takes these limits). Limits that already report to another device
    /// count as always set on this one.
    pub(crate) fn attach(&self, watch: &QosWatch) {
        let attached = self.watch.set(watch.clone()).is_ok();
        if !attached || self.is_limited() {
            watch.count.fetch_add(1, Relaxed);
            watch.moved();
        }
    }

    /// True if any limit is set.
    #[inline]
    pub fn is_limited(&self) -> bool {
        self.limited.load(Relaxed)
    }

    /// Change the burst window.
    pub fn set_burst_ms(&self, burst_ms: u64) {
        let w = burst_ms.saturating_mul(1_000_000);
        for b in [&self.riops, &self.wiops, &self.rbps, &self.wbps] {
            b.set_burst_ns(w);
        }
    }

    /// Charge one bio of `op` and `bytes` at `now_ns`: when it may go.
    #[inline]
    pub fn charge(&self, op: Op, bytes: u64, now_ns: u64) -> u64 {
        let (iops, bps) = match op {
            Op::Read => (&self.riops, &self.rbps),
            Op::Write | Op::Discard | Op::WriteZeroes => (&self.wiops, &self.wbps),
            Op::Flush => return now_ns,
        };
        // Discards and write-zeroes move no data: they count as I/Os only.
        let data = if op == Op::Discard || op == Op::WriteZeroes {
            0
        } else {
            bytes
        };
        iops.charge(1, now_ns).max(bps.charge(data, now_ns))
    }
}
