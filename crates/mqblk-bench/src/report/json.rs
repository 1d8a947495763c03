//! fio's `--output-format=json`, with the layer's `mqblk` block.

use mqblk::stats::StatGroup;
use serde_json::{json, Map, Value};

use crate::ctime::ctime;
use crate::result::{DirResult, RunResult};
use mqblk_fio::job::JobSpec;

use super::figures::*;
use super::group::reported;

/// fio's `"job options"`: every value a string, as fio writes them.
pub(super) fn job_options(spec: &JobSpec) -> Value {
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

/// One latency with its bins, as json+ writes it: bins where it has
/// samples and percentiles (fio writes none for a latency without).
fn plus(lat: &Lat, mut v: Value) -> Value {
    if lat.n > 0 && v.get("percentile").is_some() {
        v["bins"] = lat.json_bins();
    } else if let Some(o) = v.as_object_mut() {
        o.remove("bins");
    }
    v
}

pub(super) fn dir_json(d: &DirResult, lats: DirLat, runtime_ns: u64, json_plus: bool) -> Value {
    let bw_bytes = round_u64(per_sec(d.bytes, runtime_ns));
    let lat = lats.clat.unwrap_or_else(Lat::empty);
    // fio: percentiles with slat_percentiles=1, and only of samples.
    let slat = match &lats.slat {
        Some(s) if lats.slat_percentiles && s.n > 0 => s.json(),
        Some(s) => s.json_summary(),
        None => Lat::empty().json_summary(),
    };
    // Total latency when the job measured slat; without it, no
    // submission latency is known, and lat is clat.
    let total = lats.lat.filter(|t| t.n > 0);
    let lat_ns = total.as_ref().map_or_else(|| lat.json(), Lat::json);
    if json_plus {
        let slat = match &lats.slat {
            Some(s) => plus(s, slat),
            None => slat,
        };
        let lat_ns = plus(total.as_ref().unwrap_or(&lat), lat_ns);
        let clat_ns = plus(&lat, lat.json());
        return dir_fields(d, bw_bytes, runtime_ns, slat, clat_ns, lat_ns);
    }
    dir_fields(d, bw_bytes, runtime_ns, slat, lat.json_with_bins(), lat_ns)
}

fn dir_fields(
    d: &DirResult,
    bw_bytes: u64,
    runtime_ns: u64,
    slat: Value,
    clat: Value,
    lat: Value,
) -> Value {
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
        "clat_ns": clat,
        "lat_ns": lat,
    })
}

/// The report in fio's JSON shape (`--output-format=json`).
pub fn json(specs: &[JobSpec], run: &RunResult) -> Value {
    report(specs, run, false)
}

/// fio's json+ (`--output-format=json+`): the JSON report with the bins
/// of every latency that has samples and percentiles (`clat_ns.bins`,
/// `lat_ns.bins`, and `slat_ns.bins` with `slat_percentiles=1`), as
/// `fio_jsonplus_clat2csv` and `mqblk plot` read them.
pub fn json_plus(specs: &[JobSpec], run: &RunResult) -> Value {
    report(specs, run, true)
}

fn report(specs: &[JobSpec], run: &RunResult, json_plus: bool) -> Value {
    let now = unix_now();
    let jobs: Vec<Value> = reported(specs, run)
        .iter()
        .map(|entry| {
            let job = &entry.job;
            let options = spec_of(specs, job).map_or_else(|| json!({}), job_options);
            let dir = |d: &DirResult, group| {
                dir_json(d, DirLat::of(specs, job, group), job.runtime_ns, json_plus)
            };
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
                "usr_cpu": percent_of(job.usr_ns, entry.cpu_runtime_ns),
                "sys_cpu": percent_of(job.sys_ns, entry.cpu_runtime_ns),
                "job_runtime": msec(entry.cpu_runtime_ns),
                "members": entry.members,
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
                    "interrupted": r.interrupted,
                    "mismatches": r.mismatches.iter().map(|m| json!({
                        "offset": m.offset,
                        "reason": m.reason,
                        "expected": m.expected_text(),
                        "actual": m.found_text(),
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
