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

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::MicroCeph;

/// The device's io_timeout_ms in the kill cases.
const TIMEOUT_MS: u64 = 3000;
/// Issue 26: a bench reports and exits within io_timeout_ms + 2 s of the
/// death.
const EXIT_BOUND: Duration = Duration::from_millis(TIMEOUT_MS + 2000);
/// Issue 26: a signal ends a bench within 2 s.
const SIGNAL_BOUND: Duration = Duration::from_secs(2);
/// A hang guard for waits that have no bound of their own.
const HANG: Duration = Duration::from_secs(120);

struct Bench {
    child: Child,
    out: mpsc::Receiver<String>,
    out_all: Option<std::thread::JoinHandle<String>>,
    err_all: Option<std::thread::JoinHandle<String>>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lines<R: Read + Send + 'static>(
    r: R,
) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, h)
}

fn bench(args: &[&str]) -> Bench {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mqblk bench");
    let (out, out_all) = lines(child.stdout.take().unwrap());
    let (_, err_all) = lines(child.stderr.take().unwrap());
    let b = Bench {
        child,
        out,
        out_all: Some(out_all),
        err_all: Some(err_all),
    };
    loop {
        match b.out.recv_timeout(HANG) {
            Ok(l) if l.contains("Starting 1 thread") => break,
            Ok(_) => {}
            Err(e) => panic!("the bench never started: {e}"),
        }
    }
    b
}

/// Wait for the bench to exit; its code, stdout and stderr.
fn finish(mut b: Bench) -> (Option<i32>, String, String) {
    let t = Instant::now();
    let code = loop {
        if let Some(s) = b.child.try_wait().unwrap() {
            break s.code();
        }
        assert!(t.elapsed() < HANG, "the bench never exited");
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = b.out_all.take().unwrap().join().unwrap();
    let err = b.err_all.take().unwrap().join().unwrap();
    (code, out, err)
}

fn sigint(b: &Bench) {
    // SAFETY: kill(2) on the pid of a child this test started and has not
    // reaped.
    let r = unsafe { libc::kill(b.child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(r, 0);
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
        let b = bench(&[
            "--device",
            &spec,
            &format!("--rw={rw}"),
            "--bs=4k",
            "--iodepth=16",
            "--size=256m",
            "--runtime=60",
            "--time_based",
        ]);
        std::thread::sleep(Duration::from_secs(2));
        let killed = Instant::now();
        c.kill_osd();
        let (code, out, err) = finish(b);
        let took = killed.elapsed();
        eprintln!("{rw}: exit {code:?} {took:?} after the OSD was killed");
        assert_eq!(code, Some(1), "{rw}: {err}");
        assert!(
            took < EXIT_BOUND,
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
    let b = bench(&[
        "--device",
        &spec,
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--size=256m",
        "--runtime=120",
        "--time_based",
    ]);
    std::thread::sleep(Duration::from_secs(2));
    c.kill_osd();
    // Its I/O is stuck now.
    std::thread::sleep(Duration::from_secs(2));
    let t = Instant::now();
    sigint(&b);
    let (code, out, err) = finish(b);
    let took = t.elapsed();
    eprintln!("SIGINT on a dead OSD: exit {code:?} {took:?} after the signal");
    assert_eq!(code, Some(130), "{err}");
    assert!(took < SIGNAL_BOUND, "{took:?} after SIGINT: {err}");
    assert!(out.contains("Run status group 0 (all jobs):"), "{out}");
}

#[test]
fn a_verified_bench_over_nbd_ends_in_time_when_its_server_is_killed() {
    let dir = std::env::temp_dir().join(format!("mqblk-dead-nbd-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("s.sock");
    let mut server = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "ram,size=256M", "--socket"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    mqblk_test_support::wait_for_path(&sock, "mqblk serve", Some(&mut server));
    let spec = format!(
        "nbd+unix:///?socket={},io_timeout_ms={TIMEOUT_MS}",
        sock.display()
    );
    let b = bench(&[
        "--device",
        &spec,
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--size=256m",
        "--runtime=60",
        "--time_based",
        "--verify=crc32c",
    ]);
    std::thread::sleep(Duration::from_secs(1));
    let killed = Instant::now();
    server.kill().unwrap();
    server.wait().unwrap();
    let (code, out, err) = finish(b);
    let took = killed.elapsed();
    eprintln!("nbd: exit {code:?} {took:?} after the server was killed");
    assert_eq!(code, Some(1), "{err}");
    assert!(took < EXIT_BOUND, "{took:?} after the kill: {err}");
    assert!(out.contains("write of 4096 bytes at offset "), "{out}");
    // It stopped: no IOPS figure counts failed I/Os as done.
    assert!(
        err.contains("the job stops (continue_on_error=none"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
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
        let b = bench(&[
            "--device",
            &spec,
            "--rw=randread",
            "--bs=4k",
            "--iodepth=4",
            "--runtime=60",
            "--time_based",
        ]);
        let (code, out, err) = finish(b);
        let took = started.elapsed();
        eprintln!("{engine}: exit {code:?} {took:?} after the bench started");
        assert_eq!(code, Some(1), "{engine}: {err}");
        // Its first reads past the half hang at once: the bench exits
        // within the timeout + 2 s of its start.
        assert!(
            took < EXIT_BOUND,
            "{engine}: the bench exited {took:?} after it started: {err}"
        );
        assert!(out.contains("read of 4096 bytes at offset "), "{out}");
        assert!(err.contains("timed out"), "{err}");
    }
}
