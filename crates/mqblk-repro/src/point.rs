//! One point of an experiment: bench jobs run through the bench engine in
//! this process, their fio-shaped JSON kept under `points/`, and the
//! figures the tables need taken from the run, with what the kernel
//! counted meanwhile ([`super::kernel_counters`]). A point is run
//! [`ROUNDS`] times ([`Runner::rounds`]); the tables give the median of the
//! rounds with the lowest and highest, and the plots draw that range as
//! error bars.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use mqblk::stats::{Histograms, StatGroup};

use mqblk_bench::engine;
use mqblk_bench::report;
use mqblk_bench::status::StatusOptions;
use mqblk_bench::{JobSpec, RwMode};

use super::kernel_counters::Snapshot;

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
    /// Bytes moved, all jobs.
    pub bytes: u64,
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
    /// Wall time of the run, ns.
    pub wall_ns: u64,
    /// CPU time of the whole process during the run, ns (every thread:
    /// the jobs, io_uring's workers, the psync engine's threads).
    pub cpu_ns_process: u64,
    /// TLB shootdowns during the run, machine-wide (None: not counted).
    pub tlb_shootdowns: Option<u64>,
    /// User pages pinned for I/O during the run, machine-wide.
    pub pages_pinned: Option<u64>,
}

impl Figures {
    /// The process's CPU time per I/O, ns.
    pub fn cpu_ns_process_per_io(&self) -> f64 {
        self.cpu_ns_process as f64 / self.ios.max(1) as f64
    }

    /// The share of `cores` the process kept busy, %.
    pub fn cpu_busy_percent(&self, cores: usize) -> f64 {
        100.0 * self.cpu_ns_process as f64 / (self.wall_ns.max(1) as f64 * cores.max(1) as f64)
    }

    /// A machine-wide count per I/O (NaN: not counted).
    pub fn per_io(&self, count: Option<u64>) -> f64 {
        count.map_or(f64::NAN, |n| n as f64 / self.ios.max(1) as f64)
    }
}

/// Work done on the devices after they are opened and before the jobs
/// start (registering partitions, say).
pub type Setup = Arc<dyn Fn(&[mqblk::Device]) -> Result<()> + Send + Sync>;

/// One point to run: its label, its jobs, and any setup.
#[derive(Clone)]
pub struct Plan {
    /// The label, in the JSON file's name.
    pub label: String,
    /// The bench jobs, run together.
    pub jobs: Vec<JobSpec>,
    /// Work on the opened devices before the jobs start.
    pub setup: Option<Setup>,
}

impl Plan {
    /// A point with no setup.
    pub fn new(label: impl Into<String>, jobs: Vec<JobSpec>) -> Plan {
        Plan {
            label: label.into(),
            jobs,
            setup: None,
        }
    }
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

    /// `base` times the scale, at least `RUNTIME_MIN`.
    pub fn runtime(&self, base: Duration) -> Duration {
        base.mul_f64(self.scale).max(RUNTIME_MIN)
    }

    /// Run `jobs` as one bench run, `setup` first on its devices once they
    /// are open; keep its JSON as `points/NN-LABEL.json` and return its
    /// figures.
    pub fn point(
        &mut self,
        label: &str,
        jobs: &[JobSpec],
        setup: Option<&Setup>,
    ) -> Result<Figures> {
        self.points += 1;
        eprintln!("mqblk: point {}: {label}", self.points);
        let prepared = engine::prepare(jobs, false, None)
            .with_context(|| format!("point {label}: opening its devices"))?;
        if let Some(setup) = setup {
            setup(&prepared.devices()).with_context(|| format!("point {label}: setting up"))?;
        }
        let stop = AtomicBool::new(false);
        let before = Snapshot::now();
        let t0 = Instant::now();
        let (run, teardown) = engine::run(prepared, &StatusOptions::quiet(), &stop)
            .with_context(|| format!("point {label}: running"))?;
        teardown.close(None);
        let wall_ns = t0.elapsed().as_nanos() as u64;
        let kernel = before.until(&Snapshot::now());
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
            f.bytes += j.read.bytes + j.write.bytes;
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
        f.wall_ns = wall_ns;
        f.cpu_ns_process = kernel.cpu_ns;
        f.tlb_shootdowns = kernel.tlb_shootdowns;
        f.pages_pinned = kernel.pages_pinned;
        Ok(f)
    }
}

/// A point run [`ROUNDS`] times: every round's figures, in the order the
/// rounds ran (round k of two points ran in the same spell).
#[derive(Clone, Debug, Default)]
pub struct Rounds {
    /// Each round's figures, first round first.
    pub runs: Vec<Figures>,
}

/// The median of some runs, with the lowest and the highest.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The median (of an even count, the upper middle one).
    pub median: f64,
    /// The lowest.
    pub min: f64,
    /// The highest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values` (NaN everywhere when there are none).
    pub fn of(values: &[f64]) -> Spread {
        let mut v: Vec<f64> = values.to_vec();
        v.sort_by(f64::total_cmp);
        match (v.first(), v.last()) {
            (Some(&min), Some(&max)) => Spread {
                median: v[v.len() / 2],
                min,
                max,
            },
            _ => Spread {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            },
        }
    }

    /// Whether every run was above `x`.
    pub fn above(&self, x: f64) -> bool {
        self.min > x
    }

    /// Whether every run was below `x`.
    pub fn below(&self, x: f64) -> bool {
        self.max < x
    }

    /// Median, min and max as table cells with `digits` decimals.
    pub fn cells(&self, digits: usize) -> [String; 3] {
        [
            cell(self.median, digits),
            cell(self.min, digits),
            cell(self.max, digits),
        ]
    }
}

impl Rounds {
    /// The round of median IOPS (whole, so that its latencies and counters
    /// go together).
    pub fn median(&self) -> &Figures {
        let mut order: Vec<&Figures> = self.runs.iter().collect();
        order.sort_by(|a, b| a.iops.total_cmp(&b.iops));
        order[order.len() / 2]
    }

    /// The spread of `f` of this point's round k against `other`'s round
    /// k (a ratio of two points, say), round by round.
    pub fn paired(&self, other: &Rounds, f: impl Fn(&Figures, &Figures) -> f64) -> Spread {
        Spread::of(
            &self
                .runs
                .iter()
                .zip(&other.runs)
                .map(|(a, b)| f(a, b))
                .collect::<Vec<_>>(),
        )
    }

    /// The median, lowest and highest of `f` over the rounds.
    pub fn spread(&self, f: impl Fn(&Figures) -> f64) -> Spread {
        Spread::of(&self.runs.iter().map(f).collect::<Vec<_>>())
    }

    /// How many rounds ran.
    pub fn count(&self) -> usize {
        self.runs.len()
    }
}

/// How many times [`Runner::rounds`] runs each point: the machine these
/// run on is often shared, and a median of three shrugs off one bad round.
pub const ROUNDS: usize = 3;

impl Runner {
    /// Run every point `ROUNDS` times, all points once per round, so that
    /// a noisy spell hits every point alike; one `Rounds` per point.
    pub fn rounds(&mut self, plans: &[Plan]) -> Result<Vec<Rounds>> {
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); plans.len()];
        for round in 1..=ROUNDS {
            for (i, p) in plans.iter().enumerate() {
                let label = format!("{}-round{round}", p.label);
                runs[i].push(self.point(&label, &p.jobs, p.setup.as_ref())?);
            }
        }
        Ok(runs.into_iter().map(|runs| Rounds { runs }).collect())
    }

    /// An experiment's first note: its `workload`, how long each point ran
    /// (`base` at this scale) and how [`Runner::rounds`] ran and reports
    /// the points.
    pub fn workload_note(&self, workload: &str, base: Duration) -> String {
        format!(
            "Workload: {workload}, {} ms per point, {ROUNDS} rounds of every point in turn; the \
             table gives the median with the lowest and highest.",
            self.runtime(base).as_millis()
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_median_and_the_ends() {
        let s = Spread::of(&[5.0, 1.0, 3.0]);
        assert_eq!(
            s,
            Spread {
                median: 3.0,
                min: 1.0,
                max: 5.0
            }
        );
        assert_eq!(s.cells(1), ["3.0".to_string(), "1.0".into(), "5.0".into()]);
        assert!(Spread::of(&[]).median.is_nan());
        assert!(s.above(0.5) && !s.above(1.0));
        assert!(s.below(6.0) && !s.below(5.0));
    }
}
