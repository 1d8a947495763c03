//! `NBD_FLAG_CAN_MULTI_CONN`: a write replied to on one connection is
//! seen by a read on any other, and a flush on any connection covers the
//! writes replied to on all of them.
//!
//! Why it holds: every connection to an export submits to the same
//! [`mqblk_core::Device`] (through its I/O thread's context), and the
//! server replies to a write only when the device completed it, so the
//! data is in the device's one copy before the client hears of it. A flush
//! goes to the device, not to a connection, and the device's flush covers
//! every write it completed before (the core's flush semantics); nothing
//! is cached per connection or per thread above the device.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;
use mqblk_nbd_proto::consts::{cmd, transmission_flags as tf};

const CONNS: usize = 4;
const REGION: u64 = 1 << 20;

fn connect(srv: &TestServer) -> RawClient {
    let s = UnixStream::connect(&srv.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    RawClient::handshake(s, "", false)
}

#[test]
fn four_connections_write_flush_and_read_across_each_other() {
    let dir = TempDir::new("multiconn");
    let img = dir.path().join("disk.img");
    std::fs::write(&img, vec![0u8; (CONNS as u64 * REGION) as usize]).unwrap();
    // A file device has a write cache to flush; ram is the other kind.
    for spec in [
        format!("file:{},engine=psync", img.display()),
        "ram,size=4M".to_string(),
    ] {
        let srv = TestServer::start(vec![export("", &spec)]);
        let flags = srv.server.export_infos()[0].flags;
        assert_ne!(flags & tf::CAN_MULTI_CONN, 0, "{spec}: CAN_MULTI_CONN");
        let mut c: Vec<RawClient> = (0..CONNS).map(|_| connect(&srv)).collect();
        for round in 0..3u64 {
            // Connection i writes region i.
            let data: Vec<Vec<u8>> = (0..CONNS)
                .map(|i| pattern(round * 10 + i as u64, 64 << 10))
                .collect();
            for (i, conn) in c.iter_mut().enumerate() {
                let off = i as u64 * REGION;
                conn.send(cmd::WRITE, 0, i as u64, off, data[i].len() as u32, &data[i]);
            }
            for (i, conn) in c.iter_mut().enumerate() {
                assert_eq!(conn.simple_reply(), (0, i as u64));
            }
            // Flush on the next connection over.
            for i in 0..CONNS {
                let f = &mut c[(i + 1) % CONNS];
                f.send(cmd::FLUSH, 0, 100 + i as u64, 0, 0, &[]);
                assert_eq!(f.simple_reply(), (0, 100 + i as u64));
            }
            // Read back on the connection two over.
            for (i, d) in data.iter().enumerate() {
                let r = &mut c[(i + 2) % CONNS];
                let off = i as u64 * REGION;
                r.send(cmd::READ, 0, 200 + i as u64, off, d.len() as u32, &[]);
                assert_eq!(r.simple_reply(), (0, 200 + i as u64));
                let mut got = vec![0u8; d.len()];
                r.s.read_exact(&mut got).unwrap();
                assert!(got == *d, "{spec}: region {i} round {round}");
            }
        }
        drop(c);
        srv.stop();
        if spec.starts_with("file:") {
            // What the flushes covered is in the file.
            let on_disk = std::fs::read(&img).unwrap();
            for i in 0..CONNS {
                let d = pattern(20 + i as u64, 64 << 10);
                let off = (i as u64 * REGION) as usize;
                assert!(on_disk[off..off + d.len()] == d[..], "file region {i}");
            }
        }
    }
}
