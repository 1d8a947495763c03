//! The client against a server whose replies are damaged: a proxy passes
//! mqblk's server's negotiation through untouched, then flips bytes of the
//! reply stream, sends pieces of it twice, cuts it short, or goes silent
//! (then requests time out, and the connection is given up). Whatever it does, nothing panics or
//! hangs, and every bio completes exactly once (with its data, or an
//! error): the parser takes what the server sends as untrusted input.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mqblk::Bio;
use mqblk_test_support::time_bound;

/// Seeds from this one on get a server that goes silent mid-run.
const STALLING_FROM: u64 = 30;

/// The client's request timeout.
const IO_TIMEOUT_MS: u64 = 1000;
/// Every bio of a round ends by its timeout, late only by scheduling on
/// a loaded 2-core machine (a second).
const ROUND_MAX: Duration = Duration::from_millis(IO_TIMEOUT_MS + 1000);

/// The NBD request magic: the client has finished negotiating once it
/// sends one.
const REQUEST_MAGIC: [u8; 4] = 0x2560_9513u32.to_be_bytes();

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Relay one connection at a time from `listen` to `to`, damaging the
/// server's bytes after negotiation, as `seed` decides.
fn damaging_proxy(listen: UnixListener, to: std::path::PathBuf, seed: u64) {
    std::thread::spawn(move || {
        for (n, client) in listen.incoming().enumerate() {
            let Ok(client) = client else { return };
            let Ok(server) = UnixStream::connect(&to) else {
                return;
            };
            let talking = Arc::new(AtomicBool::new(false));
            let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let t = talking.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    let k = match c_in.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => k,
                    };
                    if buf[..k].windows(4).any(|w| w == REQUEST_MAGIC) {
                        t.store(true, Ordering::Release);
                    }
                    if s_out.write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
                let _ = s_out.shutdown(std::net::Shutdown::Both);
            });
            let (mut s_in, mut c_out) = (server, client);
            let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n as u64 ^ 1;
            // The last seeds' servers go silent instead.
            let stall = seed >= STALLING_FROM;
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                loop {
                    let k = match s_in.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => k,
                    };
                    if talking.load(Ordering::Acquire) && stall {
                        // Answer nothing more, and keep the connection
                        // open: requests time out; then the connection is
                        // given up.
                        let mut sink = [0u8; 4096];
                        while matches!(s_in.read(&mut sink), Ok(n) if n > 0) {}
                        break;
                    }
                    if talking.load(Ordering::Acquire) {
                        match xorshift(&mut rng) % 8 {
                            // Flip a few bytes anywhere in what came.
                            0..=4 => {
                                for _ in 0..1 + xorshift(&mut rng) % 3 {
                                    let i = (xorshift(&mut rng) % k as u64) as usize;
                                    buf[i] ^= 1 << (xorshift(&mut rng) % 8);
                                }
                            }
                            // Cut the stream here, mid-reply.
                            5 => {
                                let cut = (xorshift(&mut rng) % k as u64) as usize;
                                let _ = c_out.write_all(&buf[..cut]);
                                break;
                            }
                            // Send it twice: replies to requests no
                            // longer (or never) in flight.
                            6 if c_out.write_all(&buf[..k]).is_err() => break,
                            // Pass it on untouched.
                            _ => {}
                        }
                    }
                    if c_out.write_all(&buf[..k]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
}

#[test]
fn damaged_replies_never_panic_or_hang_and_every_bio_completes_once() {
    let srv = TestServer::start(vec![export("", "ram,size=16M")]);
    for seed in 0..32u64 {
        let dir = TempDir::new("hostile");
        let sock = dir.path().join("proxy.sock");
        damaging_proxy(UnixListener::bind(&sock).unwrap(), srv.socket.clone(), seed);
        let dev = mqblk::open(&format!(
            "nbd+unix:///?socket={},io_timeout_ms={IO_TIMEOUT_MS}",
            sock.display()
        ))
        .unwrap();
        let mut ctx = dev.context().unwrap();
        let t = Instant::now();
        let mut submitted = 0u64;
        let mut completed = vec![0u32; 64];
        let mut ok = 0u32;
        for round in 0..4u64 {
            let round_at = Instant::now();
            for i in 0..16u64 {
                let id = round * 16 + i;
                // Reads of 4 KiB to 256 KiB (structured, with holes), and
                // writes.
                let len = 4096usize << (id % 7);
                let off = (id * 256 * 1024) % (15 << 20);
                let mut bio = if id % 3 == 0 {
                    let mut b = dev.alloc_buf(len);
                    b.as_mut_slice().fill(id as u8);
                    Bio::write_at(off, b)
                } else {
                    Bio::read_at(off, dev.alloc_buf(len))
                };
                bio.private = id;
                if ctx.submit(bio).is_ok() {
                    submitted += 1;
                } else {
                    completed[id as usize] += 1;
                }
            }
            ctx.unplug();
            while completed.iter().map(|&c| u64::from(c)).sum::<u64>() < (round + 1) * 16 {
                ctx.poll_wait(1, |c| {
                    completed[c.private() as usize] += 1;
                    ok += u32::from(c.result().is_ok());
                });
                assert!(
                    round_at.elapsed() < ROUND_MAX,
                    "seed {seed}: {} bios of round {round} still in flight after {:?}",
                    ctx.in_flight(),
                    round_at.elapsed()
                );
            }
            time_bound(&format!("round {round}"), round_at.elapsed(), ROUND_MAX);
        }
        assert!(submitted > 0);
        eprintln!(
            "seed {seed}: {ok} of {submitted} bios succeeded, in {:?}",
            t.elapsed()
        );
        assert!(
            completed.iter().all(|&c| c == 1),
            "seed {seed}: completions per bio {completed:?}"
        );
    }
}
