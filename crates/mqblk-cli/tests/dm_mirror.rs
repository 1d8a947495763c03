//! Acceptance 3 of the mirror, with real processes: a leg served by
//! `mqblk serve` is killed mid-run (the mirror goes degraded, no verify
//! error), and `mqblk bench` on a mirror with a disk log is killed with
//! SIGKILL mid-run; the reopen copies only the regions marked dirty, and
//! then the legs are identical. Issue 26's case end to end: a bench whose
//! NBD leg's server is SIGKILLed goes on, reports the leg degraded (text,
//! JSON, `mqblk stat`) and exits non-zero unless `allow_degraded=1`; a
//! SIGINT in the resync that follows ends the bench within 2 s, and the
//! next open copies only the regions its log still marks dirty. Every
//! process stopped is one this test started, by its pid.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqblk_dm::mirror::{LegState, Mirror};

/// Longest wait for a process to reach a point (a hang guard, not a
/// timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(60);

use mqblk_test_support::{Scratch, Watched};

/// `mqblk ARGS`, watched.
fn spawn_mqblk<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Watched {
    Watched::spawn(Command::new(env!("CARGO_BIN_EXE_mqblk")).args(args))
}

/// Whether two legs hold the same bytes (`cmp`).
fn same_bytes(a: &Path, b: &Path) -> bool {
    Command::new("cmp")
        .arg(a)
        .arg(b)
        .status()
        .expect("run cmp")
        .success()
}

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
    let mut server = spawn_mqblk(&[
        "serve".as_ref(),
        "ram,size=16M".as_ref(),
        "--socket".as_ref(),
        sock.as_os_str(),
    ]);
    server.wait_for_path(&sock);
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
    let mut bench = spawn_mqblk(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--size=8M",
        "--runtime=60s",
        "--time_based",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    let start = Instant::now();
    while dirty_bits(&log) == 0 {
        if let Some(st) = bench.try_wait() {
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
    assert!(same_bytes(&a, &b), "the legs differ after the resync");
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
    let mut bench = spawn_mqblk(&[
        "bench",
        &format!("--device={spec}"),
        &format!("--control={}", sock.display()),
        "--rw=randrw",
        "--bs=4k",
        "--iodepth=16",
        "--runtime=4s",
        "--time_based",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    bench.wait_for_path(&sock);
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
    let (st, out, err) = bench.finish(WAIT_MAX);
    assert!(st.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    for job in v["jobs"].as_array().unwrap() {
        assert_eq!(job["verify_errors"], 0, "{job:#}");
        assert_eq!(job["error"], 0, "{job:#}");
    }
    assert!(same_bytes(&a, &c), "leg 0 and the rebuilt leg differ");
}

/// The bound issue 26 sets: a signal ends a bench within 2 s, whatever its
/// devices hold (a resync included).
const SIGNAL_BOUND: Duration = Duration::from_secs(2);

/// `mqblk serve SPEC --socket SOCK`, once it listens.
fn serve(spec: &str, sock: &Path) -> Watched {
    let w = spawn_mqblk(&[
        "serve".as_ref(),
        spec.as_ref(),
        "--socket".as_ref(),
        sock.as_os_str(),
    ]);
    w.wait_err("mqblk serve: listening on", WAIT_MAX);
    w
}

/// Dirty bits of the log in regions `from..to`.
fn dirty_in(log: &Path, from: usize, to: usize) -> u32 {
    let b = std::fs::read(log).unwrap();
    (from..to)
        .filter(|r| b[4096 + r / 8] & (1 << (r % 8)) != 0)
        .count() as u32
}

#[test]
fn nbd_leg_killed_under_bench_then_sigint_in_the_resync_then_reopen_copies_only_dirty_regions() {
    let s = Scratch::new("mirror-degraded");
    let size = 32u64 << 20;
    let region = 64u64 << 10;
    let (a, b, log) = (
        s.file("a.img", size),
        s.file("b.img", size),
        s.file("log.img", 64 << 10),
    );
    let sock = s.0.join("leg.sock");
    // Two zeroed legs are the same: `nosync` for the new log. Leg 1 is the
    // export of a `mqblk serve` child.
    let spec = format!(
        "dm-table:0 {} mirror disk 3 file:{} 128 nosync 2 file:{} 0 nbd+unix:///?socket={} 0",
        size >> 9,
        log.display(),
        a.display(),
        sock.display()
    );
    let b_spec = format!("file:{}", b.display());

    // 1. A verify run over the first 8 MiB; the leg's server is SIGKILLed
    //    once writes flow (the log shows dirty regions).
    let mut server = serve(&b_spec, &sock);
    let runtime_ms = 4000;
    let bench = spawn_mqblk(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=randrw",
        "--bs=4k",
        "--iodepth=16",
        "--size=8M",
        &format!("--runtime={runtime_ms}ms"),
        "--time_based",
        "--verify=crc32c",
        "--output-format=json",
    ]);
    let start = Instant::now();
    while dirty_in(&log, 0, 512) == 0 {
        assert!(start.elapsed() < WAIT_MAX, "no region ever went dirty");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    server.kill(); // SIGKILL, by pid
    let (st, out, err) = bench.finish(WAIT_MAX);
    eprintln!("{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let job = &v["jobs"][0];
    // The mirror completed every I/O from leg 0: no error, no mismatch,
    // and the job was not stopped (continue_on_error=none stops a job at
    // its first error; there was none to see).
    assert_eq!(job["error"], 0, "{job:#}");
    assert_eq!(job["verify_errors"], 0, "{job:#}");
    assert!(job.get("stopped_at").is_none(), "{job:#}");
    assert!(
        job["verify"]["blocks_verified"].as_u64().unwrap() > 0,
        "{job:#}"
    );
    let degraded = v["mqblk"]["degraded"].as_array().expect("mqblk.degraded");
    assert_eq!(degraded.len(), 1, "{degraded:#?}");
    let d = &degraded[0];
    assert_eq!(d["leg"], 1, "{d:#}");
    assert_eq!(d["table_line"], 1, "{d:#}");
    assert_eq!(d["device"], job["device"], "{d:#}");
    assert_eq!(d["job_device"], job["device"], "{d:#}");
    assert!(
        d["leg_spec"]
            .as_str()
            .unwrap()
            .contains(&sock.display().to_string()),
        "{d:#}"
    );
    assert!(
        ["read", "write", "flush"].contains(&d["op"].as_str().unwrap()),
        "{d:#}"
    );
    assert!(!d["error"].as_str().unwrap().is_empty(), "{d:#}");
    assert!(d["time_ms"].as_u64().unwrap() > 0, "{d:#}");
    assert_eq!(d["allowed"], false, "{d:#}");
    // It failed inside the run, and the job went on to its end.
    let failed_ms = d["run_ms"].as_u64().expect("run_ms");
    let ran_ms = job["write"]["runtime"].as_u64().unwrap();
    assert!(
        failed_ms < ran_ms,
        "failed at {failed_ms} ms of {ran_ms} ms"
    );
    assert!(
        ran_ms >= runtime_ms,
        "the job ran {ran_ms} ms of {runtime_ms}"
    );
    // Degraded without allow_degraded=1: a failed run.
    assert_eq!(st.code(), Some(1), "{err}");
    assert!(err.contains("the run ended degraded"), "{err}");
    assert!(err.contains("allow_degraded=1"), "{err}");
    eprintln!(
        "degraded at {failed_ms} ms ({} {}), job ran {ran_ms} ms, 0 errors, {} blocks verified, {st}",
        d["op"], d["error"], job["verify"]["blocks_verified"]
    );

    // 2. The leg comes back behind: every region written since is dirty
    //    in the log. Its new server takes writes at 2 MB/s (a slow link:
    //    32 regions a second), so the resync at the next open takes
    //    seconds; a SIGINT in it ends the bench within 2 s.
    let dirty_before = dirty_in(&log, 0, 128);
    assert!(dirty_before > 0);
    assert_eq!(
        dirty_in(&log, 128, 512),
        0,
        "only the first 8 MiB was written"
    );
    let mut server = serve(&format!("{b_spec},wbps=2m"), &sock);
    // Writes elsewhere (16 to 24 MiB) while the resync runs.
    let mut bench = spawn_mqblk(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=4",
        "--offset=16M",
        "--size=8M",
        "--runtime=60s",
        "--time_based",
        "--output-format=json",
    ]);
    let started = bench.wait_err("resyncing", WAIT_MAX).text;
    assert!(
        started.contains(&format!("resyncing {dirty_before} of 512 regions")),
        "{started}"
    );
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    bench.signal("-INT");
    let (st, _out, err) = bench.finish(WAIT_MAX);
    let took = t.elapsed();
    eprintln!("{err}");
    assert_eq!(st.code(), Some(130), "{err}");
    assert!(
        mqblk_test_support::time_bound("", took, SIGNAL_BOUND),
        "the bench took {took:?} to end after SIGINT in the resync"
    );
    assert!(
        !err.contains("resync copied"),
        "the resync finished before the signal: {err}"
    );
    let dirty_after = dirty_in(&log, 0, 128);
    let dirty_total = dirty_in(&log, 0, 512);
    eprintln!(
        "SIGINT in the resync: {st} after {took:?}; dirty regions {dirty_before} before, \
         {dirty_after} left ({dirty_total} in all)"
    );
    assert!(dirty_after > 0, "nothing was left to copy");
    assert!(
        dirty_after < dirty_before,
        "no copied region was marked clean ({dirty_after} of {dirty_before} dirty)"
    );

    // 3. The next open copies exactly the regions the log marks dirty.
    let dev = mqblk::open(&spec).unwrap();
    assert!(with_mirror(&dev, |m| m.wait_recovery(WAIT_MAX)));
    let resynced = with_mirror(&dev, Mirror::resynced_bytes);
    eprintln!(
        "reopen copied {} regions ({resynced} bytes); the log marked {dirty_total}",
        resynced / region
    );
    assert_eq!(resynced, u64::from(dirty_total) * region);
    assert_eq!(with_mirror(&dev, Mirror::regions_in_sync), (512, 512));
    assert!(!with_mirror(&dev, Mirror::degraded));
    drop(dev);
    assert_eq!(dirty_in(&log, 0, 512), 0, "closed clean");
    // The server stops cleanly (its export flushed), then the legs match.
    server.signal("-TERM");
    let (st, _, err) = server.finish(WAIT_MAX);
    assert!(st.success(), "{err}");
    assert!(same_bytes(&a, &b), "the legs differ after the resync");
}

#[test]
fn allow_degraded_lets_a_run_end_degraded_and_report_and_stat_say_so() {
    let s = Scratch::new("mirror-allow");
    let sock = s.0.join("leg.sock");
    let stats = s.0.join("stats");
    let mut server = serve("ram,size=16M", &sock);
    let spec = format!(
        "dm-table:0 32768 mirror core 2 128 nosync 2 ram,size=16M 0 nbd+unix:///?socket={} 0",
        sock.display()
    );
    let bench = spawn_mqblk(&[
        "bench",
        &format!("--device={spec}"),
        "--rw=randrw",
        "--bs=4k",
        "--iodepth=8",
        "--runtime=3s",
        "--time_based",
        "--verify=crc32c",
        "--allow_degraded=1",
        &format!("--stats-dir={}", stats.display()),
    ]);
    // Mid-run: the stats show I/O, then the leg's server dies.
    let start = Instant::now();
    loop {
        let ios = std::fs::read_to_string(stats.join("mqblk.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["devices"][0]["bios"].as_u64())
            .unwrap_or(0);
        if ios > 1000 {
            break;
        }
        assert!(start.elapsed() < WAIT_MAX, "the bench never got going");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill(); // SIGKILL, by pid
    let (st, out, err) = bench.finish(WAIT_MAX);
    assert!(st.success(), "allow_degraded=1: {st}\n{out}\n{err}");
    assert!(out.contains("err= 0"), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("mirror leg 1 (nbd+unix"))
        .unwrap_or_else(|| panic!("no degraded leg in the report: {out}"));
    assert!(
        out.contains("DEGRADED: a mirror leg is out of service"),
        "{out}"
    );
    assert!(line.contains("is out: a "), "{line}");
    assert!(line.contains("s into the run (allow_degraded=1)"), "{line}");
    // `mqblk stat` shows it under the device.
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("stat")
        .arg(&stats)
        .output()
        .expect("run mqblk stat");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("DEGRADED: ") && l.contains("mirror leg 1 (nbd+unix")),
        "{text}"
    );
}

/// `mqblk info` has no side effects: on a mirror whose legs differ (a
/// fresh log: every region out of sync) it starts no resync and writes no
/// log, with a core log and with a disk log; and it says its features are
/// a read-only open's.
#[test]
fn info_on_a_mirror_resyncs_nothing_and_writes_no_log() {
    let dir = Scratch::new("info-mirror");
    let (a, b, log) = (
        dir.path().join("a.img"),
        dir.path().join("b.img"),
        dir.path().join("log.img"),
    );
    let mut da = vec![0u8; 1 << 20];
    pattern(1, &mut da);
    std::fs::write(&a, &da).unwrap();
    let mut db = vec![0u8; 1 << 20];
    pattern(2, &mut db);
    std::fs::write(&b, &db).unwrap();
    std::fs::write(&log, vec![0u8; 1 << 20]).unwrap();
    let disk = format!("disk 2 file:{} 128", log.display());
    for log_args in ["core 1 128", disk.as_str()] {
        let spec = format!(
            "dm-table:0 2048 mirror {log_args} 2 file:{} 0 file:{} 0",
            a.display(),
            b.display()
        );
        let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["info", &spec])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{log_args}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("of this read-only open"), "{log_args}: {out}");
        assert!(
            std::fs::read(&a).unwrap() == da,
            "{log_args}: leg a changed"
        );
        assert!(
            std::fs::read(&b).unwrap() == db,
            "{log_args}: info resynced leg b"
        );
        assert!(
            std::fs::read(&log).unwrap().iter().all(|&x| x == 0),
            "{log_args}: info wrote the log"
        );
    }
}
