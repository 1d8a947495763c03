//! `mqblk bench` and signals, as fio: the first SIGINT or SIGTERM stops
//! the jobs, drains what is in flight and prints the report of what ran
//! (exit status 128 + the signal); a second one exits at once. Every
//! process signalled is one this test started, by its pid.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// Longest wait for the bench to reach a point (a hang guard, not a
/// timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(60);

struct Bench {
    child: Option<Child>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Lines of a pipe, forwarded to a channel, and all of it at the end.
fn lines<R: Read + Send + 'static>(
    r: R,
) -> (mpsc::Receiver<String>, std::thread::JoinHandle<String>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            all.push_str(&line);
            all.push('\n');
            let _ = tx.send(line);
        }
        all
    });
    (rx, h)
}

fn wait_for(rx: &mpsc::Receiver<String>, what: &str) {
    loop {
        match rx.recv_timeout(WAIT_MAX) {
            Ok(l) if l.contains(what) => return,
            Ok(_) => continue,
            Err(e) => panic!("never saw {what:?}: {e}"),
        }
    }
}

fn start(args: &[&str]) -> (Bench, ChildStdout, ChildStderr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .arg("bench")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mqblk bench");
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    (Bench { child: Some(child) }, out, err)
}

fn signal(b: &Bench, sig: &str) {
    let pid = b.child.as_ref().unwrap().id().to_string();
    let st = Command::new("kill").args([sig, &pid]).status().unwrap();
    assert!(st.success());
}

fn exit_code(mut b: Bench) -> Option<i32> {
    b.child.take().unwrap().wait().unwrap().code()
}

#[test]
fn the_first_signal_stops_drains_and_reports() {
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        let (b, out, err) = start(&[
            "--device",
            "null",
            "--rw=randread",
            "--runtime=10m",
            "--time_based",
        ]);
        let (out_rx, out_all) = lines(out);
        let (_err_rx, err_all) = lines(err);
        wait_for(&out_rx, "Starting 1 thread");
        signal(&b, sig);
        assert_eq!(exit_code(b), Some(code), "{sig}");
        let out = out_all.join().unwrap();
        let err = err_all.join().unwrap();
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

#[test]
fn a_second_signal_exits_at_once() {
    // The bench reads from an NBD export whose device completes nothing
    // for 100 s: once its I/O is seen in flight there, the drain after the
    // first signal waits on it, and only a second signal can end the bench.
    let dir = std::env::temp_dir().join(format!("mqblk-sig-{}", std::process::id()));
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
    // Left running: its connection holds I/O for 100 s, and the test
    // process ends before that matters.
    std::thread::spawn(move || server.run());

    let spec = format!("nbd+unix:///?socket={},io_timeout_ms=0", sock.display());
    let (b, out, err) = start(&[
        "--device",
        &spec,
        "--rw=randread",
        "--iodepth=4",
        "--runtime=10m",
        "--time_based",
    ]);
    let (out_rx, out_all) = lines(out);
    let (err_rx, err_all) = lines(err);
    wait_for(&out_rx, "Starting 1 thread");
    let mut waited = Duration::ZERO;
    while slow.stats().snapshot().in_flight == 0 {
        assert!(
            waited < WAIT_MAX,
            "the bench's reads never reached the export"
        );
        std::thread::sleep(Duration::from_millis(10));
        waited += Duration::from_millis(10);
    }
    signal(&b, "-TERM");
    wait_for(&err_rx, "mqblk: stopping: draining");
    signal(&b, "-TERM");
    assert_eq!(exit_code(b), Some(143));
    let out = out_all.join().unwrap();
    assert!(
        !out.contains("Run status group"),
        "no report after a second signal: {out}"
    );
    let err = err_all.join().unwrap();
    assert!(!err.contains("terminated by signal"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
