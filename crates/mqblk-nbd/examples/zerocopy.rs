//! Does `MSG_ZEROCOPY` pay for NBD read replies on this machine?
//!
//! The server sends a read reply as one gathered write: the reply header
//! and the payload straight from the request's buffer, so mqblk copies
//! nothing, and the kernel copies the payload into socket buffers.
//! `MSG_ZEROCOPY` asks the kernel to pin the pages instead; the buffer may
//! then not be reused until a notification on the socket's error queue
//! says the kernel is done with it, and the notification says whether the
//! kernel copied after all (it must, when the receiver is on this machine:
//! loopback and unix sockets deliver into the receiver's memory).
//!
//! For each reply size this sends the same bytes over TCP on 127.0.0.1
//! both ways (a 16-byte header and the payload in one `sendmsg` per reply,
//! 32 payload buffers in turn, the zerocopy sender waiting for a buffer's
//! notification before reusing it), and prints the throughput, the
//! sender's and the receiver's CPU time per reply, and the share of
//! zerocopy sends that the kernel copied anyway.
//!
//!     cargo run --release -p mqblk-nbd --example zerocopy [MIB_PER_CASE]
//!
//! Unix sockets refuse `SO_ZEROCOPY` (that is printed too).

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

/// `SO_ZEROCOPY` (Linux `asm-generic/socket.h`; not in the libc crate).
const SO_ZEROCOPY: libc::c_int = 60;
/// `SO_EE_ORIGIN_ZEROCOPY` (`linux/errqueue.h`).
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied the data after all.
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;
/// Payload buffers used in turn.
const BUFFERS: usize = 32;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a live local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn set_zerocopy(fd: libc::c_int) -> std::io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: one is a live c_int of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Completions read from the error queue so far.
#[derive(Default)]
struct Notes {
    /// Sends the kernel is done with (their ids are 0..done).
    done: u64,
    /// Of those, the ones it copied.
    copied: u64,
}

impl Notes {
    /// Read what the error queue holds; with `wait`, block until at least
    /// one notification came.
    fn reap(&mut self, fd: libc::c_int, wait: bool) {
        loop {
            let mut ctrl = [0u64; 16];
            // SAFETY: msghdr is plain data; all zeros is an empty header.
            // SAFETY: msghdr is plain data; all zeros is an empty header.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_control = ctrl.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&ctrl);
            // SAFETY: msg points at live locals (no data iovecs).
            let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
            if r < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::WouldBlock && wait {
                    let mut p = libc::pollfd {
                        fd,
                        events: 0,
                        revents: 0,
                    };
                    // SAFETY: p is one live pollfd. POLLERR is always polled.
                    unsafe { libc::poll(&mut p, 1, 1000) };
                    continue;
                }
                return;
            }
            // SAFETY: msg was filled by recvmsg; the CMSG macros walk the
            // control buffer within msg_controllen.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    let level_ok =
                        (*c).cmsg_level == libc::SOL_IP && (*c).cmsg_type == libc::IP_RECVERR;
                    if level_ok {
                        let ee = libc::CMSG_DATA(c)
                            .cast::<libc::sock_extended_err>()
                            .read_unaligned();
                        if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY {
                            // Sends lo..=hi are done.
                            let (lo, hi) = (u64::from(ee.ee_info), u64::from(ee.ee_data));
                            let n = hi.wrapping_sub(lo) + 1;
                            self.done = self.done.max(hi + 1);
                            if ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                                self.copied += n;
                            }
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            if wait {
                return;
            }
        }
    }
}

struct Case {
    mib_s: f64,
    send_ns: f64,
    recv_ns: f64,
    copied: f64,
}

fn run(size: usize, total: u64, zerocopy: bool) -> std::io::Result<Case> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let rx = std::thread::spawn(move || -> std::io::Result<(u64, u64)> {
        let (mut s, _) = l.accept()?;
        let mut buf = vec![0u8; 4 << 20];
        let (mut got, t0) = (0u64, thread_cpu_ns());
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok((got, thread_cpu_ns() - t0));
            }
            got += n as u64;
        }
    });
    let s = TcpStream::connect(addr)?;
    let fd = s.as_raw_fd();
    if zerocopy {
        set_zerocopy(fd)?;
    }
    let mut bufs: Vec<Vec<u8>> = (0..BUFFERS).map(|i| vec![i as u8 | 1; size]).collect();
    let mut header = [0u8; 16];
    let replies = (total / size as u64).max(BUFFERS as u64);
    let mut notes = Notes::default();
    let (t0, c0) = (Instant::now(), thread_cpu_ns());
    for i in 0..replies {
        let b = (i % BUFFERS as u64) as usize;
        if zerocopy {
            // The buffer's last send must be done before it is written.
            while i >= BUFFERS as u64 && notes.done < i + 1 - BUFFERS as u64 {
                notes.reap(fd, true);
            }
            notes.reap(fd, false);
        }
        header[8..16].copy_from_slice(&i.to_be_bytes());
        bufs[b][0] = i as u8;
        let mut iov = [
            libc::iovec {
                iov_base: header.as_mut_ptr().cast(),
                iov_len: header.len(),
            },
            libc::iovec {
                iov_base: bufs[b].as_mut_ptr().cast(),
                iov_len: size,
            },
        ];
        // SAFETY: msghdr is plain data; all zeros is an empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len();
        let flags = if zerocopy { libc::MSG_ZEROCOPY } else { 0 };
        // SAFETY: msg points at live iovecs over live buffers; a blocking
        // TCP socket sends all of it (or fails).
        let r = unsafe { libc::sendmsg(fd, &msg, flags) };
        if r < 0 {
            return Err(std::io::Error::last_os_error());
        }
        assert_eq!(r as usize, header.len() + size, "short send");
    }
    if zerocopy {
        while notes.done < replies {
            notes.reap(fd, true);
        }
    }
    let send_ns = thread_cpu_ns() - c0;
    s.shutdown(std::net::Shutdown::Write)?;
    let (got, recv_ns) = rx.join().expect("receiver")?;
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(got, replies * (16 + size as u64));
    Ok(Case {
        mib_s: got as f64 / secs / f64::from(1 << 20),
        send_ns: send_ns as f64 / replies as f64,
        recv_ns: recv_ns as f64 / replies as f64,
        copied: if zerocopy {
            notes.copied as f64 / replies as f64
        } else {
            1.0
        },
    })
}

fn main() -> std::io::Result<()> {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2048);
    let total = mib << 20;
    println!(
        "{mib} MiB per case over TCP 127.0.0.1, one sendmsg per reply (16-byte header + payload)"
    );
    println!(
        "{:>8}  {:>10} {:>10}  {:>12} {:>12}  {:>12} {:>12}  {:>7}",
        "reply",
        "copy MiB/s",
        "zc MiB/s",
        "copy send ns",
        "zc send ns",
        "copy recv ns",
        "zc recv ns",
        "copied"
    );
    for size in [4096usize, 65536, 262_144, 1 << 20] {
        let c = run(size, total, false)?;
        let z = run(size, total, true)?;
        println!(
            "{:>8}  {:>10.0} {:>10.0}  {:>12.0} {:>12.0}  {:>12.0} {:>12.0}  {:>6.0}%",
            size,
            c.mib_s,
            z.mib_s,
            c.send_ns,
            z.send_ns,
            c.recv_ns,
            z.recv_ns,
            z.copied * 100.0
        );
    }
    // Unix sockets, which the NBD tests and most local clients use.
    let (a, _b) = std::os::unix::net::UnixStream::pair()?;
    match set_zerocopy(a.as_raw_fd()) {
        Ok(()) => println!("unix socket: SO_ZEROCOPY accepted"),
        Err(e) => println!("unix socket: SO_ZEROCOPY refused: {e}"),
    }
    Ok(())
}
