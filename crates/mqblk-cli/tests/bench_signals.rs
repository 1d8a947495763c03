//! `mqblk bench` and signals, as fio: the first SIGINT or SIGTERM stops
//! the jobs and prints the report of what ran (exit status 128 + the
//! signal), within 2 s even when the device never answers; a second one
//! exits at once. Every
//! process signalled is one this test started, by its pid.

use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::Watched;

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

/// An NBD export whose device completes nothing for 100 s, served from
/// this process (left running: its connection holds I/O for 100 s, and
/// the test process ends before that matters); returns the bench's spec
/// and the device, to see the bench's I/O in flight there.
fn stuck_export(tag: &str) -> (String, mqblk::Device) {
    let dir = std::env::temp_dir().join(format!("mqblk-sig-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("slow.sock");
    let slow =
        mqblk::open("null,completion=timer,completion_nsec=100000000000,io_timeout_ms=0").unwrap();
    let server = mqblk_nbd::Server::bind(
        mqblk_nbd::ServerConfig {
            exports: vec![mqblk_nbd::Export::new("", slow.clone())],
            tls_mode: mqblk_nbd::TlsMode::Off,
            tls: None,
            limits: mqblk_nbd::ConnLimits::default(),
        },
        &mqblk_nbd::Listen::Unix(sock.clone()),
    )
    .unwrap();
    std::thread::spawn(move || server.run());
    (
        format!("nbd+unix:///?socket={},io_timeout_ms=0", sock.display()),
        slow,
    )
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
    let (st, out, err) = b.finish(WAIT_MAX);
    assert_eq!(st.code(), Some(143));
    assert!(
        !out.contains("Run status group"),
        "no report after a second signal: {out}"
    );
    assert!(!err.contains("terminated by signal"), "{err}");
}
