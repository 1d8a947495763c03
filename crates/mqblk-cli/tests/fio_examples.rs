//! fio's own examples/ job files run with `mqblk bench --device=SPEC
//! JOBFILE`: every one that does block I/O on a device or a file, or uses
//! fio's null engine, on one device spec for all, with fio's meaning. The
//! job files come from Debian's fio source (`mqblk_test_support::
//! fio_source`), of the installed fio; the test lists every file it leaves
//! out, with the reason, and checks that mqblk bench refuses each with it.

use std::path::{Path, PathBuf};
use std::process::Command;

use mqblk_test_support::require_tool;

/// One device for every example: sparse, larger than any example's
/// offsets (cross-stripe-verify.fio reaches 30 x 124 GiB), keeping what
/// is written so that the verify examples check real data.
const DEVICE: &str = "ram,size=4T";

/// fio's engines that do block I/O on a file or a device (mqblk is the
/// engine in their place; nbd and rbd are mqblk drivers).
const BLOCK_ENGINES: &[&str] = &[
    "libaio", "io_uring", "sync", "psync", "vsync", "pvsync", "pvsync2", "posixaio", "mmap",
    "null", "nbd", "rbd",
];

/// Why a file with this engine is left out: what the engine does that is
/// not block I/O.
fn not_block_io(engine: &str) -> &'static str {
    match engine {
        "cpuio" | "cpp_null" | "exec" => "burns CPU or runs a program: no I/O",
        "e4defrag" | "falloc" | "ftruncate" | "filecreate" | "filedelete" | "filestat" => {
            "file-system calls (defragment, allocate, truncate, create, stat)"
        }
        "net"
        | "rdma"
        | "librpma_apm_client"
        | "librpma_apm_server"
        | "librpma_gpspm_client"
        | "librpma_gpspm_server" => "network transfers, not storage",
        "http" | "rados" | "gfapi" | "libhdfs" | "nfs" | "dfs" => {
            "object or distributed file-system APIs"
        }
        "sg" => "SCSI commands (verify, write same) through the sg driver",
        "io_uring_cmd" => "NVMe passthrough commands",
        "libzbc" => "zone commands through libzbc",
        "libiscsi" => "an iSCSI initiator",
        "mtd" => "a flash device's erase and program",
        "dev-dax" | "libpmem" | "pmemblk" => "persistent-memory loads and stores",
        "libcufile" => "GPU memory through cuFile",
        e if e.starts_with("ime_") => "DDN IME's API",
        _ => "not an engine of block I/O",
    }
}

/// Files whose own comments say how fio runs them: only their [default]
/// section (their [override] takes ${FIO_RW} and the like from the
/// environment).
const SECTIONS: &[(&str, &str)] = &[
    ("xnvme-compare.fio", "default"),
    ("xnvme-zoned.fio", "default"),
];

/// The engines a job file names.
fn engines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.trim().split_once('=')?;
            (k.trim() == "ioengine").then(|| v.trim().to_string())
        })
        .collect()
}

fn examples_dir() -> PathBuf {
    mqblk_test_support::fio_source().join("examples")
}

/// Every example, split into those that run and those left out with why.
fn examples() -> (Vec<PathBuf>, Vec<(PathBuf, String)>) {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "fio"))
        .collect();
    files.sort();
    let (mut run, mut left) = (Vec::new(), Vec::new());
    for f in files {
        match engines(&f)
            .into_iter()
            .find(|e| !BLOCK_ENGINES.contains(&e.as_str()))
        {
            Some(e) => {
                let why = format!("ioengine={e}: {}", not_block_io(&e));
                left.push((f, why));
            }
            None => run.push(f),
        }
    }
    (run, left)
}

fn bench(dir: &Path, file: &Path, extra: &[&str]) -> std::process::Output {
    let name = file.file_name().unwrap().to_str().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    cmd.current_dir(dir)
        .arg("bench")
        .arg(format!("--device={DEVICE}"))
        .args(extra)
        .arg("--output-format=json");
    if let Some((_, s)) = SECTIONS.iter().find(|(f, _)| *f == name) {
        cmd.arg(format!("--section={s}"));
    }
    cmd.arg(file).output().expect("run mqblk")
}

#[test]
fn every_block_example_runs_through_mqblk_bench_and_the_rest_are_refused_with_the_reason() {
    require_tool("fio");
    let (run, left) = examples();
    let scratch = tempdir().join("examples");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut failures = Vec::new();
    for file in &run {
        // Short: the point is that each file is read and run with its
        // options' meaning, not its figures (time-based and sized jobs
        // alike stop at the runtime; 1mbs_clients.fio's clients would
        // start over 124 s).
        let out = bench(&scratch, file, &["--runtime=300ms", "--startdelay=0"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let json: Option<serde_json::Value> = serde_json::from_str(&stdout).ok();
        let jobs = json
            .as_ref()
            .and_then(|j| j["jobs"].as_array())
            .cloned()
            .unwrap_or_default();
        let verify_errors: u64 = jobs
            .iter()
            .map(|j| j["verify_errors"].as_u64().unwrap_or(0))
            .sum();
        if !out.status.success() || jobs.is_empty() || verify_errors > 0 {
            failures.push(format!(
                "{}: {} ({} jobs, {verify_errors} verify errors)\n{stderr}",
                file.display(),
                out.status,
                jobs.len()
            ));
        }
    }
    let mut listed = Vec::new();
    for (file, why) in &left {
        let name = file.file_name().unwrap().to_string_lossy();
        listed.push(format!("{name}: {why}"));
        let out = bench(&scratch, file, &["--runtime=100ms"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !stderr.contains("not an engine of block I/O") {
            failures.push(format!(
                "{name} is left out ({why}), but mqblk bench did not refuse it so: {stderr}"
            ));
        }
    }
    eprintln!(
        "{} examples ran on {DEVICE}; {} left out:\n  {}",
        run.len(),
        left.len(),
        listed.join("\n  ")
    );
    // Debian's fio 3.33 has 41 examples of block I/O.
    assert!(run.len() >= 41, "only {} examples ran", run.len());
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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
