//! fio's own examples/ job files run with `mqblk bench --device=SPEC
//! JOBFILE`: every one that targets a block device or a file and uses only
//! what mqblk bench models. The job files come from Debian's fio source
//! (`mqblk_test_support::fio_source`), of the installed fio.

use std::path::PathBuf;
use std::process::Command;

use mqblk_test_support::require_tool;

/// The examples that run, and the device each runs on (a ram device for
/// those that verify what they wrote; null, which stores nothing, for the
/// rest). The others are listed in the report of issue 13 with the key
/// that stops them (zonemode, flow, dedupe, randtrim, ...: each refused
/// with a pointer to the fio engine) or their non-block engine.
const RUNS: &[(&str, &str)] = &[
    ("aio-read.fio", "null,size=1T"),
    ("backwards-read.fio", "null,size=1T"),
    ("basic-verify.fio", "ram,size=16G"),
    ("cmdprio-bssplit.fio", "null,size=1T"),
    ("cmdprio-percentage.fio", "null,size=1T"),
    ("exitwhat.fio", "null,size=1T"),
    ("fio-rand-RW.fio", "null,size=1T"),
    ("fio-rand-read.fio", "null,size=1T"),
    ("fio-rand-write.fio", "null,size=1T"),
    ("fio-seq-RW.fio", "null,size=1T"),
    ("fio-seq-read.fio", "null,size=1T"),
    ("fio-seq-write.fio", "null,size=1T"),
    ("fixed-rate-submission.fio", "null,size=1T"),
    ("fsx.fio", "null,size=1T"),
    ("iometer-file-access-server.fio", "null,size=1T"),
    ("jesd219.fio", "null,size=1T"),
    ("null.fio", "null,size=1T"),
    ("numa.fio", "null,size=1T"),
    ("rand-zones.fio", "null,size=1T"),
    ("ssd-steadystate.fio", "null,size=1T"),
    ("ssd-test.fio", "null,size=1T"),
    ("tiobench-example.fio", "null,size=1T"),
    ("waitfor.fio", "null,size=1T"),
    ("zipf.fio", "null,size=1T"),
];

fn examples_dir() -> PathBuf {
    mqblk_test_support::fio_source().join("examples")
}

#[test]
fn fio_examples_run_through_mqblk_bench() {
    let dir = examples_dir();
    let scratch = tempdir();
    let mut failures = Vec::new();
    for (file, device) in RUNS {
        let path = dir.join(file);
        // Short: the point is that each file is read and run, not its
        // figures (time-based and sized jobs alike stop at the runtime).
        let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .current_dir(&scratch)
            .args([
                "bench",
                "--device",
                device,
                "--runtime=300ms",
                "--output-format=json",
            ])
            .arg(&path)
            .output()
            .expect("run mqblk");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let json: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
        let ran = json
            .as_ref()
            .and_then(|j| j["jobs"].as_array())
            .is_some_and(|jobs| !jobs.is_empty());
        if !out.status.success() || !ran {
            failures.push(format!("{file} on {device}: {}\n{stderr}", out.status));
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_workload_key_mqblk_does_not_model_is_refused_with_a_pointer_to_the_fio_engine() {
    let dir = examples_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["bench", "--device", "null", "--runtime=100ms"])
        .arg(dir.join("zbd-rand-write.fio"))
        .output()
        .expect("run mqblk");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("`zonemode`"), "{stderr}");
    assert!(stderr.contains("contrib/fio-engine"), "{stderr}");
}

fn tempdir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("mqblk-fio-examples-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bw_iops_and_latency_logs_have_fio_s_format_for_fiologparser() {
    require_tool("python3");
    let tools = examples_dir().join("../tools");
    let scratch = tempdir().join("logs");
    std::fs::create_dir_all(&scratch).unwrap();
    let job = scratch.join("log.fio");
    std::fs::write(
        &job,
        "[logged]\nrw=randrw\nbs=4k\nwrite_bw_log=run\nwrite_iops_log=run\nwrite_lat_log=run\n\
         log_avg_msec=100\n\
         time_based\nruntime=500ms\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .current_dir(&scratch)
        .args(["bench", "--device", "null"])
        .arg(&job)
        .output()
        .expect("run mqblk");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for log in [
        "run_bw.1.log",
        "run_iops.1.log",
        "run_lat.1.log",
        "run_slat.1.log",
        "run_clat.1.log",
    ] {
        let text = std::fs::read_to_string(scratch.join(log)).unwrap();
        let first = text.lines().next().unwrap_or_default().to_string();
        // fio 3.33's averaged line: time, value, direction, block size 0,
        // priority 0.
        let fields: Vec<&str> = first.split(", ").collect();
        assert_eq!(fields.len(), 5, "{log}: {first}");
        assert_eq!(fields[3..], ["0", "0"], "{log}: {first}");
        // fiologparser.py unpacks the four columns of fio before 3.2x, so
        // it reads fio 3.33's own logs only with the priority cut too.
        let four: String = text
            .lines()
            .map(|l| format!("{}\n", l.rsplit_once(", ").unwrap().0))
            .collect();
        let cut = scratch.join(format!("{log}.4"));
        std::fs::write(&cut, four).unwrap();
        let parsed = Command::new("python3")
            .arg(tools.join("fiologparser.py"))
            .arg("-A")
            .arg("-f")
            .arg(&cut)
            .output()
            .expect("run fiologparser.py");
        let stdout = String::from_utf8_lossy(&parsed.stdout);
        assert!(
            parsed.status.success(),
            "{log}: {}",
            String::from_utf8_lossy(&parsed.stderr)
        );
        let value: f64 = stdout.trim().rsplit(", ").next().unwrap().parse().unwrap();
        assert!(value > 0.0, "{log}: {stdout}");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

#[test]
fn trim_modes_discard_and_report_a_trim_direction() {
    for rw in ["trim", "randtrim"] {
        let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args([
                "bench",
                "--device",
                "ram,size=64M",
                "--bs=64k",
                "--output-format=json",
            ])
            .arg(format!("--rw={rw}"))
            .args(["--runtime=200ms", "--time_based"])
            .output()
            .expect("run mqblk");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let job = &v["jobs"][0];
        assert!(
            job["trim"]["total_ios"].as_u64().unwrap() > 0,
            "{rw}: {job}"
        );
        assert_eq!(job["write"]["total_ios"], 0, "{rw}");
        assert_eq!(job["read"]["total_ios"], 0, "{rw}");
    }
}

#[test]
fn stonewall_groups_run_in_turn_and_carry_their_groupid() {
    let dir = tempdir().join("stonewall");
    std::fs::create_dir_all(&dir).unwrap();
    let job = dir.join("sw.fio");
    std::fs::write(
        &job,
        "[global]\nbs=4k\nsize=1m\n[a]\nrw=write\n[b]\nrw=write\n[c]\nstonewall\nrw=read\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["bench", "--device", "null,size=1G", "--output-format=json"])
        .arg(&job)
        .output()
        .expect("run mqblk");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups: Vec<u64> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["groupid"].as_u64().unwrap())
        .collect();
    assert_eq!(groups, [0, 0, 1]);
    let _ = std::fs::remove_dir_all(&dir);
}
