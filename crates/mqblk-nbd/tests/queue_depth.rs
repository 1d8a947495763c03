//! A device with fewer tags than a client keeps in flight. The I/O thread
//! must not block in the core waiting for a tag: it stops taking that
//! connection's requests (they wait in the socket) and goes on serving
//! every other connection on the thread, then takes them once the device
//! completes one.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;
use mqblk_nbd_proto::consts::cmd;

const READS: u64 = 6;
const LEN: usize = 4096;
const REPLY: usize = 16 + LEN;

/// The device's time per request (`completion_nsec`).
const SERVICE: Duration = Duration::from_secs(1);
/// The longest wait for the next reply: the device's time for one
/// request, late only by scheduling (a second more).
const REPLY_GAP_MAX: Duration = Duration::from_secs(SERVICE.as_secs() + 1);

fn connect(srv: &TestServer) -> RawClient {
    let s = UnixStream::connect(&srv.socket).unwrap();
    // The device answers one request a second: each reply comes within
    // that of the one before, late only by scheduling (a second more).
    s.set_read_timeout(Some(REPLY_GAP_MAX)).unwrap();
    RawClient::handshake(s, "", false)
}

#[test]
fn a_full_device_queue_does_not_hold_up_the_other_connections_of_its_thread() {
    // One I/O thread; one tag; each request takes a second.
    let srv = TestServer::start_on_threads(
        vec![export(
            "",
            &format!(
                "null,size=16M,completion=timer,completion_nsec={},queue_depth=1,hw_queues=1",
                SERVICE.as_nanos()
            ),
        )],
        1,
    );
    let mut a = connect(&srv);
    // Apart from each other, so that none merges with another.
    for i in 0..READS {
        a.send(cmd::READ, 0, i, i * 2 * LEN as u64, LEN as u32, &[]);
    }
    // A second connection negotiates on the same thread while the first
    // has five reads waiting for the device's one tag. A thread that
    // blocked for the tag would finish those first: the first connection
    // would already hold five replies when this handshake is done.
    let _b = connect(&srv);
    a.s.set_nonblocking(true).unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; READS as usize * REPLY];
    while let Ok(n) = a.s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        got.len() < 5 * REPLY,
        "{} replies came before the second connection was served",
        got.len() / REPLY
    );
    // Every read is still answered, in the device's order.
    a.s.set_nonblocking(false).unwrap();
    let mut gap_worst = Duration::ZERO;
    while got.len() < READS as usize * REPLY {
        let t = std::time::Instant::now();
        let n = a.s.read(&mut buf).unwrap();
        gap_worst = gap_worst.max(t.elapsed());
        assert_ne!(n, 0, "connection closed early");
        got.extend_from_slice(&buf[..n]);
    }
    mqblk_test_support::time_bound("reply gap", gap_worst, REPLY_GAP_MAX);
    for i in 0..READS as usize {
        let h = mqblk_nbd_proto::ReplyHeader::decode(&got[i * REPLY..i * REPLY + 16]).unwrap();
        assert_eq!(
            h,
            mqblk_nbd_proto::ReplyHeader::Simple {
                error: 0,
                cookie: i as u64
            }
        );
    }
    srv.stop();
}
