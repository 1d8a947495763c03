//! fio's rate options: `rate=`/`rate_iops=` pace a job's I/O, evenly
//! (`rate_process=linear`, the default) or as a Poisson process
//! (`rate_process=poisson`: exponential gaps of the same mean, as fio's
//! `usec_for_io` draws them); `rate_min=`/`rate_iops_min=` fail a job that
//! falls below them over a `rate_cycle=` (after fio's two-second settling
//! time).
//!
//! Only a paced job reads the clock, once per loop of the engine.

use std::time::Duration;

use super::distribution::Rng;

/// When a paced job may issue.
pub struct Pacer {
    pace_ns: u64,
    poisson: bool,
    start_ns: u64,
    /// Poisson: arrivals so far, and when the next one is due.
    arrivals: u64,
    next_due_ns: u64,
    rng: Rng,
}

/// Most arrivals one call of [`Pacer::allowed`] counts (a long stall does
/// not turn into a burst without bound).
const ARRIVALS_PER_CALL_MAX: u64 = 1 << 16;

impl Pacer {
    /// A pacer for one I/O per `pace_ns` on average.
    pub fn new(pace_ns: u64, poisson: bool, seed: u64) -> Pacer {
        Pacer {
            pace_ns: pace_ns.max(1),
            poisson,
            start_ns: 0,
            arrivals: 0,
            next_due_ns: 0,
            rng: Rng(seed | 1),
        }
    }

    fn gap_ns(&mut self) -> u64 {
        if !self.poisson {
            return self.pace_ns;
        }
        // -ln(U) * mean, U in (0, 1].
        let u = 1.0 - self.rng.unit();
        (-u.ln() * self.pace_ns as f64) as u64
    }

    /// How many more I/Os may be issued at `now_ns`, `done` having been
    /// issued.
    pub fn allowed(&mut self, now_ns: u64, done: u64) -> u64 {
        if self.start_ns == 0 {
            self.start_ns = now_ns;
            self.next_due_ns = now_ns;
        }
        if !self.poisson {
            let due = (now_ns - self.start_ns) / self.pace_ns + 1;
            return due.saturating_sub(done);
        }
        let mut n = 0;
        while self.next_due_ns <= now_ns && n < ARRIVALS_PER_CALL_MAX {
            self.arrivals += 1;
            let gap = self.gap_ns();
            self.next_due_ns += gap;
            n += 1;
        }
        self.arrivals.saturating_sub(done)
    }

    /// How long until the next I/O is due, from `now_ns` (at most 1 ms, so
    /// that a stop is seen).
    pub fn wait(&self, now_ns: u64) -> Duration {
        let ns = if self.poisson {
            self.next_due_ns.saturating_sub(now_ns)
        } else {
            self.pace_ns - (now_ns - self.start_ns) % self.pace_ns
        };
        Duration::from_nanos(ns.clamp(1, 1_000_000))
    }
}

/// `rate_min=`/`rate_iops_min=`: checked once per `rate_cycle`.
pub struct MinRate {
    min_bps: u64,
    min_iops: u64,
    cycle_ns: u64,
    start_ns: u64,
    last_ns: u64,
    last_bytes: u64,
    last_ios: u64,
}

/// fio lets a job settle this long before holding it to its minimum.
const SETTLE_NS: u64 = 2_000_000_000;

impl MinRate {
    /// The check, if the job has a minimum.
    pub fn new(min_bps: Option<u64>, min_iops: Option<u64>, cycle: Duration) -> Option<MinRate> {
        if min_bps.is_none() && min_iops.is_none() {
            return None;
        }
        Some(MinRate {
            min_bps: min_bps.unwrap_or(0),
            min_iops: min_iops.unwrap_or(0),
            cycle_ns: (cycle.as_nanos() as u64).max(1_000_000),
            start_ns: 0,
            last_ns: 0,
            last_bytes: 0,
            last_ios: 0,
        })
    }

    /// At `now_ns`, with `bytes` and `ios` done so far: the message of a
    /// minimum not met over the last cycle.
    pub fn check(&mut self, now_ns: u64, bytes: u64, ios: u64) -> Option<String> {
        if self.start_ns == 0 {
            self.start_ns = now_ns;
            self.last_ns = now_ns;
            return None;
        }
        if now_ns - self.start_ns < SETTLE_NS || now_ns - self.last_ns < self.cycle_ns {
            return None;
        }
        let secs = (now_ns - self.last_ns) as f64 / 1e9;
        let bps = ((bytes - self.last_bytes) as f64 / secs) as u64;
        let iops = ((ios - self.last_ios) as f64 / secs) as u64;
        (self.last_ns, self.last_bytes, self.last_ios) = (now_ns, bytes, ios);
        if bps < self.min_bps {
            return Some(format!(
                "rate_min={}B/s not met, only transferred {bps}B/s",
                self.min_bps
            ));
        }
        if iops < self.min_iops {
            return Some(format!(
                "rate_iops_min={} not met, only performed {iops} IOPS",
                self.min_iops
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linear_pacing_allows_one_per_gap() {
        let mut p = Pacer::new(1000, false, 1);
        assert_eq!(p.allowed(5000, 0), 1);
        assert_eq!(p.allowed(8500, 1), 3);
        assert_eq!(p.wait(8500), Duration::from_nanos(500));
    }

    #[test]
    fn poisson_arrivals_have_the_mean_rate_and_vary() {
        let mut p = Pacer::new(1000, true, 7);
        let mut gaps = Vec::new();
        let mut last = 0;
        p.allowed(1, 0);
        for now in (1..10_000_000u64).step_by(100) {
            let before = p.arrivals;
            p.allowed(now, before);
            if p.arrivals > before {
                gaps.push(now - last);
                last = now;
            }
        }
        // About 10,000 arrivals in 10 ms at one per µs.
        assert!((9_000..11_000).contains(&p.arrivals), "{}", p.arrivals);
        let short = gaps.iter().filter(|&&g| g <= 200).count();
        let long = gaps.iter().filter(|&&g| g >= 3000).count();
        assert!(short > 100 && long > 100, "{short} short, {long} long gaps");
    }

    #[test]
    fn a_minimum_not_met_is_said_after_the_settling_time() {
        let mut m = MinRate::new(Some(1000), None, Duration::from_secs(1)).unwrap();
        assert!(m.check(1, 0, 0).is_none());
        assert!(m.check(1_500_000_000, 10, 1).is_none());
        let msg = m.check(2_100_000_000, 10, 1).unwrap();
        assert!(msg.contains("rate_min=1000B/s not met"), "{msg}");
        assert!(MinRate::new(None, None, Duration::from_secs(1)).is_none());
    }
}
