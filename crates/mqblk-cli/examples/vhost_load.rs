//! A load generator for vhost-user-blk backends through libblkio (the
//! `blkio` crate's `virtio-blk-vhost-user` driver), the client of
//! `scripts/compare-vhost.sh`: random reads or writes of one block size at
//! a fixed depth per queue, one thread per queue, for a fixed time.
//!
//! ```text
//! vhost_load SOCKET RW BS IODEPTH QUEUES SECONDS [BACKEND_PID]
//! ```
//!
//! RW is `randread` or `randwrite`. Prints one line of `key=value`:
//! `iops`, `ios`, `seconds`, the client's CPU per I/O (`client_ns_per_io`,
//! from getrusage) and, given the backend's pid, its CPU per I/O over the
//! same window (`backend_ns_per_io`, utime+stime from /proc/PID/stat).

use std::mem::MaybeUninit;
use std::time::{Duration, Instant};

use blkio::{Blkio, Completion, ReqFlags};

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> T {
    args.get(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("argument {i}: expected {what}"))
}

/// utime + stime of `pid`, in nanoseconds.
fn proc_cpu_ns(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc/PID/stat");
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').expect("a comm field") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ticks * 1_000_000_000 / hz
}

/// This process's user + system CPU time, in nanoseconds.
fn self_cpu_ns() -> u64 {
    let mut ru = MaybeUninit::<libc::rusage>::uninit();
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        assert_eq!(libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()), 0);
        ru.assume_init()
    };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sock: String = arg(&args, 1, "the socket");
    let rw: String = arg(&args, 2, "randread or randwrite");
    let bs: usize = arg(&args, 3, "the block size in bytes");
    let depth: usize = arg(&args, 4, "the queue depth");
    let queues: usize = arg(&args, 5, "the number of queues");
    let seconds: u64 = arg(&args, 6, "the runtime in seconds");
    let backend: Option<u32> = args.get(7).map(|p| p.parse().expect("a pid"));
    let write = match rw.as_str() {
        "randread" => false,
        "randwrite" => true,
        _ => panic!("RW: randread or randwrite"),
    };
    let mut b = Blkio::new("virtio-blk-vhost-user").expect("libblkio");
    b.set_str("path", &sock).expect("path");
    b.connect().expect("connect");
    b.set_i32("num-queues", queues as i32).expect("num-queues");
    let out = b.start().expect("start");
    let capacity = b.get_u64("capacity").expect("capacity");
    let blocks = capacity / bs as u64;
    let len = (bs * depth * queues).next_multiple_of(2 << 20);
    let region = b.alloc_mem_region(len).expect("alloc");
    b.map_mem_region(&region).expect("map");
    let base = region.addr;
    let stop = Instant::now() + Duration::from_secs(seconds);
    let cpu0 = self_cpu_ns();
    let backend0 = backend.map(proc_cpu_ns);
    let t0 = Instant::now();
    let threads: Vec<_> = out
        .queues
        .into_iter()
        .enumerate()
        .map(|(qi, mut q)| {
            std::thread::spawn(move || {
                let mut rng = 0x2545_f491_4f6c_dd1du64 ^ (qi as u64 + 1);
                let mut next = || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % blocks) * bs as u64
                };
                let buf = |slot: usize| (base + (qi * depth + slot) * bs) as *mut u8;
                for slot in 0..depth {
                    if write {
                        q.write(next(), buf(slot), bs, slot, ReqFlags::empty());
                    } else {
                        q.read(next(), buf(slot), bs, slot, ReqFlags::empty());
                    }
                }
                let mut done = [const { MaybeUninit::<Completion>::uninit() }; 64];
                let mut ios = 0u64;
                let mut in_flight = depth;
                while in_flight > 0 {
                    let n = q.do_io(&mut done, 1, None, None).expect("do_io");
                    let more = Instant::now() < stop;
                    for c in &done[..n] {
                        // SAFETY: do_io initialised the first n completions.
                        let c = unsafe { c.assume_init_ref() };
                        assert_eq!(c.ret, 0, "request failed: {}", c.ret);
                        ios += 1;
                        if more {
                            let slot = c.user_data;
                            if write {
                                q.write(next(), buf(slot), bs, slot, ReqFlags::empty());
                            } else {
                                q.read(next(), buf(slot), bs, slot, ReqFlags::empty());
                            }
                        } else {
                            in_flight -= 1;
                        }
                    }
                }
                ios
            })
        })
        .collect();
    let ios: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let secs = t0.elapsed().as_secs_f64();
    let client = (self_cpu_ns() - cpu0) / ios.max(1);
    let mut line = format!(
        "iops={:.0} ios={ios} seconds={secs:.2} client_ns_per_io={client}",
        ios as f64 / secs
    );
    if let (Some(pid), Some(c0)) = (backend, backend0) {
        line += &format!(
            " backend_ns_per_io={}",
            (proc_cpu_ns(pid) - c0) / ios.max(1)
        );
    }
    println!("{line}");
}
