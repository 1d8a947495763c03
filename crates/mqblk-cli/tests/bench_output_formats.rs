//! `mqblk bench --output-format=json+` and `terse` as fio's users read
//! them: fio's own `fio_jsonplus_clat2csv` turns our json+ into its CSV
//! (and validates it), `mqblk plot` draws it, and a terse line has the
//! field count and order of fio's version 3 (field by field the same
//! kind of value as the line fio itself prints for the same job), with
//! the figures of the JSON report of the same run.

use std::path::Path;
use std::process::Command;

use mqblk_test_support::{require_tool, Scratch};

fn mqblk(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A sized random job with a fixed seed: the same I/O in every format.
fn bench(format: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "bench",
        "--device=ram,size=64M",
        "--rw=randrw",
        "--bs=4k",
        "--size=4m",
        "--randseed=3",
    ];
    let f = format!("--output-format={format}");
    args.push(&f);
    args.extend_from_slice(extra);
    mqblk(&args)
}

fn run_ok(cmd: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn fios_jsonplus_clat2csv_reads_our_json_plus_and_plot_draws_it() {
    require_tool("fio_jsonplus_clat2csv");
    let dir = Scratch::new("jsonplus");
    // slat and lat measured (a latency log asks), with slat's percentiles
    // (fio writes bins only for a latency with percentiles).
    let log = format!("--write_lat_log={}", dir.path().join("lat").display());
    let report = bench("json+", &[&log, "--log_avg_msec=0", "--slat_percentiles=1"]);
    let v: serde_json::Value = serde_json::from_str(&report).expect("json+ is JSON");
    let path = dir.path().join("run.json");
    std::fs::write(&path, &report).unwrap();
    let out = run_ok(
        "fio_jsonplus_clat2csv",
        &["run.json", "run.csv"],
        dir.path(),
    );
    assert!(out.contains("run_job0.csv generated"), "{out}");
    let out = run_ok(
        "fio_jsonplus_clat2csv",
        &["run.json", "run.csv", "--validate"],
        dir.path(),
    );
    assert!(out.contains("run_job0.csv validated"), "{out}");
    // Its CSV counts every I/O of each latency: the last cumulative count
    // of a column is the JSON's N.
    let csv = std::fs::read_to_string(dir.path().join("run_job0.csv")).unwrap();
    let header: Vec<String> = csv
        .lines()
        .next()
        .unwrap()
        .split(',')
        .map(|c| c.trim().to_string())
        .collect();
    for (dir_name, lat) in [
        ("read", "clat_ns"),
        ("write", "clat_ns"),
        ("read", "lat_ns"),
        ("read", "slat_ns"),
    ] {
        let col = header
            .iter()
            .position(|c| *c == format!("{dir_name}_{lat}_cumulative"))
            .unwrap();
        let last = csv
            .lines()
            .skip(1)
            .filter_map(|l| l.split(',').nth(col)?.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let n = v["jobs"][0][dir_name][lat]["N"].as_u64().unwrap();
        eprintln!("{dir_name} {lat}: {n} I/Os in the JSON, {last} in the CSV");
        assert!(n > 0, "{dir_name} {lat}: no samples");
        assert_eq!(last, n, "{dir_name} {lat}");
    }
    let stem = dir.path().join("chart");
    let out = mqblk(&[
        "plot",
        path.to_str().unwrap(),
        &format!("--out={}", stem.display()),
    ]);
    assert!(out.contains("run:job0") && out.contains("p99="), "{out}");
    assert!(dir.path().join("chart.svg").exists(), "{out}");
}

/// The kind of a terse field, to compare ours with fio's field by field.
fn kind(field: &str) -> &'static str {
    if field.contains("%=") {
        "percentile"
    } else if field.ends_with('%') {
        "percent"
    } else if field.parse::<u64>().is_ok() {
        "integer"
    } else if field.parse::<f64>().is_ok() {
        "decimal"
    } else {
        "text"
    }
}

#[test]
fn a_terse_line_has_fios_version_3_fields_in_fios_order() {
    require_tool("fio");
    let dir = Scratch::new("terse");
    let fio = run_ok(
        "fio",
        &[
            "--name=t",
            "--ioengine=null",
            "--size=4m",
            "--rw=randrw",
            "--output-format=terse",
        ],
        dir.path(),
    );
    let fio_fields: Vec<&str> = fio.trim_end().split(';').collect();
    let ours = bench("terse", &[]);
    let lines: Vec<&str> = ours.lines().collect();
    assert_eq!(lines.len(), 1, "{ours}");
    let fields: Vec<&str> = lines[0].split(';').collect();
    eprintln!(
        "fio's line: {} fields, ours: {} fields",
        fio_fields.len(),
        fields.len()
    );
    assert_eq!(fio_fields.len(), 121, "fio's own terse v3: {fio}");
    assert_eq!(fields.len(), fio_fields.len(), "{ours}");
    for (i, (a, b)) in fields.iter().zip(&fio_fields).enumerate() {
        // fio's version and our version are both text; so are the names.
        assert_eq!(
            kind(a),
            kind(b),
            "field {} is {a:?} here and {b:?} in fio's line",
            i + 1
        );
    }
    assert_eq!(fields[0], "3");
    assert_eq!(fields[2], "job0");
    // The figures are the JSON report's, for the same I/O.
    let v: serde_json::Value = serde_json::from_str(&bench("json", &[])).unwrap();
    let job = &v["jobs"][0];
    let read_kib = job["read"]["io_kbytes"].as_u64().unwrap();
    let write_kib = job["write"]["io_kbytes"].as_u64().unwrap();
    assert_eq!(fields[5], read_kib.to_string(), "read_kb");
    assert_eq!(fields[46], write_kib.to_string(), "write_kb");
    assert_eq!(read_kib + write_kib, 4096, "the random map: 4 MiB, once");
    // The latency ranges are percentages of every I/O.
    let sum: f64 = fields[99..121]
        .iter()
        .map(|f| f.trim_end_matches('%').parse::<f64>().unwrap())
        .sum();
    assert!((sum - 100.0).abs() < 0.5, "the latency ranges add to {sum}");
    // group_reporting: one line for the group.
    let grouped = bench("terse", &["--numjobs=3", "--group_reporting"]);
    assert_eq!(grouped.lines().count(), 1, "{grouped}");
    let apart = bench("terse", &["--numjobs=3"]);
    assert_eq!(apart.lines().count(), 3, "{apart}");
}
