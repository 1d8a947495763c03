//! No lock-out: with the server's defaults, 1,024 connections from one
//! address that negotiate and then idle do not keep a client from another
//! address out (one address holds at most its per-peer share); connections
//! that send nothing cannot keep a new client out past the handshake
//! deadline; a refused client is told why.
//!
//! Every bound below is the deadline it tests plus [`GRACE`]; the reads
//! have the same bound, so a server that never answers fails the test
//! instead of hanging it.

mod common;

use std::io::Read;
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use mqblk_nbd::{ConnLimits, TlsMode};
use mqblk_nbd_proto::consts::{cmd, rep};
use mqblk_test_support::time_bound;

const SILENT: usize = 256;
const IDLE: usize = 256;
/// What a bound allows on top of the deadline it tests: scheduling on a
/// loaded 2-core machine, never a second deadline.
const GRACE: Duration = Duration::from_secs(1);
/// The acceptance bound for a client from another address (issue 26).
const ANSWERED_WITHIN: Duration = Duration::from_secs(1);

#[test]
fn idle_clients_from_one_address_do_not_lock_out_another_with_the_defaults() {
    require("nbdinfo");
    const HOSTILE: usize = 1024;
    let lim = ConnLimits::default();
    assert!(lim.max_per_peer < lim.max_connections);
    assert!(lim.idle_timeout.is_some(), "an idle timeout by default");
    // 1,024 client sockets, the server's side of the ones it serves, and
    // the refused ones it is still answering.
    raise_fd_limit(4096);
    let srv = TestServer::start_with(
        vec![export("", "ram,size=16M")],
        ConnLimits::default(),
        TlsMode::Off,
        None,
        true,
    );
    let addr = srv.tcp.unwrap();
    let hostile = Ipv4Addr::new(127, 0, 0, 2);
    // 1,024 from 127.0.0.2, each negotiating to transmission and then
    // saying nothing; all are kept open by the test.
    let mut held: Vec<TcpStream> = Vec::with_capacity(HOSTILE);
    let (mut served, mut refused) = (0, 0);
    let mut message = String::new();
    for _ in 0..HOSTILE {
        let mut s = connect_from(hostile, addr);
        s.set_read_timeout(Some(lim.handshake_timeout + GRACE))
            .unwrap();
        match go(&mut s) {
            Go::Served => served += 1,
            Go::Refused(t, msg) => {
                assert_eq!(t, rep::ERR_POLICY, "{msg}");
                refused += 1;
                message = msg;
            }
            Go::Closed => refused += 1,
        }
        held.push(s);
    }
    println!(
        "lockout: of {HOSTILE} connections from {hostile}, {served} served and idle, \
         {refused} refused: {message}"
    );
    assert_eq!(served, lim.max_per_peer, "one address holds its share");
    assert!(
        message.contains(&format!(
            "127.0.0.2 already has its limit of {} connections",
            lim.max_per_peer
        )),
        "{message}"
    );
    assert_eq!(
        srv.server.stats().open.load(Ordering::Relaxed),
        lim.max_per_peer as u64
    );

    // nbdinfo from 127.0.0.1 is answered at once.
    let t = Instant::now();
    let out = run_timeout(
        Command::new("nbdinfo").arg(format!("nbd://127.0.0.1:{}", addr.port())),
        ANSWERED_WITHIN + GRACE,
    );
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("lockout: nbdinfo from 127.0.0.1 answered in {took:?}");
    assert!(
        out.status.success(),
        "nbdinfo was not served: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("export-size: 16777216"), "{text}");
    assert!(
        time_bound("answered", took, ANSWERED_WITHIN),
        "nbdinfo was answered after {took:?}"
    );
    // The idle ones are still there (idle for less than the idle
    // timeout), and still served.
    assert_eq!(
        srv.server.stats().open.load(Ordering::Relaxed),
        lim.max_per_peer as u64
    );
    drop(held);
    srv.stop();
}

#[test]
fn silent_and_idle_clients_do_not_lock_out_a_new_one() {
    raise_fd_limit(4096);
    let handshake = Duration::from_millis(1500);
    let bound = handshake + GRACE;
    let srv = TestServer::start_with(
        vec![export("", "ram,size=16M")],
        ConnLimits {
            handshake_timeout: handshake,
            max_connections: SILENT + IDLE,
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        false,
    );
    let connect = || {
        let s = UnixStream::connect(&srv.socket).unwrap();
        s.set_read_timeout(Some(bound)).unwrap();
        s
    };
    // 256 that finish negotiating and then idle.
    let mut idle: Vec<RawClient> = (0..IDLE)
        .map(|_| RawClient::handshake(connect(), "", false))
        .collect();
    // 256 that connect and send nothing.
    let silent_from = Instant::now();
    let silent: Vec<UnixStream> = (0..SILENT).map(|_| connect()).collect();

    // Every slot is held (once the server has taken all 512 in): a new
    // client is refused, and told why.
    while srv.server.stats().connections.load(Ordering::Relaxed) < (SILENT + IDLE) as u64 {
        assert!(
            silent_from.elapsed() < bound,
            "the server did not take all clients in within {bound:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    time_bound("all taken in", silent_from.elapsed(), bound);
    let mut s = connect();
    match go(&mut s) {
        Go::Refused(t, msg) => {
            assert_eq!(t, rep::ERR_POLICY, "{msg}");
            assert!(msg.contains("limit of 512 connections"), "{msg}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(s);

    // Once the silent ones pass the handshake deadline, a new client is
    // served: by the deadline plus the grace.
    let served_at = loop {
        let mut s = connect();
        if let Go::Served = go(&mut s) {
            break silent_from.elapsed();
        }
        assert!(
            silent_from.elapsed() < bound,
            "no new client served within {bound:?} of the silent ones connecting \
             (handshake deadline {handshake:?})"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    time_bound("new client served", served_at, bound);
    println!(
        "lockout: a new client was served {} ms after the silent clients connected \
         (handshake deadline {} ms)",
        served_at.as_millis(),
        handshake.as_millis()
    );
    // The silent ones were dropped: each sees the end of its stream.
    for mut s in silent {
        let mut b = [0u8; 64];
        let mut total = 0;
        loop {
            match s.read(&mut b) {
                Ok(0) => break,
                Ok(n) => total += n,
                Err(e) => panic!("a silent client was not dropped: {e}"),
            }
        }
        assert!(total <= 18, "only the greeting was sent");
    }
    // The idle ones are still served (idle for less than the idle
    // timeout).
    for (i, c) in idle.iter_mut().enumerate().step_by(64) {
        c.send(cmd::READ, 0, i as u64, 0, 4096, &[]);
        let (err, cookie) = c.simple_reply();
        assert_eq!((err, cookie), (0, i as u64));
        let mut d = vec![0u8; 4096];
        c.s.read_exact(&mut d).unwrap();
    }
    drop(idle);
    srv.stop();
}

#[test]
fn an_idle_timeout_closes_an_idle_connection() {
    let idle = Duration::from_millis(300);
    let srv = TestServer::start_with(
        vec![export("", "ram,size=16M")],
        ConnLimits {
            idle_timeout: Some(idle),
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        false,
    );
    let s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(idle + GRACE)).unwrap();
    let mut c = RawClient::handshake(s, "", false);
    // The server's idle clock starts at its reply, after the request was
    // sent and before the client has read the reply: timed from before
    // the send, the close can come no sooner than the idle timeout;
    // timed from after the reply, no later than it plus scheduling.
    let sent = Instant::now();
    c.send(cmd::FLUSH, 0, 7, 0, 0, &[]);
    assert_eq!(c.simple_reply(), (0, 7));
    let t = Instant::now();
    assert!(c.closed(), "the idle connection is closed");
    let took = t.elapsed();
    let since_sent = sent.elapsed();
    println!(
        "closed {took:?} after its last reply, {since_sent:?} after its request \
         (idle timeout {idle:?})"
    );
    assert!(since_sent >= idle, "closed early");
    assert!(
        time_bound("closed", took, idle + GRACE),
        "closed after {took:?}"
    );
    srv.stop();
}

#[test]
fn one_peer_cannot_take_every_slot() {
    let srv = TestServer::start_with(
        vec![export("", "ram,size=16M")],
        ConnLimits {
            max_per_peer: 4,
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        true,
    );
    let addr = srv.tcp.unwrap();
    let connect = || {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(GRACE)).unwrap();
        s
    };
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut s = connect();
        assert!(matches!(go(&mut s), Go::Served));
        held.push(s);
    }
    let mut s = connect();
    match go(&mut s) {
        Go::Refused(t, msg) => {
            assert_eq!(t, rep::ERR_POLICY);
            assert!(
                msg.contains("127.0.0.1 already has its limit of 4"),
                "{msg}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(srv.server.stats().refused.load(Ordering::Relaxed) >= 1);
    // Another address is served.
    let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 3), addr);
    s.set_read_timeout(Some(GRACE)).unwrap();
    assert!(matches!(go(&mut s), Go::Served));
    drop(s);
    // Closing one frees its slot (the server sees the close at once).
    drop(held.pop());
    let t = Instant::now();
    loop {
        let mut s = connect();
        if let Go::Served = go(&mut s) {
            break;
        }
        assert!(
            t.elapsed() < GRACE,
            "the freed slot did not come back within {GRACE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    time_bound("slot back", t.elapsed(), GRACE);
    srv.stop();
}
