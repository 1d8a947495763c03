//! fio's steady state (`ss=`/`steadystate=`, `ss_dur=`, `ss_ramp=`): a
//! job ends early once its IOPS or bandwidth has settled, judged once a
//! second over a rolling window, as fio's `steadystate.c` does. The
//! supervisor ([`super::engine`]) samples each job's published counts
//! ([`super::counts`]) and asks the job to stop.
//!
//! With `group_reporting`, the jobs of a job section (its `numjobs`
//! copies) are judged together, on their sums, and stop together.

use std::time::Duration;

use serde_json::json;

pub(crate) use mqblk_fio::steadystate::SteadySpec;

/// What the report says of a job's steady state (fio's JSON
/// `steadystate` object).
#[derive(Clone, Debug, PartialEq)]
pub struct SteadyResult {
    /// `ss=` as fio spells it.
    pub spec: String,
    /// Window, seconds.
    pub duration_s: u64,
    /// Whether the job stopped because it was steady.
    pub attained: bool,
    /// The last criterion computed (slope or deviation; percent or
    /// absolute, as the limit).
    pub criterion: f64,
    /// IOPS of the window, oldest first.
    pub iops: Vec<u64>,
    /// Bandwidth of the window, bytes per second.
    pub bw: Vec<u64>,
}

impl SteadyResult {
    /// fio's JSON shape.
    pub fn json(&self) -> serde_json::Value {
        let mean = |v: &[u64]| {
            if v.is_empty() {
                0
            } else {
                v.iter().sum::<u64>() / v.len() as u64
            }
        };
        json!({
            "ss": self.spec,
            "duration": self.duration_s,
            "attained": u8::from(self.attained),
            "criterion": format!("{:.6}{}", self.criterion, if self.spec.ends_with('%') { "%" } else { "" }),
            "data": {
                "bw_mean": mean(&self.bw),
                "iops_mean": mean(&self.iops),
                "iops": self.iops,
                "bw": self.bw,
            }
        })
    }
}

/// One judged unit (a job, or a job section with `group_reporting`).
struct Unit {
    spec: SteadySpec,
    /// The jobs summed.
    jobs: Vec<usize>,
    dur: usize,
    ramp: Duration,
    iops: Vec<u64>,
    bw: Vec<u64>,
    prev_ios: u64,
    prev_bytes: u64,
    prev_ms: u64,
    started: bool,
    attained: bool,
    criterion: f64,
}

/// The supervisor's view of every steady-state job of a group.
pub struct Tracker {
    units: Vec<Unit>,
    next_ms: u64,
}

/// How often the criterion is computed (fio: once a second).
const INTERVAL_MS: u64 = 1000;

impl Tracker {
    /// Units for the jobs that ask (`jobs[i]`: the job's `ss` settings
    /// and the unit key it is judged in); `None` when none asks.
    pub fn new(jobs: &[(Option<SteadySpec>, Duration, Duration, usize)]) -> Option<Tracker> {
        let mut units: Vec<(usize, Unit)> = Vec::new();
        for (i, (spec, dur, ramp, key)) in jobs.iter().enumerate() {
            let Some(spec) = spec else { continue };
            let secs = dur.as_secs() as usize;
            if secs == 0 {
                continue;
            }
            if let Some((_, u)) = units.iter_mut().find(|(k, _)| k == key) {
                u.jobs.push(i);
                continue;
            }
            units.push((
                *key,
                Unit {
                    spec: *spec,
                    jobs: vec![i],
                    dur: secs,
                    ramp: *ramp,
                    iops: Vec::with_capacity(secs),
                    bw: Vec::with_capacity(secs),
                    prev_ios: 0,
                    prev_bytes: 0,
                    prev_ms: 0,
                    started: false,
                    attained: false,
                    criterion: 0.0,
                },
            ));
        }
        if units.is_empty() {
            return None;
        }
        Some(Tracker {
            units: units.into_iter().map(|(_, u)| u).collect(),
            next_ms: INTERVAL_MS,
        })
    }

    /// Called by the supervisor as it ticks, `now_ms` since the jobs
    /// started; `counts(i)` gives job i's (I/Os, bytes) so far. Returns
    /// the jobs that became steady (to be stopped).
    pub fn tick(&mut self, now_ms: u64, counts: impl Fn(usize) -> (u64, u64)) -> Vec<usize> {
        let mut stop = Vec::new();
        if now_ms < self.next_ms {
            return stop;
        }
        self.next_ms = now_ms + INTERVAL_MS;
        for u in &mut self.units {
            if u.attained {
                continue;
            }
            let (ios, bytes) = u
                .jobs
                .iter()
                .map(|&j| counts(j))
                .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
            // fio starts recording one second after the ramp.
            if !u.started {
                if now_ms >= u.ramp.as_millis() as u64 + if u.ramp.is_zero() { 0 } else { 1000 } {
                    u.started = true;
                    u.prev_ios = ios;
                    u.prev_bytes = bytes;
                    u.prev_ms = now_ms;
                }
                continue;
            }
            let ms = (now_ms - u.prev_ms).max(1);
            let iops = 1000 * ios.saturating_sub(u.prev_ios) / ms;
            let bw = 1000 * bytes.saturating_sub(u.prev_bytes) / ms;
            (u.prev_ios, u.prev_bytes, u.prev_ms) = (ios, bytes, now_ms);
            if u.iops.len() == u.dur {
                u.iops.remove(0);
                u.bw.remove(0);
            }
            u.iops.push(iops);
            u.bw.push(bw);
            if u.iops.len() < u.dur {
                continue;
            }
            let data = if u.spec.iops { &u.iops } else { &u.bw };
            u.criterion = criterion(&u.spec, data);
            if u.criterion.abs() < u.spec.limit {
                u.attained = true;
                stop.extend(&u.jobs);
            }
        }
        stop
    }

    /// The report for job `i`, if it is judged.
    pub fn result(&self, i: usize) -> Option<SteadyResult> {
        let u = self.units.iter().find(|u| u.jobs.contains(&i))?;
        Some(SteadyResult {
            spec: u.spec.name(),
            duration_s: u.dur as u64,
            attained: u.attained,
            criterion: u.criterion,
            iops: u.iops.clone(),
            bw: u.bw.clone(),
        })
    }
}

/// fio's criterion over a full window: the least-squares slope, or the
/// largest deviation from the mean; as a percentage of the mean when the
/// limit is one.
pub fn criterion(spec: &SteadySpec, data: &[u64]) -> f64 {
    let n = data.len() as f64;
    let mean = data.iter().sum::<u64>() as f64 / n;
    let value = if spec.slope {
        let sum_x = n * (n - 1.0) / 2.0;
        let sum_x_sq = (n - 1.0) * n * (2.0 * n - 1.0) / 6.0;
        let sum_y: f64 = data.iter().map(|&y| y as f64).sum();
        let sum_xy: f64 = data
            .iter()
            .enumerate()
            .map(|(x, &y)| x as f64 * y as f64)
            .sum();
        (sum_xy - sum_x * sum_y / n) / (sum_x_sq - sum_x * sum_x / n)
    } else {
        data.iter()
            .map(|&y| (y as f64 - mean).abs())
            .fold(0.0, f64::max)
    };
    if spec.percent {
        if mean == 0.0 {
            f64::INFINITY
        } else {
            100.0 * value / mean
        }
    } else {
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_s_criteria_parse() {
        let s = SteadySpec::parse("iops:10%").unwrap();
        assert!(s.iops && !s.slope && s.percent && s.limit == 10.0);
        let s = SteadySpec::parse("bw_slope:1%").unwrap();
        assert!(!s.iops && s.slope);
        let s = SteadySpec::parse("bw:1m").unwrap();
        assert_eq!(s.limit, 1048576.0);
        assert!(!s.percent);
        for bad in ["iops", "lat:1", "iops:x", "iops:-1"] {
            assert!(SteadySpec::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slope_and_deviation_are_fio_s() {
        let dev = SteadySpec::parse("iops:10%").unwrap();
        assert!((criterion(&dev, &[100, 110, 90]) - 10.0).abs() < 1e-9);
        let slope = SteadySpec::parse("iops_slope:1").unwrap();
        assert!((criterion(&slope, &[10, 20, 30, 40]) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn a_steady_job_is_stopped_once_its_window_is_full() {
        let spec = SteadySpec::parse("iops:5%").unwrap();
        let mut t = Tracker::new(&[
            (Some(spec), Duration::from_secs(3), Duration::ZERO, 0),
            (None, Duration::ZERO, Duration::ZERO, 1),
        ])
        .unwrap();
        let ios = |ms: u64| ms; // 1000 IOPS, steady
        let mut stopped = Vec::new();
        for ms in (0..=6000).step_by(250) {
            stopped.extend(t.tick(ms, |_| (ios(ms), ios(ms) * 4096)));
        }
        assert_eq!(stopped, [0]);
        let r = t.result(0).unwrap();
        assert!(r.attained);
        assert_eq!(r.iops, [1000, 1000, 1000]);
        assert!(t.result(1).is_none());
    }
}
