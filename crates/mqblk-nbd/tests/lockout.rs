//! No lock-out: connections that send nothing, or negotiate and then idle,
//! cannot keep a new client out for longer than the handshake deadline;
//! one peer cannot take every slot; a refused client is told why.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use mqblk_nbd::{ConnLimits, TlsMode};
use mqblk_nbd_proto::consts::{cmd, opt, rep};
use mqblk_nbd_proto::handshake::{encode_option, OptionReplyHeader};

const SILENT: usize = 256;
const IDLE: usize = 256;
/// Upper bound on any wait in these tests (not a timing assertion: a
/// slow machine only makes the test take longer).
const WAIT_MAX: Duration = Duration::from_secs(60);

/// 512 client sockets and as many server sockets in one process.
fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the live struct we pass.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    assert_eq!(got, 0, "getrlimit");
    if r.rlim_cur < 4096 && r.rlim_max > r.rlim_cur {
        r.rlim_cur = r.rlim_max.min(4096);
        // SAFETY: setrlimit reads the live struct we pass.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    }
}

/// Greeting, flags, `OPT_GO`: the server's first option reply.
fn go<S: Read + Write>(s: &mut S) -> (OptionReplyHeader, Vec<u8>) {
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut d = Vec::new();
    mqblk_nbd_proto::InfoRequest {
        name: "",
        requests: vec![],
    }
    .encode(&mut d);
    let mut v = Vec::new();
    encode_option(opt::GO, &d, &mut v);
    s.write_all(&v).unwrap();
    let mut h = [0u8; 20];
    s.read_exact(&mut h).unwrap();
    let h = OptionReplyHeader::decode(&h).unwrap();
    let mut d = vec![0u8; h.len as usize];
    s.read_exact(&mut d).unwrap();
    (h, d)
}

#[test]
fn silent_and_idle_clients_do_not_lock_out_a_new_one() {
    raise_fd_limit();
    let handshake = Duration::from_millis(1500);
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
        s.set_read_timeout(Some(WAIT_MAX)).unwrap();
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
    let t = Instant::now();
    while srv.server.stats().connections.load(Ordering::Relaxed) < (SILENT + IDLE) as u64 {
        assert!(
            t.elapsed() < WAIT_MAX,
            "the server never took all clients in"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut s = connect();
    let (h, msg) = go(&mut s);
    assert_eq!(h.reply_type, rep::ERR_POLICY, "expected a refusal");
    let msg = String::from_utf8_lossy(&msg).into_owned();
    assert!(msg.contains("limit of 512 connections"), "{msg}");
    drop(s);

    // Once the silent ones pass the handshake deadline, a new client is
    // served.
    let served_at = loop {
        assert!(
            silent_from.elapsed() < WAIT_MAX,
            "no new client served within {WAIT_MAX:?}"
        );
        let mut s = connect();
        let (h, _) = go(&mut s);
        if h.reply_type == rep::INFO || h.reply_type == rep::ACK {
            break silent_from.elapsed();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
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
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
        assert!(total <= 18, "only the greeting was sent");
    }
    // The idle ones are still served (no idle timeout by default).
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
    let srv = TestServer::start_with(
        vec![export("", "ram,size=16M")],
        ConnLimits {
            idle_timeout: Some(Duration::from_millis(300)),
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        false,
    );
    let s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(WAIT_MAX)).unwrap();
    let mut c = RawClient::handshake(s, "", false);
    c.send(cmd::FLUSH, 0, 7, 0, 0, &[]);
    assert_eq!(c.simple_reply(), (0, 7));
    assert!(c.closed(), "the idle connection is closed");
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
        s.set_read_timeout(Some(WAIT_MAX)).unwrap();
        s
    };
    let mut held: Vec<TcpStream> = Vec::new();
    for _ in 0..4 {
        let mut s = connect();
        let (h, _) = go(&mut s);
        assert_ne!(h.reply_type & rep::FLAG_ERROR, rep::FLAG_ERROR);
        held.push(s);
    }
    let mut s = connect();
    let (h, msg) = go(&mut s);
    assert_eq!(h.reply_type, rep::ERR_POLICY);
    let msg = String::from_utf8_lossy(&msg).into_owned();
    assert!(
        msg.contains("127.0.0.1 already has its limit of 4"),
        "{msg}"
    );
    assert!(
        srv.server
            .stats()
            .refused
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 1
    );
    // Closing one frees its slot (the server sees the close at once).
    drop(held.pop());
    let t = Instant::now();
    loop {
        assert!(t.elapsed() < WAIT_MAX, "the freed slot never came back");
        let mut s = connect();
        let (h, _) = go(&mut s);
        if h.reply_type & rep::FLAG_ERROR == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    srv.stop();
}
