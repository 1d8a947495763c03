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

mod counters;
mod hist;

pub(crate) use counters::{bump, drop_by, StatShard};
pub use counters::{DiskStats, StatGroup, NR_STAT_GROUPS};
pub use hist::Histograms;
pub(crate) use hist::LatencyRun;

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
    fn a_shard_snapshot_and_its_difference_cover_every_counter() {
        let d = DeviceStats::new();
        let sh = d.register();
        bump(&sh.ios[1], 3);
        bump(&sh.errors, 1);
        let start = sh.snapshot();
        bump(&sh.ios[1], 2);
        bump(&sh.merges[0], 4);
        bump(&sh.requeues, 5);
        bump(&sh.in_flight[1], 1);
        let end = sh.snapshot();
        assert_eq!(end.ios[1], 5);
        assert_eq!(end.requeues, 5);
        assert_eq!(end.in_flight, 0, "a context's snapshot keeps no gauge");
        let delta = end.since(&start);
        assert_eq!(delta.ios[1], 2);
        assert_eq!(delta.merges[0], 4);
        assert_eq!(delta.requeues, 5);
        assert_eq!(delta.errors, 0);
        let mut sum = start;
        sum.add(&delta);
        assert_eq!(sum, end);
        drop_by(&sh.in_flight[1], 1);
        d.retire(&sh, &Histograms::new());
        assert_eq!(
            sh.snapshot(),
            DiskStats::default(),
            "a retired shard is zeroed"
        );
        assert_eq!(
            d.snapshot().requeues,
            5,
            "and its counts stay with the device"
        );
    }

    #[test]
    fn the_flat_order_is_group_by_group_then_gauges_then_the_layer_s() {
        let names = DiskStats::flat_names();
        assert_eq!(DiskStats::FLAT_LEN, 23);
        assert_eq!(
            names[..8],
            [
                "read_ios",
                "read_merges",
                "read_sectors",
                "read_ns",
                "write_ios",
                "write_merges",
                "write_sectors",
                "write_ns"
            ]
        );
        assert_eq!(
            names[12..16],
            ["flush_ios", "flush_ns", "in_flight", "io_ticks_ms"]
        );
        assert_eq!(names[16], "requests");
        assert_eq!(names[22], "errors");
        let s = DiskStats {
            ios: [1, 2, 3, 4],
            merges: [5, 6, 7, 8],
            sectors: [9, 10, 11, 12],
            nsecs: [13, 14, 15, 16],
            in_flight: 17,
            io_ticks_ms: 18,
            requests: 19,
            errors: 25,
            ..DiskStats::default()
        };
        let flat = s.flat();
        let at = |name: &str| flat[names.iter().position(|n| *n == name).unwrap()];
        assert_eq!(at("read_merges"), 5);
        assert_eq!(at("discard_sectors"), 11);
        assert_eq!(at("flush_ios"), 4);
        assert_eq!(at("flush_ns"), 16);
        assert_eq!(at("io_ticks_ms"), 18);
        assert_eq!(at("requests"), 19);
        assert_eq!(at("errors"), 25);
        assert!(!flat.contains(&8), "no flush merges, as in diskstats");
        assert!(!flat.contains(&12), "no flush sectors");
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
