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

/// Declares the layer's counters once, as `StatShard` (the atomics a
/// context writes) and `DiskStats` (a snapshot) fields, and generates
/// everything that goes over all of them: a shard's snapshot and reset,
/// sums, differences, and the flat order of the C ABI's `mqblk_stats`.
///
/// A counter kept per stat group lists its flat names, one per group in
/// group order; one with three names has no flat value for flushes
/// (diskstats has no flush merges or sectors). The gauges, `in_flight` and
/// `io_ticks_ms`, are not counters: they are the whole device's (a shard
/// keeps no busy time), so a context's snapshot leaves them at 0, and a
/// difference keeps the later snapshot's.
macro_rules! stat_counters {
    (
        per_group {
            $( $(#[$gdoc:meta])* $g:ident [$($gname:literal),+], )*
        }
        single {
            $( $(#[$sdoc:meta])* $s:ident, )*
        }
    ) => {
        /// One context's counters. Written only by its context.
        #[derive(Debug, Default)]
        pub struct StatShard {
            $( $(#[$gdoc])* pub(crate) $g: [AtomicU64; NR_STAT_GROUPS], )*
            /// Requests started and not ended: reads, then writes (Linux
            /// `in_flight[rw]`).
            pub(crate) in_flight: [AtomicU64; 2],
            $( $(#[$sdoc])* pub(crate) $s: AtomicU64, )*
            /// The next shard in [`DeviceStats`]'s list of every shard (set
            /// once, under the registry lock, before the shard is
            /// published).
            next: AtomicPtr<CachePadded<StatShard>>,
        }

        impl StatShard {
            /// This context's counters (without the device's gauges: its
            /// in-flight count and busy time stay 0).
            pub(crate) fn snapshot(&self) -> DiskStats {
                DiskStats {
                    $( $g: std::array::from_fn(|g| self.$g[g].load(Relaxed)), )*
                    $( $s: self.$s.load(Relaxed), )*
                    ..DiskStats::default()
                }
            }

            /// Zero every counter, for reuse by a new context.
            fn reset(&self) {
                $( for c in &self.$g { c.store(0, Relaxed); } )*
                for c in &self.in_flight {
                    c.store(0, Relaxed);
                }
                $( self.$s.store(0, Relaxed); )*
            }
        }

        /// A snapshot of a device's counters: the 17 `/proc/diskstats`
        /// fields (with 512-byte sectors and milliseconds) plus the layer's
        /// own counters.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct DiskStats {
            $( $(#[$gdoc])* pub $g: [u64; NR_STAT_GROUPS], )*
            /// Requests in flight now (field 9).
            pub in_flight: u64,
            /// Milliseconds the device had I/O in flight (field 10).
            pub io_ticks_ms: u64,
            $( $(#[$sdoc])* pub $s: u64, )*
        }

        impl DiskStats {
            /// How many values [`DiskStats::flat`] gives.
            pub const FLAT_LEN: usize =
                [$($($gname,)+)*].len() + 2 + [$(stringify!($s)),*].len();

            /// Apply `f` to each counter of `self` and the same counter of
            /// `o` (the gauges are left alone).
            fn each_counter(&mut self, o: &DiskStats, f: impl Fn(u64, u64) -> u64) {
                $( for g in 0..NR_STAT_GROUPS {
                    self.$g[g] = f(self.$g[g], o.$g[g]);
                } )*
                $( self.$s = f(self.$s, o.$s); )*
            }

            /// The values in the order of the C ABI's `mqblk_stats`: each
            /// group's counters (read, write, discard, flush), then the
            /// gauges, then the layer's own counters.
            pub fn flat(&self) -> [u64; DiskStats::FLAT_LEN] {
                let groups = [$( (&self.$g, [$($gname),+].len()), )*];
                let mut out = [0; DiskStats::FLAT_LEN];
                let mut i = 0;
                for g in 0..NR_STAT_GROUPS {
                    for (values, kept) in groups {
                        if g < kept {
                            out[i] = values[g];
                            i += 1;
                        }
                    }
                }
                for v in [self.in_flight, self.io_ticks_ms, $(self.$s),*] {
                    out[i] = v;
                    i += 1;
                }
                debug_assert_eq!(i, DiskStats::FLAT_LEN);
                out
            }

            /// The names of [`DiskStats::flat`]'s values, in its order (the
            /// field names of the C ABI's `mqblk_stats`).
            pub fn flat_names() -> [&'static str; DiskStats::FLAT_LEN] {
                let groups: [&[&'static str]; [$(stringify!($g)),*].len()] =
                    [$( &[$($gname),+], )*];
                let mut out = [""; DiskStats::FLAT_LEN];
                let mut i = 0;
                for g in 0..NR_STAT_GROUPS {
                    for names in groups {
                        if let Some(name) = names.get(g) {
                            out[i] = name;
                            i += 1;
                        }
                    }
                }
                for name in ["in_flight", "io_ticks_ms", $(stringify!($s)),*] {
                    out[i] = name;
                    i += 1;
                }
                out
            }
        }
    };
}

// Every counter of the layer: a new one is a line here (and a field of
// the C ABI's `MqblkStats`, which a test holds to this order).
stat_counters! {
    per_group {
        /// Completed I/Os per group.
        ios ["read_ios", "write_ios", "discard_ios", "flush_ios"],
        /// Merged I/Os per group.
        merges ["read_merges", "write_merges", "discard_merges"],
        /// Sectors per group.
        sectors ["read_sectors", "write_sectors", "discard_sectors"],
        /// Nanoseconds spent per group.
        nsecs ["read_ns", "write_ns", "discard_ns", "flush_ns"],
    }
    single {
        /// Requests built (one per tag use).
        requests,
        /// Bios submitted.
        bios,
        /// Bios split to fit the limits.
        splits,
        /// Bytes copied through bounce buffers.
        bytes_copied,
        /// Requests the driver answered busy.
        requeues,
        /// Requests that timed out.
        timeouts,
        /// Requests that completed with an error.
        errors,
    }
}

impl StatShard {
    /// Requests this shard's context has started and not ended.
    #[inline]
    fn has_in_flight(&self) -> bool {
        self.in_flight[0].load(Relaxed) != 0 || self.in_flight[1].load(Relaxed) != 0
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

impl DiskStats {
    fn add_shard(&mut self, s: &StatShard) {
        self.each_counter(&s.snapshot(), u64::wrapping_add);
        self.in_flight = self
            .in_flight
            .wrapping_add(s.in_flight[0].load(Relaxed))
            .wrapping_add(s.in_flight[1].load(Relaxed));
    }

    /// Add `o`'s counters to these (busy time included: callers that know
    /// better fix it up).
    pub fn add(&mut self, o: &DiskStats) {
        self.each_counter(o, u64::wrapping_add);
        self.in_flight = self.in_flight.wrapping_add(o.in_flight);
        self.io_ticks_ms += o.io_ticks_ms;
    }

    /// What the counters did since `start`, a snapshot of the same shard or
    /// device taken earlier; the gauges are this snapshot's.
    pub fn since(&self, start: &DiskStats) -> DiskStats {
        let mut d = *self;
        d.each_counter(start, u64::wrapping_sub);
        d
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
