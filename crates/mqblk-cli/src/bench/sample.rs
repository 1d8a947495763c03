//! Per-I/O latencies, measured by the job thread only when a log or the
//! report asks for them (fio's stat.c `add_slat_sample`, `add_clat_sample`,
//! `add_lat_sample`). Without them the engine reads no clock per I/O and
//! latency comes from the layer's histograms alone.
//!
//! Three clock reads, as fio takes them: just before a bio is submitted to
//! the layer (fio's `start_time`), when `submit` returns (`issue_time`),
//! and once per reap batch, at its first completion (`icd->time`). From
//! them: slat = issue - start, clat = completion - issue, lat =
//! completion - start.
//!
//! A bio in flight carries its timing slot, plus one, in the high half of
//! `Bio::private` (the verify hook owns the low half); the slot holds its
//! two stamps. Slots are made for the job's iodepth before the run, so
//! nothing here allocates per I/O.

use std::sync::atomic::Ordering::Relaxed;

use mqblk::stats::{Histograms, StatGroup};
use mqblk::{Bio, Op};

use super::job::JobSpec;
use super::log::Counters;
use super::verify::HOOK_PRIVATE_MASK;

/// fio's data directions in logs: 0 read, 1 write (and write-zeroes),
/// 2 trim (discard).
pub const DIRECTIONS: usize = 3;

/// fio's direction of an operation (flushes are never logged).
#[inline]
pub fn direction(op: Op) -> usize {
    StatGroup::of(op) as usize
}

/// The two stamps of an I/O in flight.
#[derive(Clone, Copy, Debug, Default)]
struct Stamp {
    start_ns: u64,
    issue_ns: u64,
    /// Taken by a bio (from `before_submit` until its completion).
    taken: bool,
}

/// A bio about to be submitted: its slot and its start.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    slot: u32,
    start_ns: u64,
}

/// One direction's latencies summed (for the averaged logs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sums {
    /// Completions summed.
    pub ios: u64,
    /// Their lat, slat and clat, nanoseconds.
    pub lat_ns: u64,
    /// Submission latencies.
    pub slat_ns: u64,
    /// Completion latencies.
    pub clat_ns: u64,
}

/// What a job measured per I/O, for the report and the logs.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Submission latency per stat group (for the report's slat).
    pub slat: Option<Histograms>,
}

/// One job's per-I/O measurements.
pub struct Recorder {
    /// Indexed by slot.
    stamps: Vec<Stamp>,
    /// Slots not in flight.
    free_slots: Vec<u32>,
    /// Completion time of the current reap batch (0: not read yet).
    batch_ns: u64,
    measuring: bool,
    /// Sum the latencies for the averaged `write_lat_log`.
    sum: bool,
    sums: [Sums; DIRECTIONS],
    slat: Histograms,
}

impl Recorder {
    /// The recorder `job` needs, or `None` when nothing asks for per-I/O
    /// latencies.
    pub fn for_job(job: &JobSpec) -> Option<Recorder> {
        if job.write_lat_log.is_none() && !job.slat_percentiles {
            return None;
        }
        let depth = job.iodepth as usize;
        Some(Recorder {
            stamps: vec![Stamp::default(); depth],
            // Popped from the end: slot 0 first.
            free_slots: (0..job.iodepth).rev().collect(),
            batch_ns: 0,
            measuring: false,
            sum: job.write_lat_log.is_some(),
            sums: [Sums::default(); DIRECTIONS],
            slat: Histograms::new(),
        })
    }

    /// The measured phase starts: forget what the ramp measured.
    pub fn start_measuring(&mut self) {
        self.measuring = true;
        self.sums = [Sums::default(); DIRECTIONS];
        self.slat.reset();
    }

    /// Give `bio` a slot and read the start stamp; call right before
    /// `submit`.
    #[inline]
    pub fn before_submit(&mut self, bio: &mut Bio) -> Pending {
        // A job has at most iodepth bios (data-less ones take a data bio's
        // place), so a slot is free for each.
        let slot = self.free_slots.pop();
        debug_assert!(slot.is_some(), "more bios in flight than iodepth");
        if let Some(i) = slot {
            let stamp = &mut self.stamps[i as usize];
            debug_assert!(!stamp.taken, "slot {i} taken twice");
            stamp.taken = true;
        }
        let slot = slot.map_or(0, |s| s + 1);
        bio.private = (bio.private & HOOK_PRIVATE_MASK) | u64::from(slot) << 32;
        Pending {
            slot,
            start_ns: mqblk::clock::now_ns(),
        }
    }

    /// `submit` returned: read the issue stamp, or free the slot of a bio
    /// the layer gave back.
    #[inline]
    pub fn after_submit(&mut self, p: Pending, submitted: bool) {
        let Some(i) = p.slot.checked_sub(1) else {
            return;
        };
        if submitted {
            debug_assert!((i as usize) < self.stamps.len());
            self.stamps[i as usize] = Stamp {
                start_ns: p.start_ns,
                issue_ns: mqblk::clock::now_ns(),
                taken: true,
            };
        } else {
            self.release(i);
        }
    }

    fn release(&mut self, i: u32) {
        let stamp = &mut self.stamps[i as usize];
        debug_assert!(stamp.taken, "slot {i} freed twice");
        stamp.taken = false;
        debug_assert!(self.free_slots.len() < self.stamps.len());
        self.free_slots.push(i);
    }

    /// A reap starts: its completions share one clock read.
    #[inline]
    pub fn begin_reap(&mut self) {
        self.batch_ns = 0;
    }

    /// `bio` completed (`ok`: without error). Frees its slot; in the
    /// measured phase, records its latencies (fio logs no failed I/O).
    #[inline]
    pub fn complete(&mut self, bio: &Bio, ok: bool) {
        let Some(i) = ((bio.private >> 32) as u32).checked_sub(1) else {
            return;
        };
        debug_assert!((i as usize) < self.stamps.len());
        let stamp = self.stamps[i as usize];
        self.release(i);
        if !self.measuring || !ok {
            return;
        }
        if self.batch_ns == 0 {
            self.batch_ns = mqblk::clock::now_ns();
        }
        let slat_ns = stamp.issue_ns - stamp.start_ns;
        let clat_ns = self.batch_ns.saturating_sub(stamp.issue_ns);
        let d = direction(bio.op());
        self.slat.record(StatGroup::of(bio.op()), slat_ns);
        if self.sum {
            let s = &mut self.sums[d];
            s.ios += 1;
            s.lat_ns += slat_ns + clat_ns;
            s.slat_ns += slat_ns;
            s.clat_ns += clat_ns;
        }
    }

    /// Publish the sums for the averaged logs (once per reap).
    #[inline]
    pub fn publish(&self, counters: &Counters) {
        if self.sum {
            counters.publish_latency(&self.sums);
        }
    }

    /// What was measured.
    pub fn finish(self) -> Recorded {
        Recorded {
            slat: Some(self.slat),
        }
    }
}

/// Load the published sums of one direction.
pub fn load_sums(c: &Counters, d: usize) -> Sums {
    Sums {
        ios: c.lat_ios[d].load(Relaxed),
        lat_ns: c.lat_ns[d].load(Relaxed),
        slat_ns: c.slat_ns[d].load(Relaxed),
        clat_ns: c.clat_ns[d].load(Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> JobSpec {
        JobSpec {
            iodepth: 2,
            write_lat_log: Some("x".into()),
            ..JobSpec::default()
        }
    }

    #[test]
    fn nothing_asks_nothing_is_measured() {
        assert!(Recorder::for_job(&JobSpec::default()).is_none());
        let slat = JobSpec {
            slat_percentiles: true,
            ..JobSpec::default()
        };
        assert!(Recorder::for_job(&slat).is_some());
    }

    #[test]
    fn slots_carry_the_stamps_and_come_back() {
        let mut r = Recorder::for_job(&job()).unwrap();
        r.start_measuring();
        let mut a = Bio::at(Op::Read, 0);
        a.private = 7;
        let mut b = Bio::at(Op::Write, 4096);
        let pa = r.before_submit(&mut a);
        r.after_submit(pa, true);
        let pb = r.before_submit(&mut b);
        r.after_submit(pb, true);
        // The hook's half is kept; the slots differ.
        assert_eq!(a.private & HOOK_PRIVATE_MASK, 7);
        assert_ne!(a.private >> 32, b.private >> 32);
        assert!(r.free_slots.is_empty());
        r.begin_reap();
        r.complete(&a, true);
        r.complete(&b, false);
        assert_eq!(r.free_slots.len(), 2);
        assert_eq!(r.sums[0].ios, 1);
        assert_eq!(r.sums[0].lat_ns, r.sums[0].slat_ns + r.sums[0].clat_ns);
        // A failed write is not measured.
        assert_eq!(r.sums[1].ios, 0);
        // A bio the layer gave back frees its slot at once.
        let mut c = Bio::at(Op::Read, 0);
        let pc = r.before_submit(&mut c);
        r.after_submit(pc, false);
        assert_eq!(r.free_slots.len(), 2);
        let rec = r.finish();
        assert_eq!(rec.slat.unwrap().group(StatGroup::Read).len(), 1);
    }

    #[test]
    fn a_bio_without_a_slot_is_not_measured() {
        let mut r = Recorder::for_job(&job()).unwrap();
        r.start_measuring();
        r.begin_reap();
        r.complete(&Bio::flush(), true);
        assert_eq!(r.sums, [Sums::default(); DIRECTIONS]);
        assert_eq!(r.free_slots.len(), 2);
    }
}
