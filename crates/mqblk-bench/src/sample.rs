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
//!
//! With `log_avg_msec=0` every completed I/O also leaves one [`IoSample`]
//! (fio's `struct io_sample`, one for all the logs) in a [`SampleLog`]:
//! chunks of [`SAMPLE_CHUNK`] samples, the first made before the run, a
//! new one only when the last is full (one allocation per 65536 I/Os,
//! and no copy of what was logged). The files are written from it when
//! the run ends. With `write_hist_log` (and `log_hist_msec`), each
//! completion's clat is counted in fio's bins ([`super::hist`]).

use mqblk::stats::{Histograms, StatGroup};
use mqblk::Bio;

use super::counts::{direction, Counters, Sums, DIRECTIONS};
use super::hist::HistLog;
use super::verify::HOOK_PRIVATE_MASK;
use mqblk_fio::job::JobSpec;

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

/// One completed I/O, for the per-I/O logs (`log_avg_msec=0`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoSample {
    /// Completion, ns since the job's measured phase began.
    pub done_ns: u64,
    /// Completion latency (0 when nothing asked for stamps).
    pub clat_ns: u64,
    /// Submission latency.
    pub slat_ns: u64,
    /// Where on the device.
    pub offset_bytes: u64,
    /// How many bytes.
    pub len_bytes: u32,
    /// fio's direction: 0 read, 1 write, 2 trim.
    pub direction: u8,
}

impl IoSample {
    /// When `submit` returned, ns since the measured phase began (0 for an
    /// I/O issued before it).
    pub fn issue_ns(&self) -> u64 {
        self.done_ns.saturating_sub(self.clat_ns)
    }

    /// Submission to completion.
    pub fn lat_ns(&self) -> u64 {
        self.slat_ns + self.clat_ns
    }
}

/// Samples per chunk of a [`SampleLog`].
pub const SAMPLE_CHUNK: usize = 1 << 16;

/// Per-I/O samples in chunks that never grow in place (no copy of what is
/// logged, one allocation per [`SAMPLE_CHUNK`] I/Os).
#[derive(Debug, Default)]
pub struct SampleLog {
    chunks: Vec<Vec<IoSample>>,
}

impl SampleLog {
    /// A log with room for `first` samples before it allocates again.
    pub fn with_capacity(first: usize) -> SampleLog {
        let mut chunks = Vec::with_capacity(64);
        chunks.push(Vec::with_capacity(first.max(1)));
        SampleLog { chunks }
    }

    /// Append a sample.
    #[inline]
    pub fn push(&mut self, s: IoSample) {
        match self.chunks.last_mut() {
            Some(c) if c.len() < c.capacity() => c.push(s),
            _ => self.push_to_new_chunk(s),
        }
    }

    #[cold]
    #[inline(never)]
    fn push_to_new_chunk(&mut self, s: IoSample) {
        let mut c = Vec::with_capacity(SAMPLE_CHUNK);
        c.push(s);
        self.chunks.push(c);
    }

    /// Forget every sample (keeping the first chunk's room).
    pub fn clear(&mut self) {
        self.chunks.truncate(1);
        if let Some(c) = self.chunks.first_mut() {
            c.clear();
        }
    }

    /// The samples, in completion order.
    pub fn iter(&self) -> impl Iterator<Item = &IoSample> {
        self.chunks.iter().flatten()
    }
}

/// What a job measured per I/O, for the report and the logs.
#[derive(Debug, Default)]
pub struct Recorded {
    /// The report's latencies, from the stamps (when the job took them).
    pub stamped: Option<StampedLatency>,
    /// One sample per completed I/O (`log_avg_msec=0`).
    pub samples: Option<SampleLog>,
    /// The histogram log's lines (`write_hist_log` with `log_hist_msec`).
    pub hist: Option<HistLog>,
}

/// The latencies the stamps give, per stat group, as fio defines them:
/// each I/O's lat is its slat plus its clat.
#[derive(Debug, Default)]
pub struct StampedLatency {
    /// Submission: `submit` called to `submit` returned.
    pub slat: Histograms,
    /// Completion: `submit` returned to the completion.
    pub clat: Histograms,
    /// Total: `submit` called to the completion.
    pub lat: Histograms,
}

/// One job's per-I/O measurements.
pub struct Recorder {
    /// Indexed by slot.
    stamps: Vec<Stamp>,
    /// Slots not in flight.
    free_slots: Vec<u32>,
    /// Read the clock around submit (slat, clat and lat are asked for).
    stamping: bool,
    /// Completion time of the current reap batch (0: not read yet).
    batch_ns: u64,
    /// Start of the measured phase (the logs' time 0), ns.
    epoch_ns: u64,
    measuring: bool,
    /// Sum the latencies for the averaged `write_lat_log`.
    sum: bool,
    sums: [Sums; DIRECTIONS],
    stamped: Option<StampedLatency>,
    samples: Option<SampleLog>,
    hist: Option<HistLog>,
}

impl Recorder {
    /// The recorder `job` needs, or `None` when nothing asks for per-I/O
    /// measurements. `expected_ios`, when the job's I/O count is known,
    /// sizes the first chunk of per-I/O samples; the histogram log makes
    /// room for a run of the job's runtime.
    pub fn for_job(job: &JobSpec, expected_ios: Option<u64>) -> Option<Recorder> {
        // fio writes no histogram line with log_hist_msec=0.
        let hist = (job.write_hist_log.is_some() && job.log_hist_msec > 0).then(|| {
            let windows = job
                .runtime
                .map_or(1024, |r| r.as_millis() / u128::from(job.log_hist_msec) + 2);
            // Reads and writes; more only for a very long run.
            let lines = (windows * 2).min(1 << 14) as usize;
            HistLog::new(job.log_hist_msec, lines)
        });
        let per_io = job.log_avg_msec == 0
            && (job.write_bw_log.is_some()
                || job.write_iops_log.is_some()
                || job.write_lat_log.is_some());
        // Per-I/O bandwidth is bytes over clat; an IOPS log alone needs
        // only the completion time.
        let stamping = job.write_lat_log.is_some()
            || job.slat_percentiles
            || job.latency_target.is_some()
            || job.max_latency.is_some()
            || (per_io && job.write_bw_log.is_some())
            || hist.is_some();
        if !stamping && !per_io {
            return None;
        }
        let depth = if stamping { job.iodepth } else { 0 };
        let first_chunk = expected_ios.map_or(SAMPLE_CHUNK as u64, |n| {
            n.saturating_add(u64::from(job.iodepth))
                .min(SAMPLE_CHUNK as u64)
        });
        Some(Recorder {
            stamps: vec![Stamp::default(); depth as usize],
            // Popped from the end: slot 0 first.
            free_slots: (0..depth).rev().collect(),
            stamping,
            batch_ns: 0,
            epoch_ns: 0,
            measuring: false,
            sum: job.write_lat_log.is_some() && job.log_avg_msec > 0,
            sums: [Sums::default(); DIRECTIONS],
            stamped: stamping.then(StampedLatency::default),
            samples: per_io.then(|| SampleLog::with_capacity(first_chunk as usize)),
            hist,
        })
    }

    /// Whether bios are stamped around `submit` (so they must be
    /// submitted through [`Recorder::before_submit`], not resubmitted in
    /// place).
    pub fn stamping(&self) -> bool {
        self.stamping
    }

    /// The measured phase starts at `epoch_ns`: forget what the ramp
    /// measured.
    pub fn start_measuring(&mut self, epoch_ns: u64) {
        self.measuring = true;
        self.epoch_ns = epoch_ns;
        self.sums = [Sums::default(); DIRECTIONS];
        if let Some(s) = &mut self.stamped {
            s.slat.reset();
            s.clat.reset();
            s.lat.reset();
        }
        if let Some(s) = &mut self.samples {
            s.clear();
        }
        if let Some(h) = &mut self.hist {
            h.clear();
        }
    }

    /// Give `bio` a slot and read the start stamp, if this job stamps;
    /// call right before `submit`.
    #[inline]
    pub fn before_submit(&mut self, bio: &mut Bio) -> Option<Pending> {
        if !self.stamping {
            return None;
        }
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
        Some(Pending {
            slot,
            start_ns: mqblk::clock::now_ns(),
        })
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
    /// measured phase, records it (fio logs no failed I/O). Returns its
    /// latency (submission to completion) when the job stamps its I/O.
    #[inline]
    pub fn complete(&mut self, bio: &Bio, ok: bool) -> Option<u64> {
        let stamp = if self.stamping {
            let i = ((bio.private >> 32) as u32).checked_sub(1)?;
            debug_assert!((i as usize) < self.stamps.len());
            let stamp = self.stamps[i as usize];
            self.release(i);
            stamp
        } else {
            Stamp::default()
        };
        if !ok {
            return None;
        }
        if self.stamping && self.batch_ns == 0 {
            self.batch_ns = mqblk::clock::now_ns();
        }
        let lat = self
            .stamping
            .then(|| self.batch_ns.saturating_sub(stamp.start_ns));
        if !self.measuring {
            return lat;
        }
        if self.batch_ns == 0 {
            self.batch_ns = mqblk::clock::now_ns();
        }
        let (slat_ns, clat_ns) = if self.stamping {
            (
                stamp.issue_ns - stamp.start_ns,
                self.batch_ns.saturating_sub(stamp.issue_ns),
            )
        } else {
            (0, 0)
        };
        let d = direction(bio.op());
        let done_ns = self.batch_ns.saturating_sub(self.epoch_ns);
        let len_bytes = bio.len_bytes().min(u64::from(u32::MAX)) as u32;
        if let Some(s) = &mut self.stamped {
            let g = StatGroup::of(bio.op());
            s.slat.record(g, slat_ns);
            s.clat.record(g, clat_ns);
            s.lat.record(g, slat_ns + clat_ns);
        }
        if let Some(log) = &mut self.samples {
            log.push(IoSample {
                done_ns,
                clat_ns,
                slat_ns,
                offset_bytes: bio.offset_bytes(),
                len_bytes,
                direction: d as u8,
            });
        }
        if let Some(h) = &mut self.hist {
            h.record(d, clat_ns, done_ns / 1_000_000, len_bytes);
        }
        if self.sum {
            let s = &mut self.sums[d];
            s.ios += 1;
            s.lat_ns += slat_ns + clat_ns;
            s.slat_ns += slat_ns;
            s.clat_ns += clat_ns;
        }
        lat
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
            stamped: self.stamped,
            samples: self.samples,
            hist: self.hist,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqblk::Op;

    fn job() -> JobSpec {
        JobSpec {
            iodepth: 2,
            write_lat_log: Some("x".into()),
            ..JobSpec::default()
        }
    }

    #[test]
    fn nothing_asks_nothing_is_measured() {
        assert!(Recorder::for_job(&JobSpec::default(), None).is_none());
        let slat = JobSpec {
            slat_percentiles: true,
            ..JobSpec::default()
        };
        assert!(Recorder::for_job(&slat, None).unwrap().stamping());
        // Averaged bw and IOPS logs come from the counters alone.
        let averaged = JobSpec {
            write_bw_log: Some("x".into()),
            write_iops_log: Some("x".into()),
            ..JobSpec::default()
        };
        assert!(Recorder::for_job(&averaged, None).is_none());
        // Per I/O, IOPS needs only the completion time; bandwidth needs
        // clat.
        let iops = JobSpec {
            write_iops_log: Some("x".into()),
            log_avg_msec: 0,
            ..JobSpec::default()
        };
        assert!(!Recorder::for_job(&iops, None).unwrap().stamping());
        let bw = JobSpec {
            write_bw_log: Some("x".into()),
            ..iops
        };
        assert!(Recorder::for_job(&bw, None).unwrap().stamping());
        // The histogram log counts clat, with a window to count in.
        let hist = JobSpec {
            write_hist_log: Some("x".into()),
            log_hist_msec: 100,
            ..JobSpec::default()
        };
        assert!(Recorder::for_job(&hist, None).unwrap().stamping());
        let no_window = JobSpec {
            log_hist_msec: 0,
            ..hist
        };
        assert!(Recorder::for_job(&no_window, None).is_none());
    }

    #[test]
    fn slots_carry_the_stamps_and_come_back() {
        let mut r = Recorder::for_job(&job(), None).unwrap();
        r.start_measuring(0);
        let mut a = Bio::at(Op::Read, 0);
        a.private = 7;
        let mut b = Bio::at(Op::Write, 4096);
        let pa = r.before_submit(&mut a).unwrap();
        r.after_submit(pa, true);
        let pb = r.before_submit(&mut b).unwrap();
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
        let pc = r.before_submit(&mut c).unwrap();
        r.after_submit(pc, false);
        assert_eq!(r.free_slots.len(), 2);
        let rec = r.finish();
        assert_eq!(rec.stamped.unwrap().slat.group(StatGroup::Read).len(), 1);
    }

    #[test]
    fn a_bio_without_a_slot_is_not_measured() {
        let mut r = Recorder::for_job(&job(), None).unwrap();
        r.start_measuring(0);
        r.begin_reap();
        r.complete(&Bio::flush(), true);
        assert_eq!(r.sums, [Sums::default(); DIRECTIONS]);
        assert_eq!(r.free_slots.len(), 2);
    }

    #[test]
    fn per_io_samples_keep_every_completion_in_order() {
        let job = JobSpec {
            iodepth: 1,
            log_avg_msec: 0,
            write_lat_log: Some("x".into()),
            ..JobSpec::default()
        };
        let mut r = Recorder::for_job(&job, Some(3)).unwrap();
        r.start_measuring(mqblk::clock::now_ns());
        for (i, op) in [Op::Read, Op::Write, Op::Discard].into_iter().enumerate() {
            let mut bio = Bio::at(op, i as u64 * 8192);
            let p = r.before_submit(&mut bio).unwrap();
            r.after_submit(p, true);
            r.begin_reap();
            r.complete(&bio, true);
        }
        let rec = r.finish();
        let samples: Vec<IoSample> = rec.samples.unwrap().iter().copied().collect();
        assert_eq!(samples.len(), 3);
        for (i, s) in samples.iter().enumerate() {
            assert_eq!(s.direction as usize, i);
            assert_eq!(s.offset_bytes, i as u64 * 8192);
            assert_eq!(s.lat_ns(), s.slat_ns + s.clat_ns);
            assert!(s.issue_ns() <= s.done_ns);
        }
        assert!(samples.windows(2).all(|w| w[0].done_ns <= w[1].done_ns));
    }

    #[test]
    fn a_sample_is_40_bytes() {
        // What the README promises per logged I/O.
        assert_eq!(std::mem::size_of::<IoSample>(), 40);
    }

    #[test]
    fn a_sample_log_grows_by_chunks() {
        let mut log = SampleLog::with_capacity(2);
        for i in 0..(SAMPLE_CHUNK as u64 + 5) {
            log.push(IoSample {
                done_ns: i,
                ..IoSample::default()
            });
        }
        // The first chunk as sized, then one full chunk, then the rest.
        assert_eq!(log.chunks.len(), 3);
        assert_eq!(log.chunks[0].capacity(), 2);
        assert_eq!(log.iter().count(), SAMPLE_CHUNK + 5);
        assert!(log.iter().zip(0..).all(|(s, i)| s.done_ns == i));
        log.clear();
        assert_eq!(log.iter().count(), 0);
        assert_eq!(log.chunks.len(), 1);
    }
}
