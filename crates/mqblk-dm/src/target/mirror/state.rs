//! The state a mirror's target, cleaner and recovery share ([`Inner`]):
//! the state word of live and rebuilding legs, the region bitmaps and the
//! log, and the mapping of reads and writes onto the legs.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mqblk_core::driver::Status;

use super::log::Log;
use super::region::{Bits, Pending};
use crate::legs::{LegId, Legs};
use crate::target::target_type::{Io, Route};

/// Most legs a mirror takes.
pub const MAX_LEGS: usize = 4;

/// How often the cleaner clears the bits of idle regions.
pub const CLEAN_PERIOD: Duration = Duration::from_millis(250);

// The state word: which legs are live (read and written), which are being
// rebuilt (written where already copied), and whether a recovery runs.
pub(super) const LIVE: u32 = 0xf;
pub(super) const REBUILD_SHIFT: u32 = 4;
pub(super) const REBUILD: u32 = 0xf << REBUILD_SHIFT;
pub(super) const RECOVERING: u32 = 1 << 8;

/// Read round-robin counters, one cache line per hardware queue.
#[repr(align(64))]
#[derive(Debug, Default)]
pub(super) struct Turn(pub(super) AtomicU32);
pub(super) const TURNS: usize = 64;

/// One leg of the mirror.
#[derive(Clone, Copy, Debug)]
pub(super) struct Leg {
    pub(super) id: LegId,
    pub(super) offset_bytes: u64,
}

/// The state shared by the target, its cleaner and its recovery thread.
pub(crate) struct Inner {
    pub(super) line: usize,
    pub(super) len_bytes: u64,
    pub(super) region_shift: u32,
    pub(super) nr_regions: u64,
    pub(super) legs: Vec<Leg>,
    pub(super) all: Arc<Legs>,
    pub(super) state: AtomicU32,
    /// Regions whose bit is durable in a disk log: a write tests only
    /// this bit before it goes to the legs, so a set bit must mean
    /// durable. A bit is set only after the log write-out carrying it has
    /// been flushed ([`Inner::mark_dirty`], [`Inner::mark_all_dirty`]),
    /// and cleared only by the cleaner ([`Inner::clean`]) before the
    /// write-out that clears it; both under the log's lock, so every
    /// write-out finds in this bitmap exactly what is durable or on its
    /// way to being cleared. At open it is what the log holds.
    pub(super) dirty: Bits,
    /// Not yet copied to the legs being rebuilt.
    pub(super) nosync: Bits,
    /// Being copied: writes are requeued.
    pub(super) locked: Bits,
    /// Written since the cleaner last looked.
    pub(super) recent: Bits,
    pub(super) pending: Pending,
    pub(super) turns: Box<[Turn]>,
    pub(super) log: Log,
    pub(super) stop: AtomicBool,
    /// Held by whoever runs a recovery.
    pub(super) recovery: Mutex<()>,
    /// Bytes copied by recoveries so far, and the current one's goal.
    pub(super) copied_bytes: AtomicU64,
    pub(super) goal_bytes: AtomicU64,
    pub(super) done_bytes: AtomicU64,
    /// Why each leg went out, kept for reports; written once per failure
    /// (the cold path), read by the control plane.
    pub(super) failures: Box<[Mutex<Option<LegFailure>>]>,
}

/// Why and when a leg was taken out of service: the first I/O of it that
/// failed (Linux dm-raid1 keeps the same, as the error it reports in
/// `dmsetup status` and the kernel log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LegFailure {
    /// The I/O that failed on the leg: `read`, `write` or `flush`.
    pub op: &'static str,
    /// How it ended.
    pub status: Status,
    /// When it ended.
    pub at: SystemTime,
}

/// How each leg stands (`dmsetup status`'s health letters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LegState {
    /// In sync, read and written (`A`).
    Live,
    /// Being rebuilt: written where already copied, never read (`A`, with
    /// fewer regions in sync).
    Rebuilding,
    /// Failed: no I/O goes to it (`D`).
    Failed,
}

impl Inner {
    #[inline]
    pub(super) fn region(&self, offset_bytes: u64) -> u64 {
        offset_bytes >> self.region_shift
    }

    pub(super) fn region_len(&self, r: u64) -> u64 {
        let start = r << self.region_shift;
        (self.len_bytes - start).min(1 << self.region_shift)
    }

    pub(super) fn index_of(&self, leg: LegId) -> Option<usize> {
        self.legs.iter().position(|l| l.id == leg)
    }

    pub(super) fn leg_states(&self) -> Vec<LegState> {
        let s = self.state.load(Ordering::SeqCst);
        (0..self.legs.len())
            .map(|i| {
                if s & (1 << i) != 0 {
                    LegState::Live
                } else if s & (1 << (i as u32 + REBUILD_SHIFT)) != 0 {
                    LegState::Rebuilding
                } else {
                    LegState::Failed
                }
            })
            .collect()
    }

    pub(super) fn spec_of(&self, i: usize) -> String {
        self.all
            .specs()
            .get(self.legs[i].id as usize)
            .cloned()
            .unwrap_or_default()
    }

    /// Take leg `i` out of service; say so the first time.
    #[cold]
    pub(super) fn fail_leg(&self, i: usize, what: &'static str, status: Status) {
        let bits = (1u32 << i) | (1u32 << (i as u32 + REBUILD_SHIFT));
        let old = self.state.fetch_and(!bits, Ordering::SeqCst);
        if old & bits != 0 {
            *self.failures[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(LegFailure {
                op: what,
                status,
                at: SystemTime::now(),
            });
            eprintln!(
                "mqblk: mirror (table line {}): leg {i} ({}) failed a {what} ({status:?}); it is out, and the mirror is degraded",
                self.line,
                self.spec_of(i)
            );
        }
    }

    #[inline]
    pub(super) fn map_read(&self, io: &Io, hwq: u16, route: &mut Route) {
        match self.route_read(io.offset_bytes, hwq) {
            Some((leg, at)) => route.to_leg(leg, at),
            None => route.fail(Status::IoError),
        }
    }

    /// The live leg a read at `offset_bytes` goes to (the legs take turns
    /// per hardware queue: the next live leg after the last one read), and
    /// the offset there; `None` with no live leg. No division: a mask and
    /// a bit scan.
    #[inline]
    pub(super) fn route_read(&self, offset_bytes: u64, hwq: u16) -> Option<(LegId, u64)> {
        let live = self.state.load(Ordering::Relaxed) & LIVE;
        if live == 0 {
            return None;
        }
        let t = &self.turns[hwq as usize % TURNS].0;
        // The last leg read from (one of LIVE's bits, so the shift stays
        // in the word): the live legs above it take the next turn, or
        // else the first live leg.
        let last = t.load(Ordering::Relaxed) % LIVE.count_ones();
        let above = live & !((2u32 << last) - 1);
        let i = if above != 0 {
            above.trailing_zeros()
        } else {
            live.trailing_zeros()
        };
        t.store(i, Ordering::Relaxed);
        let l = self.legs[i as usize];
        Some((l.id, l.offset_bytes + offset_bytes))
    }

    #[inline]
    pub(super) fn map_write(&self, io: &Io, route: &mut Route) {
        let r = self.region(io.offset_bytes);
        let n = self.legs.len() as u32;
        // Count the children first, then look at the region: the copier
        // and the cleaner set their bit, then look at the count.
        self.pending.add(r, n);
        let s = self.state.load(Ordering::SeqCst);
        if s & RECOVERING != 0 && self.locked.test(r) {
            self.pending.sub(r, n);
            route.requeue();
            return;
        }
        if !self.log.is_core() {
            if !self.dirty.test(r) {
                if let Err(e) = self.mark_dirty(r) {
                    eprintln!(
                        "mqblk: mirror (table line {}): region {r} cannot be marked dirty, so the write fails: {e}",
                        self.line
                    );
                    self.pending.sub(r, n);
                    route.fail(Status::IoError);
                    return;
                }
            }
            if !self.recent.test(r) {
                self.recent.set(r);
            }
        }
        let rebuild = (s & REBUILD) >> REBUILD_SHIFT;
        let to = if rebuild != 0 && !self.nosync.test(r) {
            (s & LIVE) | rebuild
        } else {
            s & LIVE
        };
        let mut sent = 0;
        for (i, l) in self.legs.iter().enumerate() {
            if to & (1 << i) != 0 {
                route.to_leg(l.id, l.offset_bytes + io.offset_bytes);
                sent += 1;
            }
        }
        if sent < n {
            self.pending.sub(r, n - sent);
        }
        if sent == 0 {
            route.fail(Status::IoError);
        }
    }

    /// A write child (of a write, discard or write-zeroes at
    /// `offset_bytes`) ended on `leg` with `status`: no longer in flight
    /// on its region, and what the write takes from it. A leg that failed
    /// is taken out, and the write stands if a live leg took it (or will
    /// say it did not, with its own error).
    #[inline(always)]
    pub(super) fn write_child_ended(
        &self,
        offset_bytes: u64,
        leg: LegId,
        status: Status,
    ) -> Status {
        self.pending.sub(self.region(offset_bytes), 1);
        if status.is_ok() {
            return status;
        }
        self.child_failed(leg, "write", status)
    }

    /// A child of a write (`what`: "write") or a flush ("flush") failed
    /// on `leg`: the leg is taken out, and the bio stands on the legs
    /// still live (Ok), or fails with `status` if none is.
    #[cold]
    #[inline(never)]
    pub(super) fn child_failed(&self, leg: LegId, what: &'static str, status: Status) -> Status {
        let Some(i) = self.index_of(leg) else {
            return status;
        };
        self.fail_leg(i, what, status);
        if self.state.load(Ordering::SeqCst) & LIVE != 0 {
            Status::Ok
        } else {
            status
        }
    }

    /// The rare path: make region `r`'s bit durable before its first
    /// write. The bit is written out and flushed first and set in memory
    /// after, under the log's lock: a write on another queue that finds
    /// it set finds it durable, and one that finds it clear waits here for
    /// the lock and then finds it set.
    #[cold]
    #[inline(never)]
    pub(super) fn mark_dirty(&self, r: u64) -> std::result::Result<(), String> {
        let mut g = self.log.lock();
        if self.dirty.test(r) {
            // Set by another queue, after its write-out; or set back by
            // the cleaner, never having been written clear (it holds the
            // lock from its clear to its write-out).
            return Ok(());
        }
        let (w, bit) = ((r >> 6) as usize, 1u64 << (r & 63));
        self.log
            .write_out(&mut g, self.dirty.nr_words(), w, w, |n| {
                let d = self.dirty.word(n).load(Ordering::SeqCst);
                if n == w {
                    d | bit
                } else {
                    d
                }
            })?;
        self.dirty.set(r);
        Ok(())
    }

    /// Mark every region dirty: written out and flushed first, then set in
    /// memory (a new log of legs not known to be the same, a leg being
    /// replaced). Nothing for a core log.
    pub(super) fn mark_all_dirty(&self) -> std::result::Result<(), String> {
        if self.log.is_core() {
            return Ok(());
        }
        let mut g = self.log.lock();
        let n = self.dirty.nr_words();
        self.log
            .write_out(&mut g, n, 0, n - 1, |w| self.dirty.mask(w))?;
        self.dirty.set_all();
        Ok(())
    }

    /// The cleaner: every period, clear the bits of regions with no write
    /// in flight, none since the last look and nothing left to copy, and
    /// write them out. Nothing is cleared while a leg is failed: the
    /// regions written meanwhile must be copied when it comes back.
    pub(super) fn clean_loop(&self) {
        let tick = Duration::from_millis(10);
        let mut waited = Duration::ZERO;
        while !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(tick);
            waited += tick;
            if waited < CLEAN_PERIOD {
                continue;
            }
            waited = Duration::ZERO;
            if let Err(e) = self.clean(false) {
                eprintln!("mqblk: mirror (table line {}): log cleaner: {e}", self.line);
            }
        }
    }

    /// One pass of the cleaner (`all`: at close, recent writes too).
    ///
    /// A write counts its children in `pending`, then tests the region's
    /// bit; the cleaner clears the bit, then looks at the count (all
    /// sequentially consistent), so a write that found the bit set is
    /// seen here and its bit set back. The log's lock is held from the
    /// first clear to the write-out: a [`Inner::mark_dirty`] in between
    /// would write its word as it finds it, with a bit cleared here that
    /// is about to be set back.
    pub(super) fn clean(&self, all: bool) -> std::result::Result<(), String> {
        let s = self.state.load(Ordering::SeqCst);
        let n = self.legs.len() as u32;
        if (s & LIVE) | ((s & REBUILD) >> REBUILD_SHIFT) != (1 << n) - 1 {
            return Ok(());
        }
        let mut g = self.log.lock();
        let mut changed: Option<(usize, usize)> = None;
        for w in 0..self.dirty.nr_words() {
            let d = self.dirty.word(w).load(Ordering::SeqCst);
            let recent = self.recent.word(w).swap(0, Ordering::SeqCst);
            if d == 0 {
                continue;
            }
            let ns = self.nosync.word(w).load(Ordering::SeqCst);
            let mut cand = d & !ns & if all { u64::MAX } else { !recent };
            let busy = |b: u32| self.pending.get(((w as u64) << 6) + u64::from(b)) != 0;
            let mut m = cand;
            while m != 0 {
                let b = m.trailing_zeros();
                m &= m - 1;
                if busy(b) {
                    cand &= !(1 << b);
                }
            }
            if cand == 0 {
                continue;
            }
            self.dirty.word(w).fetch_and(!cand, Ordering::SeqCst);
            // A write that counted itself before the clear saw the bit set
            // and is on its way: give it its bit back.
            let mut m = cand;
            while m != 0 {
                let b = m.trailing_zeros();
                m &= m - 1;
                if busy(b) || self.nosync.test(((w as u64) << 6) + u64::from(b)) {
                    self.dirty.word(w).fetch_or(1 << b, Ordering::SeqCst);
                    cand &= !(1 << b);
                }
            }
            if cand != 0 {
                changed = Some(changed.map_or((w, w), |(a, _)| (a, w)));
            }
        }
        if let Some((a, b)) = changed {
            self.log
                .write_out(&mut g, self.dirty.nr_words(), a, b, |w| {
                    self.dirty.word(w).load(Ordering::SeqCst)
                })?;
        }
        Ok(())
    }

    /// A recovery ended: legs rebuilt and still there go live if every
    /// region was copied.
    pub(super) fn finish_recovery(&self) -> String {
        let all_copied = self.nosync.count() == 0;
        let _ = self
            .state
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |s| {
                let rebuilt = (s & REBUILD) >> REBUILD_SHIFT;
                Some(if all_copied {
                    (s & LIVE) | rebuilt
                } else {
                    s & !RECOVERING
                })
            });
        self.health()
    }

    pub(super) fn health(&self) -> String {
        self.leg_states()
            .iter()
            .map(|s| match s {
                LegState::Live | LegState::Rebuilding => 'A',
                LegState::Failed => 'D',
            })
            .collect()
    }
}
