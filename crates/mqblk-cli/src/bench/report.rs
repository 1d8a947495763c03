//! Printing a [`RunResult`] the way fio prints its results, so that people
//! and scripts that read fio read mqblk too: `normal` mimics fio's text
//! report (job blocks, then `Run status group 0 (all jobs):`), and `json`
//! has the shape of fio's `--output-format=json`. Both end with the layer's
//! own figures (the `mqblk` block), which fio has no place for.
//!
//! Every job of the run is one fio job in group 0; `numjobs` copies of a
//! section are reported one by one, as fio does without
//! `group_reporting`.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use mqblk::stats::StatGroup;
use serde_json::{json, Map, Value};

use super::job::JobSpec;
use super::result::{DirResult, JobResult, RunResult};
use crate::ctime::ctime;

/// `--output-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// fio's text report.
    Normal,
    /// fio's JSON report.
    Json,
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
const EIO: i32 = 5;

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

fn round_u64(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    }
}

/// A byte count per second, as `61.9GiB/s (66.5GB/s)`.
fn bw_pair(bytes_per_sec: u64) -> (String, String) {
    (
        format!("{}B/s", num2str(bytes_per_sec, 4, true)),
        format!("{}B/s", num2str(bytes_per_sec, 4, false)),
    )
}

fn per_sec(count: u64, runtime_ns: u64) -> f64 {
    if runtime_ns == 0 {
        0.0
    } else {
        count as f64 * 1e9 / runtime_ns as f64
    }
}

fn msec(ns: u64) -> u64 {
    (ns + 500_000) / 1_000_000
}

/// The job spec of job `index`, with every section expanded `numjobs`
/// times in order, as the engine runs them.
fn spec_of<'a>(specs: &'a [JobSpec], result: &JobResult) -> Option<&'a JobSpec> {
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
struct Lat {
    min: u64,
    max: u64,
    mean: f64,
    stdev: f64,
    n: u64,
    percentiles: [u64; PERCENTILES.len()],
    /// The histogram's non-empty log-linear buckets: (highest value in the
    /// bucket, ns; count), as fio's json+ `bins`.
    bins: Vec<(u64, u64)>,
}

impl Lat {
    fn of(h: &Histogram<u64>) -> Lat {
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

    fn empty() -> Lat {
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

    fn json(&self) -> Value {
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
    fn json_summary(&self) -> Value {
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
    fn json_with_bins(&self) -> Value {
        let mut v = self.json();
        let bins: Map<String, Value> = self
            .bins
            .iter()
            .map(|(ns, n)| (ns.to_string(), json!(n)))
            .collect();
        v["bins"] = Value::Object(bins);
        v
    }
}

fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// The clat of one direction of a job, if it was recorded.
fn lat_of(job: &JobResult, group: StatGroup) -> Option<Lat> {
    job.clat_valid.then(|| Lat::of(job.clat.group(group)))
}

/// The slat of one direction of a job, if it was measured.
fn slat_of(job: &JobResult, group: StatGroup) -> Option<Lat> {
    job.slat.as_ref().map(|h| Lat::of(h.group(group)))
}

/// The total latency of one direction of a job, if it was measured.
fn total_lat_of(job: &JobResult, group: StatGroup) -> Option<Lat> {
    job.lat.as_ref().map(|h| Lat::of(h.group(group)))
}

/// One direction's latencies, as the report shows them.
struct DirLat {
    clat: Option<Lat>,
    slat: Option<Lat>,
    /// Total latency (slat and clat of each I/O), when slat is measured.
    lat: Option<Lat>,
    /// `slat_percentiles=1`.
    slat_percentiles: bool,
}

impl DirLat {
    fn of(specs: &[JobSpec], job: &JobResult, group: StatGroup) -> DirLat {
        DirLat {
            clat: lat_of(job, group),
            slat: slat_of(job, group),
            lat: total_lat_of(job, group),
            slat_percentiles: spec_of(specs, job).is_some_and(|s| s.slat_percentiles),
        }
    }
}

fn job_error(job: &JobResult) -> i32 {
    if job.first_error.is_some()
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
const EILSEQ: i32 = 84;

fn verify_errors(job: &JobResult) -> u64 {
    job.verify.as_ref().map_or(0, |v| v.errors)
}

fn duration_str(d: Option<Duration>) -> Option<String> {
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

/// fio's `"job options"`: every value a string, as fio writes them.
fn job_options(spec: &JobSpec) -> Value {
    let mut o = Map::new();
    let mut put = |k: &str, v: String| {
        o.insert(k.to_string(), Value::String(v));
    };
    put("name", spec.name.clone());
    put("rw", spec.rw.name().to_string());
    put("bs", spec.bs.to_string());
    put("iodepth", spec.iodepth.to_string());
    put("numjobs", spec.numjobs.to_string());
    if let Some(size) = spec.size {
        put("size", size.to_string());
    }
    if let Some(r) = duration_str(spec.runtime) {
        put("runtime", r);
    }
    if spec.time_based {
        put("time_based", "1".into());
    }
    if let Some(r) = duration_str(spec.ramp_time) {
        put("ramp_time", r);
    }
    put("rwmixread", spec.rwmixread.to_string());
    put("randseed", spec.randseed.to_string());
    put("device", spec.devices.join(" "));
    if let Some(m) = &spec.queue_mode {
        put("queue_mode", m.clone());
    }
    if let Some(n) = spec.hw_queues {
        put("hw_queues", n.to_string());
    }
    if let Some(p) = spec.plug {
        put("plug", if p { "on" } else { "off" }.into());
    }
    put("iostats", if spec.iostats { "1" } else { "0" }.into());
    if let Some(kind) = spec.verify {
        put("verify", kind.name().into());
        put("do_verify", if spec.do_verify { "1" } else { "0" }.into());
        put(
            "verify_fatal",
            if spec.verify_fatal { "1" } else { "0" }.into(),
        );
    }
    if spec.allow_degraded {
        put("allow_degraded", "1".into());
    }
    Value::Object(o)
}

fn dir_json(d: &DirResult, lats: DirLat, runtime_ns: u64) -> Value {
    let bw_bytes = round_u64(per_sec(d.bytes, runtime_ns));
    let lat = lats.clat.unwrap_or_else(Lat::empty);
    // fio: percentiles with slat_percentiles=1, and only of samples.
    let slat = match lats.slat {
        Some(s) if lats.slat_percentiles && s.n > 0 => s.json(),
        Some(s) => s.json_summary(),
        None => Lat::empty().json_summary(),
    };
    json!({
        "io_bytes": d.bytes,
        "io_kbytes": d.bytes / 1024,
        "bw_bytes": bw_bytes,
        "bw": bw_bytes / 1024,
        "iops": per_sec(d.ios, runtime_ns),
        "runtime": if d.ios == 0 { 0 } else { msec(runtime_ns) },
        "total_ios": d.ios,
        "short_ios": 0,
        "drop_ios": 0,
        "errors": d.errors,
        "slat_ns": slat,
        "clat_ns": lat.json_with_bins(),
        // Total latency when the job measured slat; without it, no
        // submission latency is known, and lat is clat.
        "lat_ns": match lats.lat {
            Some(t) if t.n > 0 => t.json(),
            _ => lat.json(),
        },
    })
}

fn percent_of(part_ns: u64, whole_ns: u64) -> f64 {
    if whole_ns == 0 {
        0.0
    } else {
        part_ns as f64 * 100.0 / whole_ns as f64
    }
}

fn device_names(run: &RunResult) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for j in &run.jobs {
        if !names.contains(&j.device) {
            names.push(j.device.clone());
        }
    }
    names
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// The report in fio's JSON shape (`--output-format=json`).
pub fn json(specs: &[JobSpec], run: &RunResult) -> Value {
    let now = unix_now();
    let jobs: Vec<Value> = run
        .jobs
        .iter()
        .map(|job| {
            let options = spec_of(specs, job).map_or_else(|| json!({}), job_options);
            let dir =
                |d: &DirResult, group| dir_json(d, DirLat::of(specs, job, group), job.runtime_ns);
            let mut v = json!({
                "jobname": job.name,
                "groupid": job.group,
                "error": job_error(job),
                "eta": 0,
                "elapsed": (job.runtime_ns + 500_000_000) / 1_000_000_000,
                "job options": options,
                "read": dir(&job.read, StatGroup::Read),
                "write": dir(&job.write, StatGroup::Write),
                "trim": dir(&job.trim, StatGroup::Discard),
                "usr_cpu": percent_of(job.usr_ns, job.runtime_ns),
                "sys_cpu": percent_of(job.sys_ns, job.runtime_ns),
                "ctx": 0,
                "majf": 0,
                "minf": 0,
                "device": job.device,
            });
            if let Some(e) = &job.first_error {
                v["error_message"] = json!(e);
            }
            if let Some(e) = &job.stopped_at {
                // continue_on_error= did not name it: nothing was issued
                // after it.
                v["stopped_at"] = json!(e);
            }
            if let Some(ss) = &job.steadystate {
                v["steadystate"] = ss.json();
            }
            if let (Some(depth), Some(spec)) = (job.latency_depth, spec_of(specs, job)) {
                let t = spec.latency_target.unwrap_or_default();
                // fio's fields, in its units (microseconds).
                v["latency_depth"] = json!(depth);
                v["latency_target"] = json!(t.as_micros() as u64);
                v["latency_percentile"] = json!(spec.latency_percentile);
                v["latency_window"] = json!(spec.latency_window.as_micros() as u64);
            }
            v["verify_errors"] = json!(verify_errors(job));
            if let Some(r) = &job.verify {
                v["verify"] = json!({
                    "type": r.kind,
                    "blocks_written": r.blocks_written,
                    "blocks_trimmed": r.blocks_trimmed,
                    "blocks_zeroed": r.blocks_zeroed,
                    "blocks_verified": r.blocks_verified,
                    "blocks_unwritten": r.blocks_unwritten,
                    "by_header_only": r.loose,
                    "errors": r.errors,
                    "stopped": r.stopped,
                    "mismatches": r.mismatches.iter().map(|m| json!({
                        "offset": m.offset,
                        "reason": m.reason,
                        "expected": m.expected.to_string(),
                        "actual": m.actual.to_string(),
                        "computed": m.computed,
                    })).collect::<Vec<_>>(),
                });
            }
            v
        })
        .collect();
    let l = &run.layer;
    json!({
        "fio version": version(),
        "timestamp": now.as_secs(),
        "timestamp_ms": now.as_millis() as u64,
        "time": ctime(now.as_secs()),
        "jobs": jobs,
        "mqblk": {
            "queue_mode": l.queue_mode,
            "allocs_per_io": l.allocs_per_io(),
            "allocs": l.allocs,
            "ios": l.ios,
            "bytes_copied": l.stats.bytes_copied,
            "requests": l.stats.requests,
            "bios": l.stats.bios,
            "merges": l.merges(),
            "splits": l.stats.splits,
            "ns_per_io_cpu": l.ns_per_io_cpu(),
            "cpu_ns": l.cpu_ns,
            "descriptor_bytes": l.descriptor_bytes,
            "devices": device_names(run),
            "alignment": l.alignment.iter().map(|a| json!({
                "device": a.device,
                "logical_block_size": a.logical_block_size,
                "dma_alignment": a.dma_alignment_bytes,
            })).collect::<Vec<_>>(),
            "interrupted": l.interrupted,
            "degraded": l.degraded.iter().map(|d| {
                let mut v = crate::degraded::json(&d.leg, d.run_ms);
                v["job_device"] = json!(d.device);
                v["allowed"] = json!(d.allowed);
                v
            }).collect::<Vec<_>>(),
        },
    })
}

/// What fio prints before a run: each job's line, the version, and the
/// number of threads.
pub fn starting(specs: &[JobSpec]) -> String {
    let mut s = String::new();
    for spec in specs {
        let bs = format!("{}B-{}B", spec.bs, spec.bs);
        let _ = writeln!(
            s,
            "{}: (g=0): rw={}, bs=(R) {bs}, (W) {bs}, (T) {bs}, ioengine=mqblk, iodepth={}",
            spec.name,
            spec.rw.name(),
            spec.iodepth
        );
    }
    let threads: u64 = specs.iter().map(|s| u64::from(s.numjobs)).sum();
    let _ = writeln!(s, "{}", version());
    let plural = if threads == 1 { "" } else { "s" };
    let _ = writeln!(s, "Starting {threads} thread{plural}");
    s
}

/// fio's `display_lat` scaling: nsec, or usec/msec when the values are
/// large and spread enough.
fn lat_unit(lat: &Lat) -> (&'static str, u64) {
    if lat.min > 2_000_000 && lat.max > 99_999_999 && lat.stdev > 1_000_000.0 {
        ("msec", 1_000_000)
    } else if lat.min > 2_000 && lat.max > 99_999 && lat.stdev > 1_000.0 {
        ("usec", 1_000)
    } else {
        ("nsec", 1)
    }
}

/// fio's `display_lat`: `    clat (nsec): min=..., max=..., avg=...,
/// stdev=...`.
fn write_lat_line(out: &mut String, name: &str, lat: &Lat) {
    let (unit, div) = lat_unit(lat);
    let _ = writeln!(
        out,
        "    {name} ({unit}): min={}, max={}, avg={:5.2}, stdev={:5.2}",
        num2str(lat.min / div, 6, false),
        num2str(lat.max / div, 6, false),
        lat.mean / div as f64,
        lat.stdev / div as f64,
    );
}

/// fio's `show_clat_percentiles`: `    clat percentiles (nsec):` and the
/// percentiles four to a line.
fn write_percentiles(out: &mut String, name: &str, lat: &Lat) {
    let lo = lat.percentiles[0];
    let hi = lat.percentiles[PERCENTILES.len() - 1];
    let (unit, div) = if lo > 2_000_000 && hi > 99_999_999 {
        ("msec", 1_000_000)
    } else if lo > 2_000 && hi > 99_999 {
        ("usec", 1_000)
    } else {
        ("nsec", 1)
    };
    let _ = writeln!(out, "    {name} percentiles ({unit}):");
    const PER_LINE: usize = 4;
    for (i, (p, v)) in PERCENTILES.iter().zip(lat.percentiles).enumerate() {
        if i % PER_LINE == 0 {
            out.push_str("     |");
        }
        let last = i + 1 == PERCENTILES.len();
        let _ = write!(out, " {p:5.2}th=[{:>5}]", v.div_ceil(div));
        if last {
            out.push('\n');
        } else {
            out.push(',');
            if i % PER_LINE == PER_LINE - 1 {
                out.push('\n');
            }
        }
    }
}

/// fio's order: the slat, clat (and lat) lines, then the slat
/// percentiles (with `slat_percentiles=1`), then the clat percentiles. A
/// latency without samples is not shown.
fn write_lats(out: &mut String, lats: &DirLat) {
    let slat = lats.slat.as_ref().filter(|s| s.n > 0);
    if let Some(s) = slat {
        write_lat_line(out, "slat", s);
    }
    if let Some(c) = &lats.clat {
        write_lat_line(out, "clat", c);
    }
    if let Some(t) = lats.lat.as_ref().filter(|t| t.n > 0) {
        write_lat_line(out, "lat", t);
    }
    if let Some(s) = slat.filter(|_| lats.slat_percentiles) {
        write_percentiles(out, "slat", s);
    }
    if let Some(c) = &lats.clat {
        write_percentiles(out, "clat", c);
    }
}

fn write_dir(out: &mut String, label: &str, d: &DirResult, lats: DirLat, runtime_ns: u64) {
    let iops = per_sec(d.ios, runtime_ns);
    let (bw, bw_si) = bw_pair(round_u64(per_sec(d.bytes, runtime_ns)));
    let _ = writeln!(
        out,
        "  {label}: IOPS={}, BW={bw} ({bw_si})({}B/{}msec)",
        fmt_iops(iops),
        num2str(d.bytes, 4, true),
        msec(runtime_ns),
    );
    write_lats(out, &lats);
}

/// The report as fio's text (`--output-format=normal`).
pub fn normal(specs: &[JobSpec], run: &RunResult) -> String {
    let mut out = String::new();
    let pid = std::process::id();
    let date = ctime(unix_now().as_secs());
    for job in &run.jobs {
        let err = job_error(job);
        let why = job
            .first_error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}: (groupid={}, jobs=1): err={err:2}{why}: pid={pid}: {date}",
            job.name, job.group
        );
        if job.read.ios > 0 {
            write_dir(
                &mut out,
                "read",
                &job.read,
                DirLat::of(specs, job, StatGroup::Read),
                job.runtime_ns,
            );
        }
        if job.write.ios > 0 {
            write_dir(
                &mut out,
                "write",
                &job.write,
                DirLat::of(specs, job, StatGroup::Write),
                job.runtime_ns,
            );
        }
        if job.trim.ios > 0 {
            write_dir(
                &mut out,
                "trim",
                &job.trim,
                DirLat::of(specs, job, StatGroup::Discard),
                job.runtime_ns,
            );
        }
        let _ = writeln!(
            out,
            "  cpu          : usr={:.2}%, sys={:.2}%",
            percent_of(job.usr_ns, job.runtime_ns),
            percent_of(job.sys_ns, job.runtime_ns),
        );
        let depth = spec_of(specs, job).map_or(0, |s| s.iodepth);
        let _ = writeln!(out, "  device       : {}, iodepth={depth}", job.device);
        if let Some(r) = &job.verify {
            r.describe(&mut out);
        }
        out.push('\n');
    }
    let _ = writeln!(out, "Run status group 0 (all jobs):");
    write_group(&mut out, "READ", run, |j| &j.read);
    write_group(&mut out, "WRITE", run, |j| &j.write);
    if run.jobs.iter().any(|j| j.trim.ios > 0) {
        write_group(&mut out, "TRIM", run, |j| &j.trim);
    }
    write_layer(&mut out, run);
    write_degraded(&mut out, run);
    out
}

/// Mirror legs out of service at the end of the run: which, why, when.
fn write_degraded(out: &mut String, run: &RunResult) {
    if run.layer.degraded.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\nDEGRADED: a mirror leg is out of service; its I/O went on, on the legs left"
    );
    for d in &run.layer.degraded {
        let _ = writeln!(
            out,
            "  {}{}",
            crate::degraded::text(&d.leg, d.run_ms),
            if d.allowed { " (allow_degraded=1)" } else { "" }
        );
    }
}

/// fio's group line: aggregate bandwidth over the longest runtime, the
/// per-job range, the total I/O, and the runtime range.
fn write_group(
    out: &mut String,
    label: &str,
    run: &RunResult,
    dir: impl Fn(&JobResult) -> &DirResult,
) {
    let active: Vec<&JobResult> = run.jobs.iter().filter(|j| dir(j).ios > 0).collect();
    if active.is_empty() {
        return;
    }
    let bytes: u64 = active.iter().map(|j| dir(j).bytes).sum();
    let run_min = active.iter().map(|j| j.runtime_ns).min().unwrap_or(0);
    let run_max = active.iter().map(|j| j.runtime_ns).max().unwrap_or(0);
    let bws: Vec<u64> = active
        .iter()
        .map(|j| round_u64(per_sec(dir(j).bytes, j.runtime_ns)))
        .collect();
    let (agg, agg_si) = bw_pair(round_u64(per_sec(bytes, run_max)));
    let (lo, lo_si) = bw_pair(bws.iter().copied().min().unwrap_or(0));
    let (hi, hi_si) = bw_pair(bws.iter().copied().max().unwrap_or(0));
    let _ = writeln!(
        out,
        "{label:>7}: bw={agg} ({agg_si}), {lo}-{hi} ({lo_si}-{hi_si}), io={}B ({}B), run={}-{}msec",
        num2str(bytes, 4, true),
        num2str(bytes, 4, false),
        msec(run_min),
        msec(run_max),
    );
}

fn write_layer(out: &mut String, run: &RunResult) {
    let l = &run.layer;
    let per_bio = if l.stats.bios == 0 {
        0.0
    } else {
        l.stats.requests as f64 / l.stats.bios as f64
    };
    let _ = writeln!(
        out,
        "\nmqblk: (the layer's own figures, measured phase, all jobs)"
    );
    let _ = writeln!(
        out,
        "  queue_mode={}, devices={}",
        l.queue_mode,
        device_names(run).join(",")
    );
    for a in &l.alignment {
        let _ = writeln!(
            out,
            "  alignment: {} logical_block_size={}, dma_alignment={} (a buffer or segment \
             that breaks it is bounce-copied, counted in bytes_copied)",
            a.device, a.logical_block_size, a.dma_alignment_bytes
        );
    }
    let _ = writeln!(
        out,
        "  allocs_per_io={:.6} ({} allocations / {} I/Os), bytes_copied={}",
        l.allocs_per_io(),
        l.allocs,
        l.ios,
        l.stats.bytes_copied
    );
    let _ = writeln!(
        out,
        "  requests={}, bios={}, requests/bios={per_bio:.3}, merges={}, splits={}",
        l.stats.requests,
        l.stats.bios,
        l.merges(),
        l.stats.splits
    );
    let _ = writeln!(
        out,
        "  ns_per_io_cpu={:.1} ({} ns CPU), descriptor_bytes={}",
        l.ns_per_io_cpu(),
        l.cpu_ns,
        l.descriptor_bytes
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::job::RwMode;
    use crate::bench::result::LayerResult;
    use mqblk::stats::Histograms;

    fn synthetic() -> (Vec<JobSpec>, RunResult) {
        let spec = JobSpec {
            rw: RwMode::RandRw,
            iodepth: 8,
            numjobs: 2,
            runtime: Some(Duration::from_secs(3)),
            time_based: true,
            ..JobSpec::default()
        };
        let mut clat = Histograms::new();
        for ns in 50..2_000u64 {
            clat.record(StatGroup::Read, ns);
            clat.record(StatGroup::Write, ns * 2);
        }
        let job = |index: usize| JobResult {
            group: 0,
            name: "job0".into(),
            index,
            device: "nullb0".into(),
            read: DirResult {
                ios: 3_000_000,
                bytes: 3_000_000 * 4096,
                errors: 0,
            },
            write: DirResult {
                ios: 1_000_000,
                bytes: 1_000_000 * 4096,
                errors: 0,
            },
            trim: DirResult::default(),
            clat: clat.clone(),
            clat_valid: true,
            slat: None,
            lat: None,
            runtime_ns: 3_000_000_000,
            usr_ns: 2_900_000_000,
            sys_ns: 10_000_000,
            first_error: None,
            stopped_at: None,
            verify: None,
            latency_depth: None,
            steadystate: None,
        };
        let run = RunResult {
            jobs: vec![job(0), job(1)],
            layer: LayerResult {
                queue_mode: "mq".into(),
                allocs: 0,
                ios: 8_000_000,
                stats: mqblk::DiskStats {
                    requests: 8_000_000,
                    bios: 8_000_000,
                    ..mqblk::DiskStats::default()
                },
                cpu_ns: 5_800_000_000,
                descriptor_bytes: 256,
                ..LayerResult::default()
            },
        };
        (vec![spec], run)
    }

    #[test]
    fn iops_like_fio() {
        assert_eq!(fmt_iops(0.0), "0");
        assert_eq!(fmt_iops(999.0), "999");
        assert_eq!(fmt_iops(4_012_345.0), "4012k");
        assert_eq!(fmt_iops(16_200_000.0), "16.2M");
        assert_eq!(fmt_iops(12_345.0), "12.3k");
        assert_eq!(fmt_iops(10_000.0), "10.0k");
        assert_eq!(fmt_iops(258_400.0), "258k");
        assert_eq!(fmt_iops(f64::NAN), "0");
    }

    #[test]
    fn sizes_like_fio() {
        assert_eq!(num2str(4096, 4, true), "4096");
        assert_eq!(num2str(1 << 30, 4, true), "1024Mi");
        assert_eq!(num2str(3 << 30, 4, true), "3072Mi");
        assert_eq!(num2str(66_500_000_000, 4, false), "66.5G");
        assert_eq!(num2str(u64::MAX, 4, true), "16.0Ei");
    }

    #[test]
    fn json_has_fios_shape() {
        let (specs, run) = synthetic();
        let v = json(&specs, &run);
        assert!(v["fio version"].as_str().unwrap().starts_with("mqblk-"));
        assert!(v["timestamp"].is_u64());
        let jobs = v["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        for job in jobs {
            assert_eq!(job["jobname"], "job0");
            assert_eq!(job["groupid"], 0);
            assert_eq!(job["error"], 0);
            assert_eq!(job["ctx"], 0);
            assert!(job["elapsed"].is_u64());
            assert!(job["usr_cpu"].is_f64());
            assert!(job["sys_cpu"].is_f64());
            let opts = job["job options"].as_object().unwrap();
            for k in [
                "rw",
                "bs",
                "iodepth",
                "numjobs",
                "runtime",
                "time_based",
                "device",
            ] {
                assert!(opts[k].is_string(), "job options.{k}");
            }
            assert_eq!(opts["rw"], "randrw");
            for dir in ["read", "write", "trim"] {
                let d = &job[dir];
                for k in [
                    "io_bytes",
                    "io_kbytes",
                    "bw_bytes",
                    "bw",
                    "runtime",
                    "total_ios",
                    "short_ios",
                    "drop_ios",
                ] {
                    assert!(d[k].is_u64(), "{dir}.{k}: {}", d[k]);
                }
                assert!(d["iops"].is_f64(), "{dir}.iops");
                for lat in ["clat_ns", "lat_ns"] {
                    let l = &d[lat];
                    for k in ["min", "max", "N"] {
                        assert!(l[k].is_u64(), "{dir}.{lat}.{k}");
                    }
                    for k in ["mean", "stddev"] {
                        assert!(l[k].is_f64(), "{dir}.{lat}.{k}");
                    }
                    let pct = l["percentile"].as_object().unwrap();
                    assert_eq!(pct.len(), 17);
                    for k in [
                        "1.000000",
                        "5.000000",
                        "10.000000",
                        "20.000000",
                        "30.000000",
                        "40.000000",
                        "50.000000",
                        "60.000000",
                        "70.000000",
                        "80.000000",
                        "90.000000",
                        "95.000000",
                        "99.000000",
                        "99.500000",
                        "99.900000",
                        "99.950000",
                        "99.990000",
                    ] {
                        assert!(pct[k].is_u64(), "{dir}.{lat}.percentile.{k}");
                    }
                }
            }
            let r = &job["read"];
            assert_eq!(r["total_ios"], 3_000_000);
            assert_eq!(r["io_bytes"], 3_000_000u64 * 4096);
            assert_eq!(r["runtime"], 3000);
            assert!((r["iops"].as_f64().unwrap() - 1_000_000.0).abs() < 1.0);
            assert_eq!(r["bw"], r["bw_bytes"].as_u64().unwrap() / 1024);
            assert_eq!(r["clat_ns"]["N"], 1950);
            let p50 = r["clat_ns"]["percentile"]["50.000000"].as_u64().unwrap();
            assert!((900..=1100).contains(&p50), "{p50}");
            assert_eq!(job["trim"]["total_ios"], 0);
            assert!((job["usr_cpu"].as_f64().unwrap() - 96.666).abs() < 0.01);
        }
        let m = &v["mqblk"];
        assert_eq!(m["queue_mode"], "mq");
        assert!(m["allocs_per_io"].is_f64());
        assert!(m["ns_per_io_cpu"].is_f64());
        for k in [
            "bytes_copied",
            "requests",
            "bios",
            "merges",
            "splits",
            "descriptor_bytes",
        ] {
            assert!(m[k].is_u64(), "mqblk.{k}");
        }
        assert_eq!(m["devices"], json!(["nullb0"]));
    }

    #[test]
    fn no_clat_without_iostats() {
        let (specs, mut run) = synthetic();
        for j in &mut run.jobs {
            j.clat_valid = false;
        }
        let v = json(&specs, &run);
        assert_eq!(v["jobs"][0]["read"]["clat_ns"]["N"], 0);
        let text = normal(&specs, &run);
        assert!(!text.contains("clat"), "{text}");
        assert!(text.contains("IOPS="), "{text}");
    }

    #[test]
    fn slat_is_shown_when_measured_with_percentiles_as_asked() {
        let (mut specs, mut run) = synthetic();
        let v = json(&specs, &run);
        let slat = &v["jobs"][0]["read"]["slat_ns"];
        assert_eq!(slat["N"], 0);
        assert!(slat.get("percentile").is_none(), "{slat}");
        assert!(!normal(&specs, &run).contains("slat"));
        let mut h = Histograms::new();
        for ns in 10..110u64 {
            h.record(StatGroup::Read, ns);
        }
        for j in &mut run.jobs {
            j.slat = Some(h.clone());
        }
        // Measured (a latency log asked): the summary, no percentiles.
        let v = json(&specs, &run);
        let slat = &v["jobs"][0]["read"]["slat_ns"];
        assert_eq!(slat["N"], 100);
        assert_eq!(slat["min"], 10);
        assert!(slat.get("percentile").is_none(), "{slat}");
        assert_eq!(v["jobs"][0]["write"]["slat_ns"]["N"], 0);
        let text = normal(&specs, &run);
        assert!(text.contains("    slat (nsec): min=10, max=109"), "{text}");
        assert!(!text.contains("slat percentiles"), "{text}");
        // slat_percentiles=1: fio's percentile object and block, the slat
        // block before the clat block.
        specs[0].slat_percentiles = true;
        let v = json(&specs, &run);
        let pct = &v["jobs"][0]["read"]["slat_ns"]["percentile"];
        assert_eq!(pct.as_object().unwrap().len(), PERCENTILES.len());
        assert!(pct["50.000000"].as_u64().is_some(), "{pct}");
        // No samples, no percentiles (the write direction has none).
        assert!(v["jobs"][0]["write"]["slat_ns"].get("percentile").is_none());
        let text = normal(&specs, &run);
        let read = &text[text.find("  read:").unwrap()..text.find("  write:").unwrap()];
        let order: Vec<usize> = [
            "    slat (nsec):",
            "    clat (nsec):",
            "    slat percentiles (nsec):",
            "    clat percentiles (nsec):",
        ]
        .iter()
        .map(|k| read.find(k).unwrap_or_else(|| panic!("{k} in {read}")))
        .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{read}");
        let write = &text[text.find("  write:").unwrap()..];
        assert!(!write[..write.find("  cpu").unwrap()].contains("slat"));
    }

    #[test]
    fn lat_is_the_total_latency_when_slat_is_measured() {
        let (specs, mut run) = synthetic();
        // Without stamps, lat is clat (nothing else is known).
        let v = json(&specs, &run);
        assert_eq!(
            v["jobs"][0]["read"]["lat_ns"]["N"],
            v["jobs"][0]["read"]["clat_ns"]["N"]
        );
        assert!(!normal(&specs, &run).contains("    lat ("));
        let mut total = Histograms::new();
        for us in 1000..1100u64 {
            total.record(StatGroup::Read, us * 1000);
        }
        for j in &mut run.jobs {
            j.slat = Some(Histograms::new());
            j.lat = Some(total.clone());
        }
        let v = json(&specs, &run);
        let lat = &v["jobs"][0]["read"]["lat_ns"];
        assert_eq!(lat["N"], 100);
        assert!(lat["min"].as_u64().unwrap() >= 990_000, "{lat}");
        assert!(lat["percentile"]["99.000000"].as_u64().unwrap() >= 1_090_000);
        // A direction without samples falls back to its clat.
        assert_eq!(
            v["jobs"][0]["write"]["lat_ns"]["N"],
            v["jobs"][0]["write"]["clat_ns"]["N"]
        );
        let text = normal(&specs, &run);
        let read = &text[text.find("  read:").unwrap()..text.find("  write:").unwrap()];
        let (clat, lat) = (
            read.find("    clat (").unwrap(),
            read.find("    lat (usec): min=").unwrap(),
        );
        assert!(clat < lat, "{read}");
    }

    #[test]
    fn normal_reads_like_fio() {
        let (specs, mut run) = synthetic();
        run.jobs[1].write = DirResult::default();
        let text = normal(&specs, &run);
        assert!(
            text.contains("job0: (groupid=0, jobs=1): err= 0: pid="),
            "{text}"
        );
        assert!(
            text.contains("\n  read: IOPS=1000k, BW=3906MiB/s (4096MB/s)(11.4GiB/3000msec)\n"),
            "{text}"
        );
        assert_eq!(text.matches("\n  write: IOPS=").count(), 1, "{text}");
        assert!(text.contains("    clat (nsec): min=50, max="), "{text}");
        assert!(text.contains("    clat percentiles (nsec):"), "{text}");
        assert!(text.contains("     |  1.00th=["), "{text}");
        assert!(text.contains("     | 99.99th=["), "{text}");
        assert!(
            text.contains("  cpu          : usr=96.67%, sys=0.33%"),
            "{text}"
        );
        assert!(text.contains("Run status group 0 (all jobs):"), "{text}");
        assert!(text.contains("   READ: bw="), "{text}");
        assert!(text.contains("  WRITE: bw="), "{text}");
        assert!(text.contains("run=3000-3000msec"), "{text}");
        for k in [
            "\nmqblk: ",
            "queue_mode=mq",
            "allocs_per_io=",
            "bytes_copied=",
            "requests=",
            "bios=",
            "requests/bios=",
            "ns_per_io_cpu=",
            "descriptor_bytes=256",
        ] {
            assert!(text.contains(k), "{k}: {text}");
        }
        // Seventeen percentiles, four to a line.
        assert_eq!(text.matches("th=[").count(), 2 * 17 + 17, "{text}");
    }

    #[test]
    fn errors_are_reported() {
        let (specs, mut run) = synthetic();
        run.jobs[0].read.errors = 3;
        run.jobs[0].first_error = Some("I/O error at sector 8".into());
        assert_eq!(json(&specs, &run)["jobs"][0]["error"], EIO);
        assert!(normal(&specs, &run).contains("err= 5 (I/O error at sector 8)"));
    }

    #[test]
    fn preamble_counts_threads() {
        let (specs, _) = synthetic();
        let s = starting(&specs);
        assert!(s.contains("rw=randrw, bs=(R) 4096B-4096B"), "{s}");
        assert!(s.contains("Starting 2 threads"), "{s}");
    }
}
