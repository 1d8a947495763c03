//! fio's latency target (`latency_target=`, `latency_window=`,
//! `latency_percentile=`, `latency_run=`) and `max_latency=`: the job
//! searches for the deepest queue, up to its `iodepth`, at which
//! `latency_percentile` percent of its I/Os finish within
//! `latency_target`, as fio's `io_u.c` does (`lat_target_check` and its
//! neighbours): it starts at depth 1, doubles while a window succeeds,
//! bisects once one fails, and, unless `latency_run=1`, measures one last
//! window at the depth it settled on and ends.
//!
//! Only a job with a target reads the clock per I/O (its stamps come from
//! [`super::sample`]); the engine asks [`Target::depth`] before issuing.

use std::time::Duration;

/// A job's target settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetSpec {
    /// `latency_target=`.
    pub target: Duration,
    /// `latency_window=` (0: every completion is a window).
    pub window: Duration,
    /// `latency_percentile=` (default 100).
    pub percentile: f64,
    /// `latency_run=1`: keep searching for the whole run.
    pub run: bool,
    /// The job's `iodepth`.
    pub iodepth: u32,
}

/// What the controller wants done after a completion or a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Go on.
    Continue,
    /// Wait for the I/O in flight before going on (the depth went down,
    /// or the last window starts).
    Quiesce,
    /// The final window is done, or the target failed at depth 1 with a
    /// percentile of 100: the job ends.
    Done,
    /// The target cannot be met even at depth 1 (fio's "max latency
    /// exceeded"): the job ends with an error.
    Failed,
}

/// The search state of one job.
#[derive(Debug)]
pub struct Target {
    spec: TargetSpec,
    target_ns: u64,
    window_ns: u64,
    depth: u32,
    low: u32,
    high: u32,
    stable: u32,
    /// Window start (ns) and I/Os and failures since.
    window_start_ns: u64,
    ios: u64,
    failed: u64,
    end_run: bool,
}

impl Target {
    /// The controller for `spec`, starting at depth 1.
    pub fn new(spec: TargetSpec) -> Target {
        Target {
            spec,
            target_ns: spec.target.as_nanos() as u64,
            window_ns: spec.window.as_nanos() as u64,
            depth: 1,
            low: 1,
            high: spec.iodepth.max(1),
            stable: 0,
            window_start_ns: 0,
            ios: 0,
            failed: 0,
            end_run: false,
        }
    }

    /// The queue depth the job may use now.
    #[inline]
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether the search is over and the last window is running (its
    /// figures are the job's: the caller resets its counts once).
    pub fn final_window(&self) -> bool {
        self.end_run
    }

    /// An I/O completed with total latency `lat_ns`.
    pub fn complete(&mut self, lat_ns: u64) -> Verdict {
        self.ios += 1;
        if lat_ns <= self.target_ns {
            return Verdict::Continue;
        }
        if self.spec.percentile >= 100.0 {
            return self.lower();
        }
        self.failed += 1;
        Verdict::Continue
    }

    /// Called once per reap with the time: closes a window that is over.
    pub fn check(&mut self, now_ns: u64) -> Verdict {
        if self.window_start_ns == 0 {
            self.window_start_ns = now_ns;
            return Verdict::Continue;
        }
        if now_ns.saturating_sub(self.window_start_ns) < self.window_ns || self.ios == 0 {
            return Verdict::Continue;
        }
        let ok = 100.0 * (self.ios - self.failed) as f64 / self.ios as f64;
        let v = if ok >= self.spec.percentile {
            self.raise()
        } else {
            self.lower()
        };
        self.new_window(now_ns);
        v
    }

    fn new_window(&mut self, now_ns: u64) {
        self.window_start_ns = now_ns;
        self.ios = 0;
        self.failed = 0;
    }

    /// fio's `__lat_target_failed`.
    fn lower(&mut self) -> Verdict {
        if self.depth == 1 {
            return if self.spec.percentile >= 100.0 {
                Verdict::Failed
            } else {
                Verdict::Continue
            };
        }
        self.high = self.depth;
        if self.depth == self.low {
            self.low -= 1;
        }
        self.depth = ((self.depth + self.low) / 2).max(1);
        self.stable = 0;
        self.ios = 0;
        self.failed = 0;
        Verdict::Quiesce
    }

    /// fio's `lat_target_success`.
    fn raise(&mut self) -> Verdict {
        let before = self.depth;
        let iodepth = self.spec.iodepth.max(1);
        self.low = self.depth;
        if self.depth + 1 == self.high {
            self.stable += 1;
            if self.stable >= 3 {
                self.high += 1;
                self.stable = 0;
            }
        }
        self.depth = if self.high != iodepth {
            (self.depth + self.high) / 2
        } else {
            self.depth * 2
        }
        .clamp(1, iodepth);
        if !self.spec.run && self.depth == before {
            if self.end_run {
                return Verdict::Done;
            }
            self.end_run = true;
            return Verdict::Quiesce;
        }
        Verdict::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(percentile: f64) -> TargetSpec {
        TargetSpec {
            target: Duration::from_micros(100),
            window: Duration::from_millis(10),
            percentile,
            run: false,
            iodepth: 64,
        }
    }

    /// A device whose latency is 10 µs per I/O in flight.
    fn lat(depth: u32) -> u64 {
        u64::from(depth) * 10_000
    }

    #[test]
    fn the_search_settles_on_the_deepest_queue_within_the_target() {
        let mut t = Target::new(spec(99.0));
        let mut now = 1;
        assert_eq!(t.check(now), Verdict::Continue);
        let mut end = None;
        for _ in 0..200 {
            for _ in 0..100 {
                t.complete(lat(t.depth()));
            }
            now += 10_000_000;
            if t.check(now) == Verdict::Done {
                end = Some(t.depth());
                break;
            }
        }
        // 10 in flight is 100 µs, within; 11 is not.
        assert_eq!(end, Some(10));
    }

    #[test]
    fn a_target_missed_at_depth_one_fails_the_job() {
        let mut t = Target::new(spec(100.0));
        assert_eq!(t.complete(1_000_000), Verdict::Failed);
        let mut t = Target::new(spec(100.0));
        t.depth = 8;
        assert_eq!(t.complete(1_000_000), Verdict::Quiesce);
        assert!(t.depth() < 8);
    }
}
