//! `mqblk repro`: every experiment runs at `--scale=0.01` and writes its
//! directory: a JSON file per point, a CSV with the expected columns and
//! axes that only grow within each series, a markdown table with the
//! seed's column, and the plot as SVG and PNG. No assertion depends on
//! timing or throughput.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mqblk_test_support::Scratch as TempDir;

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary")
}

/// Run `repro NAME --scale=0.01`; return the CSV's header and rows.
fn run(name: &str, out: &Path) -> (Vec<String>, Vec<Vec<String>>) {
    let o = mqblk(&[
        "repro",
        name,
        "--scale=0.01",
        &format!("--out={}", out.display()),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "repro {name} failed: {stderr}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("## The seed beside ours"), "{stdout}");

    let csv = std::fs::read_to_string(out.join(format!("{name}.csv"))).unwrap();
    let mut lines = csv.lines();
    let header: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(String::from).collect())
        .collect();
    assert!(!rows.is_empty(), "{name}: no rows");
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{name}: {r:?} against {header:?}");
    }

    let md = std::fs::read_to_string(out.join(format!("{name}.md"))).unwrap();
    assert!(
        md.contains("| figure | the seed's | ours (this run) |"),
        "{md}"
    );
    assert!(md.contains(&format!("({name}.png)")), "{md}");

    let png = std::fs::read(out.join(format!("{name}.png"))).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "{name}.png is not a PNG"
    );
    let svg = std::fs::read_to_string(out.join(format!("{name}.svg"))).unwrap();
    assert!(svg.contains("<svg"), "{name}.svg");
    assert!(svg.contains(&format!("{name}:")), "{name}.svg has no title");

    // One raw fio-shaped JSON per run: a row per point, or a row per
    // point run `rounds` times.
    let points: Vec<PathBuf> = std::fs::read_dir(out.join("points"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let runs: usize = match header.iter().position(|h| h == "rounds") {
        Some(c) => rows.iter().map(|r| r[c].parse::<usize>().unwrap()).sum(),
        None => rows.len(),
    };
    assert_eq!(points.len(), runs, "{name}: a JSON per run");
    for p in &points {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
        assert!(v["jobs"].as_array().is_some_and(|j| !j.is_empty()), "{p:?}");
        assert!(v["mqblk"]["requests"].is_u64(), "{p:?}");
    }
    (header, rows)
}

fn col(header: &[String], name: &str) -> usize {
    header
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name} in {header:?}"))
}

/// Within each run of rows with the same `series` cell, `axis` grows.
fn assert_monotone(header: &[String], rows: &[Vec<String>], series: &str, axis: &str) {
    let (s, a) = (col(header, series), col(header, axis));
    for w in rows.windows(2) {
        if w[0][s] == w[1][s] {
            let x0: f64 = w[0][a].parse().unwrap();
            let x1: f64 = w[1][a].parse().unwrap();
            assert!(x1 > x0, "{axis} goes {x0} then {x1} in series {}", w[0][s]);
        }
    }
}

fn numbers(header: &[String], rows: &[Vec<String>], names: &[&str]) {
    for n in names {
        let c = col(header, n);
        for r in rows {
            let v: f64 = r[c].parse().unwrap_or_else(|_| panic!("{n}: {:?}", r[c]));
            assert!(v.is_finite() && v >= 0.0, "{n}: {v}");
        }
    }
}

#[test]
fn readv() {
    let d = TempDir::new("repro-readv");
    let (h, rows) = run("readv", &d.0);
    assert_monotone(&h, &rows, "device", "segments");
    numbers(&h, &rows, &["iops", "mib_per_s", "requests_per_bio"]);
    assert_eq!(rows.len(), 14, "ram and file, 7 segment counts");
    // A vectored bio is one request, on both devices.
    for r in &rows {
        assert_eq!(r[col(&h, "requests_per_bio")], "1.000", "{r:?}");
    }
    assert!(
        !d.0.join("readv-data.img").exists(),
        "the data file is removed"
    );
}

#[test]
fn submits() {
    let d = TempDir::new("repro-submits");
    let (h, rows) = run("submits", &d.0);
    assert_monotone(&h, &rows, "way", "max_sectors");
    numbers(&h, &rows, &["requests_per_128k", "bios_per_128k"]);
    assert_eq!(rows.len(), 18);
}

#[test]
fn iorl() {
    let d = TempDir::new("repro-iorl");
    let (h, rows) = run("iorl", &d.0);
    assert_monotone(&h, &rows, "queue_mode", "devices");
    numbers(&h, &rows, &["iops", "iops_min", "iops_max", "iops_per_job"]);
    for r in &rows {
        let v = |c: &str| r[col(&h, c)].parse::<f64>().unwrap();
        assert!(
            v("iops_min") <= v("iops") && v("iops") <= v("iops_max"),
            "{r:?}"
        );
    }
    let modes: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r[col(&h, "queue_mode")].as_str())
        .collect();
    assert_eq!(modes.len(), 3, "{modes:?}");
}

#[test]
fn mq_scaling() {
    let d = TempDir::new("repro-mq-scaling");
    let (h, rows) = run("mq-scaling", &d.0);
    assert_monotone(&h, &rows, "queue_mode", "threads");
    numbers(
        &h,
        &rows,
        &["iops", "clat_p50_ns", "clat_p99_ns", "clat_p99_9_ns"],
    );
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let most: usize = rows
        .iter()
        .map(|r| r[col(&h, "threads")].parse::<usize>().unwrap())
        .max()
        .unwrap();
    assert!(most > cores, "threads go past the {cores} cores: {most}");
}

#[test]
fn plug() {
    let d = TempDir::new("repro-plug");
    let (h, rows) = run("plug", &d.0);
    numbers(&h, &rows, &["iops", "ns_per_io_cpu"]);
    for (p, c) in [("on", "on"), ("on", "off"), ("off", "on"), ("off", "off")] {
        assert!(
            rows.iter()
                .any(|r| r[col(&h, "plug")] == p && r[col(&h, "clock_reads")] == c),
            "plug={p} clock={c}"
        );
    }
}

#[test]
fn descriptor() {
    let d = TempDir::new("repro-descriptor");
    let (h, rows) = run("descriptor", &d.0);
    assert_monotone(&h, &rows, "descriptor_bytes", "queue_depth");
    numbers(&h, &rows, &["heap_bytes", "descriptor_bytes"]);
    let md = std::fs::read_to_string(d.0.join("descriptor.md")).unwrap();
    assert!(md.contains("8792"), "the kiobuf's figure beside ours: {md}");
    // More tags hold more memory.
    let heap: Vec<f64> = rows
        .iter()
        .map(|r| r[col(&h, "heap_bytes")].parse().unwrap())
        .collect();
    assert!(heap.last() > heap.first(), "{heap:?}");
}

#[test]
fn part_cache_waits_for_partitions() {
    let d = TempDir::new("repro-part-cache");
    let o = mqblk(&[
        "repro",
        "part-cache",
        "--scale=0.01",
        &format!("--out={}", d.0.display()),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("partitions"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn unknown_experiments_are_named() {
    let o = mqblk(&["repro", "readvv"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("readv, submits, iorl"), "{err}");
    let o = mqblk(&["repro", "list"]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for name in [
        "readv",
        "submits",
        "iorl",
        "mq-scaling",
        "plug",
        "part-cache",
        "descriptor",
    ] {
        assert!(out.contains(name), "{out}");
    }
}
