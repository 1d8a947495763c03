//! A pending future on the file device sleeps: a read that a FUSE server
//! holds (see `hang_fuse`) ends with a timeout after `io_timeout_ms`
//! (1 s), and the future waiting for it must use under 50 ms of CPU, on
//! each engine. The future sleeps on the context's completion fd, whose
//! timer wakes it when the request can have timed out and whose interrupt
//! line (the ring's eventfd) wakes it when the cancelled read comes back.
//!
//! The CPU is the process's (getrusage), which counts the thread that
//! watches the completion fd for the executor: this binary holds this one
//! test (and the FUSE server's entry point, which returns at once), and the
//! server runs in a child process.

mod common;
mod hang_fuse;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use hang_fuse::Mount;
use mqblk_core::error::Status;
use mqblk_core::{block_on, AsyncContext};

/// Reads at or past this offset are never answered.
const HANG_FROM: u64 = 512 << 10;
const TIMEOUT_MS: u64 = 1000;
/// The most CPU the 1 s wait may take: a correctness bound (the future
/// sleeps), not a speed claim; a spinning future takes about the wait.
const CPU_BOUND: Duration = Duration::from_millis(50);
/// Bounds the whole case, so a hang fails the test instead of hanging it.
const HANG_BOUND: Duration = Duration::from_secs(30);

/// Not a test: the FUSE server, when the test binary runs itself as it
/// (see `hang_fuse::Mount::start`). Returns at once otherwise.
#[test]
fn fuse_server() {
    hang_fuse::serve_if_helper();
}

fn cpu() -> Duration {
    // SAFETY: getrusage fills the live struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_SELF is always valid.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn a_future_sleeps_through_a_held_read() {
    let m = match Mount::start("future", HANG_FROM) {
        Ok(m) => m,
        Err(why) => {
            // FUSE is a kernel module (fuse); CI has it, and runs as root.
            mqblk_test_support::skip_unless_ci(&why);
            return;
        }
    };
    for engine in ["uring", "psync"] {
        let disk = m.disk();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let spec = format!("engine={engine},direct=1,io_timeout_ms={TIMEOUT_MS}");
            let dev = common::open(&disk, &spec).expect("open the FUSE file");
            let actx = AsyncContext::new(dev.context().unwrap());
            // An answered read first: it starts what the futures use.
            let (_, r) = block_on(actx.read(dev.alloc_buf(4096), 0));
            r.unwrap();
            let (t, c) = (Instant::now(), cpu());
            let (_, r) = block_on(actx.read(dev.alloc_buf(4096), HANG_FROM));
            let took = (t.elapsed(), cpu() - c);
            // Closed before the next engine opens the image (it is locked
            // while open).
            drop(actx);
            drop(dev);
            tx.send((r.map_err(|e| e.status()), took.0, took.1))
                .unwrap();
        });
        let (r, wall, cpu) = rx.recv_timeout(HANG_BOUND).unwrap_or_else(|_| {
            panic!("{engine}: the held read did not end within {HANG_BOUND:?}")
        });
        println!("{engine}: held read ended {r:?} after {wall:?}, CPU {cpu:?}");
        assert_eq!(r, Err(Status::Timeout), "{engine}");
        assert!(
            wall >= Duration::from_millis(TIMEOUT_MS),
            "{engine}: timed out after {wall:?}, before its {TIMEOUT_MS} ms"
        );
        assert!(
            cpu < CPU_BOUND,
            "{engine}: a {TIMEOUT_MS} ms wait used {cpu:?} of CPU (bound {CPU_BOUND:?}): the future spins"
        );
    }
}
