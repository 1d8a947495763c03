//! `io_timeout_ms` on the file engines, with I/O that really hangs: a FUSE
//! file system (see `hang_fuse`) that never answers I/O past 512 KiB,
//! run in a child process.
//!
//! - While the server is alive it honours FUSE_INTERRUPT, as a stuck but
//!   well-behaved server does: io_uring's IORING_OP_ASYNC_CANCEL, or the
//!   psync worker's signal, interrupts the read, and `read_at` returns a
//!   timeout error within the timeout plus 1 s. The device then still
//!   works, and dropping it with reads held returns within the timeout
//!   plus 1 s.
//! - While the server is stopped (SIGSTOP) nothing can interrupt the read
//!   (FUSE waits for the server once a request is queued, and only a
//!   fatal signal ends that wait): the request must NOT be given back to
//!   the caller, whose buffer the kernel may still fill. It ends with a
//!   timeout error as soon as the server runs again.
//! - A loop device over that file is a hung block device: no cancel or
//!   signal reaches the loop driver's worker, so the request stays with
//!   the driver until the kernel ends it (when the server is killed).
//!
//! Both engines are run, with `direct=1`: the server opens files with
//! FOPEN_DIRECT_IO, so reads reach it as synchronous requests.
//!
//! Every test does its I/O on a thread of its own and waits for it with a
//! bound, so a hang fails the test (and the mount guard then kills the
//! server, which frees the thread) instead of hanging it. Those waits
//! ([`hang_bound`]) only prove that nothing hangs. When a request ends, the
//! time it took is checked against [`late_bound`]: the timeout it tests
//! plus 1 s, the correctness bound a held request must meet.

mod common;
mod hang_fuse;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use hang_fuse::Mount;
use mqblk_core::error::Status;

/// Reads and writes at or past this offset are never answered.
const HANG_FROM: u64 = 512 << 10;
const TIMEOUT_MS: u64 = 500;

/// A held request ends with its timeout error, a drop with reads held
/// returns, and a request the kernel let go of comes back, all within
/// this: the timeout under test plus 1 s for a loaded 2-core machine (they
/// take about 525 ms against the 500 ms timeout).
fn late_bound() -> Duration {
    Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(1)
}

/// How long a waiting test thread gives the I/O thread before it calls it
/// hung: not a correctness bound (that is [`late_bound`], checked on the
/// time measured once the answer came), only what tells a hang from a late
/// answer.
fn hang_bound() -> Duration {
    Duration::from_millis(TIMEOUT_MS) + Duration::from_secs(10)
}

/// Assert that `what` took less than [`late_bound`].
fn assert_in_time(what: &str, took: Duration) {
    assert!(
        mqblk_test_support::time_bound(what, took, late_bound()),
        "{what} took {took:?}, past the {TIMEOUT_MS} ms timeout plus 1 s"
    );
}

/// Not a test: the FUSE server, when the test binary runs itself as it
/// (see `hang_fuse::Mount::start`). Returns at once otherwise.
#[test]
fn fuse_server() {
    hang_fuse::serve_if_helper();
}

fn mount(tag: &str) -> Option<Mount> {
    match Mount::start(tag, HANG_FROM) {
        Ok(m) => Some(m),
        Err(why) => {
            // FUSE is a kernel module (fuse); CI has it, and runs as root.
            mqblk_test_support::skip_unless_ci(&why);
            None
        }
    }
}

fn spec(engine: &str) -> String {
    format!("engine={engine},direct=1,io_timeout_ms={TIMEOUT_MS}")
}

/// What the I/O thread of `held_io_times_out` measured.
struct Timings {
    timeout_after: Duration,
    write_timeout_after: Duration,
    drop_after: Duration,
}

fn held_io_times_out(engine: &str) {
    let Some(m) = mount(&format!("held-{engine}")) else {
        return;
    };
    let disk = m.disk();
    let engine_name = engine.to_string();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let dev = common::open(&disk, &spec(&engine_name)).expect("open the FUSE file");
        let mut ctx = dev.context().unwrap();
        // Answered I/O works.
        let mut data = vec![0u8; 4096];
        common::pattern(&mut data, 0, 1);
        ctx.write_at(&data, 0).unwrap();
        let mut back = vec![0u8; 4096];
        ctx.read_at(&mut back, 0).unwrap();
        common::expect_pattern(&back, 0, 1);

        // A read the server holds.
        let mut buf = vec![0xAAu8; 4096];
        let t = Instant::now();
        let err = ctx.read_at(&mut buf, HANG_FROM).unwrap_err();
        let timeout_after = t.elapsed();
        assert_eq!(err.status(), Status::Timeout, "{err}");
        println!("{engine_name}: held read: {err} after {timeout_after:?}");

        // A write the server holds.
        let t = Instant::now();
        let err = ctx.write_at(&data, HANG_FROM).unwrap_err();
        let write_timeout_after = t.elapsed();
        assert_eq!(err.status(), Status::Timeout, "{err}");
        println!("{engine_name}: held write: {err} after {write_timeout_after:?}");

        // The device still works.
        ctx.read_at(&mut back, 0).unwrap();
        common::expect_pattern(&back, 0, 1);

        // Reads held at the drop: the context waits for them to time out,
        // then the device goes.
        for i in 0..4u64 {
            // Gaps between them: four requests, not one merged.
            let bio = mqblk_core::bio::Bio::read_at(HANG_FROM + i * 8192, dev.alloc_buf(4096));
            ctx.submit(bio).unwrap();
        }
        ctx.unplug();
        let t = Instant::now();
        drop(ctx);
        drop(dev);
        let drop_after = t.elapsed();
        tx.send(Timings {
            timeout_after,
            write_timeout_after,
            drop_after,
        })
        .unwrap();
    });
    let timings = rx.recv_timeout(hang_bound() * 2).unwrap_or_else(|e| {
        panic!(
            "{engine}: the I/O thread did not finish ({e}); server events:\n{}",
            m.events()
        )
    });
    println!(
        "{engine}: drop with 4 reads held: {:?}; server events:\n{}",
        timings.drop_after,
        m.events()
    );
    assert_in_time(&format!("{engine}: the held read"), timings.timeout_after);
    assert_in_time(
        &format!("{engine}: the held write"),
        timings.write_timeout_after,
    );
    assert_in_time(
        &format!("{engine}: the drop with 4 reads held"),
        timings.drop_after,
    );
    assert!(
        m.events().contains("answered EINTR"),
        "the server never saw an interrupt:\n{}",
        m.events()
    );
}

#[test]
fn uring_held_reads_and_writes_time_out_and_drop_returns() {
    held_io_times_out("uring");
}

#[test]
fn psync_held_reads_and_writes_time_out_and_drop_returns() {
    held_io_times_out("psync");
}

fn stopped_server_keeps_the_buffer(engine: &str) {
    let Some(m) = mount(&format!("stopped-{engine}")) else {
        return;
    };
    let dev = common::open(&m.disk(), &spec(engine)).expect("open the FUSE file");
    let (tx, rx) = mpsc::channel();
    m.signal(libc::SIGSTOP);
    let reader = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            let mut ctx = dev.context().unwrap();
            let mut buf = vec![0xAAu8; 4096];
            let r = ctx.read_at(&mut buf, HANG_FROM);
            tx.send(r.map_err(|e| e.status())).unwrap();
        })
    };
    // Several timeout periods pass with the server stopped: the timeout
    // fires, but the kernel still holds the buffer, so the read must not
    // return.
    let held = rx.recv_timeout(Duration::from_millis(TIMEOUT_MS * 6));
    assert!(
        held.is_err(),
        "{engine}: the read returned ({held:?}) while the stopped server's kernel request still \
         held its buffer"
    );
    println!(
        "{engine}: read still held after {} ms with the server stopped",
        TIMEOUT_MS * 6
    );
    // The server runs again: it takes the request, then the interrupt the
    // kernel queued for it, and answers EINTR; the read ends as timed out.
    let t = Instant::now();
    m.signal(libc::SIGCONT);
    let r = rx
        .recv_timeout(hang_bound())
        .unwrap_or_else(|e| panic!("{engine}: no answer after SIGCONT ({e})"));
    let answered_after = t.elapsed();
    println!(
        "{engine}: after SIGCONT the read returned {r:?} in {answered_after:?}; server events:\n{}",
        m.events()
    );
    assert_eq!(r, Err(Status::Timeout));
    assert_in_time(
        &format!("{engine}: the answer after SIGCONT"),
        answered_after,
    );
    reader.join().unwrap();
    let t = Instant::now();
    drop(dev);
    let drop_after = t.elapsed();
    println!("{engine}: drop after the read ended: {drop_after:?}");
    assert_in_time(&format!("{engine}: the drop"), drop_after);
}

#[test]
fn uring_a_stopped_server_keeps_the_request_until_it_lets_go() {
    stopped_server_keeps_the_buffer("uring");
}

#[test]
fn psync_a_stopped_server_keeps_the_request_until_it_lets_go() {
    stopped_server_keeps_the_buffer("psync");
}

#[test]
fn psync_a_request_no_worker_has_taken_times_out_at_once() {
    // One worker, and the server stopped: the worker is stuck in the first
    // read (nothing interrupts it now), the second read waits on the
    // submission list, untouched, and the timeout completes it by itself.
    let Some(m) = mount("queued-psync") else {
        return;
    };
    let disk = m.disk();
    let dev = common::open(&disk, &format!("{},workers=1", spec("psync"))).unwrap();
    m.signal(libc::SIGSTOP);
    let (tx, rx) = mpsc::channel();
    {
        let dev = dev.clone();
        std::thread::spawn(move || {
            let mut ctx = dev.context().unwrap();
            for i in 0..2u64 {
                let mut bio =
                    mqblk_core::bio::Bio::read_at(HANG_FROM + i * 8192, dev.alloc_buf(4096));
                bio.private = i;
                ctx.submit(bio).unwrap();
            }
            ctx.unplug();
            let mut n = 0;
            while n < 2 {
                n += ctx.poll_wait(1, |c| tx.send((c.private(), c.status())).unwrap());
            }
        });
    }
    let t = Instant::now();
    let first = rx
        .recv_timeout(hang_bound())
        .unwrap_or_else(|e| panic!("the queued read did not time out ({e})"));
    let first_after = t.elapsed();
    println!("psync, one worker, server stopped: first {first:?} after {first_after:?}");
    assert_eq!(first, (1, Status::Timeout), "the queued read ends first");
    assert_in_time("the queued read's timeout", first_after);
    let t = Instant::now();
    m.signal(libc::SIGCONT);
    let second = rx
        .recv_timeout(hang_bound())
        .unwrap_or_else(|e| panic!("the read on the worker did not end after SIGCONT ({e})"));
    let second_after = t.elapsed();
    println!(
        "then {second:?}, {second_after:?} after SIGCONT; server events:\n{}",
        m.events()
    );
    assert_eq!(second, (0, Status::Timeout));
    assert_in_time("the worker's read after SIGCONT", second_after);
    // Only the read the worker took reached the server.
    assert_eq!(m.events().matches("held READ").count(), 1, "{}", m.events());
}

fn hung_block_device_keeps_the_request(engine: &str) {
    // A loop device over the FUSE file: a read past HANG_FROM waits in the
    // loop driver's worker, inside FUSE. Neither io_uring's cancel nor a
    // signal to a psync worker reaches that kernel thread, and a block
    // request cannot be taken back: the request must stay with the driver
    // until the kernel ends it, here when the server is killed.
    let Some(m) = mount(&format!("loop-{engine}")) else {
        return;
    };
    let Some(lo) = mqblk_test_support::LoopDev::attach(&m.disk()) else {
        return;
    };
    let dev = common::open(std::path::Path::new(&lo.dev), &spec(engine)).unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            let mut ctx = dev.context().unwrap();
            let mut buf = dev.alloc_buf(4096);
            let r = ctx.read_at(buf.as_mut_slice(), HANG_FROM);
            tx.send(r.map_err(|e| e.status())).unwrap();
        })
    };
    let held = rx.recv_timeout(Duration::from_millis(TIMEOUT_MS * 6));
    assert!(
        held.is_err(),
        "{engine}: the read returned ({held:?}) while the block layer still held it"
    );
    println!(
        "{engine} on {}: read still held after {} ms; server events:\n{}",
        lo.dev,
        TIMEOUT_MS * 6,
        m.events()
    );
    // Kill the server: FUSE fails its requests, the loop device fails the
    // read, and the request ends, as timed out.
    let t = Instant::now();
    drop(m);
    let r = rx
        .recv_timeout(hang_bound())
        .unwrap_or_else(|e| panic!("{engine}: no answer after the server died ({e})"));
    let answered_after = t.elapsed();
    println!("{engine}: after the server was killed the read returned {r:?} in {answered_after:?}");
    assert_eq!(r, Err(Status::Timeout));
    assert_in_time(
        &format!("{engine}: the answer after the server was killed"),
        answered_after,
    );
    reader.join().unwrap();
    drop(dev);
    drop(lo);
}

#[test]
fn uring_a_hung_block_device_keeps_the_request_until_the_kernel_ends_it() {
    hung_block_device_keeps_the_request("uring");
}

#[test]
fn psync_a_hung_block_device_keeps_the_request_until_the_kernel_ends_it() {
    hung_block_device_keeps_the_request("psync");
}
