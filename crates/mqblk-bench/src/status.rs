//! What a running bench tells a person: fio's status line on a terminal
//! (elapsed and remaining time, IOPS and bandwidth per direction, p99),
//! and `--status-interval`'s periodic JSON reports.
//!
//! Job threads publish their counts in a `Live` once per reap batch (two
//! relaxed stores); the supervisor reads them. A p99 is computed by the
//! job thread itself, from its own histogram, only when the supervisor
//! asks for one (once per status tick), so the hot path never shares the
//! histogram and never computes a quantile it was not asked for.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use mqblk::stats::{Histograms, StatGroup};
use serde_json::{json, Value};

use super::report::{fmt_iops, num2str};

/// fio's `--eta`: when to show the status line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Eta {
    /// When stdout and stderr are both terminals.
    #[default]
    Auto,
    /// Whenever stderr is a terminal.
    Always,
    /// Never.
    Never,
}

/// How a run reports while it runs.
#[derive(Clone, Debug, Default)]
pub struct StatusOptions {
    /// The status line.
    pub eta: Eta,
    /// Print a JSON report to stdout this often.
    pub interval: Option<Duration>,
}

impl StatusOptions {
    /// Nothing while running (in-process runs such as `mqblk repro`).
    pub fn quiet() -> StatusOptions {
        StatusOptions {
            eta: Eta::Never,
            interval: None,
        }
    }
}

/// One job's live counts, written by its thread.
#[derive(Debug, Default)]
pub(crate) struct Live {
    ios: [AtomicU64; 2],
    p99_ns: [AtomicU64; 2],
    want_p99: AtomicBool,
}

/// How often the status line and the p99s are refreshed.
const TICK: Duration = Duration::from_millis(500);

impl Live {
    /// New counters, one per job, each on its own cache line.
    pub fn for_jobs(n: usize) -> Vec<CachePadded<Live>> {
        (0..n).map(|_| CachePadded::new(Live::default())).collect()
    }

    /// Called by the job thread after each reap: its measured I/Os so far,
    /// and its histograms for a p99 when one was asked for.
    #[inline]
    pub fn publish(&self, read_ios: u64, write_ios: u64, clat: &Histograms) {
        self.ios[0].store(read_ios, Relaxed);
        self.ios[1].store(write_ios, Relaxed);
        if self.want_p99.load(Relaxed) {
            self.want_p99.store(false, Relaxed);
            self.publish_p99(clat);
        }
    }

    #[cold]
    fn publish_p99(&self, clat: &Histograms) {
        for (i, g) in [StatGroup::Read, StatGroup::Write].into_iter().enumerate() {
            let h = clat.group(g);
            let v = if h.is_empty() {
                0
            } else {
                h.value_at_quantile(0.99)
            };
            self.p99_ns[i].store(v, Relaxed);
        }
    }
}

/// A job as the status needs it: name and block size.
#[derive(Clone, Debug)]
pub(crate) struct JobInfo {
    /// The job's name.
    pub name: String,
    /// Bytes per I/O.
    pub bs: u64,
}

/// The supervisor's side: the line, the interval reports, and the counts
/// at the last tick.
pub(crate) struct Status {
    bar: Option<indicatif::ProgressBar>,
    interval: Option<Duration>,
    jobs: Vec<JobInfo>,
    t0: Instant,
    last_tick: Instant,
    last_report: Instant,
    last_ios: Vec<[u64; 2]>,
    report_ios: Vec<[u64; 2]>,
}

/// Whether the status line is shown for these options and terminals.
pub(crate) fn line_wanted(eta: Eta, stdout_tty: bool, stderr_tty: bool) -> bool {
    match eta {
        Eta::Never => false,
        Eta::Always => stderr_tty,
        Eta::Auto => stdout_tty && stderr_tty,
    }
}

impl Status {
    /// Start reporting at `t0`, the start of the measured phase.
    pub fn start(
        opts: &StatusOptions,
        jobs: Vec<JobInfo>,
        runtime: Option<Duration>,
        t0: Instant,
        live: &[CachePadded<Live>],
    ) -> Status {
        // The first p99s are ready by the first tick.
        for l in live {
            l.want_p99.store(true, Relaxed);
        }
        let show = line_wanted(
            opts.eta,
            std::io::stdout().is_terminal(),
            std::io::stderr().is_terminal(),
        );
        let bar = show.then(|| status_bar(jobs.len(), runtime)).flatten();
        let n = jobs.len();
        Status {
            bar,
            interval: opts.interval,
            jobs,
            t0,
            last_tick: t0,
            last_report: t0,
            last_ios: vec![[0; 2]; n],
            report_ios: vec![[0; 2]; n],
        }
    }

    /// Whether anything is reported while running.
    pub fn active(&self) -> bool {
        self.bar.is_some() || self.interval.is_some()
    }

    /// Refresh the line and print a due report; called by the supervisor
    /// every few milliseconds.
    pub fn tick(&mut self, live: &[CachePadded<Live>]) -> std::io::Result<()> {
        if !self.active() {
            return Ok(());
        }
        let now = Instant::now();
        if now.duration_since(self.last_tick) >= TICK {
            let dt = now.duration_since(self.last_tick).as_secs_f64();
            let ios = counts(live);
            if let Some(bar) = &self.bar {
                bar.set_position(now.duration_since(self.t0).as_millis() as u64);
                bar.set_message(self.line(&ios, &self.last_ios, dt, live));
            }
            self.last_ios = ios;
            self.last_tick = now;
            for l in live {
                l.want_p99.store(true, Relaxed);
            }
        }
        if let Some(every) = self.interval {
            if now.duration_since(self.last_report) >= every {
                let ios = counts(live);
                let dt = now.duration_since(self.last_report).as_secs_f64();
                let v = self.report(&ios, &self.report_ios, dt, now, live);
                let mut out = std::io::stdout().lock();
                serde_json::to_writer(&mut out, &v)?;
                out.write_all(b"\n")?;
                out.flush()?;
                self.report_ios = ios;
                self.last_report = now;
            }
        }
        Ok(())
    }

    /// Clear the line.
    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }

    fn rates(&self, ios: &[[u64; 2]], before: &[[u64; 2]], dt: f64) -> [(f64, f64); 2] {
        let mut r = [(0.0, 0.0); 2];
        for ((now, then), job) in ios.iter().zip(before).zip(&self.jobs) {
            for d in 0..2 {
                let n = now[d].saturating_sub(then[d]) as f64 / dt.max(1e-9);
                r[d].0 += n;
                r[d].1 += n * job.bs as f64;
            }
        }
        r
    }

    fn line(
        &self,
        ios: &[[u64; 2]],
        before: &[[u64; 2]],
        dt: f64,
        live: &[CachePadded<Live>],
    ) -> String {
        let r = self.rates(ios, before, dt);
        let p99 = |d: usize| {
            let v = live
                .iter()
                .map(|l| l.p99_ns[d].load(Relaxed))
                .max()
                .unwrap_or(0);
            if v == 0 {
                "-".to_string()
            } else {
                format_ns(v)
            }
        };
        format!(
            "[r={}B/s,w={}B/s][r={},w={} IOPS][p99 r={},w={}]",
            num2str(r[0].1 as u64, 4, true),
            num2str(r[1].1 as u64, 4, true),
            fmt_iops(r[0].0),
            fmt_iops(r[1].0),
            p99(0),
            p99(1),
        )
    }

    fn report(
        &self,
        ios: &[[u64; 2]],
        before: &[[u64; 2]],
        dt: f64,
        now: Instant,
        live: &[CachePadded<Live>],
    ) -> Value {
        let jobs: Vec<Value> = self
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let dir = |d: usize| {
                    let n = ios[i][d].saturating_sub(before[i][d]) as f64 / dt.max(1e-9);
                    let mut pct = serde_json::Map::new();
                    let p99 = live[i].p99_ns[d].load(Relaxed);
                    if p99 > 0 {
                        pct.insert("99.000000".into(), json!(p99));
                    }
                    json!({
                        "iops": n,
                        "bw_bytes": (n * job.bs as f64).round() as u64,
                        "total_ios": ios[i][d],
                        "io_bytes": ios[i][d] * job.bs,
                        "clat_ns": { "percentile": pct },
                    })
                };
                json!({
                    "jobname": job.name,
                    "jobid": i,
                    "read": dir(0),
                    "write": dir(1),
                })
            })
            .collect();
        json!({
            "status": {
                "elapsed_ms": now.duration_since(self.t0).as_millis() as u64,
                "interval_ms": (dt * 1000.0).round() as u64,
            },
            "jobs": jobs,
        })
    }
}

fn counts(live: &[CachePadded<Live>]) -> Vec<[u64; 2]> {
    live.iter()
        .map(|l| [l.ios[0].load(Relaxed), l.ios[1].load(Relaxed)])
        .collect()
}

/// fio's line: `Jobs: N: [bar] [r=..,w=..][r=..,w=.. IOPS][p99 ..][elapsed, eta]`;
/// without a runtime there is no end to count down to, so a spinner.
fn status_bar(jobs: usize, runtime: Option<Duration>) -> Option<indicatif::ProgressBar> {
    let (bar, template) = match runtime {
        Some(r) => (
            indicatif::ProgressBar::new(r.as_millis() as u64),
            format!("Jobs: {jobs}: [{{bar:20}}] {{msg}}[elapsed {{elapsed}}, eta {{eta}}]"),
        ),
        None => (
            indicatif::ProgressBar::new_spinner(),
            format!("Jobs: {jobs}: {{spinner}} {{msg}}[elapsed {{elapsed}}]"),
        ),
    };
    let style = indicatif::ProgressStyle::with_template(&template)
        .ok()?
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
    Some(bar)
}

/// A latency for the status line, in the largest unit that keeps it at
/// or above 1, to three figures: `850 ns`, `12.3 µs`, `1.25 ms`, `2 s`.
fn format_ns(ns: u64) -> String {
    let v = ns as f64;
    let (x, unit) = if v >= 1e9 {
        (v / 1e9, "s")
    } else if v >= 1e6 {
        (v / 1e6, "ms")
    } else if v >= 1e3 {
        (v / 1e3, "µs")
    } else {
        (v, "ns")
    };
    let digits = if x >= 100.0 || x == x.trunc() {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    let digits = if digits.contains('.') {
        digits.trim_end_matches('0').trim_end_matches('.')
    } else {
        &digits
    };
    format!("{digits} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_only_on_terminals() {
        assert!(line_wanted(Eta::Auto, true, true));
        assert!(!line_wanted(Eta::Auto, false, true));
        assert!(!line_wanted(Eta::Auto, true, false));
        assert!(line_wanted(Eta::Always, false, true));
        assert!(!line_wanted(Eta::Never, true, true));
    }

    #[test]
    fn a_p99_is_published_only_when_asked() {
        let live = Live::default();
        let mut h = Histograms::new();
        for ns in 1..=1000 {
            h.record(StatGroup::Read, ns);
        }
        live.publish(1000, 0, &h);
        assert_eq!(live.p99_ns[0].load(Relaxed), 0);
        live.want_p99.store(true, Relaxed);
        live.publish(1000, 0, &h);
        let p99 = live.p99_ns[0].load(Relaxed);
        assert!((980..=1000).contains(&p99), "{p99}");
        assert_eq!(
            counts(std::slice::from_ref(&CachePadded::new(live))),
            [[1000, 0]]
        );
    }

    #[test]
    fn reports_have_fios_job_shape() {
        let live = Live::for_jobs(1);
        live[0].publish(500, 100, &Histograms::new());
        let s = Status::start(
            &StatusOptions {
                eta: Eta::Never,
                interval: Some(Duration::from_secs(1)),
            },
            vec![JobInfo {
                name: "job0".into(),
                bs: 4096,
            }],
            None,
            Instant::now(),
            &live,
        );
        let now = Instant::now();
        let v = s.report(&counts(&live), &[[0, 0]], 1.0, now, &live);
        assert_eq!(v["jobs"][0]["jobname"], "job0");
        assert_eq!(v["jobs"][0]["read"]["iops"], 500.0);
        assert_eq!(v["jobs"][0]["write"]["bw_bytes"], 409_600);
        assert!(v["status"]["elapsed_ms"].is_u64());
    }

    #[test]
    fn a_p99_is_shown_in_its_unit() {
        assert_eq!(format_ns(850), "850 ns");
        assert_eq!(format_ns(12_340), "12.3 µs");
        assert_eq!(format_ns(1_250_000), "1.25 ms");
        assert_eq!(format_ns(2_000_000_000), "2 s");
    }
}
