//! `mqblk bench` checks what its jobs will pin (iodepth x numjobs slots of
//! bs-sized buffers, their bios, the verify records) against the memory
//! there is, before it allocates: a run that does not fit is refused at
//! once, in one line naming the figures and `--allow-overcommit`, which
//! skips the check. A run that fits is not touched.

use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::{require_tool, Watched};

/// A hang guard, not a timing assertion.
const WAIT_MAX: Duration = Duration::from_secs(60);

/// A refusal comes before anything is allocated: 4M slots of 4 KiB would
/// take minutes to allocate and fill, the check takes milliseconds.
const REFUSED_WITHIN: Duration = Duration::from_secs(1);

/// 65536 x 64 slots.
const SLOTS: u64 = 65536 * 64;

/// Bytes a slot of `bs` pins: its buffer (a page at least) and its bio.
fn slot_bytes(bs: u64) -> u64 {
    bs.max(4096) + std::mem::size_of::<mqblk::Bio>() as u64
}

/// Run `cmd` to its end: (exit code, stdout, stderr, how long it took).
fn run(cmd: &mut Command) -> (Option<i32>, String, String, Duration) {
    let t = Instant::now();
    let mut w = Watched::spawn(cmd);
    let code = w.wait(WAIT_MAX).code();
    let took = t.elapsed();
    let (_, out, err) = w.finish(WAIT_MAX);
    (code, out, err, took)
}

fn bench(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    c.arg("bench").args(args);
    c
}

/// The refusal's figures: (needed, available).
fn figures(err: &str) -> (u64, u64) {
    let num = |after: &str| -> u64 {
        let rest = &err[err
            .find(after)
            .unwrap_or_else(|| panic!("{after:?} in {err}"))
            + after.len()..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    (num("would pin "), num(", and "))
}

fn assert_refused(code: Option<i32>, err: &str, took: Duration, need: u64, source: &str) {
    let (needed, available) = figures(err);
    eprintln!(
        "refused in {took:?} (bound {REFUSED_WITHIN:?}): needs {needed} bytes, {available} available ({source})"
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        mqblk_test_support::time_bound("refused", took, REFUSED_WITHIN),
        "{took:?}: {err}"
    );
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert_eq!(needed, need, "{err}");
    assert!(available < needed, "{err}");
    assert!(err.contains(source), "{err}");
    assert!(err.contains("--allow-overcommit"), "{err}");
    assert!(
        err.contains("iodepth=65536 x numjobs=64 = 4194304 slots"),
        "{err}"
    );
}

#[test]
fn iodepth_65536_numjobs_64_is_refused_at_once_when_the_memory_is_not_there() {
    // 4M slots of 4 KiB: 16.6 GiB. Under an 8 GiB address space (the
    // machine's own memory may be larger), it does not fit.
    require_tool("prlimit");
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--as={}", 8u64 << 30))
        .arg(env!("CARGO_BIN_EXE_mqblk"))
        .args([
            "bench",
            "--device",
            "null",
            "--iodepth=65536",
            "--numjobs=64",
        ]);
    let (code, out, err, took) = run(&mut cmd);
    assert_refused(code, &err, took, SLOTS * slot_bytes(4096), "RLIMIT_AS");
    assert!(out.is_empty(), "no banner: {out}");
}

#[test]
fn the_same_jobs_at_bs_1m_are_refused_against_the_machines_memory() {
    // 4M slots of 1 MiB: 4 TiB, more than any machine this runs on has.
    let (code, out, err, took) = run(&mut bench(&[
        "--device",
        "null",
        "--iodepth=65536",
        "--numjobs=64",
        "--bs=1m",
    ]));
    let source = if err.contains("MemAvailable") {
        "MemAvailable in /proc/meminfo"
    } else {
        "memory"
    };
    assert_refused(code, &err, took, SLOTS * slot_bytes(1 << 20), source);
    assert!(out.is_empty(), "no banner: {out}");
}

#[test]
fn allow_overcommit_skips_the_check() {
    // The same 4 TiB run gets past the check, to the next step: opening
    // its device, which fails here (no such file), so nothing is
    // allocated.
    let dir = mqblk_test_support::Scratch::new("overcommit");
    let missing = dir.path().join("no-such-dir").join("disk.img");
    let spec = format!("file:{}", missing.display());
    let args = [
        "--device",
        &spec,
        "--iodepth=65536",
        "--numjobs=64",
        "--bs=1m",
    ];
    let (code, _, err, _) = run(&mut bench(&args));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("would pin"), "refused without it: {err}");

    let mut with = args.to_vec();
    with.push("--allow-overcommit");
    let (code, _, err, took) = run(&mut bench(&with));
    eprintln!("with --allow-overcommit: exit {code:?} in {took:?}: {err}");
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("would pin"), "the check was skipped: {err}");
    assert!(err.contains("no-such-dir"), "it went on to open: {err}");
    assert!(took < REFUSED_WITHIN, "{took:?}");
}

#[test]
fn a_run_that_fits_is_not_touched() {
    let (code, out, err, _) = run(&mut bench(&[
        "--device",
        "null",
        "--rw=randread",
        "--iodepth=64",
        "--numjobs=2",
        "--size=8m",
    ]));
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("would pin"), "{err}");
    assert!(out.contains("Run status group 0"), "{out}");
}
