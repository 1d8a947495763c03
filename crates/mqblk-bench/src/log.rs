//! fio's bandwidth, IOPS and latency logs (`write_bw_log=`,
//! `write_iops_log=`, `write_lat_log=`: `_lat`, `_slat` and `_clat`), in
//! fio 3.33's format (iolog.c `flush_samples`):
//!
//! ```text
//! time_ms, value, direction, block_size[, offset], priority
//! ```
//!
//! - With `log_avg_msec=N`, one line per window and direction: the
//!   window's bandwidth (KiB/s), IOPS, or mean latency (ns), with block
//!   size 0, offset 0 and priority 0, as fio writes an averaged line
//!   (stat.c `__add_stat_to_log`). The job threads publish their counts
//!   once per batch; the supervisor, which reads the clock anyway, samples
//!   them and keeps the lines.
//! - With `log_avg_msec=0`, one line per completed I/O (stat.c
//!   `add_*_sample`): its completion time; bandwidth as fio computes it
//!   per I/O, bytes * 1000000 / clat in ns (so 1000-byte units, not KiB);
//!   IOPS 1; or its latency in ns; its size, offset and priority. The
//!   slat log is in issue order, with the issue time. The lines come from
//!   the job's samples ([`super::sample`]).
//! - `log_offset=1` adds the offset column; the priority column is 1 for
//!   real-time I/O and 0 otherwise, or with `log_prio=1` the priority
//!   value in hex, `0x4004` for best effort level 4 (fio's `ioprio`:
//!   class << 13 | level).
//!
//! Latencies are the job's own stamps, not the layer's histograms. Time is
//! in ms since the measured phase began (the job's, for per-I/O lines).
//! `fio_generate_plots` reads these lines as they are; fio's
//! `fiologparser.py` still unpacks the four columns of fio before 3.2x and
//! needs the priority column cut, for fio's own logs as for these.
//!
//! The histogram log (`write_hist_log`, `PREFIX_clat_hist.N.log`) is
//! described in [`super::hist`]; its file is written here with the others.
//!
//! Files are named as fio names them: `PREFIX_bw.N.log` for job N
//! (counting from 1), or `PREFIX_bw.log` with `per_job_logs=0`. They are
//! written when the run ends (no file I/O while measuring): a job's own
//! file from scratch, a shared one appended to (fio's `flush_log`).

use std::io::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use anyhow::{Context as _, Result};

use super::counts::{Counters, Sums, DIRECTIONS};
use super::sample::{IoSample, Recorded, SampleLog};
use mqblk_fio::job::JobSpec;

/// fio's priority value of a job's I/O (`ioprio_value`: class << 13 |
/// level, with Linux's classes, 1 real time, 2 best effort, 3 idle); 0
/// when the job sets none.
pub fn fio_ioprio(p: Option<mqblk::IoPrio>) -> u16 {
    p.map_or(0, |p| {
        let class: u16 = match p.class {
            mqblk::IoPrioClass::Rt => 1,
            mqblk::IoPrioClass::Be => 2,
            mqblk::IoPrioClass::Idle => 3,
        };
        class << 13 | u16::from(p.level)
    })
}

/// The columns a job's lines have after the block size.
#[derive(Clone, Copy, Debug, Default)]
struct Columns {
    /// `log_offset=1`.
    offset: bool,
    /// `log_prio=1`.
    prio: bool,
}

impl Columns {
    /// One line.
    fn line(
        self,
        w: &mut impl std::io::Write,
        time_ms: u64,
        value: u64,
        d: impl std::fmt::Display,
        (bs, offset, ioprio): (u64, u64, u16),
    ) -> std::io::Result<()> {
        write!(w, "{time_ms}, {value}, {d}, {bs}, ")?;
        if self.offset {
            write!(w, "{offset}, ")?;
        }
        if self.prio {
            writeln!(w, "0x{ioprio:04x}")
        } else {
            // fio's `ioprio_value_is_class_rt`.
            writeln!(w, "{}", u8::from(ioprio >> 13 == 1))
        }
    }
}

/// A log file's name and, for averaged lines, its text so far.
type File = Option<(String, Vec<u8>)>;

struct JobLog {
    bw: File,
    iops: File,
    lat: File,
    slat: File,
    clat: File,
    /// `PREFIX_clat_hist.N.log`, and `log_hist_coarseness`.
    hist: Option<(String, u8)>,
    per_job: bool,
    /// `log_avg_msec=0`: a line per I/O, from the job's samples.
    per_io: bool,
    columns: Columns,
    /// The job's priority value (fio's `td->ioprio`).
    ioprio: u16,
    last: ([u64; DIRECTIONS], [u64; DIRECTIONS]),
    last_lat: [Sums; DIRECTIONS],
}

/// The logs of one group's jobs.
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

/// Write `path` through `lines`: from scratch for a job's own file,
/// appended to for a shared one.
fn write_file(
    path: &str,
    per_job: bool,
    lines: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(!per_job)
        .truncate(per_job)
        .open(path)
        .with_context(|| format!("cannot write log {path}"))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    lines(&mut w)
        .and_then(|()| w.flush())
        .with_context(|| format!("cannot write log {path}"))
}

impl JobLog {
    /// One averaged line: block size, offset and priority 0.
    fn averaged(columns: Columns, text: &mut Vec<u8>, now_ms: u64, value: u64, d: usize) {
        let _ = columns.line(text, now_ms, value, d, (0, 0, 0));
    }

    /// Write the per-I/O files from `samples`.
    fn write_per_io(&self, samples: &SampleLog) -> Result<()> {
        let c = self.columns;
        let prio = self.ioprio;
        let each = |file: &File, value: fn(&IoSample) -> u64| -> Result<()> {
            let Some((path, _)) = file else {
                return Ok(());
            };
            write_file(path, self.per_job, |w| {
                for s in samples.iter() {
                    let tail = (u64::from(s.len_bytes), s.offset_bytes, prio);
                    c.line(w, s.done_ns / 1_000_000, value(s), s.direction, tail)?;
                }
                Ok(())
            })
        };
        // fio's add_bw_sample: bytes * 1000000 / clat_ns, 0 for a clat of 0.
        each(&self.bw, |s| {
            (u64::from(s.len_bytes) * 1_000_000)
                .checked_div(s.clat_ns)
                .unwrap_or(0)
        })?;
        each(&self.iops, |_| 1)?;
        each(&self.lat, IoSample::lat_ns)?;
        each(&self.clat, |s| s.clat_ns)?;
        if let Some((path, _)) = &self.slat {
            // fio logs slat when the I/O is issued: in issue order.
            let mut issued: Vec<&IoSample> = samples.iter().collect();
            issued.sort_by_key(|s| s.issue_ns());
            write_file(path, self.per_job, |w| {
                for s in issued {
                    let tail = (u64::from(s.len_bytes), s.offset_bytes, prio);
                    c.line(w, s.issue_ns() / 1_000_000, s.slat_ns, s.direction, tail)?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

impl Logger {
    /// The logs `jobs` ask for (`base` is the first job's index in the run),
    /// or `None` when none does.
    pub fn new(base: usize, jobs: &[&JobSpec]) -> Option<Logger> {
        if jobs.iter().all(|j| {
            j.write_bw_log.is_none()
                && j.write_iops_log.is_none()
                && j.write_lat_log.is_none()
                && j.write_hist_log.is_none()
        }) {
            return None;
        }
        let interval_ms = jobs
            .iter()
            .map(|j| j.log_avg_msec)
            .filter(|&ms| ms > 0)
            .min()
            .unwrap_or(500);
        let logs = jobs
            .iter()
            .enumerate()
            .map(|(i, j)| {
                let name = |p: &Option<String>, kind| {
                    p.as_ref()
                        .map(|p| (file_name(p, kind, base + i, j.per_job_logs), Vec::new()))
                };
                Some(JobLog {
                    bw: name(&j.write_bw_log, "bw"),
                    iops: name(&j.write_iops_log, "iops"),
                    lat: name(&j.write_lat_log, "lat"),
                    slat: name(&j.write_lat_log, "slat"),
                    clat: name(&j.write_lat_log, "clat"),
                    hist: j.write_hist_log.as_ref().map(|p| {
                        let path = file_name(p, "clat_hist", base + i, j.per_job_logs);
                        (path, j.log_hist_coarseness)
                    }),
                    per_job: j.per_job_logs,
                    per_io: j.log_avg_msec == 0,
                    columns: Columns {
                        offset: j.log_offset,
                        prio: j.log_prio,
                    },
                    ioprio: fio_ioprio(j.ioprio),
                    last: ([0; DIRECTIONS], [0; DIRECTIONS]),
                    last_lat: [Sums::default(); DIRECTIONS],
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
    pub fn tick(&mut self, now_ms: u64, counters: &[&Counters]) {
        if now_ms < self.last_ms + self.interval_ms {
            return;
        }
        let window_ms = (now_ms - self.last_ms).max(1);
        self.last_ms = now_ms;
        for (log, c) in self.jobs.iter_mut().zip(counters) {
            let Some(log) = log.as_mut().filter(|l| !l.per_io) else {
                continue;
            };
            let cols = log.columns;
            let ios: [u64; DIRECTIONS] = std::array::from_fn(|d| c.ios[d].load(Relaxed));
            let bytes: [u64; DIRECTIONS] = std::array::from_fn(|d| c.bytes[d].load(Relaxed));
            for d in 0..DIRECTIONS {
                let dios = ios[d].saturating_sub(log.last.0[d]);
                let dbytes = bytes[d].saturating_sub(log.last.1[d]);
                if dios == 0 {
                    continue;
                }
                if let Some((_, text)) = &mut log.bw {
                    // fio logs bandwidth in KiB/s.
                    let kib_s = dbytes * 1000 / window_ms / 1024;
                    JobLog::averaged(cols, text, now_ms, kib_s, d);
                }
                if let Some((_, text)) = &mut log.iops {
                    JobLog::averaged(cols, text, now_ms, dios * 1000 / window_ms, d);
                }
            }
            log.last = (ios, bytes);
            for d in 0..DIRECTIONS {
                let now = c.sums(d);
                let last = std::mem::replace(&mut log.last_lat[d], now);
                let n = now.ios.saturating_sub(last.ios);
                if n == 0 {
                    continue;
                }
                // fio logs latency in nanoseconds, the window's mean
                // rounded.
                let mean = |now: u64, last: u64| (now.saturating_sub(last) + n / 2) / n;
                for (file, now, last) in [
                    (&mut log.lat, now.lat_ns, last.lat_ns),
                    (&mut log.slat, now.slat_ns, last.slat_ns),
                    (&mut log.clat, now.clat_ns, last.clat_ns),
                ] {
                    if let Some((_, text)) = file {
                        JobLog::averaged(cols, text, now_ms, mean(now, last), d);
                    }
                }
            }
        }
    }

    /// Write the files, in job order: the averaged lines kept, or the
    /// per-I/O lines, and the histogram lines, from what each job
    /// `recorded` (indexed as the jobs).
    pub fn finish(self, recorded: &[Recorded]) -> Result<()> {
        for (i, log) in self.jobs.into_iter().enumerate() {
            let Some(log) = log else { continue };
            let recorded = recorded.get(i);
            if log.per_io {
                let none = SampleLog::default();
                let samples = recorded.and_then(|r| r.samples.as_ref()).unwrap_or(&none);
                log.write_per_io(samples)?;
            } else {
                let files = [&log.bw, &log.iops, &log.lat, &log.slat, &log.clat];
                for (path, text) in files.into_iter().flatten() {
                    write_file(path, log.per_job, |w| w.write_all(text))?;
                }
            }
            if let Some((path, coarseness)) = &log.hist {
                // With log_hist_msec=0 the file is empty, as fio's.
                let hist = recorded.and_then(|r| r.hist.as_ref());
                write_file(path, log.per_job, |w| {
                    hist.map_or(Ok(()), |h| h.write(w, *coarseness))
                })?;
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
        c[0].publish([100, 0, 0], [409600, 0, 0]);
        l.tick(100, &c);
        c[0].publish([300, 50, 0], [1228800, 204800, 0]);
        l.tick(150, &c); // not a window yet
        l.tick(200, &c);
        l.finish(&[]).unwrap();
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
        let sums = |ios, slat_ns, clat_ns| Sums {
            ios,
            lat_ns: slat_ns + clat_ns,
            slat_ns,
            clat_ns,
        };
        let none = Sums::default();
        c0.publish_latency(&[sums(10, 1_000, 10_000), none, sums(1, 7, 70)]);
        l.tick(100, &[&c0]);
        c0.publish_latency(&[sums(31, 2_003, 50_000), none, sums(1, 7, 70)]);
        l.tick(200, &[&c0]);
        l.finish(&[]).unwrap();
        let read = |kind| std::fs::read_to_string(format!("{prefix}_{kind}.1.log")).unwrap();
        // 40_000 ns of clat over 21 I/Os: 1904.8, rounded as fio rounds;
        // trims are direction 2.
        assert_eq!(
            read("clat"),
            "100, 1000, 0, 0, 0\n100, 70, 2, 0, 0\n200, 1905, 0, 0, 0\n"
        );
        assert_eq!(
            read("slat"),
            "100, 100, 0, 0, 0\n100, 7, 2, 0, 0\n200, 48, 0, 0, 0\n"
        );
        assert_eq!(
            read("lat"),
            "100, 1100, 0, 0, 0\n100, 77, 2, 0, 0\n200, 1953, 0, 0, 0\n"
        );
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
                c0.publish([100, 0, 0], [409600, 0, 0]);
                l.tick(100, &[&c0]);
                l.finish(&[]).unwrap();
            }
        }
        let own = std::fs::read_to_string(format!("{prefix}_iops.1.log")).unwrap();
        assert_eq!(own, "100, 1000, 0, 0, 0\n");
        let shared = std::fs::read_to_string(format!("{prefix}_iops.log")).unwrap();
        assert_eq!(shared, "100, 1000, 0, 0, 0\n".repeat(2));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
