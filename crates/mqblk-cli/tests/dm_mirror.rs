//! Acceptance 3 of the mirror, with real processes: a leg served by
//! `mqblk serve` is killed mid-run (the mirror goes degraded, no verify
//! error), and `mqblk bench` on a mirror with a disk log is killed with
//! SIGKILL mid-run; the reopen copies only the regions marked dirty, and
//! then the legs are identical. Every process stopped is one this test
//! started, by its pid.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqblk_dm::mirror::{LegState, Mirror};

/// Longest wait for a process to reach a point (a hang guard, not a
/// timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(60);

struct Proc(Option<Child>);

impl Proc {
    fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill(); // SIGKILL, by pid
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

use mqblk_test_support::Scratch;

fn with_mirror<T>(dev: &mqblk::Device, f: impl FnOnce(&Mirror) -> T) -> T {
    let h = mqblk_dm::find(dev.name()).expect("an open stacked device");
    let m = h.targets()[0]
        .as_any()
        .and_then(|a| a.downcast_ref::<Mirror>())
        .expect("line 1 is a mirror");
    f(m)
}

fn pattern(seed: u64, out: &mut [u8]) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in out {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
}

#[test]
fn a_leg_whose_server_is_killed_leaves_the_mirror_degraded_without_errors() {
    let s = Scratch::new("mirror-nbd");
    let sock = s.0.join("leg.sock");
    let mut server = Proc(Some(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "ram,size=16M", "--socket"])
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mqblk serve"),
    ));
    mqblk_test_support::wait_for_path(&sock, "mqblk serve", server.0.as_mut());
    let spec = format!(
        "dm-table:0 32768 mirror core 2 128 nosync 2 ram,size=16M 0 nbd+unix:///?socket={} 0",
        sock.display()
    );
    let dev = mqblk::open(&spec).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2u64)
        .map(|t| {
            let (dev, done, stop) = (dev.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ctx = dev.context().unwrap();
                let slice = dev.capacity_bytes() / 2;
                let blocks = slice / 4096;
                let mut last = vec![0u64; blocks as usize];
                let (mut w, mut r) = (dev.alloc_buf(4096), dev.alloc_buf(4096));
                let (mut bad, mut errs) = (0u64, 0u64);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let b = (n * 7919) % blocks;
                    pattern(t << 40 | n, w.as_mut_slice());
                    match ctx.write_at(w.as_slice(), slice * t + b * 4096) {
                        Ok(()) => last[b as usize] = t << 40 | n,
                        Err(_) => errs += 1,
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                let mut want = vec![0u8; 4096];
                for (b, &seed) in last.iter().enumerate() {
                    if seed == 0 {
                        continue;
                    }
                    pattern(seed, &mut want);
                    match ctx.read_at(r.as_mut_slice(), slice * t + b as u64 * 4096) {
                        Ok(()) if r.as_slice() == want => {}
                        Ok(()) => bad += 1,
                        Err(_) => errs += 1,
                    }
                }
                (bad, errs)
            })
        })
        .collect();
    let until = |n: u64| {
        let start = Instant::now();
        while done.load(Ordering::Relaxed) < n {
            assert!(start.elapsed() < WAIT_MAX, "the workload stalled at {n}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    until(2000);
    // Mid-run: the leg's server dies.
    server.kill();
    let at_kill = done.load(Ordering::Relaxed);
    until(at_kill + 2000);
    stop.store(true, Ordering::Relaxed);
    let (bad, errs) = workers
        .into_iter()
        .map(|h| h.join().unwrap())
        .fold((0, 0), |a, r| (a.0 + r.0, a.1 + r.1));
    assert_eq!((bad, errs), (0, 0), "verify errors, I/O errors");
    with_mirror(&dev, |m| {
        assert!(m.degraded());
        assert_eq!(m.leg_states(), [LegState::Live, LegState::Failed]);
    });
    let st = mqblk_dm::find(dev.name()).unwrap().status();
    assert!(st[0].contains(" 1 AD "), "{st:?}");
}

fn dirty_bits(log: &Path) -> u32 {
    let b = std::fs::read(log).unwrap();
    b[4096..].iter().map(|x| x.count_ones()).sum()
}

#[test]
fn sigkill_mid_run_then_reopen_resyncs_only_dirty_regions() {
    let s = Scratch::new("mirror-kill");
    let size = 32u64 << 20;
    let (a, b, log) = (
        s.file("a.img", size),
        s.file("b.img", size),
        s.file("log.img", 64 << 10),
    );
    let spec = format!(
        "dm-table:0 {} mirror disk 2 file:{} 128 2 file:{} 0 file:{} 0",
        size >> 9,
        log.display(),
        a.display(),
        b.display()
    );
    // First open: a new log, so every region is copied once; closed
    // cleanly, the log is all clean.
    let dev = mqblk::open(&spec).unwrap();
    assert!(with_mirror(&dev, |m| m.wait_recovery(WAIT_MAX)));
    assert_eq!(with_mirror(&dev, Mirror::resynced_bytes), size);
    drop(dev);
    assert_eq!(dirty_bits(&log), 0);
    // A verify workload over the first 8 MiB, killed once the log shows
    // regions dirty (writes are in flight).
    let mut bench = Proc(Some(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .arg("bench")
            .arg(format!("--device={spec}"))
            .args([
                "--rw=randwrite",
                "--bs=4k",
                "--iodepth=16",
                "--size=8M",
                "--runtime=60s",
                "--time_based",
                "--verify=crc32c",
                "--output-format=json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mqblk bench"),
    ));
    let start = Instant::now();
    while dirty_bits(&log) == 0 {
        if let Ok(Some(st)) = bench.0.as_mut().unwrap().try_wait() {
            panic!("the bench exited ({st}) before any region was dirty");
        }
        assert!(start.elapsed() < WAIT_MAX, "no region ever went dirty");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    bench.kill();
    let dirty = u64::from(dirty_bits(&log));
    assert!(dirty > 0);
    // Reopen: only the dirty regions are copied, from leg 0.
    let dev = mqblk::open(&spec).unwrap();
    assert!(with_mirror(&dev, |m| m.wait_recovery(WAIT_MAX)));
    let resynced = with_mirror(&dev, Mirror::resynced_bytes);
    eprintln!(
        "resynced {resynced} of {size} bytes ({dirty} regions of 64 KiB dirty after SIGKILL)"
    );
    assert_eq!(resynced, dirty * 65536);
    assert!(resynced < size, "{resynced} of {size}");
    let st = mqblk_dm::find(dev.name()).unwrap().status();
    assert!(
        st[0].ends_with(&format!("resync {resynced}/{size}")),
        "{st:?}"
    );
    drop(dev);
    let same = Command::new("cmp")
        .arg(&a)
        .arg(&b)
        .status()
        .expect("run cmp");
    assert!(same.success(), "the legs differ after the resync");
}

#[test]
fn dm_replace_rebuilds_a_leg_of_a_running_bench_under_load() {
    let s = Scratch::new("mirror-replace");
    let size = 16u64 << 20;
    let (a, b, c) = (
        s.file("a.img", size),
        s.file("b.img", size),
        s.file("c.img", size),
    );
    let sock = s.0.join("control.sock");
    let spec = format!(
        "dm-table:0 {} mirror core 2 128 nosync 2 file:{} 0 file:{} 0",
        size >> 9,
        a.display(),
        b.display()
    );
    let mut bench = Proc(Some(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .arg("bench")
            .arg(format!("--device={spec}"))
            .arg(format!("--control={}", sock.display()))
            .args([
                "--rw=randrw",
                "--bs=4k",
                "--iodepth=16",
                "--runtime=4s",
                "--time_based",
                "--verify=crc32c",
                "--output-format=json",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mqblk bench"),
    ));
    mqblk_test_support::wait_for_path(&sock, "mqblk bench", bench.0.as_mut());
    let mqblk = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(args)
            .output()
            .expect("run mqblk")
    };
    let control = format!("--control={}", sock.display());
    let o = mqblk(&["qos", &control, "show"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let show: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let name = show["devices"][0]["device"].as_str().unwrap().to_string();
    let newspec = format!("file:{}", c.display());
    let o = mqblk(&["dm", "replace", &control, &name, "1", &newspec]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("256/256 regions"), "progress shown: {err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("leg 1 rebuilt"), "{out}");
    // The bench runs to its end with nothing lost.
    let child = bench.0.take().unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for job in v["jobs"].as_array().unwrap() {
        assert_eq!(job["verify_errors"], 0, "{job:#}");
        assert_eq!(job["error"], 0, "{job:#}");
    }
    let same = Command::new("cmp")
        .arg(&a)
        .arg(&c)
        .status()
        .expect("run cmp");
    assert!(same.success(), "leg 0 and the rebuilt leg differ");
}
