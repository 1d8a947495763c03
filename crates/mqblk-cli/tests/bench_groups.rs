//! fio's reporting groups through `mqblk bench`: fio's own `jesd219.fio`
//! (one section, numjobs=4, group_reporting) and `steadystate.fio` (two
//! groups: new_group and stonewall) run as written, and their group
//! entries hold the sums of the jobs' figures from the same runs with
//! `--group_reporting=0` (the same seed and the same number of I/Os per
//! job, so the same I/O): I/Os and bytes summed, latency samples merged,
//! and bandwidth the summed bytes over the longest runtime. Group ids
//! agree between the banner, the job entries and the status blocks.

use std::path::{Path, PathBuf};
use std::process::Command;

use mqblk_test_support::require_tool;
use serde_json::Value;

fn example(name: &str) -> PathBuf {
    mqblk_test_support::fio_source().join("examples").join(name)
}

fn bench(file: &Path, format: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["bench", "--device=ram,size=1G", "--randseed=7"])
        .arg(format!("--output-format={format}"))
        .args(extra)
        .arg(file)
        .output()
        .expect("run mqblk");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}: {}\n{stdout}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn json(file: &Path, extra: &[&str]) -> Value {
    serde_json::from_str(&bench(file, "json", extra)).expect("JSON output")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// Compare each group entry of `grouped` with the sums over the jobs of
/// its group in `apart`; returns how many entries were compared.
fn compare(name: &str, grouped: &Value, apart: &Value, jobs_per_group: u64) -> usize {
    let entries = grouped["jobs"].as_array().unwrap();
    let jobs = apart["jobs"].as_array().unwrap();
    for e in entries {
        let g = u(&e["groupid"]);
        let members: Vec<&Value> = jobs.iter().filter(|j| u(&j["groupid"]) == g).collect();
        assert_eq!(members.len() as u64, jobs_per_group, "{name} group {g}");
        assert_eq!(u(&e["members"]), jobs_per_group, "{name} group {g}");
        for dir in ["read", "write"] {
            let sum = |k: &str| members.iter().map(|j| u(&j[dir][k])).sum::<u64>();
            let d = &e[dir];
            let (ios, bytes) = (u(&d["total_ios"]), u(&d["io_bytes"]));
            eprintln!(
                "{name} group {g} {dir}: {ios} I/Os, {bytes} bytes; the jobs' sums: {} I/Os, {} \
                 bytes",
                sum("total_ios"),
                sum("io_bytes")
            );
            assert_eq!(ios, sum("total_ios"), "{name} group {g} {dir}");
            assert_eq!(bytes, sum("io_bytes"), "{name} group {g} {dir}");
            let n = |v: &Value| u(&v["clat_ns"]["N"]);
            assert_eq!(
                n(d),
                members.iter().map(|j| n(&j[dir])).sum::<u64>(),
                "{name} group {g} {dir}: clat samples merged"
            );
            if ios == 0 {
                continue;
            }
            // fio: bandwidth is the summed bytes over the longest runtime.
            // The report gives the runtime in whole milliseconds and the
            // bandwidth from the exact one: within a millisecond of it (a
            // run of 20 ms is 5% apart from one of 21).
            let runtime_ms = u(&d["runtime"]) as f64;
            let bw = u(&d["bw_bytes"]) as f64;
            let (lo, hi) = (
                bytes as f64 * 1000.0 / (runtime_ms + 1.0),
                bytes as f64 * 1000.0 / (runtime_ms - 1.0).max(0.5),
            );
            assert!(
                bw >= lo * 0.99 && bw <= hi * 1.01 + 1.0,
                "{name} group {g} {dir}: bw {bw} for {bytes} bytes in {runtime_ms} ms"
            );
            let (min, max) = (u(&d["clat_ns"]["min"]), u(&d["clat_ns"]["max"]));
            assert!(min <= max, "{name} group {g} {dir}");
        }
    }
    entries.len()
}

#[test]
fn jesd219_reports_its_group_as_the_sum_of_its_jobs() {
    require_tool("fio");
    let file = example("jesd219.fio");
    // Each job's I/O fixed: the same seed, and 4 MiB of it.
    let sized = ["--io_size=4m", "--runtime=30s"];
    let grouped = json(&file, &sized);
    let mut apart_args = sized.to_vec();
    apart_args.push("--group_reporting=0");
    let apart = json(&file, &apart_args);
    assert_eq!(apart["jobs"].as_array().unwrap().len(), 4);
    assert_eq!(compare("jesd219", &grouped, &apart, 4), 1);
    let text = bench(&file, "normal", &sized);
    assert!(text.contains("JESD219: (g=0): rw=randrw"), "{text}");
    assert!(text.contains("JESD219: (groupid=0, jobs=4)"), "{text}");
    assert_eq!(text.matches("(groupid=").count(), 1, "{text}");
}

#[test]
fn steadystate_reports_two_groups_each_the_sum_of_its_jobs() {
    require_tool("fio");
    let file = example("steadystate.fio");
    // Sized, not time based: each job does 2000 I/Os of its bs.
    let sized = ["--time_based=0", "--number_ios=2000", "--runtime=30s"];
    let grouped = json(&file, &sized);
    let mut apart_args = sized.to_vec();
    apart_args.push("--group_reporting=0");
    let apart = json(&file, &apart_args);
    assert_eq!(apart["jobs"].as_array().unwrap().len(), 8);
    assert_eq!(compare("steadystate", &grouped, &apart, 4), 2);
    let text = bench(&file, "normal", &sized);
    for line in [
        "ss-write: (g=0): rw=write",
        "ss-read: (g=1): rw=randread",
        "ss-write: (groupid=0, jobs=4)",
        "ss-read: (groupid=1, jobs=4)",
        "Run status group 0 (all jobs):",
        "Run status group 1 (all jobs):",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}
