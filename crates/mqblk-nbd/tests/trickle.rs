//! The client's reply parser is resumable: replies that arrive a few bytes
//! at a time, cut anywhere (inside a header, a chunk's fixed part, or a
//! read's data), are put back together. A proxy between the client and
//! mqblk's server passes the server's bytes on in pieces of 1 to 37 bytes.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

use common::*;

/// Accept one connection at a time on `listen` and relay it to `to`,
/// passing the server's bytes on in small pieces.
fn trickle_proxy(listen: UnixListener, to: std::path::PathBuf) {
    std::thread::spawn(move || {
        for client in listen.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = UnixStream::connect(&to) else {
                return;
            };
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c_in, &mut s_out);
                let _ = s_out.shutdown(std::net::Shutdown::Write);
            });
            let (mut s_in, mut c_out) = (server, client);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut seed = 0x9e37_79b9_u32;
                loop {
                    let n = match s_in.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let mut at = 0;
                    while at < n {
                        seed ^= seed << 13;
                        seed ^= seed >> 17;
                        seed ^= seed << 5;
                        let k = (1 + seed % 37) as usize;
                        let end = (at + k).min(n);
                        if c_out.write_all(&buf[at..end]).is_err() {
                            return;
                        }
                        if seed.is_multiple_of(64) {
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        at = end;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
}

#[test]
fn replies_cut_into_small_pieces_are_put_back_together() {
    let srv = TestServer::start(vec![export("", "ram,size=16M")]);
    let dir = TempDir::new("trickle");
    let sock = dir.path().join("proxy.sock");
    trickle_proxy(UnixListener::bind(&sock).unwrap(), srv.socket.clone());
    let dev = mqblk::open(&format!("nbd+unix:///?socket={},conns=2", sock.display())).unwrap();
    let mut ctx = dev.context().unwrap();
    // Sizes below and above the size read straight into the request
    // (32 KiB), and reads of holes of 64 KiB and more (OFFSET_HOLE chunks).
    let sizes = [4096usize, 12288, 65536, 200704, 1 << 20];
    let mut at = 0u64;
    let mut written = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let data = pattern(i as u64, len);
        ctx.write_at(&data, at).unwrap();
        written.push((at, data));
        // A hole after each piece.
        at += len as u64 + 256 * 1024;
    }
    for (at, data) in &written {
        let mut back = vec![0u8; data.len()];
        ctx.read_at(&mut back, *at).unwrap();
        assert!(&back == data, "{} bytes at {at}", data.len());
        // Data, then a hole, in one read.
        let mut span = vec![1u8; data.len() + 128 * 1024];
        ctx.read_at(&mut span, *at).unwrap();
        assert!(&span[..data.len()] == data.as_slice());
        assert!(
            span[data.len()..].iter().all(|&b| b == 0),
            "the hole after {at}"
        );
    }
    // Many in flight at once, answered out of order and cut anywhere.
    let mut bufs = Vec::new();
    for i in 0..48u64 {
        let mut b = dev.alloc_buf(8192);
        b.as_mut_slice().copy_from_slice(&pattern(100 + i, 8192));
        let mut bio = mqblk::Bio::write_at((8 << 20) + i * 8192, b);
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    let mut done = 0;
    while done < 48 {
        done += ctx.poll_wait(1, |c| {
            c.result().unwrap();
            bufs.push(c.into_bio());
        });
    }
    for bio in bufs.drain(..) {
        let i = bio.private;
        let mut r = mqblk::Bio::read_at((8 << 20) + i * 8192, bio.into_buffers().next().unwrap());
        r.private = i;
        ctx.submit(r).unwrap();
    }
    let mut done = 0;
    while done < 48 {
        done += ctx.poll_wait(1, |c| {
            c.result().unwrap();
            let i = c.private();
            let bio = c.into_bio();
            assert!(
                bio.segment(0).unwrap().as_slice() == pattern(100 + i, 8192).as_slice(),
                "bio {i}"
            );
        });
    }
}
