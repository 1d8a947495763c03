//! Accounting (Linux `struct disk_stats` and `/proc/diskstats`), plus
//! log-linear latency histograms per operation.
//!
//! Each context writes its own cache-padded [`StatShard`] with plain
//! load/store on atomics (one writer, so no read-modify-write and no shared
//! cache line), as Linux keeps disk stats per CPU; readers sum the shards.
//! The clock is read once per batch, and not at all with `iostats=0`.
//!
//! Busy time (`io_ticks`, field 10) follows Linux's `update_io_ticks`: a
//! device-wide millisecond stamp is advanced at I/O start and at I/O
//! completion, and the interval since the last stamp counts as busy at a
//! completion, or at a start when requests were already in flight. Only the
//! context that moves the stamp (at most once per millisecond) pays for the
//! in-flight check, which walks the shards without a lock.

use std::ptr;
use std::sync::atomic::{
    AtomicPtr, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
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
    /// The next shard in [`DeviceStats`]'s list of every shard (set once,
    /// under the registry lock, before the shard is published).
    next: AtomicPtr<CachePadded<StatShard>>,
}

impl StatShard {
    /// Requests this shard's context has started and not ended.
    #[inline]
    fn has_in_flight(&self) -> bool {
        self.in_flight[0].load(Relaxed) != 0 || self.in_flight[1].load(Relaxed) != 0
    }

    /// Zero every counter, for reuse by a new context.
    fn reset(&self) {
        let all = self
            .ios
            .iter()
            .chain(&self.merges)
            .chain(&self.sectors)
            .chain(&self.nsecs)
            .chain(&self.in_flight)
            .chain([
                &self.requests,
                &self.bios,
                &self.splits,
                &self.bytes_copied,
                &self.requeues,
                &self.timeouts,
                &self.errors,
            ]);
        for c in all {
            c.store(0, Relaxed);
        }
    }
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

    /// Add `o`'s counters to these (busy time included: callers that know
    /// better fix it up).
    pub fn add(&mut self, o: &DiskStats) {
        for g in 0..NR_STAT_GROUPS {
            self.ios[g] += o.ios[g];
            self.merges[g] += o.merges[g];
            self.sectors[g] += o.sectors[g];
            self.nsecs[g] += o.nsecs[g];
        }
        self.in_flight = self.in_flight.wrapping_add(o.in_flight);
        self.io_ticks_ms += o.io_ticks_ms;
        self.requests += o.requests;
        self.bios += o.bios;
        self.splits += o.splits;
        self.bytes_copied += o.bytes_copied;
        self.requeues += o.requeues;
        self.timeouts += o.timeouts;
        self.errors += o.errors;
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
            // time_in_queue: Linux sums the groups' nanoseconds, then
            // converts once.
            self.nsecs.iter().fold(0u64, |a, n| a.wrapping_add(*n)) / 1_000_000,
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

    /// Record `n` equal latencies at once.
    #[inline]
    fn record_n(&mut self, g: StatGroup, ns: u64, n: u64) {
        self.groups[g as usize].saturating_record_n(ns.max(1), n);
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
    shards: Mutex<Shards>,
    retired: Mutex<(DiskStats, Histograms)>,
    /// (stamp, busy milliseconds): Linux `bd_stamp` and `io_ticks`.
    io_ticks_ms: CachePadded<(AtomicU64, AtomicU64)>,
    /// Every shard ever made, newest first, linked through
    /// `StatShard::next`; the list holds one strong count of each, freed in
    /// `Drop`. Shards are reused, never removed, so a reader may walk it
    /// without the lock.
    all: AtomicPtr<CachePadded<StatShard>>,
    /// Stats of remapped views of this device (partitions, linear
    /// tables), summed into this device's at each snapshot, as Linux
    /// counts a partition's I/O on its disk too.
    views: Mutex<Vec<std::sync::Weak<DeviceStats>>>,
}

/// The registry behind the lock: shards of live contexts, and retired
/// shards (zeroed) waiting for a new context.
#[derive(Debug, Default)]
struct Shards {
    live: Vec<Arc<CachePadded<StatShard>>>,
    free: Vec<Arc<CachePadded<StatShard>>>,
}

impl Default for DeviceStats {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for DeviceStats {
    fn drop(&mut self) {
        let mut p = *self.all.get_mut();
        while !p.is_null() {
            // SAFETY: every pointer in the list came from `Arc::into_raw` in
            // `register`, which gave the list one strong count; `&mut self`
            // means no reader is walking the list, and each pointer is
            // visited once, so each count is given back exactly once.
            let shard = unsafe { Arc::from_raw(p) };
            p = shard.next.load(Relaxed);
        }
    }
}

impl DeviceStats {
    pub(crate) fn new() -> DeviceStats {
        DeviceStats {
            shards: Mutex::new(Shards::default()),
            retired: Mutex::new((DiskStats::default(), Histograms::new())),
            io_ticks_ms: CachePadded::new((AtomicU64::new(0), AtomicU64::new(0))),
            all: AtomicPtr::new(ptr::null_mut()),
            views: Mutex::new(Vec::new()),
        }
    }

    /// Sum `view`'s counters into this device's from now on.
    pub(crate) fn add_view(&self, view: &Arc<DeviceStats>) {
        let mut v = self.views.lock().unwrap_or_else(|e| e.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(view));
    }

    pub(crate) fn register(&self) -> Arc<CachePadded<StatShard>> {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let s = match shards.free.pop() {
            Some(s) => s,
            None => {
                let s = Arc::new(CachePadded::new(StatShard::default()));
                // Publish under the lock (one writer): link, then release
                // the new head so a walker sees a linked shard.
                s.next.store(self.all.load(Relaxed), Relaxed);
                self.all.store(Arc::into_raw(s.clone()).cast_mut(), Release);
                s
            }
        };
        shards.live.push(s.clone());
        s
    }

    pub(crate) fn retire(&self, shard: &Arc<CachePadded<StatShard>>, hist: &Histograms) {
        let mut shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
        let mut retired = self.retired.lock().unwrap_or_else(|e| e.into_inner());
        retired.0.add_shard(shard);
        retired.1.merge(hist);
        shards.live.retain(|s| !Arc::ptr_eq(s, shard));
        // Its counts are in `retired` now. A shard still holding requests
        // (a context that leaked them) is never reused, so they stay
        // visible to the in-flight check.
        if !shard.has_in_flight() {
            shard.reset();
            shards.free.push(shard.clone());
        }
    }

    /// Whether any context has requests in flight (Linux
    /// `bdev_count_inflight`). Walks every shard without a lock: called at
    /// most once per millisecond, by the context that moved the stamp.
    fn any_in_flight(&self) -> bool {
        let mut p = self.all.load(Acquire);
        while !p.is_null() {
            // SAFETY: list entries stay allocated until `Drop` (the list
            // owns a strong count of each), and the Acquire load of the head
            // pairs with the Release store in `register`, so every entry
            // reached, and its `next`, is initialised.
            let s = unsafe { &*p };
            if s.has_in_flight() {
                return true;
            }
            p = s.next.load(Relaxed);
        }
        false
    }

    /// Linux `update_io_ticks`, at I/O start (`end == false`, called before
    /// the new request is counted in flight) and at completion (`end ==
    /// true`). Whoever moves the stamp forward adds the interval since the
    /// previous stamp as busy time if it ended I/O, or if requests were in
    /// flight: at most one shared write per millisecond.
    #[inline]
    pub(crate) fn update_io_ticks(&self, now_ms: u64, end: bool) {
        let (stamp, ticks) = &*self.io_ticks_ms;
        let old = stamp.load(Relaxed);
        if now_ms > old
            && stamp
                .compare_exchange(old, now_ms, Relaxed, Relaxed)
                .is_ok()
            && old != 0
            && (end || self.any_in_flight())
        {
            ticks.fetch_add(now_ms - old, Relaxed);
        }
    }

    /// Sum every context's counters. With requests in flight, busy time is
    /// brought up to now first (as Linux's `diskstats_show` does), so a
    /// long request shows as busy while it runs.
    pub fn snapshot(&self) -> DiskStats {
        let mut s = {
            let shards = self.shards.lock().unwrap_or_else(|e| e.into_inner());
            let mut s = self.retired.lock().unwrap_or_else(|e| e.into_inner()).0;
            for sh in shards.live.iter() {
                s.add_shard(sh);
            }
            s
        };
        if s.in_flight != 0 {
            self.update_io_ticks(crate::clock::now_ns() / 1_000_000, true);
        }
        s.io_ticks_ms = self.io_ticks_ms.1.load(Relaxed);
        let views: Vec<Arc<DeviceStats>> = self
            .views
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for v in views {
            let vs = v.snapshot();
            // Busy time is not additive: the device was busy at least as
            // long as its busiest view.
            let ticks = s.io_ticks_ms.max(vs.io_ticks_ms);
            s.add(&vs);
            s.io_ticks_ms = ticks;
        }
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

/// Latencies of one completion batch, gathered into runs of equal values.
///
/// A request's start time is its submission batch's clock (one read per
/// batch) and its end time its completion batch's, so the requests of one
/// submission that complete together have the same latency. A run of them
/// costs one histogram update instead of one each: the same counts, a
/// fraction of the work.
pub(crate) struct LatencyRun {
    group: StatGroup,
    ns: u64,
    n: u64,
}

impl Default for LatencyRun {
    fn default() -> Self {
        // No latency is u64::MAX ns (585 years), so nothing extends an
        // empty run.
        LatencyRun {
            group: StatGroup::Read,
            ns: u64::MAX,
            n: 0,
        }
    }
}

impl LatencyRun {
    /// One more latency: extends the run, or records the run and starts
    /// another.
    #[inline]
    pub(crate) fn push(&mut self, hist: &mut Histograms, g: StatGroup, ns: u64) {
        if self.ns == ns && self.group == g {
            self.n += 1;
            return;
        }
        self.flush(hist);
        *self = LatencyRun { group: g, ns, n: 1 };
    }

    /// Record what the run holds (end of the batch).
    #[inline]
    pub(crate) fn flush(&mut self, hist: &mut Histograms) {
        if self.n != 0 {
            hist.record_n(self.group, self.ns, self.n);
            *self = LatencyRun::default();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_runs_record_what_single_records_would() {
        let lat = [
            (StatGroup::Read, 5_000),
            (StatGroup::Read, 5_000),
            (StatGroup::Write, 5_000),
            (StatGroup::Read, 5_000),
            (StatGroup::Read, 0),
            (StatGroup::Read, 0),
            (StatGroup::Read, 7_123_456),
            (StatGroup::Flush, 7_123_456),
        ];
        let mut one = Histograms::new();
        for &(g, ns) in &lat {
            one.record(g, ns);
        }
        let mut runs = Histograms::new();
        let mut run = LatencyRun::default();
        for &(g, ns) in &lat {
            run.push(&mut runs, g, ns);
        }
        run.flush(&mut runs);
        run.flush(&mut runs);
        for g in [
            StatGroup::Read,
            StatGroup::Write,
            StatGroup::Discard,
            StatGroup::Flush,
        ] {
            let (a, b) = (one.group(g), runs.group(g));
            assert_eq!(a.len(), b.len(), "{g:?}");
            assert_eq!(a.max(), b.max(), "{g:?}");
            assert_eq!(a.min(), b.min(), "{g:?}");
            for q in [0.5, 0.99, 1.0] {
                assert_eq!(a.value_at_quantile(q), b.value_at_quantile(q), "{g:?}");
            }
        }
        assert_eq!(runs.group(StatGroup::Read).len(), 6);
    }

    /// Busy milliseconds so far (without a snapshot's catch-up).
    fn ticks(d: &DeviceStats) -> u64 {
        d.io_ticks_ms.1.load(Relaxed)
    }

    /// What a context does at I/O start: stamp first, then count the
    /// request in flight (Linux `bdev_start_io_acct`).
    fn start(d: &DeviceStats, sh: &StatShard, now_ms: u64) {
        d.update_io_ticks(now_ms, false);
        bump(&sh.in_flight[0], 1);
    }

    /// What a context does at completion (Linux `bdev_end_io_acct`).
    fn end(d: &DeviceStats, sh: &StatShard, now_ms: u64) {
        drop_by(&sh.in_flight[0], 1);
        d.update_io_ticks(now_ms, true);
    }

    #[test]
    fn idle_gaps_are_not_busy() {
        let d = DeviceStats::new();
        let sh = d.register();
        start(&d, &sh, 100);
        end(&d, &sh, 105);
        assert_eq!(ticks(&d), 5);
        // 95 ms idle, then a 3 ms I/O: only the I/O counts.
        start(&d, &sh, 200);
        assert_eq!(ticks(&d), 5, "a start after an idle gap adds nothing");
        end(&d, &sh, 203);
        assert_eq!(ticks(&d), 8);
    }

    #[test]
    fn starts_alone_advance_busy_time_while_requests_are_in_flight() {
        let d = DeviceStats::new();
        let sh = d.register();
        start(&d, &sh, 100);
        start(&d, &sh, 110);
        assert_eq!(ticks(&d), 10);
        start(&d, &sh, 125);
        assert_eq!(ticks(&d), 25, "nothing completed, yet the device was busy");
    }

    #[test]
    fn completions_alone_count_the_time_since_the_stamp() {
        let d = DeviceStats::new();
        let sh = d.register();
        // Requests started with stats off: only completions are seen.
        bump(&sh.in_flight[0], 2);
        end(&d, &sh, 100);
        assert_eq!(ticks(&d), 0, "the first stamp has no interval before it");
        end(&d, &sh, 104);
        assert_eq!(ticks(&d), 4);
    }

    #[test]
    fn overlapping_requests_of_two_contexts_count_the_union_once() {
        let d = DeviceStats::new();
        let a = d.register();
        let b = d.register();
        start(&d, &a, 100);
        start(&d, &b, 102); // a is in flight: 100..102 is busy.
        assert_eq!(ticks(&d), 2);
        end(&d, &a, 105);
        end(&d, &b, 109);
        assert_eq!(ticks(&d), 9, "busy from 100 to 109, counted once");
        // Another context's request in flight makes a start's interval busy.
        start(&d, &a, 120); // idle before: 109..120 is not busy.
        end(&d, &a, 121);
        assert_eq!(ticks(&d), 10);
    }

    #[test]
    fn the_stamp_moves_at_most_once_per_millisecond() {
        let d = DeviceStats::new();
        let sh = d.register();
        start(&d, &sh, 100);
        start(&d, &sh, 100);
        end(&d, &sh, 100);
        end(&d, &sh, 100);
        assert_eq!(ticks(&d), 0);
        // A stale clock (another context's older batch time) never counts
        // backwards.
        start(&d, &sh, 101);
        end(&d, &sh, 99);
        assert_eq!(ticks(&d), 0);
    }

    #[test]
    fn retired_shards_are_reused_and_still_walked() {
        let d = DeviceStats::new();
        let a = d.register();
        bump(&a.ios[0], 7);
        d.retire(&a, &Histograms::new());
        let b = d.register();
        assert!(Arc::ptr_eq(&a, &b), "the retired shard is reused");
        assert_eq!(b.ios[0].load(Relaxed), 0, "and starts from zero");
        assert_eq!(d.snapshot().ios[0], 7, "the retired counts stay");
        drop(a);
        start(&d, &b, 10);
        start(&d, &b, 20);
        assert_eq!(ticks(&d), 10, "the reused shard's requests are seen");
    }

    #[test]
    fn a_snapshot_brings_busy_time_up_to_now_while_requests_run() {
        let d = DeviceStats::new();
        let sh = d.register();
        let now_ms = crate::clock::now_ns() / 1_000_000;
        start(&d, &sh, now_ms - 50);
        let s = d.snapshot();
        assert_eq!(s.in_flight, 1);
        assert!(s.io_ticks_ms >= 50, "{}", s.io_ticks_ms);
    }

    #[test]
    fn time_in_queue_converts_the_sum_of_nanoseconds() {
        let s = DiskStats {
            nsecs: [1_500_000, 1_500_000, 0, 0],
            ..DiskStats::default()
        };
        let f = s.fields();
        assert_eq!(f[3], 1, "read ticks");
        assert_eq!(f[7], 1, "write ticks");
        assert_eq!(f[10], 3, "time_in_queue");
    }
}
