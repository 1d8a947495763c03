//! `io_timeout_ms` on the NBD client, against a server that really does
//! not answer in time: nbdkit's delay filter holding every read far past
//! the timeout. A blocking read returns a timeout error instead of
//! hanging, the connection stays usable (the late reply is drained, never
//! written into the caller's buffer), and dropping the device returns.
//!
//! Each bound below is the timeout plus one second: the request ends by
//! its deadline (late only by scheduling on a loaded machine), far before
//! the server's delay would have ended it.

mod common;

use std::time::{Duration, Instant};

use common::*;
use mqblk::{Bio, Status};
use mqblk_test_support::time_bound;

/// The requests' timeout in these tests.
const TIMEOUT_MS: u64 = 500;
/// What a bound allows on top of the timeout: scheduling on a loaded
/// 2-core machine, never a second timeout.
const GRACE: Duration = Duration::from_secs(1);

fn bound() -> Duration {
    Duration::from_millis(TIMEOUT_MS) + GRACE
}

#[test]
fn a_read_the_server_holds_times_out_and_the_connection_stays_usable() {
    // Structured replies: the late reply's chunks are drained.
    held_read_then_usable(&[]);
}

#[test]
fn the_same_with_simple_replies() {
    // Simple replies carry no length: the drained read's length is the
    // one the timed-out request had.
    held_read_then_usable(&["--no-sr"]);
}

fn held_read_then_usable(extra: &[&str]) {
    // Reads take 3 s; writes are not delayed.
    let mut args = extra.to_vec();
    args.extend(["--filter=delay", "memory", "16M", "rdelay=3"]);
    let kit = Nbdkit::start(&args);
    let dev = mqblk::open(&kit.spec_with(&format!("io_timeout_ms={TIMEOUT_MS}"))).unwrap();
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&pattern(7, 4096), 0).unwrap();

    let mut buf = vec![0xAAu8; 4096];
    let t = Instant::now();
    let err = ctx.read_at(&mut buf, 0).unwrap_err();
    let took = t.elapsed();
    println!("read held by the server: {err} after {took:?}");
    assert_eq!(err.status(), Status::Timeout, "{err}");
    assert!(
        time_bound("read", took, bound()),
        "the timed-out read took {took:?}"
    );

    // The late reply (3 s after the read) is read off the socket and
    // thrown away: it never reaches the buffer the caller got back.
    std::thread::sleep(Duration::from_millis(3500));
    assert!(
        buf.iter().all(|&b| b == 0xAA),
        "the late reply was written into the caller's buffer"
    );
    // The connection was kept and is still in step: writes (not delayed)
    // go through on it.
    let t = Instant::now();
    ctx.write_at(&pattern(8, 4096), 4096).unwrap();
    ctx.flush().unwrap();
    println!("write after the timeout: ok after {:?}", t.elapsed());
}

#[test]
fn dropping_a_device_with_reads_held_by_the_server_returns() {
    // Reads take 60 s: far beyond the timeout and the test's bound.
    let kit = Nbdkit::start(&["--filter=delay", "memory", "16M", "rdelay=60"]);
    let dev = mqblk::open(&kit.spec_with(&format!("io_timeout_ms={TIMEOUT_MS},conns=2"))).unwrap();
    let mut ctx = dev.context().unwrap();
    for i in 0..8u64 {
        ctx.submit(Bio::read_at(i * 4096, dev.alloc_buf(4096)))
            .unwrap();
    }
    ctx.unplug();
    // Dropping the context waits for its requests, which time out; then
    // the device closes its connections with the reads still at the
    // server.
    let t = Instant::now();
    drop(ctx);
    drop(dev);
    let took = t.elapsed();
    println!("drop with 8 reads held by the server: {took:?}");
    assert!(
        time_bound("drop", took, bound()),
        "dropping the device took {took:?}"
    );
}

#[test]
fn a_server_that_answers_nothing_fails_every_read_without_hanging() {
    let kit = Nbdkit::start(&["--filter=delay", "memory", "16M", "rdelay=60"]);
    let dev = mqblk::open(&kit.spec_with(&format!("io_timeout_ms={TIMEOUT_MS}"))).unwrap();
    let mut ctx = dev.context().unwrap();
    // The first timeout leaves the connection up (a zombie waits for its
    // reply); once a tag times out again with its zombie unanswered, the
    // connection is closed, and later reads fail at once.
    let mut statuses = Vec::new();
    for i in 0..4u64 {
        let mut b = vec![0u8; 4096];
        let t = Instant::now();
        let e = ctx.read_at(&mut b, i * 4096).unwrap_err();
        let took = t.elapsed();
        println!("read {i}: {e} after {took:?}");
        assert!(
            time_bound(&format!("read {i}"), took, bound()),
            "read {i} took {took:?}"
        );
        statuses.push(e.status());
    }
    assert_eq!(statuses[0], Status::Timeout);
    assert!(
        statuses
            .iter()
            .all(|s| matches!(s, Status::Timeout | Status::IoError)),
        "{statuses:?}"
    );
}

#[test]
fn a_write_the_server_holds_times_out_and_reads_still_work() {
    // Writes take 3 s; reads are not delayed.
    let kit = Nbdkit::start(&["--filter=delay", "memory", "16M", "wdelay=3"]);
    let dev = mqblk::open(&kit.spec_with(&format!("io_timeout_ms={TIMEOUT_MS}"))).unwrap();
    let mut ctx = dev.context().unwrap();
    let t = Instant::now();
    let err = ctx.write_at(&pattern(9, 4096), 0).unwrap_err();
    let took = t.elapsed();
    println!("write held by the server: {err} after {took:?}");
    assert_eq!(err.status(), Status::Timeout, "{err}");
    assert!(
        time_bound("write", took, bound()),
        "the timed-out write took {took:?}"
    );
    // Once the late reply has come and gone, the connection still reads;
    // the timed-out write did land in the end (Timeout means "unknown",
    // not "not done").
    std::thread::sleep(Duration::from_millis(3500));
    let mut back = vec![0u8; 4096];
    ctx.read_at(&mut back, 0).unwrap();
    assert!(back == pattern(9, 4096));
}
