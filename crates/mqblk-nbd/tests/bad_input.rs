//! Malformed handshakes and requests over a real socket. Bad requests get
//! the NBD error the protocol names and the connection stays up; broken
//! framing closes that connection only, and other clients keep being
//! served.

mod common;

use std::io::Write;
use std::time::Duration;

use common::*;
use mqblk_nbd::ConnLimits;
use mqblk_nbd_proto::consts::{cmd, cmd_flags, opt, rep, IHAVEOPT};
use mqblk_nbd_proto::handshake::encode_option;
use mqblk_nbd_proto::TlsMode;

const EPERM: u32 = 1;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

fn server() -> TestServer {
    let mut ro = export("ro", "ram,size=1M");
    ro.read_only = true;
    TestServer::start_with(
        vec![export("disk", "ram,size=8M"), ro],
        ConnLimits {
            stall_timeout: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(5),
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        false,
    )
}

/// A healthy client still gets served.
fn still_serves(srv: &TestServer) {
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    c.send(cmd::WRITE, 0, 1, 0, 512, &[7u8; 512]);
    assert_eq!(c.simple_reply(), (0, 1));
    c.send(cmd::READ, 0, 2, 0, 512, &[]);
    assert_eq!(c.simple_reply(), (0, 2));
    let mut b = [0u8; 512];
    std::io::Read::read_exact(&mut c.s, &mut b).unwrap();
    assert_eq!(b, [7u8; 512]);
}

#[test]
fn bad_requests_get_nbd_errors_and_the_connection_stays_up() {
    let srv = server();
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    let cap = 8u64 << 20;
    // Out of range: read EINVAL, write ENOSPC (payload consumed).
    c.send(cmd::READ, 0, 1, cap, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 1));
    c.send(cmd::WRITE, 0, 2, cap - 512, 1024, &[0u8; 1024]);
    assert_eq!(c.simple_reply(), (ENOSPC, 2));
    c.send(cmd::WRITE_ZEROES, 0, 3, u64::MAX - 511, 512, &[]);
    assert_eq!(c.simple_reply(), (ENOSPC, 3));
    // Misaligned offset and length.
    c.send(cmd::READ, 0, 4, 100, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 4));
    c.send(cmd::WRITE, 0, 5, 0, 100, &[0u8; 100]);
    assert_eq!(c.simple_reply(), (EINVAL, 5));
    // A read over the maximum payload.
    c.send(cmd::READ, 0, 6, 0, (32 << 20) + 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 6));
    // Unknown command, unknown flag, flag on the wrong command.
    c.send(99, 0, 7, 0, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 7));
    c.send(cmd::READ, 1 << 12, 8, 0, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 8));
    c.send(cmd::READ, cmd_flags::REQ_ONE, 9, 0, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 9));
    // Block status without a negotiated meta context.
    c.send(cmd::BLOCK_STATUS, 0, 10, 0, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 10));
    // Flush with a nonzero length.
    c.send(cmd::FLUSH, 0, 11, 0, 512, &[]);
    assert_eq!(c.simple_reply(), (EINVAL, 11));
    // And the connection still works.
    c.send(cmd::WRITE, cmd_flags::FUA, 12, 4096, 512, &[1u8; 512]);
    assert_eq!(c.simple_reply(), (0, 12));
    c.send(cmd::FLUSH, 0, 13, 0, 0, &[]);
    assert_eq!(c.simple_reply(), (0, 13));

    // Writes to a read-only export: EPERM.
    let mut r = RawClient::handshake(srv.connect(), "ro", false);
    r.send(cmd::WRITE, 0, 1, 0, 512, &[0u8; 512]);
    assert_eq!(r.simple_reply(), (EPERM, 1));
    r.send(cmd::READ, 0, 2, 0, 512, &[]);
    assert_eq!(r.simple_reply(), (0, 2));
}

#[test]
fn broken_framing_closes_only_that_connection() {
    let srv = server();
    let mut other = RawClient::handshake(srv.connect(), "disk", false);

    // A bad request magic.
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    c.s.write_all(&[0xde, 0xad, 0xbe, 0xef]).unwrap();
    c.s.write_all(&[0u8; 24]).unwrap();
    assert!(c.closed(), "bad magic must close the connection");

    // A write whose length is over the maximum payload.
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    c.send(cmd::WRITE, 0, 1, 0, 1 << 30, &[]);
    assert!(c.closed(), "an oversize write must close the connection");

    // A truncated request, then silence: closed after the stall timeout.
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    c.s.write_all(
        &mqblk_nbd_proto::Request {
            cmd: cmd::READ,
            len: 512,
            ..Default::default()
        }
        .encode()[..10],
    )
    .unwrap();
    assert!(c.closed(), "a stalled request must close the connection");

    // A write whose payload stops short.
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    c.send(cmd::WRITE, 0, 1, 0, 4096, &[0u8; 1000]);
    assert!(c.closed(), "a stalled payload must close the connection");

    // The first connection never noticed.
    other.send(cmd::READ, 0, 5, 0, 512, &[]);
    assert_eq!(other.simple_reply(), (0, 5));
    still_serves(&srv);
    drop(srv);
}

fn greet(srv: &TestServer) -> std::os::unix::net::UnixStream {
    let mut s = srv.connect();
    let mut g = [0u8; 18];
    std::io::Read::read_exact(&mut s, &mut g).unwrap();
    assert_eq!(
        mqblk_nbd_proto::handshake::decode_greeting(&g).unwrap() & 1,
        1
    );
    s
}

#[test]
fn malformed_handshakes_are_answered_or_dropped_as_the_spec_says() {
    let srv = server();
    // Unknown client flags: dropped.
    let mut s = greet(&srv);
    s.write_all(&0x80u32.to_be_bytes()).unwrap();
    assert!(RawClient { s }.closed());

    // A bad option magic: dropped.
    let mut s = greet(&srv);
    s.write_all(&3u32.to_be_bytes()).unwrap();
    s.write_all(&[0x11u8; 16]).unwrap();
    assert!(RawClient { s }.closed());

    // A huge option length: dropped without reading it.
    let mut s = greet(&srv);
    s.write_all(&3u32.to_be_bytes()).unwrap();
    s.write_all(&IHAVEOPT.to_be_bytes()).unwrap();
    s.write_all(&opt::GO.to_be_bytes()).unwrap();
    s.write_all(&u32::MAX.to_be_bytes()).unwrap();
    assert!(RawClient { s }.closed());

    // A truncated option, then silence: dropped after the stall timeout
    // (here the handshake timeout).
    let mut s = greet(&srv);
    s.write_all(&3u32.to_be_bytes()).unwrap();
    s.write_all(&IHAVEOPT.to_be_bytes()[..5]).unwrap();
    assert!(RawClient { s }.closed());

    // Unknown options: ERR_UNSUP, and negotiation goes on.
    let mut s = greet(&srv);
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut c = RawClient { s };
    for o in [0u32, 4, 11, 12, 0x7fff_ffff] {
        let mut v = Vec::new();
        encode_option(o, b"junk", &mut v);
        c.s.write_all(&v).unwrap();
        let (h, _) = c.option_reply();
        assert_eq!(h.opt, o);
        assert_eq!(h.reply_type, rep::ERR_UNSUP, "option {o}");
    }
    // Malformed data of a known option: ERR_INVALID; unknown export:
    // ERR_UNKNOWN; STARTTLS without TLS: ERR_POLICY.
    let mut v = Vec::new();
    encode_option(opt::GO, &[0, 0, 0, 9, b'x'], &mut v);
    encode_option(opt::LIST, b"x", &mut v);
    let mut go = Vec::new();
    mqblk_nbd_proto::InfoRequest {
        name: "nope",
        requests: vec![],
    }
    .encode(&mut go);
    encode_option(opt::GO, &go, &mut v);
    encode_option(opt::STARTTLS, &[], &mut v);
    c.s.write_all(&v).unwrap();
    for want in [
        rep::ERR_INVALID,
        rep::ERR_INVALID,
        rep::ERR_UNKNOWN,
        rep::ERR_POLICY,
    ] {
        assert_eq!(c.option_reply().0.reply_type, want);
    }
    // OPT_EXPORT_NAME for a missing export: the server must hang up.
    let mut v = Vec::new();
    encode_option(opt::EXPORT_NAME, b"missing", &mut v);
    c.s.write_all(&v).unwrap();
    assert!(c.closed());

    still_serves(&srv);
}

#[test]
fn a_client_that_does_not_read_replies_is_bounded() {
    // Pipelined reads without reading replies: the server stops reading
    // at its per-connection bound, and when the client finally reads,
    // every reply arrives.
    let srv = TestServer::start_with(
        vec![export("", "ram,size=64M")],
        ConnLimits {
            max_requests: 8,
            max_bytes: 32 << 20,
            ..ConnLimits::default()
        },
        TlsMode::Off,
        None,
        false,
    );
    let mut c = RawClient::handshake(srv.connect(), "", false);
    let n = 64u64;
    let writer = {
        let mut s = c.s.try_clone().unwrap();
        std::thread::spawn(move || {
            for i in 0..n {
                let r = mqblk_nbd_proto::Request {
                    cmd: cmd::READ,
                    cookie: i,
                    offset: i << 20,
                    len: 1 << 20,
                    flags: 0,
                };
                s.write_all(&r.encode()).unwrap();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut seen = vec![false; n as usize];
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..n {
        let (err, cookie) = c.simple_reply();
        assert_eq!(err, 0);
        std::io::Read::read_exact(&mut c.s, &mut buf).unwrap();
        seen[cookie as usize] = true;
    }
    writer.join().unwrap();
    assert!(seen.iter().all(|&s| s), "every request answered once");
}

#[test]
fn a_flood_of_bad_requests_is_answered_in_bounded_batches() {
    let srv = server();
    let mut c = RawClient::handshake(srv.connect(), "disk", false);
    let n = 20_000u64;
    let writer = {
        let mut s = c.s.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut v = Vec::with_capacity(28 * 1000);
            for chunk in 0..n / 1000 {
                v.clear();
                for i in 0..1000 {
                    let r = mqblk_nbd_proto::Request {
                        cmd: 77,
                        cookie: chunk * 1000 + i,
                        ..Default::default()
                    };
                    v.extend_from_slice(&r.encode());
                }
                s.write_all(&v).unwrap();
            }
        })
    };
    for i in 0..n {
        assert_eq!(
            c.simple_reply(),
            (EINVAL, i),
            "replies to invalid requests come in order"
        );
    }
    writer.join().unwrap();
    still_serves(&srv);
}
