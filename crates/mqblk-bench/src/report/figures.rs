//! The figures both reports print: fio's units and rounding, latencies
//! from the histograms, per-job errors, and the run's devices.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use mqblk::stats::StatGroup;
use serde_json::{json, Map, Value};

use crate::result::{JobResult, RunResult};
use mqblk_fio::job::JobSpec;

/// `--output-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// fio's text report.
    Normal,
    /// fio's JSON report.
    Json,
    /// fio's json+: the JSON report with every latency's bins.
    #[value(name = "json+")]
    JsonPlus,
    /// fio's terse output, version 3: one line of `;`-separated fields
    /// per report entry.
    Terse,
}

/// The version string in fio's place: `mqblk-<crate version>`.
pub fn version() -> String {
    format!("mqblk-{}", env!("CARGO_PKG_VERSION"))
}

/// fio's clat percentiles (its default `percentile_list`).
pub const PERCENTILES: [f64; 17] = [
    1.0, 5.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95,
    99.99,
];

/// errno reported in `err=` / `"error"` for a job that saw I/O errors.
pub(super) const EIO: i32 = 5;

/// fio's `num2str`: `num` in at most `maxlen` digits, scaled by 1000 (or
/// 1024 with `pow2`) and given a unit prefix (`k`, `M`, ... or `Ki`, `Mi`,
/// ...) with as many decimals as fit: 999 → `999`, 4012345 → `4012k`,
/// 16200000 → `16.2M`.
pub fn num2str(num: u64, maxlen: usize, pow2: bool) -> String {
    const SI: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
    const IEC: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    let prefixes = if pow2 { &IEC } else { &SI };
    let base: u64 = if pow2 { 1024 } else { 1000 };
    let digits = |n: u64| n.to_string().len();
    let mut n = num;
    let mut rem = None;
    let mut unit = 0;
    while digits(n) > maxlen && unit + 1 < prefixes.len() {
        rem = Some(n % base);
        n /= base;
        unit += 1;
    }
    let Some(rem) = rem else {
        return format!("{n}{}", prefixes[unit]);
    };
    // Room left for a decimal point and decimals.
    let room = maxlen.saturating_sub(digits(n));
    if room <= 1 {
        if rem * 2 >= base {
            n += 1;
        }
        return format!("{n}{}", prefixes[unit]);
    }
    let decimals = (room - 1).min(3);
    let scale = 10u64.pow(decimals as u32);
    let mut frac = (rem * scale + base / 2) / base;
    if frac >= scale {
        n += 1;
        frac -= scale;
    }
    format!("{n}.{frac:0decimals$}{}", prefixes[unit])
}

/// IOPS as fio prints them (four significant digits).
pub fn fmt_iops(iops: f64) -> String {
    num2str(round_u64(iops), 4, false)
}

pub(super) fn round_u64(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    }
}

/// A byte count per second, as `61.9GiB/s (66.5GB/s)`.
pub(super) fn bw_pair(bytes_per_sec: u64) -> (String, String) {
    (
        format!("{}B/s", num2str(bytes_per_sec, 4, true)),
        format!("{}B/s", num2str(bytes_per_sec, 4, false)),
    )
}

pub(super) fn per_sec(count: u64, runtime_ns: u64) -> f64 {
    if runtime_ns == 0 {
        0.0
    } else {
        count as f64 * 1e9 / runtime_ns as f64
    }
}

pub(super) fn msec(ns: u64) -> u64 {
    (ns + 500_000) / 1_000_000
}

/// The job spec of job `index`, with every section expanded `numjobs`
/// times in order, as the engine runs them.
pub(super) fn spec_of<'a>(specs: &'a [JobSpec], result: &JobResult) -> Option<&'a JobSpec> {
    let mut first = 0usize;
    for spec in specs {
        let end = first.saturating_add(spec.numjobs as usize);
        if result.index < end {
            return Some(spec);
        }
        first = end;
    }
    specs.iter().find(|s| s.name == result.name)
}

/// A latency histogram, summarised.
pub(super) struct Lat {
    pub(super) min: u64,
    pub(super) max: u64,
    pub(super) mean: f64,
    pub(super) stdev: f64,
    pub(super) n: u64,
    pub(super) percentiles: [u64; PERCENTILES.len()],
    /// The histogram's non-empty log-linear buckets: (highest value in the
    /// bucket, ns; count), as fio's json+ `bins`.
    pub(super) bins: Vec<(u64, u64)>,
}

impl Lat {
    pub(super) fn of(h: &Histogram<u64>) -> Lat {
        let n = h.len();
        if n == 0 {
            return Lat::empty();
        }
        let mut percentiles = [0; PERCENTILES.len()];
        for (v, p) in percentiles.iter_mut().zip(PERCENTILES) {
            *v = h.value_at_quantile(p / 100.0);
        }
        Lat {
            min: h.min(),
            max: h.max(),
            mean: finite(h.mean()),
            stdev: finite(h.stdev()),
            n,
            percentiles,
            bins: h
                .iter_recorded()
                .map(|b| (b.value_iterated_to(), b.count_at_value()))
                .collect(),
        }
    }

    pub(super) fn empty() -> Lat {
        Lat {
            min: 0,
            max: 0,
            mean: 0.0,
            stdev: 0.0,
            n: 0,
            percentiles: [0; PERCENTILES.len()],
            bins: Vec::new(),
        }
    }

    pub(super) fn json(&self) -> Value {
        let mut v = self.json_summary();
        let mut pct = Map::new();
        for (p, v) in PERCENTILES.iter().zip(self.percentiles) {
            pct.insert(format!("{p:.6}"), json!(v));
        }
        v["percentile"] = Value::Object(pct);
        v
    }

    /// min, max, mean, stddev and N, without percentiles (fio's `slat_ns`
    /// without `slat_percentiles=1`).
    pub(super) fn json_summary(&self) -> Value {
        json!({
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "stddev": self.stdev,
            "N": self.n,
        })
    }

    /// [`Lat::json`] with the buckets as fio's json+ writes them:
    /// `"bins": {"VALUE_NS": COUNT, ...}` (what `mqblk plot` draws).
    pub(super) fn json_with_bins(&self) -> Value {
        let mut v = self.json();
        v["bins"] = self.json_bins();
        v
    }

    /// The buckets as a `bins` object: `{"VALUE_NS": COUNT, ...}`.
    pub(super) fn json_bins(&self) -> Value {
        Value::Object(
            self.bins
                .iter()
                .map(|(ns, n)| (ns.to_string(), json!(n)))
                .collect(),
        )
    }
}

pub(super) fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// The clat of one direction of a job, if it was recorded.
pub(super) fn lat_of(job: &JobResult, group: StatGroup) -> Option<Lat> {
    job.clat_valid.then(|| Lat::of(job.clat.group(group)))
}

/// The slat of one direction of a job, if it was measured.
pub(super) fn slat_of(job: &JobResult, group: StatGroup) -> Option<Lat> {
    job.slat.as_ref().map(|h| Lat::of(h.group(group)))
}

/// The total latency of one direction of a job, if it was measured.
pub(super) fn total_lat_of(job: &JobResult, group: StatGroup) -> Option<Lat> {
    job.lat.as_ref().map(|h| Lat::of(h.group(group)))
}

/// One direction's latencies, as the report shows them.
pub(super) struct DirLat {
    pub(super) clat: Option<Lat>,
    pub(super) slat: Option<Lat>,
    /// Total latency (slat and clat of each I/O), when slat is measured.
    pub(super) lat: Option<Lat>,
    /// `slat_percentiles=1`.
    pub(super) slat_percentiles: bool,
}

impl DirLat {
    pub(super) fn of(specs: &[JobSpec], job: &JobResult, group: StatGroup) -> DirLat {
        DirLat {
            clat: lat_of(job, group),
            slat: slat_of(job, group),
            lat: total_lat_of(job, group),
            slat_percentiles: spec_of(specs, job).is_some_and(|s| s.slat_percentiles),
        }
    }
}

pub(super) fn job_error(job: &JobResult) -> i32 {
    if job.unfinished {
        // Still waiting when the signal's grace ended: no figures, and no
        // error either (its first_error says why).
        0
    } else if job.first_error.is_some()
        || job.read.errors > 0
        || job.write.errors > 0
        || job.trim.errors > 0
    {
        EIO
    } else if verify_errors(job) > 0 {
        // fio reports a verify failure as EILSEQ.
        EILSEQ
    } else {
        0
    }
}

/// errno fio reports for a job whose verify found mismatches.
pub(super) const EILSEQ: i32 = 84;

pub(super) fn verify_errors(job: &JobResult) -> u64 {
    job.verify.as_ref().map_or(0, |v| v.errors)
}

pub(super) fn duration_str(d: Option<Duration>) -> Option<String> {
    let d = d?;
    let ns = d.as_nanos();
    Some(if ns % 1_000_000_000 == 0 {
        format!("{}s", ns / 1_000_000_000)
    } else if ns % 1_000_000 == 0 {
        format!("{}ms", ns / 1_000_000)
    } else {
        format!("{}us", ns / 1_000)
    })
}

pub(super) fn percent_of(part_ns: u64, whole_ns: u64) -> f64 {
    if whole_ns == 0 {
        0.0
    } else {
        part_ns as f64 * 100.0 / whole_ns as f64
    }
}

pub(super) fn device_names(run: &RunResult) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for j in &run.jobs {
        if !names.contains(&j.device) {
            names.push(j.device.clone());
        }
    }
    names
}

pub(super) fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}
