//! `iostat` (sysstat) reads the diskstats that `mqblk bench --stats-dir`
//! keeps, and its figures match the bench's own. scripts/test installs
//! sysstat: a missing iostat fails this test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The tests of this file run benches; the iostat comparison needs the CPU
/// to itself, or its job thread falls behind the throttle.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn mqblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
}

/// The last report's line for `dev`: the named columns.
fn iostat_last(out: &str, dev: &str, cols: &[&str]) -> Vec<f64> {
    let mut header: Vec<&str> = Vec::new();
    let mut last = None;
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first() == Some(&"Device") {
            header = f;
        } else if f.first() == Some(&dev) {
            last = Some((header.clone(), f));
        }
    }
    let (h, f) = last.unwrap_or_else(|| panic!("iostat printed no line for {dev}:\n{out}"));
    cols.iter()
        .map(|c| {
            let i = h
                .iter()
                .position(|x| x == c)
                .unwrap_or_else(|| panic!("no column {c}"));
            f[i].parse().unwrap()
        })
        .collect()
}

/// Run a throttled 6 s bench with a stats dir, sample it with iostat over
/// a 3 s interval in the middle, and return (iostat columns, bench JSON).
fn sample(dir: &Path, rw: &str, cols: &[&str]) -> (Vec<f64>, serde_json::Value) {
    sample_bench(
        dir,
        &[
            "--device",
            "null,size=1G,mbps=8,hw_queues=1",
            &format!("--rw={rw}"),
            "--iodepth=32",
        ],
        Window {
            runtime_s: 6,
            interval_s: 3,
        },
        cols,
    )
}

/// How long a sampled bench runs, and iostat's interval within it (from
/// 1.5 s in).
struct Window {
    runtime_s: u32,
    interval_s: u32,
}

/// Run a bench of 4 KiB I/Os with `args` and a stats dir for
/// `window.runtime_s`, sample it with iostat over `window.interval_s`
/// from 1.5 s in, and return (iostat columns, bench JSON).
fn sample_bench(
    dir: &Path,
    args: &[&str],
    window: Window,
    cols: &[&str],
) -> (Vec<f64>, serde_json::Value) {
    mqblk_test_support::require_tool("iostat");
    assert!(window.interval_s + 2 <= window.runtime_s);
    let bench = mqblk()
        .arg("bench")
        .args(args)
        .args([
            "--bs=4k",
            &format!("--runtime={}", window.runtime_s),
            "--time_based",
            "--output-format=json",
            "--stats-dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let iostat = Command::new("iostat")
        .args(["-x", "-f"])
        .arg(dir)
        .args(["-p", "ALL", &window.interval_s.to_string(), "2"])
        .output()
        .expect("iostat (sysstat) must be installed: .ci/run installs it");
    assert!(
        iostat.status.success(),
        "{}",
        String::from_utf8_lossy(&iostat.stderr)
    );
    let out = bench.wait_with_output().unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    (
        iostat_last(&String::from_utf8_lossy(&iostat.stdout), "nullb0", cols),
        json,
    )
}

/// How far apart iostat's rate (`cols[0]`) and the bench's IOPS for `dir`
/// (`read` or `write`) are, as a fraction of the bench's.
fn apart(iostat: &[f64], json: &serde_json::Value, dir: &str) -> f64 {
    let bench = json["jobs"][0][dir]["iops"].as_f64().unwrap();
    assert!(bench > 0.0, "{dir}: bench reported 0");
    (iostat[0] - bench).abs() / bench
}

/// Sample until iostat's rate is within 1% of the bench's, at most three
/// times. iostat's rate is the counters' difference over its own clock
/// between two reads of the file; a reader or writer held off the CPU for
/// a tenth of a second at one of the two reads (seen on a shared 2-CPU
/// machine) skews one 3 s sample by some percent, so a sample that
/// disagrees is taken again, and each one is printed.
fn agreeing_sample(
    dir: &Path,
    rw: &str,
    cols: &[&str],
    way: &str,
) -> (Vec<f64>, std::path::PathBuf) {
    let mut seen = Vec::new();
    for attempt in 0..3 {
        let at = dir.join(attempt.to_string());
        let (v, json) = sample(&at, rw, cols);
        let d = apart(&v, &json, way);
        eprintln!(
            "{way}: iostat {} vs bench {} ({:.2}% apart)",
            v[0],
            json["jobs"][0][way]["iops"],
            d * 100.0
        );
        if d < 0.01 {
            return (v, at);
        }
        seen.push(format!("{:.2}%", d * 100.0));
    }
    panic!("{way}: iostat and the bench disagreed by more than 1% in every sample: {seen:?}");
}

#[test]
fn iostat_reads_mqblk_diskstats_and_agrees_with_the_bench() {
    let _serial = serial();
    let base = std::env::temp_dir().join(format!("mqblk-stats-{}", std::process::id()));
    let (r, _) = agreeing_sample(
        &base.join("r"),
        "randread",
        &["r/s", "rareq-sz", "w/s"],
        "read",
    );
    assert_eq!(r[1], 4.0, "rareq-sz is the bench's 4 KiB");
    assert_eq!(r[2], 0.0);

    let (w, w_dir) = agreeing_sample(
        &base.join("w"),
        "randwrite",
        &["w/s", "wareq-sz", "r/s"],
        "write",
    );
    assert_eq!(w[1], 4.0);
    assert_eq!(w[2], 0.0);

    // The finished run's own view: totals and the layer's counters.
    let stat = mqblk().arg("stat").arg(&w_dir).output().unwrap();
    assert!(stat.status.success());
    let text = String::from_utf8_lossy(&stat.stdout);
    assert!(
        text.contains("finished run") && text.contains("nullb0"),
        "{text}"
    );
    assert!(
        text.contains("splits=0") && text.contains("bytes_copied=0"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// `%util` follows Linux's io_ticks rules: busy time advances at I/O start
/// and at completion, and idle gaps between I/Os are not busy. One request
/// at a time, each taking 2 ms in the device (a timer completion), with a
/// 2 ms pause after each (thinktime): the device is busy about half the
/// time, and iostat's %util must match the busy fraction the bench measured
/// (I/Os per second × mean latency, the sum of latencies over the wall
/// time) within 5% of it, as must aqu-sz.
///
/// iostat's figures come from two reads of the counters file, timed by its
/// own clock in hundredths of a second, and the bench rewrites the file
/// every 10 ms: each end of the interval may be off by about 10 ms. Over a
/// 7 s interval of a 10 s run that is 0.3% of the interval, and the
/// interval covers most of the run the bench's figure is taken over.
#[test]
fn iostat_util_matches_the_measured_busy_fraction() {
    let _serial = serial();
    let base = std::env::temp_dir().join(format!("mqblk-stats-util-{}", std::process::id()));
    let (u, json) = sample_bench(
        &base,
        &[
            "--device",
            "null,size=1G,completion=timer,completion_nsec=2000000,hw_queues=1",
            "--rw=randread",
            "--iodepth=1",
            "--thinktime=2ms",
        ],
        Window {
            runtime_s: 10,
            interval_s: 7,
        },
        &["%util", "r/s", "aqu-sz"],
    );
    let read = &json["jobs"][0]["read"];
    let iops = read["iops"].as_f64().unwrap();
    let mean_ns = read["clat_ns"]["mean"].as_f64().unwrap();
    let busy_pct = iops * mean_ns / 1e9 * 100.0;
    eprintln!(
        "iostat %util {:.2}, measured busy {busy_pct:.2}% ({iops:.1} IOPS x {:.3} ms), \
         {:.2}% apart; iostat r/s {:.1}, aqu-sz {:.2} ({:.2}% apart)",
        u[0],
        mean_ns / 1e6,
        (u[0] - busy_pct).abs() / busy_pct * 100.0,
        u[1],
        u[2],
        (u[2] - busy_pct / 100.0).abs() / (busy_pct / 100.0) * 100.0,
    );
    // The pause is real idle time: neither 0 nor 100 % busy.
    assert!(
        (25.0..75.0).contains(&busy_pct),
        "2 ms I/Os with 2 ms pauses: busy {busy_pct:.1}%"
    );
    assert!(
        (u[0] - busy_pct).abs() <= busy_pct * 0.05,
        "iostat %util {} vs measured busy {busy_pct:.2}%: more than 5% apart",
        u[0]
    );
    // time_in_queue (field 11) is the sum of latencies, so at depth 1 the
    // average queue size is the busy fraction too. iostat prints it to two
    // places: 0.005 of rounding, 1% of the figure at 0.5.
    let busy = busy_pct / 100.0;
    assert!(
        (u[2] - busy).abs() <= busy * 0.05,
        "iostat aqu-sz {} vs measured {busy:.3}: more than 5% apart",
        u[2]
    );
    let _ = std::fs::remove_dir_all(&base);
}

fn run_with_stats(dir: &Path, device: &str, bs: &str) -> serde_json::Value {
    let out = mqblk()
        .args([
            "bench",
            "--device",
            device,
            "--rw=write",
            &format!("--bs={bs}"),
            "--iodepth=16",
            "--size=32M",
            "--output-format=json",
            "--stats-dir",
        ])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn stats_dir_shows_merges_and_splits() {
    let _serial = serial();
    let base = std::env::temp_dir().join(format!("mqblk-stats-ms-{}", std::process::id()));
    // Sequential 16 KiB writes: the plug merges neighbours (up to 32 KiB).
    let dir = base.join("merge");
    let json = run_with_stats(&dir, "null,size=64M,max_sectors=64,hw_queues=1", "16k");
    let m = &json["mqblk"];
    assert!(m["merges"].as_u64().unwrap() > 0, "{m}");
    assert!(
        m["requests"].as_u64().unwrap() < m["bios"].as_u64().unwrap(),
        "{m}"
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("mqblk.json")).unwrap()).unwrap();
    let d = &meta["devices"][0];
    assert!(
        d["diskstats"][5].as_u64().unwrap() > 0,
        "wrqm in diskstats: {d}"
    );
    // The device counts everything, the bench only its measured phase.
    assert!(d["bios"].as_u64() >= m["bios"].as_u64());
    let disk = std::fs::read_to_string(dir.join("diskstats")).unwrap();
    let fields: Vec<&str> = disk.split_whitespace().collect();
    assert_eq!(
        fields.len(),
        3 + 17,
        "major, minor, name and 17 fields: {disk}"
    );
    let stat = mqblk().arg("stat").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&stat.stdout);
    assert!(
        text.contains("merges=") && !text.contains("merges=0 "),
        "{text}"
    );

    // 64 KiB bios over a 32 KiB max_sectors: every bio is split in two.
    let dir = base.join("split");
    let json = run_with_stats(&dir, "null,size=64M,max_sectors=64,hw_queues=1", "64k");
    let m = &json["mqblk"];
    assert_eq!(m["splits"], m["bios"], "{m}");
    assert_eq!(
        m["requests"].as_u64().unwrap(),
        2 * m["bios"].as_u64().unwrap(),
        "{m}"
    );
    let stat = mqblk().arg("stat").arg(&dir).output().unwrap();
    let text = String::from_utf8_lossy(&stat.stdout);
    assert!(
        text.contains(" 2.000 "),
        "two requests per bio in the rq/bio column: {text}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
