//! fio's bandwidth, IOPS and latency logs (`write_bw_log=`,
//! `write_iops_log=`, `write_lat_log=`: the mean latency of the window): one
//! line per `log_avg_msec` window and direction, in fio 3.33's format
//! `time_ms, value, direction, block_size, priority`. On an averaged line
//! fio writes block size 0 and priority 0 (fio's iolog.c `flush_samples`,
//! stat.c `__add_stat_to_log`). `fio_generate_plots` reads these lines as
//! they are; fio's `fiologparser.py` still expects the four columns of
//! fio before 3.2x and needs the priority column cut, for fio's own logs
//! as for these. Files are named as fio names them: `PREFIX_bw.N.log` and
//! `PREFIX_iops.N.log` for job N (counting from 1), or `PREFIX_bw.log`
//! with `per_job_logs=0`; a job's file is rewritten, a shared one is
//! appended to (fio's `flush_log`).
//!
//! The job threads publish their counts once per batch; the supervisor,
//! which reads the clock anyway, samples them and keeps the lines, and the
//! files are written when the run ends (no file I/O while measuring).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use anyhow::{Context as _, Result};

use super::job::JobSpec;

/// A job's counts as its thread publishes them: I/Os and bytes, for reads
/// and for writes.
#[derive(Default)]
pub struct Counters {
    /// Completed I/Os, [reads, writes].
    pub ios: [AtomicU64; 2],
    /// Bytes transferred, [reads, writes].
    pub bytes: [AtomicU64; 2],
    /// Completions in the latency histograms, [reads, writes] (for the
    /// latency log; published when the supervisor asks, see `Logger`).
    pub lat_count: [AtomicU64; 2],
    /// Their latencies summed, in nanoseconds.
    pub lat_sum_ns: [AtomicU64; 2],
}

impl Counters {
    /// Publish the latency totals (the job thread, once per log window:
    /// reading a histogram's mean walks its buckets).
    pub fn publish_latency(&self, count: [u64; 2], sum_ns: [u64; 2]) {
        for d in 0..2 {
            self.lat_count[d].store(count[d], Relaxed);
            self.lat_sum_ns[d].store(sum_ns[d], Relaxed);
        }
    }

    /// Publish (the job thread, once per batch).
    #[inline]
    pub fn publish(&self, ios: [u64; 2], bytes: [u64; 2]) {
        for d in 0..2 {
            self.ios[d].store(ios[d], Relaxed);
            self.bytes[d].store(bytes[d], Relaxed);
        }
    }
}

struct JobLog {
    bw: Option<(String, String)>,
    iops: Option<(String, String)>,
    /// fio's lat log is three files; mqblk's one latency (submission to
    /// completion) goes into `_lat` and `_clat`.
    lat: Option<(String, String)>,
    clat: Option<(String, String)>,
    per_job: bool,
    last: ([u64; 2], [u64; 2]),
    last_lat: ([u64; 2], [u64; 2]),
}

/// The logs of one group's jobs. Each tick bumps `generation`; a job that
/// logs latency sees the change and publishes its histograms' totals.
pub struct Logger {
    jobs: Vec<Option<JobLog>>,
    interval_ms: u64,
    last_ms: u64,
}

fn file_name(prefix: &str, kind: &str, job: usize, per_job: bool) -> String {
    if per_job {
        format!("{prefix}_{kind}.{}.log", job + 1)
    } else {
        format!("{prefix}_{kind}.log")
    }
}

impl Logger {
    /// The logs `jobs` ask for (`base` is the first job's index in the run),
    /// or `None` when none does.
    pub fn new(base: usize, jobs: &[&JobSpec]) -> Option<Logger> {
        if jobs.iter().all(|j| {
            j.write_bw_log.is_none() && j.write_iops_log.is_none() && j.write_lat_log.is_none()
        }) {
            return None;
        }
        let interval_ms = jobs
            .iter()
            .map(|j| j.log_avg_msec)
            .min()
            .unwrap_or(500)
            .max(1);
        let logs = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let name = |p: &Option<String>, kind| {
                    p.as_ref()
                        .map(|p| (file_name(p, kind, base + i, j.per_job_logs), String::new()))
                };
                Some(JobLog {
                    bw: name(&j.write_bw_log, "bw"),
                    iops: name(&j.write_iops_log, "iops"),
                    lat: name(&j.write_lat_log, "lat"),
                    clat: name(&j.write_lat_log, "clat"),
                    per_job: j.per_job_logs,
                    last: ([0; 2], [0; 2]),
                    last_lat: ([0; 2], [0; 2]),
                })
            })
            .collect();
        Some(Logger {
            jobs: logs,
            interval_ms: u64::from(interval_ms),
            last_ms: 0,
        })
    }

    /// Sample the counters if a window has passed (`now_ms` since the
    /// measured phase began).
    /// True when a window ended (the caller bumps the generation).
    pub fn tick(&mut self, now_ms: u64, counters: &[&Counters]) -> bool {
        if now_ms < self.last_ms + self.interval_ms {
            return false;
        }
        let window_ms = (now_ms - self.last_ms).max(1);
        self.last_ms = now_ms;
        for (log, c) in self.jobs.iter_mut().zip(counters) {
            let Some(log) = log else { continue };
            let ios = [c.ios[0].load(Relaxed), c.ios[1].load(Relaxed)];
            let bytes = [c.bytes[0].load(Relaxed), c.bytes[1].load(Relaxed)];
            for d in 0..2 {
                let dios = ios[d].saturating_sub(log.last.0[d]);
                let dbytes = bytes[d].saturating_sub(log.last.1[d]);
                if dios == 0 {
                    continue;
                }
                if let Some((_, text)) = &mut log.bw {
                    // fio logs bandwidth in KiB/s.
                    let kib_s = dbytes * 1000 / window_ms / 1024;
                    let _ = writeln!(text, "{now_ms}, {kib_s}, {d}, 0, 0");
                }
                if let Some((_, text)) = &mut log.iops {
                    let iops = dios * 1000 / window_ms;
                    let _ = writeln!(text, "{now_ms}, {iops}, {d}, 0, 0");
                }
            }
            log.last = (ios, bytes);
            let n = [c.lat_count[0].load(Relaxed), c.lat_count[1].load(Relaxed)];
            let sum = [c.lat_sum_ns[0].load(Relaxed), c.lat_sum_ns[1].load(Relaxed)];
            for d in 0..2 {
                let dn = n[d].saturating_sub(log.last_lat.0[d]);
                let dsum = sum[d].saturating_sub(log.last_lat.1[d]);
                if dn == 0 {
                    continue;
                }
                for (_, text) in [&mut log.lat, &mut log.clat].into_iter().flatten() {
                    // fio logs latency in nanoseconds, the window's mean
                    // rounded.
                    let mean = (dsum + dn / 2) / dn;
                    let _ = writeln!(text, "{now_ms}, {mean}, {d}, 0, 0");
                }
            }
            log.last_lat = (n, sum);
        }
        true
    }

    /// Write the files: a job's own file from scratch, a file the jobs
    /// share (`per_job_logs=0`) appended to, as fio's `flush_log` does.
    pub fn finish(self) -> Result<()> {
        use std::io::Write as _;
        for log in self.jobs.into_iter().flatten() {
            for (path, text) in [log.bw, log.iops, log.lat, log.clat].into_iter().flatten() {
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .write(true)
                    .append(!log.per_job)
                    .truncate(log.per_job)
                    .open(&path)
                    .with_context(|| format!("cannot write log {path}"))?;
                f.write_all(text.as_bytes())
                    .with_context(|| format!("cannot write log {path}"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_fio_s_format_and_names() {
        let dir = std::env::temp_dir().join(format!("mqblk-log-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = dir.join("run").display().to_string();
        let job = JobSpec {
            write_bw_log: Some(prefix.clone()),
            write_iops_log: Some(prefix.clone()),
            log_avg_msec: 100,
            ..JobSpec::default()
        };
        let mut l = Logger::new(0, &[&job]).unwrap();
        let c0 = Counters::default();
        let c = [&c0];
        c[0].publish([100, 0], [409600, 0]);
        l.tick(100, &c);
        c[0].publish([300, 50], [1228800, 204800]);
        l.tick(150, &c); // not a window yet
        l.tick(200, &c);
        l.finish().unwrap();
        let bw = std::fs::read_to_string(format!("{prefix}_bw.1.log")).unwrap();
        assert_eq!(
            bw,
            "100, 4000, 0, 0, 0\n200, 8000, 0, 0, 0\n200, 2000, 1, 0, 0\n"
        );
        let iops = std::fs::read_to_string(format!("{prefix}_iops.1.log")).unwrap();
        assert_eq!(
            iops,
            "100, 1000, 0, 0, 0\n200, 2000, 0, 0, 0\n200, 500, 1, 0, 0\n"
        );
        let lat = std::fs::read_to_string(format!("{prefix}_iops.1.log")).unwrap();
        assert!(!lat.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn latency_lines_are_the_window_means() {
        let dir = std::env::temp_dir().join(format!("mqblk-lat-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = dir.join("run").display().to_string();
        let job = JobSpec {
            write_lat_log: Some(prefix.clone()),
            log_avg_msec: 100,
            ..JobSpec::default()
        };
        let mut l = Logger::new(0, &[&job]).unwrap();
        let c0 = Counters::default();
        c0.publish_latency([10, 0], [10_000, 0]);
        l.tick(100, &[&c0]);
        c0.publish_latency([31, 0], [50_003, 0]);
        l.tick(200, &[&c0]);
        l.finish().unwrap();
        for kind in ["lat", "clat"] {
            let text = std::fs::read_to_string(format!("{prefix}_{kind}.1.log")).unwrap();
            // 40_003 ns over 21 I/Os: 1904.9, rounded as fio rounds.
            assert_eq!(text, "100, 1000, 0, 0, 0\n200, 1905, 0, 0, 0\n");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_job_s_file_is_rewritten_and_a_shared_one_appended_to() {
        let dir = std::env::temp_dir().join(format!("mqblk-log-append-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = dir.join("run").display().to_string();
        for per_job_logs in [true, false] {
            let job = JobSpec {
                write_iops_log: Some(prefix.clone()),
                log_avg_msec: 100,
                per_job_logs,
                ..JobSpec::default()
            };
            for _ in 0..2 {
                let mut l = Logger::new(0, &[&job]).unwrap();
                let c0 = Counters::default();
                c0.publish([100, 0], [409600, 0]);
                l.tick(100, &[&c0]);
                l.finish().unwrap();
            }
        }
        let own = std::fs::read_to_string(format!("{prefix}_iops.1.log")).unwrap();
        assert_eq!(own, "100, 1000, 0, 0, 0\n");
        let shared = std::fs::read_to_string(format!("{prefix}_iops.log")).unwrap();
        assert_eq!(shared, "100, 1000, 0, 0, 0\n".repeat(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
