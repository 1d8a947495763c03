//! An OSD killed mid-run: every I/O in flight completes with `Timeout`
//! within `io_timeout_ms` + 1 s (librados' op timeout, set just past the
//! layer's), the device closes within one `io_timeout_ms` more, and once
//! the OSD is back a new device works.
//!
//! The bounds asserted are issue 26's, tied to the timeout; the kill time
//! is taken before the kill command, so each figure is an upper bound.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::MicroCeph;
use mqblk_core::{Device, Error, Status};

fn open(spec: &str) -> mqblk_core::Result<Device> {
    let s = mqblk_core::spec::parse(spec)?;
    mqblk_rbd::open(s.target.as_deref().unwrap_or(""), s.options)
}

const TIMEOUT_MS: u64 = 2500;
const THREADS: usize = 6;
/// The promise: every I/O in flight ends within the timeout + 1 s.
const BOUND: Duration = Duration::from_millis(TIMEOUT_MS + 1000);
/// A hang guard, far above the bound, so that a late I/O fails the test
/// with its figure rather than hanging it.
const HANG: Duration = Duration::from_secs(30);

/// Run I/O from THREADS contexts, kill the OSD, and return, per thread,
/// how long after the kill its first failing I/O ended, and its status.
/// An I/O issued after the kill began (the kill command takes a moment
/// on a loaded machine, and the OSD answers until it dies) is timed from
/// its issue: its timeout runs from there, not from the kill.
fn run_until_failure(c: &MicroCeph, dev: &Arc<Device>) -> Vec<(Duration, Status)> {
    let killed: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (dev, killed, stop, start) =
                (dev.clone(), killed.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                let mut ctx = dev.context().unwrap();
                let mut buf = vec![t as u8; 4096];
                start.wait();
                let mut i = 0u64;
                loop {
                    let off = ((t as u64 * 7919 + i * 104_729) % 4096) * 4096;
                    let issued = Instant::now();
                    let r = if i.is_multiple_of(2) {
                        ctx.write_at(&buf, off)
                    } else {
                        ctx.read_at(&mut buf, off)
                    };
                    i += 1;
                    if let Err(e) = r {
                        let k = killed.lock().unwrap().expect("no error before the kill");
                        let status = match e {
                            Error::Io { status, .. } => status,
                            e => panic!("untyped failure: {e}"),
                        };
                        return (k.max(issued).elapsed(), status);
                    }
                    assert!(
                        !stop.load(Ordering::Relaxed),
                        "I/O still succeeds long after the kill"
                    );
                }
            })
        })
        .collect();
    start.wait();
    std::thread::sleep(Duration::from_millis(700));
    // From before the kill command: the figure is an upper bound.
    *killed.lock().unwrap() = Some(Instant::now());
    c.kill_osd();
    let t0 = Instant::now();
    let mut out = Vec::new();
    for h in threads {
        while !h.is_finished() {
            if t0.elapsed() > HANG {
                stop.store(true, Ordering::Relaxed);
                panic!("an I/O is still outstanding {HANG:?} after the OSD was killed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        out.push(h.join().unwrap());
    }
    out
}

#[test]
fn every_io_fails_in_time_when_the_osd_dies_and_a_restart_works() {
    let Some(c) = MicroCeph::start() else { return };
    for cache in ["off", "on"] {
        let dev = Arc::new(
            open(&c.spec(
                &format!("k{cache}"),
                &format!("create=64M,cache={cache},io_timeout_ms={TIMEOUT_MS}"),
            ))
            .unwrap(),
        );
        // Fill the region once, so that reads go to the OSD.
        {
            let mut ctx = dev.context().unwrap();
            let b = vec![1u8; 1 << 20];
            for off in (0..16u64 << 20).step_by(1 << 20) {
                ctx.write_at(&b, off).unwrap();
            }
            ctx.flush().unwrap();
        }
        let res = run_until_failure(&c, &dev);
        let worst = res.iter().map(|r| r.0).max().unwrap();
        eprintln!(
            "cache={cache}: io_timeout_ms={TIMEOUT_MS}: every context's I/O failed; the last \
             {worst:?} after the kill; statuses {:?}",
            res.iter().map(|r| r.1).collect::<Vec<_>>()
        );
        for (_, s) in &res {
            assert_eq!(*s, Status::Timeout, "a dead OSD fails I/O with a timeout");
        }
        assert!(
            mqblk_test_support::time_bound(&format!("cache={cache} io"), worst, BOUND),
            "cache={cache}: an I/O ended {worst:?} after the kill (bound {BOUND:?})"
        );
        // Flush keeps its meaning: a write acknowledged with the OSD dead
        // (librbd's cache may take it) must fail the flush after it.
        {
            let mut ctx = dev.context().unwrap();
            let t = Instant::now();
            let w = ctx.write_at(&[5u8; 4096], 0);
            let f = ctx.flush();
            eprintln!(
                "cache={cache}: a write after the kill: {:?}; the flush after it: {:?} ({:?})",
                w.as_ref().map_err(|e| e.status()),
                f.as_ref().map_err(|e| e.status()),
                t.elapsed()
            );
            if w.is_ok() {
                assert!(
                    f.is_err(),
                    "an acknowledged write that never reached the OSD passed a flush"
                );
            }
        }
        // The device closes (no request is left in librbd).
        let t = Instant::now();
        drop(dev);
        let closed = t.elapsed();
        eprintln!("cache={cache}: device closed in {closed:?}");
        // One io_timeout_ms (and the thread it takes).
        assert!(
            mqblk_test_support::time_bound(
                &format!("cache={cache} close"),
                closed,
                Duration::from_millis(TIMEOUT_MS + 500)
            ),
            "cache={cache}: closing took {closed:?}"
        );
        c.start_osd();
    }
    // Back up: a new image works.
    let dev = open(&c.spec("after", "create=8M,io_timeout_ms=2000")).unwrap();
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&[3u8; 4096], 4096).unwrap();
    let mut b = [0u8; 4096];
    ctx.read_at(&mut b, 4096).unwrap();
    assert_eq!(b, [3u8; 4096]);
}
