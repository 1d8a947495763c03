//! Accounting (Linux `struct disk_stats` and `/proc/diskstats`), plus
//! log-linear latency histograms per operation.
//!
//! Each context writes its own cache-padded [`StatShard`] with plain
//! load/store on atomics (one writer, so no read-modify-write and no shared
//! cache line), as Linux keeps disk stats per CPU; readers sum the shards.
//! The clock is read once per batch, and not at all with `iostats=0`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;
use hdrhistogram::Histogram;

use crate::bio::Op;

/// Stat group of an operation (Linux `op_stat_group`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum StatGroup {
    /// Reads.
    Read = 0,
    /// Writes and write-zeroes.
    Write = 1,
    /// Discards.
    Discard = 2,
    /// Flushes.
    Flush = 3,
}

/// Number of stat groups.
pub const NR_STAT_GROUPS: usize = 4;

impl StatGroup {
    /// The group an operation is accounted in.
    #[inline]
    pub fn of(op: Op) -> StatGroup {
        match op {
            Op::Read => StatGroup::Read,
            Op::Write | Op::WriteZeroes => StatGroup::Write,
            Op::Discard => StatGroup::Discard,
            Op::Flush => StatGroup::Flush,
        }
    }
}

/// One context's counters. Written only by its context.
#[derive(Debug, Default)]
pub struct StatShard {
    pub(crate) ios: [AtomicU64; NR_STAT_GROUPS],
    pub(crate) merges: [AtomicU64; NR_STAT_GROUPS],
    pub(crate) sectors: [AtomicU64; NR_STAT_GROUPS],
    pub(crate) nsecs: [AtomicU64; NR_STAT_GROUPS],
    pub(crate) in_flight: [AtomicU64; 2],
    pub(crate) requests: AtomicU64,
    pub(crate) bios: AtomicU64,
    pub(crate) splits: AtomicU64,
    pub(crate) bytes_copied: AtomicU64,
    pub(crate) requeues: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) errors: AtomicU64,
}

/// Add to a counter that only the calling context writes: a plain load and
/// store, no locked instruction.
#[inline(always)]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

#[inline(always)]
pub(crate) fn drop_by(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_sub(n), Relaxed);
}

/// A snapshot of a device's counters: the 17 `/proc/diskstats` fields (with
/// 512-byte sectors and milliseconds) plus the layer's own counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Completed I/Os per group.
    pub ios: [u64; NR_STAT_GROUPS],
    /// Merged I/Os per group.
    pub merges: [u64; NR_STAT_GROUPS],
    /// Sectors per group.
    pub sectors: [u64; NR_STAT_GROUPS],
    /// Nanoseconds spent per group.
    pub nsecs: [u64; NR_STAT_GROUPS],
    /// Requests in flight now (field 9).
    pub in_flight: u64,
    /// Milliseconds the device had I/O in flight (field 10).
    pub io_ticks_ms: u64,
    /// Requests built (one per tag use).
    pub requests: u64,
    /// Bios submitted.
    pub bios: u64,
    /// Bios split to fit the limits.
    pub splits: u64,
    /// Bytes copied through bounce buffers.
    pub bytes_copied: u64,
    /// Requests the driver answered busy.
    pub requeues: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Requests that completed with an error.
    pub errors: u64,
}

impl DiskStats {
    fn add_shard(&mut self, s: &StatShard) {
        for g in 0..NR_STAT_GROUPS {
            self.ios[g] += s.ios[g].load(Relaxed);
            self.merges[g] += s.merges[g].load(Relaxed);
            self.sectors[g] += s.sectors[g].load(Relaxed);
            self.nsecs[g] += s.nsecs[g].load(Relaxed);
        }
        self.in_flight = self
            .in_flight
            .wrapping_add(s.in_flight[0].load(Relaxed))
            .wrapping_add(s.in_flight[1].load(Relaxed));
        self.requests += s.requests.load(Relaxed);
        self.bios += s.bios.load(Relaxed);
        self.splits += s.splits.load(Relaxed);
        self.bytes_copied += s.bytes_copied.load(Relaxed);
        self.requeues += s.requeues.load(Relaxed);
        self.timeouts += s.timeouts.load(Relaxed);
        self.errors += s.errors.load(Relaxed);
    }

    /// The 17 diskstats fields after major, minor and name, in order.
    pub fn fields(&self) -> [u64; 17] {
        let ms = |g: usize| self.nsecs[g] / 1_000_000;
        let r = StatGroup::Read as usize;
        let w = StatGroup::Write as usize;
        let d = StatGroup::Discard as usize;
        let f = StatGroup::Flush as usize;
        [
            self.ios[r],
            self.merges[r],
            self.sectors[r],
            ms(r),
            self.ios[w],
            self.merges[w],
            self.sectors[w],
            ms(w),
            self.in_flight,
            self.io_ticks_ms,
            // time_in_queue: Linux sums the per-group ticks.
            ms(r) + ms(w) + ms(d) + ms(f),
            self.ios[d],
            self.merges[d],
            self.sectors[d],
            ms(d),
            self.ios[f],
            ms(f),
        ]
    }

    /// One `/proc/diskstats` line.
    pub fn diskstats_line(&self, major: u32, minor: u32, name: &str) -> String {
        let mut line = format!("{major:4} {minor:7} {name}");
        for v in self.fields() {
            line.push(' ');
            line.push_str(&v.to_string());
        }
        line
    }
}

/// Latency histograms, one per stat group, in nanoseconds. Log-linear
/// buckets (HdrHistogram, two significant digits); recording never allocates.
#[derive(Clone, Debug)]
pub struct Histograms {
    groups: [Histogram<u64>; NR_STAT_GROUPS],
}

impl Default for Histograms {
    fn default() -> Self {
        Self::new()
    }
}

impl Histograms {
    /// Empty histograms covering 1 ns to 100 s.
    pub fn new() -> Histograms {
        let h =
            || Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 2).expect("histogram bounds");
        Histograms {
            groups: [h(), h(), h(), h()],
        }
    }

    /// Record one latency.
    #[inline]
    pub fn record(&mut self, g: StatGroup, ns: u64) {
        self.groups[g as usize].saturating_record(ns.max(1));
    }

    /// The histogram of a group.
    pub fn group(&self, g: StatGroup) -> &Histogram<u64> {
        &self.groups[g as usize]
    }

    /// Add another set into this one.
    pub fn merge(&mut self, other: &Histograms) {
        for (a, b) in self.groups.iter_mut().zip(other.groups.iter()) {
            // Same bounds on both sides, so this cannot fail.
            let _ = a.add(b);
        }
    }

    /// Empty all groups.
    pub fn reset(&mut self) {
        for g in &mut self.groups {
            g.reset();
        }
    }
}

/// A device's stats: the live shards of its contexts, the totals of
/// contexts that have gone, the shared io_ticks stamp, and the merged
/// histograms. Control plane: only readers and context setup take the lock.
#[derive(Debug)]
pub struct DeviceStats {
    shards: Mutex<Vec<Arc<CachePadded<StatShard>>>>,
    retired: Mutex<(DiskStats, Histograms)>,
    io_ticks_ms: CachePadded<(AtomicU64, AtomicU64)>,
}

impl Default for DeviceStats {
    fn default() -> Self {
        Self::new()
    }
}

impl DeviceStats {
    pub(crate) fn new() -> DeviceStats {
        DeviceStats {
            shards: Mutex::new(Vec::new()),
            retired: Mutex::new((DiskStats::default(), Histograms::new())),
            io_ticks_ms: CachePadded::new((AtomicU64::new(0), AtomicU64::new(0))),
        }
    }

    pub(crate) fn register(&self) -> Arc<CachePadded<StatShard>> {
        let s = Arc::new(CachePadded::new(StatShard::default()));
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(s.clone());
        s
    }

    pub(crate) fn retire(&self, shard: &Arc<CachePadded<StatShard>>, hist: &Histograms) {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        retired.0.add_shard(shard);
        retired.1.merge(hist);
        shards.retain(|s| !Arc::ptr_eq(s, shard));
    }

    /// Linux `update_io_ticks`: at most one shared write per millisecond.
    #[inline]
    pub(crate) fn update_io_ticks(&self, now_ms: u64, busy: bool) {
        let (stamp, ticks) = &*self.io_ticks_ms;
        let old = stamp.load(Relaxed);
        if now_ms > old
            && stamp
                .compare_exchange(old, now_ms, Relaxed, Relaxed)
                .is_ok()
            && busy
            && old != 0
        {
            ticks.fetch_add(now_ms - old, Relaxed);
        }
    }

    /// Sum every context's counters.
    pub fn snapshot(&self) -> DiskStats {
        let shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = self.retired.lock().unwrap_or_else(|e| e.into_inner()).0;
        for sh in shards.iter() {
            s.add_shard(sh);
        }
        s.io_ticks_ms = self.io_ticks_ms.1.load(Relaxed);
        s
    }

    /// Histograms of contexts that have closed (live contexts report their
    /// own through `Context::histograms`).
    pub fn histograms(&self) -> Histograms {
        self.retired
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }
}
