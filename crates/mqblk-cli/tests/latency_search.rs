//! fio's `latency_target=` search seen to settle, on a device whose
//! latency grows with the queue depth: a null device capped at 1 MiB/s
//! (`mbps=1`) serves one 4 KiB read every 3.9 ms, so a read waits behind
//! the others in flight (Little's law: latency = depth / rate). The p99
//! target sits between two depths' latencies, measured first at fixed
//! depths on the same device spec under the same load; the search must
//! settle on the deepest depth that meets it, give or take one step, in 5
//! of 5 runs (windows of 2 s, 512 reads, so that one stall
//! of a loaded machine is within the 1% a p99 allows) while two CPU hogs
//! (`stress-ng --cpu 2`, started and stopped here by pid) run.
//! A target no depth meets fails the job at depth 1, as fio's does.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use mqblk_test_support::{require_tool, Scratch, Watched};

/// Every I/O of the device waits for the 1 MiB/s budget.
const DEVICE: &str = "--device=null,size=1G,mbps=1";
/// The p99 target, in ms: about ten 4 KiB reads at 1 MiB/s.
const TARGET_MS: u64 = 40;
/// The depths measured at a fixed depth, around the target's.
const DEPTHS: std::ops::RangeInclusive<u32> = 5..=12;

fn bench(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(dir)
        .args(["bench", "--eta=never", "--output-format=json", DEVICE])
        .args(args)
        .output()
        .expect("run mqblk")
}

fn p99_ns(job: &serde_json::Value) -> u64 {
    job["read"]["lat_ns"]["percentile"]["99.000000"]
        .as_u64()
        .unwrap_or_else(|| panic!("no p99 in {job}"))
}

#[test]
#[cfg_attr(miri, ignore)]
fn the_search_settles_between_two_depths_under_cpu_hogs_and_fails_at_depth_one() {
    require_tool("stress-ng");
    let s = Scratch::new("latency-search");
    // The hogs stop on their own after a minute if this test dies first.
    let mut hogs =
        Watched::spawn(Command::new("stress-ng").args(["--cpu", "2", "--timeout", "90s"]));
    std::thread::sleep(Duration::from_millis(300));
    assert!(hogs.try_wait().is_none(), "stress-ng ended at once");

    // Each depth's p99 at a fixed depth: all at once, each its own process
    // and device, long enough (6 s, 1536 reads) that one stall of the
    // loaded machine does not move a p99.
    let fixed: Vec<(u32, Watched)> = DEPTHS
        .map(|d| {
            let w = Watched::spawn(
                Command::new(env!("CARGO_BIN_EXE_mqblk"))
                    .current_dir(s.path())
                    .args(["bench", "--eta=never", "--output-format=json", DEVICE])
                    .args(["--rw=randread", "--bs=4k", "--time_based", "--runtime=6s"])
                    .arg(format!("--iodepth={d}")),
            );
            (d, w)
        })
        .collect();
    let target_ns = TARGET_MS * 1_000_000;
    let p99: Vec<(u32, u64)> = fixed
        .into_iter()
        .map(|(d, w)| {
            let (status, out, err) = w.finish(Duration::from_secs(30));
            assert!(status.success(), "depth {d}: {err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            (d, p99_ns(&v["jobs"][0]))
        })
        .collect();
    for (d, ns) in &p99 {
        eprintln!("depth {d}: p99 {:.1} ms", *ns as f64 / 1e6);
    }
    // The deepest depth before the first that misses the target.
    let first_miss = p99
        .iter()
        .position(|&(_, ns)| ns > target_ns)
        .expect("some measured depth misses the target");
    assert!(
        first_miss > 0,
        "the target is between two measured depths: {p99:?}"
    );
    let expected = p99[first_miss - 1].0;
    eprintln!(
        "target p99 {TARGET_MS} ms: met at depth {expected}, missed at {}",
        p99[first_miss].0
    );

    // The search, five times.
    let search = s.path().join("search.fio");
    std::fs::write(
        &search,
        format!(
            "[search]\nrw=randread\nbs=4k\niodepth=16\ntime_based\nruntime=60s\n\
             latency_target={TARGET_MS}ms\nlatency_window=2s\nlatency_percentile=99\n"
        ),
    )
    .unwrap();
    // Five runs at once (each its own process and device): the hogs and
    // the other runs are their load.
    let runs: Vec<Watched> = (0..5)
        .map(|_| {
            Watched::spawn(
                Command::new(env!("CARGO_BIN_EXE_mqblk"))
                    .current_dir(s.path())
                    .args(["bench", "--eta=never", "--output-format=json", DEVICE])
                    .arg(&search),
            )
        })
        .collect();
    let mut settled = Vec::new();
    for (run, w) in runs.into_iter().enumerate() {
        let (status, out, err) = w.finish(Duration::from_secs(60));
        assert!(status.success(), "run {}: {err}", run + 1);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let job = &v["jobs"][0];
        let depth = job["latency_depth"].as_u64().unwrap() as u32;
        eprintln!(
            "run {}: settled at depth {depth} (p99 of its last window {:.1} ms, expected \
             {expected} ± 1)",
            run + 1,
            p99_ns(job) as f64 / 1e6
        );
        // Settled and ended: its last window, not the 60 s runtime.
        assert!(job["read"]["runtime"].as_u64().unwrap() < 5_000, "{job}");
        settled.push(depth);
    }
    let within = settled.iter().filter(|d| d.abs_diff(expected) <= 1).count();
    eprintln!("{within} of 5 runs settled within one step of depth {expected}: {settled:?}");
    assert_eq!(within, 5, "{settled:?}, expected {expected} ± 1");

    // 2 ms is less than one read takes at depth 1 (3.9 ms): with every I/O
    // to meet it (percentile 100), the job fails there.
    let out = bench(
        s.path(),
        &[
            search.to_str().unwrap(),
            "--latency_target=2ms",
            "--latency_percentile=100",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("latency_target=2000 us not met at queue depth 1"),
        "{stderr}"
    );

    hogs.signal("-TERM");
    let status = hogs.wait(Duration::from_secs(10));
    eprintln!("stress-ng stopped: {status}");
}
