//! One point of an experiment: bench jobs run through the bench engine in
//! this process, their fio-shaped JSON kept under `points/`, and the
//! figures the tables need taken from the run.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context as _, Result};
use mqblk::stats::{Histograms, StatGroup};

use crate::bench::engine;
use crate::bench::job::{JobSpec, RwMode};
use crate::bench::report;
use crate::bench::status::StatusOptions;

/// Shortest run of a point, whatever the scale: long enough for the
/// engine's supervisor to see it start.
const RUNTIME_MIN: Duration = Duration::from_millis(5);

/// Runs the points of one experiment and numbers their JSON files.
pub struct Runner {
    scale: f64,
    out: PathBuf,
    points: usize,
    cores: usize,
}

/// What one point measured (all jobs together).
#[derive(Clone, Debug, Default)]
pub struct Figures {
    /// I/Os per second, all jobs.
    pub iops: f64,
    /// Bytes per second, all jobs.
    pub bw_bytes: f64,
    /// I/Os completed.
    pub ios: u64,
    /// Completion latency percentiles over every job, ns: p50, p99, p99.9.
    pub clat_ns: [u64; 3],
    /// Requests built.
    pub requests: u64,
    /// Bios submitted.
    pub bios: u64,
    /// Bios merged into a request.
    pub merges: u64,
    /// Bios split.
    pub splits: u64,
    /// Bounce-copied bytes.
    pub bytes_copied: u64,
    /// CPU ns per I/O (all job threads).
    pub ns_per_io_cpu: f64,
    /// Heap allocations per I/O.
    pub allocs_per_io: f64,
    /// `mqblk::descriptor_bytes()` as the report gives it.
    pub descriptor_bytes: u64,
}

/// A time-based job of the bench's defaults.
pub fn job(name: &str, rw: RwMode, bs: u64, iodepth: u32, runtime: Duration) -> JobSpec {
    JobSpec {
        name: name.into(),
        rw,
        bs,
        iodepth,
        runtime: Some(runtime),
        time_based: true,
        ..JobSpec::default()
    }
}

impl Runner {
    /// A runner writing under `out`.
    pub fn new(scale: f64, out: &Path) -> Runner {
        Runner {
            scale,
            out: out.to_path_buf(),
            points: 0,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        }
    }

    /// The output directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// The scale factor.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Points run so far.
    pub fn points(&self) -> usize {
        self.points
    }

    /// CPUs this process may use.
    pub fn cores(&self) -> usize {
        self.cores
    }

    /// `base` times the scale, at least [`RUNTIME_MIN`].
    pub fn runtime(&self, base: Duration) -> Duration {
        base.mul_f64(self.scale).max(RUNTIME_MIN)
    }

    /// Run `jobs` as one bench run; keep its JSON as
    /// `points/NN-LABEL.json` and return its figures.
    pub fn point(&mut self, label: &str, jobs: &[JobSpec]) -> Result<Figures> {
        self.points += 1;
        eprintln!("mqblk: point {}: {label}", self.points);
        let prepared =
            engine::prepare(jobs).with_context(|| format!("point {label}: opening its devices"))?;
        let stop = AtomicBool::new(false);
        let (run, teardown) = engine::run(prepared, &StatusOptions::quiet(), &stop)
            .with_context(|| format!("point {label}: running"))?;
        teardown.close(None);
        if let Some(e) = run.jobs.iter().find_map(|j| j.first_error.as_ref()) {
            anyhow::bail!("point {label}: I/O error: {e}");
        }
        let json = report::json(jobs, &run);
        let file: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = self
            .out
            .join("points")
            .join(format!("{:02}-{file}.json", self.points));
        let text = serde_json::to_string_pretty(&json)? + "\n";
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;

        let mut f = Figures::default();
        let mut clat = Histograms::new();
        for j in &run.jobs {
            let secs = j.runtime_ns.max(1) as f64 / 1e9;
            f.iops += (j.read.ios + j.write.ios) as f64 / secs;
            f.bw_bytes += (j.read.bytes + j.write.bytes) as f64 / secs;
            f.ios += j.read.ios + j.write.ios;
            clat.merge(&j.clat);
        }
        let h = if clat.group(StatGroup::Read).is_empty() {
            clat.group(StatGroup::Write)
        } else {
            clat.group(StatGroup::Read)
        };
        if !h.is_empty() {
            f.clat_ns = [
                h.value_at_quantile(0.50),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
            ];
        }
        let l = &run.layer;
        f.requests = l.stats.requests;
        f.bios = l.stats.bios;
        f.merges = l.merges();
        f.splits = l.stats.splits;
        f.bytes_copied = l.stats.bytes_copied;
        f.ns_per_io_cpu = l.ns_per_io_cpu();
        f.allocs_per_io = l.allocs_per_io();
        f.descriptor_bytes = l.descriptor_bytes as u64;
        Ok(f)
    }
}

/// A point run several times: the round with the median IOPS (whole, so
/// that its latencies and counters go together), and the range of IOPS.
#[derive(Clone, Debug, Default)]
pub struct Rounds {
    /// The median round's figures.
    pub median: Figures,
    /// Lowest IOPS of any round.
    pub iops_min: f64,
    /// Highest IOPS of any round.
    pub iops_max: f64,
    /// How many rounds ran.
    pub rounds: usize,
}

/// How many times [`Runner::rounds`] runs each point: the machine these
/// run on is often shared, and a median of three shrugs off one bad round.
pub const ROUNDS: usize = 3;

impl Runner {
    /// Run every point [`ROUNDS`] times, all points once per round, so that
    /// a noisy spell hits every point alike; one [`Rounds`] per point.
    pub fn rounds(&mut self, points: &[(String, Vec<JobSpec>)]) -> Result<Vec<Rounds>> {
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); points.len()];
        for round in 1..=ROUNDS {
            for (i, (label, jobs)) in points.iter().enumerate() {
                runs[i].push(self.point(&format!("{label}-round{round}"), jobs)?);
            }
        }
        Ok(runs
            .into_iter()
            .map(|mut v| {
                v.sort_by(|a, b| a.iops.total_cmp(&b.iops));
                Rounds {
                    iops_min: v.first().map_or(0.0, |f| f.iops),
                    iops_max: v.last().map_or(0.0, |f| f.iops),
                    rounds: v.len(),
                    median: v.swap_remove(v.len() / 2),
                }
            })
            .collect())
    }
}

/// `x` with `digits` decimals, for a table cell.
pub fn cell(x: f64, digits: usize) -> String {
    if x.is_finite() {
        format!("{x:.digits$}")
    } else {
        "-".into()
    }
}
