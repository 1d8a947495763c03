//! The `mqblk` binary as a user meets it: bad input is refused with a
//! message that names the option (or the job-file line), `info` describes
//! a device, and `bench` prints fio-shaped JSON. No assertion depends on
//! timing or throughput beyond "some I/O was done".

use std::path::PathBuf;
use std::process::{Command, Output};

fn mqblk(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .output()
        .expect("run the mqblk binary")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Run, expect failure, and return stderr.
fn fails(args: &[&str]) -> String {
    let o = mqblk(args);
    assert!(
        !o.status.success(),
        "{args:?} should fail; stdout: {}",
        stdout(&o)
    );
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    err
}

/// A job file in a fresh temporary directory, removed on drop.
struct JobFile {
    dir: PathBuf,
    path: PathBuf,
}

impl JobFile {
    fn new(tag: &str, text: &str) -> JobFile {
        let dir = std::env::temp_dir().join(format!("mqblk-cli-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("job.fio");
        std::fs::write(&path, text).unwrap();
        JobFile { dir, path }
    }

    fn path(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

impl Drop for JobFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn bad_option_values_name_the_option_and_value() {
    for (arg, needle) in [
        ("--bs=0", "--bs"),
        ("--bs=3k1", "--bs"),
        ("--iodepth=0", "--iodepth"),
        ("--rw=foo", "--rw"),
        ("--rwmixread=101", "--rwmixread"),
        ("--size=12q", "--size"),
        ("--runtime=5y", "--runtime"),
        ("--numjobs=0", "--numjobs"),
        ("--hw-queues=0", "--hw-queues"),
        ("--plug=maybe", "--plug"),
        ("--iostats=2", "--iostats"),
        ("--queue-mode=lockless", "--queue-mode"),
    ] {
        let err = fails(&["bench", arg]);
        assert!(err.contains(needle), "{arg}: {err}");
        let value = arg.split_once('=').unwrap().1;
        assert!(err.contains(value), "{arg}: {err}");
        assert!(err.contains("expected"), "{arg}: {err}");
    }
    // The separate-value form is validated the same way.
    let err = fails(&["bench", "--bs", "0"]);
    assert!(err.contains("--bs"), "{err}");
    // clap's own checks name the option too.
    let err = fails(&["bench", "--output-format=xml"]);
    assert!(err.contains("--output-format"), "{err}");
    let err = fails(&["bench", "--no-such-option=1"]);
    assert!(err.contains("--no-such-option"), "{err}");
}

#[test]
fn time_based_without_runtime_is_refused() {
    let err = fails(&["bench", "--time_based"]);
    assert!(err.contains("runtime"), "{err}");
}

#[test]
fn malformed_job_file_names_the_line() {
    let f = JobFile::new("bad-key", "[global]\nbs=4k\n\n[a]\nioscheduler=bfq\n");
    let err = fails(&["bench", f.path()]);
    assert!(err.contains("line 5"), "{err}");
    assert!(err.contains("ioscheduler"), "{err}");
    assert!(err.contains("fio engine"), "{err}");

    let f = JobFile::new("bad-value", "[a]\n; comment\niodepth=0\n");
    let err = fails(&["bench", f.path()]);
    assert!(err.contains("line 3"), "{err}");
    assert!(err.contains("iodepth=0"), "{err}");

    let f = JobFile::new("no-section", "bs=4k\n");
    let err = fails(&["bench", f.path()]);
    assert!(err.contains("line 1"), "{err}");

    let err = fails(&["bench", "/nonexistent/mqblk/job.fio"]);
    assert!(err.contains("/nonexistent/mqblk/job.fio"), "{err}");
}

#[test]
fn info_prints_the_capacity() {
    let o = mqblk(&["info", "--device", "null,size=1G"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("capacity:"), "{out}");
    assert!(out.contains("1073741824"), "{out}");
    for k in [
        "logical_block_size:",
        "queue_mode:",
        "hw_queues:",
        "limits:",
        "features:",
    ] {
        assert!(out.contains(k), "{k}: {out}");
    }
    let o = mqblk(&[
        "info",
        "--device=null,size=1G,hw_queues=3,queue_mode=device-lock",
    ]);
    let out = stdout(&o);
    assert!(out.contains("device-lock"), "{out}");
}

#[test]
fn bad_device_specs_name_the_problem() {
    let err = fails(&["info", "--device", "nul"]);
    assert!(err.contains("nul"), "{err}");
    assert!(err.contains("unknown device kind"), "{err}");
    let err = fails(&["info", "--device", "null,sise=1G"]);
    assert!(err.contains("sise"), "{err}");
    let err = fails(&["bench", "--device", "nu ll"]);
    assert!(err.contains("--device"), "{err}");
}

#[test]
fn bad_device_options_fail_the_bench() {
    let err = fails(&["bench", "--runtime=100ms", "--device", "null,sise=1G"]);
    assert!(err.contains("sise"), "{err}");
    let err = fails(&["bench", "--runtime=100ms", "--device", "nul"]);
    assert!(err.contains("nul"), "{err}");
}

fn json_of(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "stderr: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn bench_prints_fio_json() {
    let v = json_of(&mqblk(&[
        "bench",
        "--rw=randread",
        "--bs=4k",
        "--iodepth=8",
        "--runtime=1",
        "--time_based",
        "--output-format=json",
        "--device",
        "null",
    ]));
    let job = &v["jobs"][0];
    assert!(job["read"]["iops"].as_f64().unwrap() > 0.0, "{job}");
    assert!(job["read"]["bw_bytes"].as_u64().unwrap() > 0, "{job}");
    assert!(
        job["read"]["clat_ns"]["percentile"]["99.000000"].is_u64(),
        "{job}"
    );
    assert!(job["usr_cpu"].is_number());
    assert!(job["sys_cpu"].is_number());
    let m = &v["mqblk"];
    assert!(m["allocs_per_io"].is_number(), "{m}");
    for k in [
        "queue_mode",
        "bytes_copied",
        "requests",
        "bios",
        "ns_per_io_cpu",
    ] {
        assert!(!m[k].is_null(), "mqblk.{k}: {m}");
    }
}

#[test]
fn job_file_with_global_and_two_sections_runs_two_jobs() {
    let f = JobFile::new(
        "two-jobs",
        "; two jobs sharing [global]\n\
         [global]\n\
         ioengine=libaio\n\
         bs=4k\n\
         time_based\n\
         runtime=200ms\n\
         device=null,size=1G\n\
         \n\
         [reader]\n\
         rw=randread\n\
         iodepth=4\n\
         \n\
         [writer]\n\
         rw=randwrite\n",
    );
    let v = json_of(&mqblk(&["bench", f.path(), "--output-format", "json"]));
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{v}");
    assert_eq!(jobs[0]["jobname"], "reader");
    assert_eq!(jobs[1]["jobname"], "writer");
    assert!(jobs[0]["read"]["iops"].as_f64().unwrap() > 0.0);
    assert!(jobs[1]["write"]["iops"].as_f64().unwrap() > 0.0);
    assert_eq!(jobs[0]["job options"]["iodepth"], "4");

    // The command line overrides the file.
    let v = json_of(&mqblk(&[
        "bench",
        f.path(),
        "--iodepth=2",
        "--runtime=100ms",
        "--output-format=json",
    ]));
    for job in v["jobs"].as_array().unwrap() {
        assert_eq!(job["job options"]["iodepth"], "2", "{job}");
        assert_eq!(job["job options"]["runtime"], "100ms", "{job}");
    }
}

#[test]
fn bench_prints_fio_text() {
    let o = mqblk(&[
        "bench",
        "--rw=randrw",
        "--runtime=200ms",
        "--time_based",
        "--iodepth=4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    for k in [
        "job0: (groupid=0, jobs=1): err= 0",
        "read: IOPS=",
        "write: IOPS=",
        "clat percentiles",
        "Run status group 0 (all jobs):",
        "READ: bw=",
        "WRITE: bw=",
        "allocs_per_io=",
        "requests/bios=",
    ] {
        assert!(out.contains(k), "{k}: {out}");
    }
    let o = mqblk(&[
        "bench",
        "--rw=read",
        "--runtime=100ms",
        "--time_based",
        "--iostats=0",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("clat"), "{out}");
    assert!(!out.contains("write: IOPS="), "{out}");
}

/// How far an error rate the bench reports may be from the injected one,
/// relative to it.
const ERROR_RATE_TOLERANCE: f64 = 0.01;

/// Run `ios` 4 KiB random reads at depth 1 on `device` and return the
/// (errors, I/Os) the bench's JSON reports. Depth 1: every I/O is a request
/// of its own, so each one is one draw of the fault injector.
fn bench_errors(device: &str, ios: u64) -> (f64, f64) {
    let o = mqblk(&[
        "bench",
        "--device",
        device,
        // Every error is counted, and the job goes on past it.
        "--continue_on_error=all",
        "--rw=randread",
        "--bs=4k",
        "--iodepth=1",
        "--size=1G",
        &format!("--number_ios={ios}"),
        "--output-format=json",
    ]);
    let out = stdout(&o);
    let v: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{}", stderr(&o)));
    let read = &v["jobs"][0]["read"];
    let total = read["total_ios"].as_u64().unwrap();
    let errors = read["errors"].as_u64().unwrap();
    assert!(total >= ios, "{total} I/Os of {ios}");
    (errors as f64, total as f64)
}

/// Assert that `errors` of `ios` is `injected` within
/// [`ERROR_RATE_TOLERANCE`], and print the figures.
fn assert_error_rate(errors: f64, ios: f64, injected: f64) {
    let rate = errors / ios;
    let off = (rate - injected).abs() / injected;
    println!(
        "error rate {rate:.6} ({errors} of {ios}), injected {injected}: {:.3}% off",
        off * 100.0
    );
    assert!(
        off <= ERROR_RATE_TOLERANCE,
        "error rate {rate} ({errors} of {ios}) is {:.2}% off the injected {injected}",
        off * 100.0
    );
}

/// Fault injection: every 1000th request fails. A bio that failed once and
/// is resubmitted in place (as the bench does) starts clean, so the error
/// rate the bench reports is the injected one, 0.1%, within 1% of it.
/// Where the measured phase starts in the count of 1000 moves the count by
/// one error at most: 0.4% of the 262 errors of 262,144 I/Os.
#[test]
fn injected_error_rate_is_what_the_bench_reports() {
    let (errors, ios) = bench_errors(
        "null,size=1G,hw_queues=1,error_interval=1000,error_probability=100",
        262_144,
    );
    assert_error_rate(errors, ios, 0.001);
}

/// Fault injection by chance: each request fails with probability 30%,
/// drawn from the seeded generator, and the rate the bench reports is 30%
/// within 1% of it. The binomial spread of 4 million draws is 0.08% of the
/// rate (one standard deviation, sqrt(p (1 - p) / n) / p), so five of them
/// stay well inside the 1%.
#[test]
fn injected_error_probability_is_what_the_bench_reports() {
    const IOS: u64 = 4_000_000;
    const P: f64 = 0.30;
    let five_sigma = 5.0 * (P * (1.0 - P) / IOS as f64).sqrt() / P;
    assert!(
        five_sigma < ERROR_RATE_TOLERANCE / 2.0,
        "{IOS} draws: 5 sigma is {:.2}% of the rate",
        five_sigma * 100.0
    );
    let (errors, ios) = bench_errors("null,size=1G,hw_queues=1,error_probability=30,seed=7", IOS);
    assert_error_rate(errors, ios, P);
}

/// fio's default, continue_on_error=none: a job stops at its first I/O
/// error, names it (direction, length, offset, error) and exits non-zero.
/// `continue_on_error=write` does not cover a read.
#[test]
fn a_job_stops_at_its_first_io_error_unless_told_to_go_on() {
    for extra in [None, Some("--continue_on_error=write")] {
        let mut args = vec![
            "bench",
            "--device",
            "null,size=1G,hw_queues=1,error_interval=1000,error_probability=100",
            "--rw=randread",
            "--bs=4k",
            "--iodepth=1",
            "--size=400M",
            "--output-format=json",
        ];
        args.extend(extra);
        let o = mqblk(&args);
        let (out, err) = (stdout(&o), stderr(&o));
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {err}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let job = &v["jobs"][0];
        // The 1000th request fails; the job issues nothing after it (going
        // on would have made 102,400). Without a ramp the job measures from
        // its first I/O, so the count is exact.
        let total = job["read"]["total_ios"].as_u64().unwrap();
        assert_eq!(total, 1000, "{extra:?}: {job}");
        assert_eq!(job["read"]["errors"], 1, "{extra:?}");
        let stopped = job["stopped_at"].as_str().unwrap_or_default();
        assert!(
            stopped.starts_with("read of 4096 bytes at offset ") && stopped.contains(" on nullb0"),
            "{extra:?}: {stopped}"
        );
        assert!(
            err.contains("the job stops (continue_on_error=none"),
            "{err}"
        );
        assert!(err.contains("read of 4096 bytes at offset"), "{err}");
    }
    // `all` goes on to the end.
    let o = mqblk(&[
        "bench",
        "--device",
        "null,size=1G,hw_queues=1,error_interval=1000,error_probability=100",
        "--continue_on_error=all",
        "--rw=randread",
        "--bs=4k",
        "--iodepth=1",
        "--size=40M",
        "--output-format=json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let total = v["jobs"][0]["read"]["total_ios"].as_u64().unwrap();
    // The job goes on to the end of its 10,240, no more, every 1000th
    // failing. (Before the phase was set ahead of the start barrier, a job
    // that ran before the supervisor issued I/O outside the measured
    // phase, and a sized job did one I/O more than its size.)
    assert_eq!(total, 10_240);
    let errors = v["jobs"][0]["read"]["errors"].as_u64().unwrap();
    assert_eq!(errors, 10);
    assert!(v["jobs"][0]["stopped_at"].is_null());
    assert_eq!(o.status.code(), Some(1), "errors still fail the run");
}
