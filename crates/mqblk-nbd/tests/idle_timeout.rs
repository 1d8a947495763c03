//! A connection closed by the idle timeout leaves nothing behind: its
//! socket is closed, its cached data buffers are freed, and its slot
//! (global and per-peer) is free for the next client.
//!
//! One test in this file, so that the process's descriptors and memory
//! are this test's alone.

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use mqblk_nbd::{ConnLimits, TlsMode};
use mqblk_nbd_proto::consts::{cmd, DEFAULT_MAX_PAYLOAD};
use mqblk_test_support::time_bound;

const IDLE: Duration = Duration::from_millis(500);
/// What a bound allows on top of the deadline it tests.
const GRACE: Duration = Duration::from_secs(1);
const PER_PEER: usize = 4;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// A write of `data` at `offset`, all of it but its last byte: the
/// request is still arriving, which the server times by its stall timeout
/// (30 s by default), not by the idle timeout.
fn write_but_the_last_byte(s: &mut TcpStream, cookie: u64, offset: u64, data: &[u8]) {
    let r = mqblk_nbd_proto::Request {
        flags: 0,
        cmd: cmd::WRITE,
        cookie,
        offset,
        len: data.len() as u32,
    };
    s.write_all(&r.encode()).unwrap();
    s.write_all(&data[..data.len() - 1]).unwrap();
}

/// The last byte of the write [`write_but_the_last_byte`] began, and its
/// simple reply.
fn write_the_last_byte(s: &mut TcpStream, cookie: u64, data: &[u8]) {
    s.write_all(&data[data.len() - 1..]).unwrap();
    let mut b = [0u8; 16];
    s.read_exact(&mut b).unwrap();
    match mqblk_nbd_proto::ReplyHeader::decode(&b).unwrap() {
        mqblk_nbd_proto::ReplyHeader::Simple { error, cookie: c } => {
            assert_eq!((error, c), (0, cookie));
        }
        other => panic!("expected a simple reply, got {other:?}"),
    }
}

#[test]
#[cfg_attr(miri, ignore)]
fn an_idle_timed_out_connection_frees_its_socket_buffers_and_slot() {
    let srv = TestServer::start_with(
        vec![export("", "null,size=1G")],
        ConnLimits {
            idle_timeout: Some(IDLE),
            max_per_peer: PER_PEER,
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        true,
    );
    let addr = srv.tcp.unwrap();
    let peer = Ipv4Addr::new(127, 0, 0, 2);
    let connect = || {
        let s = connect_from(peer, addr);
        s.set_read_timeout(Some(IDLE + GRACE)).unwrap();
        s
    };
    let rss0 = rss_bytes();
    // Every slot of the peer is taken, each connection holding one
    // largest-payload buffer: a write that lacks only its last byte. None
    // of them is idle yet, so however long filling the slots takes on a
    // loaded machine, none is closed before the checks below (a complete
    // write here would start its connection's idle clock while the next
    // slots were still being filled).
    let data = vec![0x5au8; DEFAULT_MAX_PAYLOAD as usize];
    let mut held: Vec<TcpStream> = Vec::new();
    for i in 0..PER_PEER {
        let mut s = connect();
        assert!(matches!(go(&mut s), Go::Served));
        write_but_the_last_byte(&mut s, i as u64, (i as u64) << 25, &data);
        held.push(s);
    }
    // Counted before the refused connection: the server closes its side
    // of that one in its own time, so it is not counted either way.
    let fds_held = open_fds();
    let mut s = connect();
    assert!(matches!(go(&mut s), Go::Refused(..)), "the peer is full");
    drop(s);
    let rss_held = rss_bytes();
    let cached = (PER_PEER as u64) * u64::from(DEFAULT_MAX_PAYLOAD);
    println!(
        "{PER_PEER} connections: {} open by the server, RSS {} MiB -> {} MiB",
        srv.server.stats().open.load(Ordering::Relaxed),
        rss0 >> 20,
        rss_held >> 20
    );
    assert_eq!(
        srv.server.stats().open.load(Ordering::Relaxed),
        PER_PEER as u64
    );
    assert!(
        rss_held >= rss0 + cached / 2,
        "the connections hold no buffers: RSS {rss0} -> {rss_held}, so this tests nothing"
    );
    // Each write completes (its buffer stays cached with its connection),
    // and each connection goes idle from its reply. The server's idle
    // clock starts before the client reads the reply, so the time from
    // the last reply read is an upper bound on each one's idle time.
    for (i, s) in held.iter_mut().enumerate() {
        write_the_last_byte(s, i as u64, &data);
    }
    let last_reply = Instant::now();

    // The idle timeout closes each one.
    for s in &mut held {
        let mut b = [0u8; 1];
        match s.read(&mut b) {
            Ok(0) => {}
            other => panic!("an idle connection was not closed: {other:?}"),
        }
    }
    let closed = last_reply.elapsed();
    println!("all closed {closed:?} after their last reply (idle timeout {IDLE:?})");
    assert!(
        time_bound("closed", closed, IDLE + GRACE),
        "closed after {closed:?}"
    );

    // Its descriptor, buffers and slot are given back.
    let t = Instant::now();
    while srv.server.stats().open.load(Ordering::Relaxed) > 0 || open_fds() > fds_held - PER_PEER {
        assert!(
            t.elapsed() < GRACE,
            "still held {GRACE:?} after the close: {} connections, {} descriptors \
             (the server's side of {PER_PEER} should have gone from {fds_held})",
            srv.server.stats().open.load(Ordering::Relaxed),
            open_fds()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    time_bound("given back", t.elapsed(), GRACE);
    let rss_after = rss_bytes();
    println!(
        "after the idle timeout: {} descriptors (from {fds_held}), RSS {} MiB (from {} MiB)",
        open_fds(),
        rss_after >> 20,
        rss_held >> 20
    );
    assert_eq!(open_fds(), fds_held - PER_PEER);
    assert!(
        rss_after + cached / 2 <= rss_held,
        "the closed connections' buffers were kept: RSS {rss_held} -> {rss_after}"
    );
    drop(held);
    // The peer's slots are free again.
    let again: Vec<TcpStream> = (0..PER_PEER)
        .map(|_| {
            let mut s = connect();
            assert!(matches!(go(&mut s), Go::Served), "a freed slot was kept");
            s
        })
        .collect();
    drop(again);
    srv.stop();
}
