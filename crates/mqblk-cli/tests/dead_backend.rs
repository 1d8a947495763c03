//! A backend that dies under `mqblk bench`: an OSD of a throwaway Ceph
//! cluster (scripts/micro-ceph) SIGKILLed under randread and randwrite,
//! an `mqblk serve` SIGKILLed under a verified randwrite over NBD, and a
//! FUSE server under a file device that stops answering its I/O (it still
//! answers an interrupt: a FUSE server that is itself stopped, SIGSTOP,
//! holds even the exit of a process that has its file open, in the
//! kernel's FLUSH on close, so no process can end before it runs again).
//!
//! The bounds asserted are issue 26's, tied to the device's timeout:
//! - the bench exits non-zero within `io_timeout_ms` + 2 s of the death,
//!   and its report names the first failed I/O (direction, length,
//!   offset);
//! - SIGINT sent to a bench stuck on a dead OSD (a timeout far away) ends
//!   it within 2 s, report first.
//!
//! The kill time is taken before the kill command runs, so each measured
//! figure is an upper bound. Every process signalled is one this test
//! started, by its pid.

#[path = "../../mqblk-rbd/tests/common/mod.rs"]
mod common;
#[path = "../../mqblk-file/tests/hang_fuse/mod.rs"]
mod hang_fuse;

use std::process::Command;
use std::time::{Duration, Instant};

use common::MicroCeph;
use mqblk_test_support::{time_bound, Scratch, Watched};

/// The device's io_timeout_ms in the kill cases.
const TIMEOUT_MS: u64 = 3000;
/// Issue 26: a bench reports and exits within io_timeout_ms + 2 s of the
/// death.
const EXIT_BOUND: Duration = Duration::from_millis(TIMEOUT_MS + 2000);
/// Issue 26: a signal ends a bench within 2 s.
const SIGNAL_BOUND: Duration = Duration::from_secs(2);
/// A hang guard for waits that have no bound of their own.
const HANG: Duration = Duration::from_secs(120);
/// The kill cases' I/O: 16 deep over the first 256 MiB.
const DEEP: [&str; 2] = ["--iodepth=16", "--size=256m"];

/// `mqblk bench` of 4 KiB random `rw` on `spec`, time based for
/// `runtime_s`, with `more` options; once it has started.
fn bench(spec: &str, rw: &str, runtime_s: u32, more: &[&str]) -> Watched {
    let b = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["bench", "--device", spec, &format!("--rw={rw}"), "--bs=4k"])
            .args(more)
            .args([&format!("--runtime={runtime_s}"), "--time_based"]),
    );
    b.wait_out("Starting 1 thread", HANG);
    b
}

/// Wait for the bench to exit; its code, stdout and stderr.
fn finish(b: Watched) -> (Option<i32>, String, String) {
    let (st, out, err) = b.finish(HANG);
    (st.code(), out, err)
}

/// `stop` the bench (kill its backend, signal it), then wait for it to
/// exit: its code, stdout and stderr, and how long after `stop` began it
/// exited (the clock is read before `stop` runs: an upper bound).
fn stop_and_finish(
    mut b: Watched,
    stop: impl FnOnce(&mut Watched),
) -> (Option<i32>, String, String, Duration) {
    let t = Instant::now();
    stop(&mut b);
    let (code, out, err) = finish(b);
    (code, out, err, t.elapsed())
}

#[test]
fn a_bench_ends_in_time_when_its_osd_dies_and_a_signal_ends_it_at_once() {
    let Some(c) = MicroCeph::start() else { return };
    for (rw, what) in [("randread", "read"), ("randwrite", "write")] {
        let spec = c.spec(
            &format!("dead-{rw}"),
            &format!("create=256M,io_timeout_ms={TIMEOUT_MS}"),
        );
        if rw == "randread" {
            // Reads of data that is there go to the OSD.
            let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
                .args(["bench", "--device", &spec, "--rw=write", "--bs=1m"])
                .args(["--size=256m", "--iodepth=4"])
                .output()
                .unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        }
        let b = bench(&spec, rw, 60, &DEEP);
        std::thread::sleep(Duration::from_secs(2));
        let (code, out, err, took) = stop_and_finish(b, |_| c.kill_osd());
        eprintln!("{rw}: exit {code:?} {took:?} after the OSD was killed");
        assert_eq!(code, Some(1), "{rw}: {err}");
        assert!(
            time_bound(rw, took, EXIT_BOUND),
            "{rw}: the bench exited {took:?} after the OSD died (bound {EXIT_BOUND:?}): {err}"
        );
        let first = format!("{what} of 4096 bytes at offset ");
        assert!(
            out.contains(&first),
            "{rw}: the report names the I/O: {out}"
        );
        assert!(err.contains(&first) && err.contains("timed out"), "{err}");
        c.start_osd();
    }

    // A timeout far away: only the signal can end the bench.
    let spec = c.spec("dead-int", "create=256M,io_timeout_ms=60000");
    let b = bench(&spec, "randwrite", 120, &DEEP);
    std::thread::sleep(Duration::from_secs(2));
    c.kill_osd();
    // Its I/O is stuck now.
    std::thread::sleep(Duration::from_secs(2));
    let (code, out, err, took) = stop_and_finish(b, |b| b.signal("-INT"));
    eprintln!("SIGINT on a dead OSD: exit {code:?} {took:?} after the signal");
    assert_eq!(code, Some(130), "{err}");
    assert!(
        time_bound("SIGINT", took, SIGNAL_BOUND),
        "{took:?} after SIGINT: {err}"
    );
    assert!(out.contains("Run status group 0 (all jobs):"), "{out}");
}

#[test]
fn a_verified_bench_over_nbd_ends_in_time_when_its_server_is_killed() {
    let dir = Scratch::new("dead-nbd");
    let sock = dir.path().join("s.sock");
    let mut server = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "ram,size=256M", "--socket"])
            .arg(&sock),
    );
    server.wait_for_path(&sock);
    let spec = format!(
        "nbd+unix:///?socket={},io_timeout_ms={TIMEOUT_MS}",
        sock.display()
    );
    let b = bench(
        &spec,
        "randwrite",
        60,
        &[&DEEP[..], &["--verify=crc32c"]].concat(),
    );
    std::thread::sleep(Duration::from_secs(1));
    let (code, out, err, took) = stop_and_finish(b, |_| server.kill());
    eprintln!("nbd: exit {code:?} {took:?} after the server was killed");
    assert_eq!(code, Some(1), "{err}");
    assert!(
        time_bound("", took, EXIT_BOUND),
        "{took:?} after the kill: {err}"
    );
    assert!(out.contains("write of 4096 bytes at offset "), "{out}");
    // It stopped: no IOPS figure counts failed I/Os as done.
    assert!(
        err.contains("the job stops (continue_on_error=none"),
        "{err}"
    );
}

/// Not a test: the FUSE server, when this test binary runs itself as it
/// (see `hang_fuse::Mount::start`). Returns at once otherwise.
#[test]
fn fuse_server() {
    hang_fuse::serve_if_helper();
}

#[test]
fn a_bench_on_a_file_ends_in_time_when_its_fuse_server_stops_answering() {
    // I/O in the second half of the file is never answered.
    let m = match hang_fuse::Mount::start("bench", hang_fuse::SIZE / 2) {
        Ok(m) => m,
        Err(why) => {
            // FUSE is a kernel module (fuse); CI has it, and runs as root.
            mqblk_test_support::skip_unless_ci(&why);
            return;
        }
    };
    for engine in ["uring", "psync"] {
        let spec = format!(
            "file:{},engine={engine},direct=1,io_timeout_ms={TIMEOUT_MS}",
            m.disk().display()
        );
        let started = Instant::now();
        let b = bench(&spec, "randread", 60, &["--iodepth=4"]);
        let (code, out, err) = finish(b);
        let took = started.elapsed();
        eprintln!("{engine}: exit {code:?} {took:?} after the bench started");
        assert_eq!(code, Some(1), "{engine}: {err}");
        // Its first reads past the half hang at once: the bench exits
        // within the timeout + 2 s of its start.
        assert!(
            time_bound(engine, took, EXIT_BOUND),
            "{engine}: the bench exited {took:?} after it started: {err}"
        );
        assert!(out.contains("read of 4096 bytes at offset "), "{out}");
        assert!(err.contains("timed out"), "{err}");
    }
}
