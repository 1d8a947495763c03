//! `mqblk plot` on bench JSON and on fio's own JSON (fio's null engine),
//! the bench's `--status-interval` reports and its latency buckets, and
//! `info`/`stat` with their argument given positionally or by option.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mqblk_test_support::require_tool;
use serde_json::Value;

use mqblk_test_support::Scratch as TempDir;

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary")
}

fn ok(args: &[&str]) -> String {
    let o = mqblk(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A bench JSON report (randrw, so both directions have latencies).
fn bench_json(dir: &Path) -> PathBuf {
    let out = ok(&[
        "bench",
        "--device=null",
        "--rw=randrw",
        "--iodepth=4",
        "--numjobs=2",
        "--runtime=200ms",
        "--time_based",
        "--output-format=json",
    ]);
    let path = dir.join("bench.json");
    std::fs::write(&path, out).unwrap();
    path
}

fn assert_figure(stem: &Path, titles: &[&str]) {
    let png = std::fs::read(stem.with_extension("png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
    for t in titles {
        assert!(svg.contains(t), "{t} missing from {}", stem.display());
    }
}

#[test]
fn bench_json_has_the_log_linear_buckets() {
    let d = TempDir::new("plot-bins");
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(bench_json(&d.0)).unwrap()).unwrap();
    for job in v["jobs"].as_array().unwrap() {
        for dir in ["read", "write"] {
            let clat = &job[dir]["clat_ns"];
            let bins = clat["bins"].as_object().unwrap();
            let sum: u64 = bins.values().map(|c| c.as_u64().unwrap()).sum();
            assert_eq!(
                sum,
                clat["N"].as_u64().unwrap(),
                "{dir}: every I/O in a bucket"
            );
            assert!(bins.keys().all(|k| k.parse::<u64>().is_ok()), "{bins:?}");
        }
    }
}

#[test]
fn plots_bench_json() {
    let d = TempDir::new("plot-bench");
    let input = bench_json(&d.0);
    let stem = d.0.join("chart");
    let out = ok(&[
        "plot",
        input.to_str().unwrap(),
        &format!("--out={}", stem.display()),
    ]);
    assert!(out.contains("bench:job0.0"), "{out}");
    assert!(out.contains("IOPS="), "{out}");
    assert_figure(
        &stem,
        &[
            "IOPS per job",
            "Completion latency percentiles",
            "Completion latency histogram",
            "bench:job0.1 write",
        ],
    );
    let stem = d.0.join("bw");
    ok(&[
        "plot",
        input.to_str().unwrap(),
        "--metric=bw",
        &format!("--out={}", stem.display()),
    ]);
    assert_figure(&stem, &["Bandwidth per job"]);
}

#[test]
fn plots_fio_json_beside_bench_json() {
    require_tool("fio");
    let d = TempDir::new("plot-fio");
    let mut fio_reports = Vec::new();
    for (format, name) in [("json", "fio.json"), ("json+", "fioplus.json")] {
        let o = Command::new("fio")
            .args([
                "--name=nulljob",
                "--ioengine=null",
                "--rw=randread",
                "--bs=4k",
                "--size=64M",
                "--runtime=1",
                "--time_based",
                &format!("--output-format={format}"),
            ])
            .output()
            .expect("run fio");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let path = d.0.join(name);
        std::fs::write(&path, &o.stdout).unwrap();
        fio_reports.push(path);
    }
    let bench = bench_json(&d.0);
    let stem = d.0.join("both");
    let out = ok(&[
        "plot",
        fio_reports[0].to_str().unwrap(),
        fio_reports[1].to_str().unwrap(),
        bench.to_str().unwrap(),
        &format!("--out={}", stem.display()),
    ]);
    assert!(out.contains("fio:nulljob"), "{out}");
    assert!(out.contains("fioplus:nulljob"), "{out}");
    // fio's json+ has bins; its plain json has percentiles only.
    assert_figure(
        &stem,
        &[
            "IOPS per job",
            "fio:nulljob read",
            "fioplus:nulljob read",
            "Completion latency histogram",
        ],
    );
}

#[test]
fn plot_refuses_what_is_not_a_report() {
    let d = TempDir::new("plot-bad");
    let path = d.0.join("x.json");
    std::fs::write(&path, "{\"hello\": 1}").unwrap();
    let o = mqblk(&["plot", path.to_str().unwrap()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no fio-shaped JSON report"), "{err}");
}

#[test]
fn status_interval_prints_json_reports() {
    let out = ok(&[
        "bench",
        "--device=null",
        "--rw=randrw",
        "--runtime=1",
        "--time_based",
        "--status-interval=200ms",
        "--output-format=json",
    ]);
    let values: Vec<Value> = serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(|v| v.unwrap())
        .collect();
    let (status, last) = values.split_at(values.len() - 1);
    assert!(status.len() >= 2, "{} reports: {out}", status.len());
    for s in status {
        assert!(s["status"]["elapsed_ms"].is_u64(), "{s}");
        let job = &s["jobs"][0];
        assert_eq!(job["jobname"], "job0");
        for dir in ["read", "write"] {
            assert!(job[dir]["iops"].as_f64().is_some(), "{s}");
            assert!(job[dir]["bw_bytes"].is_u64(), "{s}");
            assert!(job[dir]["total_ios"].is_u64(), "{s}");
        }
    }
    // Counts so far only grow.
    let totals: Vec<u64> = status
        .iter()
        .map(|s| s["jobs"][0]["read"]["total_ios"].as_u64().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{totals:?}");
    assert!(
        status.last().unwrap()["jobs"][0]["read"]["clat_ns"]["percentile"]["99.000000"].is_u64()
    );
    // The final report follows, whole.
    assert!(last[0]["mqblk"]["requests"].is_u64(), "{}", last[0]);
    // Without a terminal, no status line is drawn.
    let o = mqblk(&["bench", "--device=null", "--runtime=1", "--time_based"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("Jobs:"));
    ok(&[
        "bench",
        "--device=null",
        "--runtime=100ms",
        "--time_based",
        "--eta=never",
    ]);
    let o = mqblk(&["bench", "--status-interval=1q"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--status-interval"));
}

#[test]
fn info_and_stat_take_their_argument_either_way() {
    let by_position = ok(&["info", "null"]);
    let by_option = ok(&["info", "--device", "null"]);
    assert!(by_position.contains("name:"), "{by_position}");
    assert_eq!(
        by_position.lines().find(|l| l.starts_with("capacity:")),
        by_option.lines().find(|l| l.starts_with("capacity:"))
    );
    let d = TempDir::new("plot-stat");
    let dir = d.0.join("st");
    ok(&[
        "bench",
        "--device=null",
        "--runtime=100ms",
        "--time_based",
        &format!("--stats-dir={}", dir.display()),
    ]);
    let a = ok(&["stat", dir.to_str().unwrap()]);
    let b = ok(&["stat", "--stats-dir", dir.to_str().unwrap()]);
    assert!(a.contains("nullb0"), "{a}");
    assert_eq!(a, b);
}

/// On a terminal (a pty made by util-linux's `script`), bench draws fio's
/// status line with both directions and a p99; `--eta=never` hides it.
#[test]
fn status_line_on_a_terminal() {
    require_tool("script");
    let bin = env!("CARGO_BIN_EXE_mqblk");
    let run = |eta: &str| {
        let cmd =
            format!("{bin} bench --device=null --rw=randrw --runtime=2 --time_based --eta={eta}");
        let o = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .output()
            .expect("run script");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let shown = run("auto");
    let line = shown
        .split(['\r', '\n'])
        .rfind(|l| l.contains("Jobs: 1:"))
        .unwrap_or_else(|| panic!("no status line in {shown:?}"));
    for part in ["[r=", ",w=", " IOPS]", "[p99 r=", "elapsed", "eta"] {
        assert!(line.contains(part), "{part} missing from {line:?}");
    }
    // The report follows as usual.
    assert!(shown.contains("Run status group 0"), "{shown}");
    let hidden = run("never");
    assert!(!hidden.contains("Jobs: 1:"), "{hidden}");
    assert!(hidden.contains("Run status group 0"), "{hidden}");
}
