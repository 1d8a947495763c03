//! A device error is the client's error, not the connection's: when the
//! exported device fails a request (bad blocks, injected faults), the
//! server answers that request with `EIO` and goes on serving it and
//! every other request, on the same connection. Seen from a raw client
//! (pipelined requests), from qemu-io, and from mqblk's own client.

mod common;

use std::os::unix::net::UnixStream;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use mqblk::{Bio, Status};
use mqblk_nbd_proto::consts::cmd;

/// Sectors 2048..=2055: the 4 KiB at 1 MiB fail, reads and writes.
const BAD: &str = "null,size=64M,memory_backed=1,bad_blocks=2048-2055";
const BAD_AT: u64 = 1 << 20;
const EIO: u32 = 5;
/// A hang guard on replies the device gives at once.
const REPLY_MAX: Duration = Duration::from_secs(5);

/// (connections, errors answered, connections dropped), once every
/// client has gone (the server adds a connection's counts when it closes).
fn stats(srv: &TestServer) -> (u64, u64, u64) {
    let st = srv.server.stats();
    let t = std::time::Instant::now();
    while st.open.load(Ordering::Relaxed) > 0 {
        assert!(
            t.elapsed() < REPLY_MAX,
            "a connection whose client left is still open"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    (
        st.connections.load(Ordering::Relaxed),
        st.errors.load(Ordering::Relaxed),
        st.dropped.load(Ordering::Relaxed),
    )
}

#[test]
fn a_failing_request_gets_eio_and_its_connection_goes_on() {
    let srv = TestServer::start(vec![export("", BAD)]);
    let s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(REPLY_MAX)).unwrap();
    let mut c = RawClient::handshake(s, "", false);
    let good = pattern(1, 4096);
    // Pipelined: good and bad requests in flight together.
    c.send(cmd::WRITE, 0, 1, 0, 4096, &good);
    c.send(cmd::READ, 0, 2, BAD_AT, 4096, &[]);
    c.send(cmd::WRITE, 0, 3, BAD_AT, 4096, &good);
    c.send(cmd::READ, 0, 4, 0, 4096, &[]);
    c.send(cmd::FLUSH, 0, 5, 0, 0, &[]);
    let mut errors = std::collections::BTreeMap::new();
    for _ in 0..5 {
        let (err, cookie) = c.simple_reply();
        if cookie == 4 && err == 0 {
            let mut d = vec![0u8; 4096];
            std::io::Read::read_exact(&mut c.s, &mut d).unwrap();
            assert!(d == good, "the good read got the written data");
        }
        errors.insert(cookie, err);
    }
    println!("errors by cookie: {errors:?}");
    assert_eq!(
        errors.into_iter().collect::<Vec<_>>(),
        vec![(1, 0), (2, EIO), (3, EIO), (4, 0), (5, 0)]
    );
    // Later requests on the same connection are served, good and bad.
    for round in 0..3u64 {
        c.send(cmd::READ, 0, 10 + round, BAD_AT, 4096, &[]);
        assert_eq!(c.simple_reply(), (EIO, 10 + round));
        c.send(cmd::READ, 0, 20 + round, 4096 * round, 4096, &[]);
        assert_eq!(c.simple_reply(), (0, 20 + round));
        let mut d = vec![0u8; 4096];
        std::io::Read::read_exact(&mut c.s, &mut d).unwrap();
    }
    drop(c);
    let (conns, errors, dropped) = stats(&srv);
    assert_eq!(
        (conns, errors, dropped),
        (1, 5, 0),
        "errors answered, none dropped"
    );
}

#[test]
fn qemu_io_gets_eio_for_bad_blocks_and_the_rest_of_its_commands_work() {
    require("qemu-io");
    let srv = TestServer::start(vec![export("", BAD)]);
    let before = stats(&srv);
    let o = run_timeout(
        Command::new("qemu-io")
            .args(["-f", "raw"])
            .arg(srv.uri(""))
            .args([
                "-c",
                "write -P 0x5a 0 64k",
                "-c",
                "read -P 0x5a 0 4k",
                "-c",
                "read 1M 4k",
                "-c",
                "write -P 0x33 1M 4k",
                "-c",
                "read -P 0x5a 4k 4k",
                "-c",
                "write -P 0x77 2M 4k",
                "-c",
                "read -P 0x77 2M 4k",
            ]),
        Duration::from_secs(60),
    );
    let out = String::from_utf8_lossy(&o.stdout);
    println!("{out}");
    // qemu-io says each failure and exits 1 for them, after running
    // every command on its one connection.
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert_eq!(out.matches("read failed: Input/output error").count(), 1);
    assert_eq!(out.matches("write failed: Input/output error").count(), 1);
    for ok in [
        "wrote 65536/65536 bytes at offset 0",
        "read 4096/4096 bytes at offset 0",
        "read 4096/4096 bytes at offset 4096",
        "wrote 4096/4096 bytes at offset 2097152",
        "read 4096/4096 bytes at offset 2097152",
    ] {
        assert!(out.contains(ok), "missing {ok:?}:\n{out}");
    }
    assert!(!out.contains("Pattern verification failed"), "{out}");
    let after = stats(&srv);
    assert_eq!(after.0 - before.0, 1, "one connection for every command");
    assert_eq!(after.1 - before.1, 2, "two requests answered with an error");
    assert_eq!(after.2, before.2, "no connection dropped");
}

#[test]
fn mqblk_client_gets_io_errors_and_keeps_its_connection() {
    // Every 4th request fails, and the bad blocks always do.
    let srv = TestServer::start(vec![
        export("", BAD),
        export("every4th", "null,size=64M,error_interval=4"),
    ]);
    let dev = mqblk::open(&srv.uri("")).unwrap();
    let mut ctx = dev.context().unwrap();
    let data = pattern(2, 4096);
    let mut buf = dev.alloc_buf(4096);
    buf.as_mut_slice().copy_from_slice(&data);
    ctx.write_at(buf.as_slice(), 0).unwrap();
    let mut back = dev.alloc_buf(4096);
    let e = ctx.read_at(back.as_mut_slice(), BAD_AT).unwrap_err();
    assert_eq!(e.status(), Status::IoError, "{e}");
    let e = ctx.write_at(buf.as_slice(), BAD_AT).unwrap_err();
    assert_eq!(e.status(), Status::IoError, "{e}");
    ctx.read_at(back.as_mut_slice(), 0).unwrap();
    assert!(back.as_slice() == data.as_slice());
    drop(ctx);
    drop(dev);

    // 64 reads in flight at once on one connection: every 4th fails,
    // every other one succeeds, and the connection is still up after.
    let before = stats(&srv);
    let dev = mqblk::open(&srv.uri("every4th")).unwrap();
    let mut ctx = dev.context().unwrap();
    let (mut ok, mut failed) = (0u64, 0u64);
    for round in 0..4u64 {
        let mut completed = vec![0u32; 16];
        for i in 0..16u64 {
            // Apart from each other, so that none merges with another.
            let mut bio = Bio::read_at((round * 16 + i) * 2 * 4096, dev.alloc_buf(4096));
            bio.private = i;
            ctx.submit(bio).unwrap();
        }
        ctx.unplug();
        let mut done = 0;
        while done < 16 {
            done += ctx.poll_wait(1, |c| {
                completed[c.private() as usize] += 1;
                match c.status() {
                    Status::Ok => ok += 1,
                    Status::IoError => failed += 1,
                    s => panic!("unexpected status {s:?}"),
                }
            });
        }
        assert!(completed.iter().all(|&n| n == 1), "{completed:?}");
    }
    println!("every 4th: {ok} reads succeeded, {failed} failed");
    assert_eq!(failed, 16);
    assert_eq!(ok, 48);
    drop(ctx);
    drop(dev);
    let after = stats(&srv);
    assert_eq!(
        after.1 - before.1,
        failed,
        "the server answered each with an error"
    );
    assert_eq!(after.2, before.2, "no connection dropped");
}
