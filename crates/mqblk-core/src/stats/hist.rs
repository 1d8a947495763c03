//! Latency histograms per stat group, and the runs of equal latencies a
//! completion batch records at once.

use hdrhistogram::Histogram;

use super::counters::{StatGroup, NR_STAT_GROUPS};

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
