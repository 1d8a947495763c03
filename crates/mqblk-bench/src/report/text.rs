//! fio's text report (`--output-format=normal`): the banner, the job
//! blocks, the group lines, and the layer's own figures.

use std::fmt::Write as _;

use mqblk::stats::StatGroup;

use crate::ctime::ctime;
use crate::result::{DirResult, JobResult, RunResult};
use mqblk_fio::job::JobSpec;

use super::figures::*;
use super::group::{reported, section_groups};

/// What fio prints before a run: each job's line, the version, and the
/// number of threads.
pub fn starting(specs: &[JobSpec]) -> String {
    let mut s = String::new();
    for (spec, g) in specs.iter().zip(section_groups(specs)) {
        let bs = format!("{}B-{}B", spec.bs, spec.bs);
        let _ = writeln!(
            s,
            "{}: (g={g}): rw={}, bs=(R) {bs}, (W) {bs}, (T) {bs}, ioengine=mqblk, iodepth={}",
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
pub(super) fn lat_unit(lat: &Lat) -> (&'static str, u64) {
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
pub(super) fn write_lat_line(out: &mut String, name: &str, lat: &Lat) {
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
pub(super) fn write_percentiles(out: &mut String, name: &str, lat: &Lat) {
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
pub(super) fn write_lats(out: &mut String, lats: &DirLat) {
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

pub(super) fn write_dir(
    out: &mut String,
    label: &str,
    d: &DirResult,
    lats: DirLat,
    runtime_ns: u64,
) {
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
    let entries = reported(specs, run);
    for entry in &entries {
        let job = &entry.job;
        let err = job_error(job);
        let why = job
            .first_error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}: (groupid={}, jobs={}): err={err:2}{why}: pid={pid}: {date}",
            job.name, job.group, entry.members
        );
        for (name, dir, group) in [
            ("read", &job.read, StatGroup::Read),
            ("write", &job.write, StatGroup::Write),
            ("trim", &job.trim, StatGroup::Discard),
        ] {
            if dir.ios > 0 {
                let lat = DirLat::of(specs, job, group);
                write_dir(&mut out, name, dir, lat, job.runtime_ns);
            }
        }
        let _ = writeln!(
            out,
            "  cpu          : usr={:.2}%, sys={:.2}%",
            percent_of(job.usr_ns, entry.cpu_runtime_ns),
            percent_of(job.sys_ns, entry.cpu_runtime_ns),
        );
        let depth = spec_of(specs, job).map_or(0, |s| s.iodepth);
        let _ = writeln!(out, "  device       : {}, iodepth={depth}", job.device);
        if let Some(r) = &job.verify {
            r.describe(&mut out);
        }
        out.push('\n');
    }
    // fio: a status block per group, over its entries.
    let mut groups: Vec<usize> = entries.iter().map(|e| e.job.group).collect();
    groups.dedup();
    for (i, g) in groups.into_iter().enumerate() {
        let members: Vec<&JobResult> = entries
            .iter()
            .filter(|e| e.job.group == g)
            .map(|e| &e.job)
            .collect();
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "Run status group {g} (all jobs):");
        write_group(&mut out, "READ", &members, |j| &j.read);
        write_group(&mut out, "WRITE", &members, |j| &j.write);
        if members.iter().any(|j| j.trim.ios > 0) {
            write_group(&mut out, "TRIM", &members, |j| &j.trim);
        }
    }
    write_layer(&mut out, run);
    write_degraded(&mut out, run);
    out
}

/// Mirror legs out of service at the end of the run: which, why, when.
pub(super) fn write_degraded(out: &mut String, run: &RunResult) {
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
/// per-entry range, the total I/O, and the runtime range.
pub(super) fn write_group(
    out: &mut String,
    label: &str,
    entries: &[&JobResult],
    dir: impl Fn(&JobResult) -> &DirResult,
) {
    let active: Vec<&JobResult> = entries.iter().copied().filter(|j| dir(j).ios > 0).collect();
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

pub(super) fn write_layer(out: &mut String, run: &RunResult) {
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
