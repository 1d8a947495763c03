//! The layer's counters, declared once (`stat_counters!`): a context's
//! shard of atomics, the snapshot callers see, and the stat group of an
//! operation (Linux `op_stat_group`). The leaf of `stats/`.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering::Relaxed};

use crossbeam_utils::CachePadded;

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
            pub(crate) next: AtomicPtr<CachePadded<StatShard>>,
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
            pub(crate) fn reset(&self) {
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
            pub(crate) fn each_counter(&mut self, o: &DiskStats, f: impl Fn(u64, u64) -> u64) {
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
    pub(crate) fn has_in_flight(&self) -> bool {
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
    pub(crate) fn add_shard(&mut self, s: &StatShard) {
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
