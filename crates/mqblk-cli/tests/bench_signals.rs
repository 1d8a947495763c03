//! `mqblk bench` and signals, as fio: the first SIGINT or SIGTERM stops
//! the jobs and prints the report of what ran (exit status 128 + the
//! signal), within 2 s even when the device never answers; a second one
//! exits at once, and one stop sent twice (as `timeout` sends it) is one
//! stop, with its report, at 100 random moments of a run. Every process
//! signalled is one this test started, by its pid.

use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::{Scratch, Watched};

/// Longest wait for the bench to reach a point (a hang guard, not a
/// timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(60);

fn start(args: &[&str]) -> Watched {
    Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .arg("bench")
            .args(args),
    )
}

#[test]
fn the_first_signal_stops_drains_and_reports() {
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        let mut b = start(&[
            "--device",
            "null",
            "--rw=randread",
            "--runtime=10m",
            "--time_based",
        ]);
        b.wait_out("Starting 1 thread", WAIT_MAX);
        b.signal(sig);
        let (st, out, err) = b.finish(WAIT_MAX);
        assert_eq!(st.code(), Some(code), "{sig}");
        // The signal may come before the first I/O completes, so the report
        // may have no `read:` line; it is printed all the same.
        assert!(
            out.contains("Run status group 0 (all jobs):"),
            "{sig}: the report: {out}\nstderr: {err}"
        );
        assert!(out.contains("mqblk: (the layer's own figures"), "{out}");
        assert!(
            out.contains("alignment: nullb0 logical_block_size=512, dma_alignment="),
            "{out}"
        );
        assert!(
            err.contains(&format!("terminated by signal {}", code - 128)),
            "{err}"
        );
    }
}

/// `dev` exported over a unix socket from this process, its server left
/// running (the test process ends before that matters): the bench's spec
/// for it, with `options` added.
fn export(tag: &str, dev: &mqblk::Device, options: &str) -> String {
    let dir = std::env::temp_dir().join(format!("mqblk-sig-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("export.sock");
    let server = mqblk_nbd::Server::bind(
        mqblk_nbd::ServerConfig {
            exports: vec![mqblk_nbd::Export::new("", dev.clone())],
            tls_mode: mqblk_nbd::TlsMode::Off,
            tls: None,
            limits: mqblk_nbd::ConnLimits::default(),
        },
        &mqblk_nbd::Listen::Unix(sock.clone()),
    )
    .unwrap();
    std::thread::spawn(move || server.run());
    format!("nbd+unix:///?socket={},{options}", sock.display())
}

/// An NBD export whose device completes nothing for 100 s (its
/// connection holds I/O that long); returns the bench's spec and the
/// device, to see the bench's I/O in flight there.
fn stuck_export(tag: &str) -> (String, mqblk::Device) {
    let slow =
        mqblk::open("null,completion=timer,completion_nsec=100000000000,io_timeout_ms=0").unwrap();
    (export(tag, &slow, "io_timeout_ms=0"), slow)
}

/// Start a bench on the stuck export and wait until its reads are there.
fn bench_on_stuck(spec: &str, slow: &mqblk::Device) -> Watched {
    let b = start(&[
        "--device",
        spec,
        "--rw=randread",
        "--iodepth=4",
        "--runtime=10m",
        "--time_based",
    ]);
    b.wait_out("Starting 1 thread", WAIT_MAX);
    let mut waited = Duration::ZERO;
    while slow.stats().snapshot().in_flight == 0 {
        assert!(
            waited < WAIT_MAX,
            "the bench's reads never reached the export"
        );
        std::thread::sleep(Duration::from_millis(10));
        waited += Duration::from_millis(10);
    }
    b
}

/// The bound issue 26 sets: a signal ends a bench within 2 s, whatever its
/// device holds.
const SIGNAL_BOUND: Duration = Duration::from_secs(2);

#[test]
fn one_signal_ends_a_bench_whose_device_never_answers_within_2s_report_first() {
    // io_timeout_ms=0: no timeout will ever end the reads it holds.
    let (spec, slow) = stuck_export("one");
    let mut b = bench_on_stuck(&spec, &slow);
    let t = Instant::now();
    b.signal("-INT");
    let code = b.wait(WAIT_MAX).code();
    let took = t.elapsed();
    let (_, out, err) = b.finish(WAIT_MAX);
    eprintln!("exit {code:?} {took:?} after SIGINT");
    assert_eq!(code, Some(130), "{err}");
    assert!(
        mqblk_test_support::time_bound("", took, SIGNAL_BOUND),
        "the bench took {took:?} to end after SIGINT; stderr: {err}"
    );
    assert!(out.contains("Run status group 0 (all jobs):"), "{out}");
    assert!(err.contains("terminated by signal 2"), "{err}");
    assert!(
        err.contains("did not close within"),
        "the device that never answered is said: {err}"
    );
}

/// "At once": a second signal exits within this (the handler exits in
/// the signal; the rest is the test's 5 ms polling and process teardown).
const SECOND_SIGNAL_BOUND: Duration = Duration::from_millis(500);

#[test]
fn a_second_signal_exits_at_once() {
    // The bench reads from an NBD export whose device completes nothing
    // for 100 s: after the first signal the bench waits a moment for it,
    // and a second signal ends the bench at once, with no report.
    let (spec, slow) = stuck_export("two");
    let mut b = bench_on_stuck(&spec, &slow);
    b.signal("-TERM");
    b.wait_err("mqblk: stopping: reporting", WAIT_MAX);
    b.signal("-TERM");
    // From the moment `kill` has sent it: the handler exits in the signal.
    let t = Instant::now();
    let code = b.wait(WAIT_MAX).code();
    let took = t.elapsed();
    let (_, out, err) = b.finish(WAIT_MAX);
    eprintln!("exit {code:?} {took:?} after the second SIGTERM (bound {SECOND_SIGNAL_BOUND:?})");
    assert_eq!(code, Some(143), "{err}");
    assert!(
        mqblk_test_support::time_bound("second signal", took, SECOND_SIGNAL_BOUND),
        "the bench took {took:?} to exit after a second signal; stderr: {err}"
    );
    assert!(
        !out.contains("Run status group"),
        "no report after a second signal: {out}"
    );
    assert!(!err.contains("terminated by signal"), "{err}");
}

/// A ram device exported from this process (as [`stuck_export`]): the
/// bench's spec for it, with `options` added, and the device, to see what
/// the bench's I/O did there.
fn ram_export(tag: &str, options: &str) -> (String, mqblk::Device) {
    let ram = mqblk::open("ram,size=16M").unwrap();
    (export(tag, &ram, options), ram)
}

/// Wait (bounded) until `ready` says so of `dev`'s counters.
fn wait_stats(dev: &mqblk::Device, what: &str, ready: impl Fn(&mqblk::DiskStats) -> bool) {
    let t = Instant::now();
    while !ready(&dev.stats().snapshot()) {
        assert!(t.elapsed() < WAIT_MAX, "never saw {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_stop_during_a_throttled_verify_reports_the_writes_and_the_verify_so_far() {
    use mqblk::stats::StatGroup;
    // The bench's own io.max limit holds the verify phase's reads: 2 a
    // second, no burst, 8 at a time. Writes are not limited.
    let (spec, ram) = ram_export("verify", "riops=2,throttle_burst_ms=0");
    let mut b = start(&[
        "--device",
        &spec,
        "--rw=write",
        "--bs=4k",
        "--size=256k",
        "--iodepth=8",
        "--verify=crc32c",
    ]);
    b.wait_out("Starting 1 thread", WAIT_MAX);
    // Every block written (64 of 8 sectors), and a read of the verify
    // phase through: the rest wait on the throttle.
    wait_stats(&ram, "the writes and a verify read", |s| {
        s.sectors[StatGroup::Write as usize] >= 64 * 8 && s.ios[StatGroup::Read as usize] > 0
    });
    let t = Instant::now();
    b.signal("-TERM");
    let code = b.wait(WAIT_MAX).code();
    let took = t.elapsed();
    let (_, out, err) = b.finish(WAIT_MAX);
    let verify = out.lines().find(|l| l.contains("verify       :"));
    eprintln!("exit {code:?} {took:?} after SIGTERM in the verify phase (bound {SIGNAL_BOUND:?})");
    eprintln!("report: {verify:?}");
    eprintln!("stderr:\n{err}");
    assert_eq!(code, Some(143), "{err}");
    assert!(
        mqblk_test_support::time_bound("", took, SIGNAL_BOUND),
        "{took:?}; stderr: {err}"
    );
    // The write phase's figures: all 256 KiB, and the layer's counts.
    assert!(out.contains("write: IOPS="), "{out}");
    assert!(out.contains("io=256KiB"), "{out}");
    assert!(!out.contains("requests=0,"), "{out}");
    // The verify done so far, said to be that.
    let verify = verify.unwrap_or_else(|| panic!("no verify line: {out}"));
    assert!(verify.contains("64 blocks written"), "{verify}");
    assert!(
        verify.contains("the verify phase was stopped by the signal"),
        "{verify}"
    );
    // Not blamed on the device, and no "0 errors, first: ...".
    for wrong in [
        "does not answer",
        "still waiting for nbd0",
        "errors, first",
        "err= 5",
    ] {
        assert!(
            !out.contains(wrong) && !err.contains(wrong),
            "{wrong:?}: {out}\nstderr: {err}"
        );
    }
    // Reads the throttle still held when the devices closed are said to
    // wait on the limit.
    if let Some(l) = err.lines().find(|l| l.contains("did not close")) {
        assert!(l.contains("held by the io.max throttle, riops=2"), "{l}");
    }
}

/// The bench's first connection to a server that `accept`s (non-blocking)
/// and never answers, kept open: its device stays opening.
fn first_connection<C>(what: &str, mut accept: impl FnMut() -> std::io::Result<C>) -> C {
    let t = Instant::now();
    loop {
        match accept() {
            Ok(c) => return c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(t.elapsed() < WAIT_MAX, "{what} never connected");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// SIGINT to bench `b` while its device `spec` is still opening: exit 130
/// within the bound, nothing on stdout, and one line on stderr saying so.
fn interrupt_while_opening(mut b: Watched, spec: &str) {
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    b.signal("-INT");
    let code = b.wait(WAIT_MAX).code();
    let took = t.elapsed();
    let (_, out, err) = b.finish(WAIT_MAX);
    eprintln!("exit {code:?} {took:?} after SIGINT while {spec} opened (bound {SIGNAL_BOUND:?})");
    eprintln!("stderr: {err}");
    assert_eq!(code, Some(130), "{err}");
    assert!(
        mqblk_test_support::time_bound("", took, SIGNAL_BOUND),
        "{took:?}"
    );
    assert!(out.is_empty(), "nothing ran, nothing to report: {out}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(
        lines[0].contains(&format!("while {spec} was still opening")),
        "{err}"
    );
}

#[test]
fn a_stop_while_a_device_is_still_opening_says_so_in_one_line() {
    // An NBD server that takes the connection and never answers the
    // handshake: the open waits (up to the client's 30 s handshake
    // timeout).
    let dir = Scratch::new("sig-open");
    let sock = dir.path().join("mute.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let spec = format!("nbd+unix:///?socket={}", sock.display());
    let b = start(&[
        "--device",
        &spec,
        "--rw=randread",
        "--runtime=10m",
        "--time_based",
    ]);
    let _conn = first_connection("the bench", || listener.accept());
    interrupt_while_opening(b, &spec);
}

#[test]
fn a_stop_while_an_rbd_image_is_still_opening_says_so_in_one_line() {
    // A Ceph config whose monitor is a port of this process that takes
    // the connection and never answers: librados waits in its connect.
    let dir = Scratch::new("sig-rbd");
    let mon = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    mon.set_nonblocking(true).unwrap();
    let conf = dir.path().join("ceph.conf");
    std::fs::write(
        &conf,
        format!(
            "[global]\nmon_host = {}\nauth_client_required = none\n",
            mon.local_addr().unwrap()
        ),
    )
    .unwrap();
    let spec = "rbd:rbd/img";
    let b = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .env("CEPH_CONF", &conf)
            .args(["bench", "--device", spec, "--rw=randread"])
            .args(["--runtime=10m", "--time_based"]),
    );
    let _conn = first_connection("librados", || mon.accept());
    interrupt_while_opening(b, spec);
}

/// Whether `pid` answers SIGINT: it blocks it (`SigBlk` in
/// /proc/PID/status: the bench blocks it in `.preinit_array`, before the
/// shared libraries' constructors, until its handler is in place) or has
/// a handler for it (`SigCgt`). Before that, during the exec and the
/// loader's relocations, the kernel's default action ends any process,
/// and no code of the bench can answer.
fn answers_sigint(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    let has = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
    };
    has("SigBlk:") || has("SigCgt:")
}

/// What one run stopped at `moment` did: its exit code, and whether it
/// printed its report or the one line of a stop before any I/O.
struct Stopped {
    moment: Duration,
    code: Option<i32>,
    report: bool,
    before_io: bool,
    out: String,
    err: String,
}

/// The run (`timeout --preserve-status -s INT T mqblk bench
/// --device ram,size=1G --rw=randrw --iodepth=16 --runtime=10
/// --time_based --verify=crc32c`), stopped `moment` after it answers
/// SIGINT ([`answers_sigint`]) by SIGINT sent twice back to back, as `timeout` sends it (to
/// the child, then to its process group).
fn stop_twice_at(moment: Duration) -> Stopped {
    let mut b = start(&[
        "--device",
        "ram,size=1G",
        "--rw=randrw",
        "--iodepth=16",
        "--runtime=10",
        "--time_based",
        "--verify=crc32c",
    ]);
    let t = Instant::now();
    while !answers_sigint(b.pid()) {
        assert!(t.elapsed() < WAIT_MAX, "the bench never answered SIGINT");
        assert!(b.try_wait().is_none(), "the bench ended before its handler");
        std::thread::sleep(Duration::from_micros(200));
    }
    std::thread::sleep(moment);
    let pid = b.pid() as libc::pid_t;
    assert!(b.try_wait().is_none(), "the bench ended before its signal");
    for _ in 0..2 {
        // SAFETY: kill with this test's own child's pid, not reaped yet
        // (checked above), so the pid is still its.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    }
    let (st, out, err) = b.finish(WAIT_MAX);
    Stopped {
        moment,
        code: st.code(),
        report: out.contains("Run status group 0 (all jobs):")
            && out.contains("mqblk: (the layer's own figures"),
        before_io: !out.contains("Run status group")
            && err.contains("was still opening; nothing ran, no report")
            && err.lines().count() == 1,
        out,
        err,
    }
}

#[test]
fn a_stop_sent_twice_at_100_random_moments_reports_every_time() {
    const RUNS: usize = 100;
    const PARALLEL: usize = 5;
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("moments from seed {seed}");
    // xorshift64*: moments uniform in 0 to 3 s.
    let mut x = seed;
    let moments: Vec<Duration> = (0..RUNS)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11;
            Duration::from_micros(r % 3_000_001)
        })
        .collect();
    let mut all = Vec::new();
    for chunk in moments.chunks(PARALLEL) {
        let runs: Vec<_> = chunk
            .iter()
            .map(|&m| std::thread::spawn(move || stop_twice_at(m)))
            .collect();
        all.extend(runs.into_iter().map(|r| r.join().expect("a run's thread")));
    }
    let reports = all.iter().filter(|r| r.report).count();
    let before_io = all.iter().filter(|r| r.before_io).count();
    let good = all
        .iter()
        .filter(|r| r.code == Some(130) && (r.report || r.before_io))
        .count();
    eprintln!(
        "{good} of {RUNS} runs exited 130 with their report ({reports}) or the one line of a \
         stop before any I/O ({before_io})"
    );
    for r in all
        .iter()
        .filter(|r| r.code != Some(130) || !(r.report || r.before_io))
    {
        eprintln!(
            "stopped at {:?}: exit {:?}\nstdout: {}\nstderr: {}",
            r.moment, r.code, r.out, r.err
        );
    }
    assert_eq!(good, RUNS);
}
