//! The `mqblk serve` binary: serves NBD on a unix socket, and on SIGTERM
//! stops accepting, drains the requests in flight (their replies all
//! arrive), flushes, and exits 0.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_nbd_proto::consts::{cmd, opt, rep};
use mqblk_nbd_proto::handshake::{encode_option, OptionReplyHeader};
use mqblk_nbd_proto::{InfoRequest, ReplyHeader, Request};
use mqblk_test_support::{time_bound, Scratch, Watched};

/// A hang guard for a process that should exit (not a timing assertion).
const WAIT_MAX: Duration = Duration::from_secs(60);

/// `mqblk serve ARGS --socket S` with S in `dir`, once S is there: S and
/// the server.
fn serve(dir: &Scratch, args: &[&str]) -> (PathBuf, Watched) {
    let sock = dir.path().join("nbd.sock");
    let mut w = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .arg("serve")
            .args(args)
            .arg("--socket")
            .arg(&sock),
    );
    w.wait_for_path(&sock);
    (sock, w)
}

/// A client connection to `sock`, whose reads give up after 20 s.
fn connect(sock: &Path) -> UnixStream {
    let s = UnixStream::connect(sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn handshake(s: &mut UnixStream, export: &str) {
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut d = Vec::new();
    InfoRequest {
        name: export,
        requests: vec![],
    }
    .encode(&mut d);
    let mut v = Vec::new();
    encode_option(opt::GO, &d, &mut v);
    s.write_all(&v).unwrap();
    loop {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let h = OptionReplyHeader::decode(&h).unwrap();
        let mut d = vec![0u8; h.len as usize];
        s.read_exact(&mut d).unwrap();
        if h.reply_type == rep::ACK {
            return;
        }
        assert_eq!(h.reply_type, rep::INFO);
    }
}

fn writes(n: u64, first_cookie: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for i in 0..n {
        let r = Request {
            flags: 0,
            cmd: cmd::WRITE,
            cookie: first_cookie + i,
            offset: i * 4096,
            len: 4096,
        };
        v.extend_from_slice(&r.encode());
        v.extend(std::iter::repeat_n(i as u8, 4096));
    }
    v
}

fn reply(s: &mut UnixStream) -> Option<(u32, u64)> {
    let mut b = [0u8; 16];
    match s.read_exact(&mut b) {
        Ok(()) => match ReplyHeader::decode(&b).unwrap() {
            ReplyHeader::Simple { error, cookie } => Some((error, cookie)),
            other => panic!("unexpected {other:?}"),
        },
        Err(_) => None,
    }
}

#[test]
fn serve_drains_in_flight_requests_and_exits_zero_on_sigterm() {
    let dir = Scratch::new("serve");
    let (sock, mut child) = serve(
        &dir,
        &[
            "--device",
            "ram,size=64M",
            "--export",
            "disk",
            "--device",
            "null,size=1M,memory_backed=1",
            "--export",
            "small",
        ],
    );
    let mut c = connect(&sock);
    handshake(&mut c, "disk");
    let mut small = connect(&sock);
    handshake(&mut small, "small");
    // An idle client still negotiating.
    let mut idle = connect(&sock);
    let mut g = [0u8; 18];
    idle.read_exact(&mut g).unwrap();

    c.write_all(&writes(32, 0)).unwrap();
    for _ in 0..32 {
        assert_eq!(reply(&mut c).unwrap().0, 0);
    }
    // More writes, then SIGTERM while they may be in flight: every reply
    // that comes is a success and whole, then the server hangs up.
    c.write_all(&writes(32, 100)).unwrap();
    child.signal("-TERM");
    let mut got = 0;
    while let Some((err, cookie)) = reply(&mut c) {
        assert_eq!(err, 0, "cookie {cookie}");
        assert!((100..132).contains(&cookie));
        got += 1;
    }
    assert!(got <= 32);
    let (status, _, err) = child.finish(Duration::from_secs(30));
    assert!(status.success(), "exit {status}: {err}");
    assert!(err.contains("stopped after 3 connections"), "{err}");
    let mut b = [0u8; 1];
    assert!(matches!(idle.read(&mut b), Ok(0) | Err(_)));
    assert!(matches!(small.read(&mut b), Ok(0) | Err(_)));
    assert!(!sock.exists(), "the socket is removed");
}

/// Issue 26: a stop signal ends `serve` within 2 s, whatever its devices
/// hold. Here a read waits on a device that completes nothing for 100 s,
/// with no timeout: the server says so, and exits (status 1) without it.
#[test]
fn a_signal_ends_serve_within_2s_while_a_device_holds_a_request() {
    const SIGNAL_BOUND: Duration = Duration::from_secs(2);
    for sig in ["-INT", "-TERM"] {
        let dir = Scratch::new("serve-stuck");
        let (sock, mut child) = serve(
            &dir,
            &["null,size=1G,completion=timer,completion_nsec=100000000000,io_timeout_ms=0"],
        );
        let mut c = connect(&sock);
        handshake(&mut c, "");
        let r = Request {
            flags: 0,
            cmd: cmd::READ,
            cookie: 7,
            offset: 0,
            len: 4096,
        };
        c.write_all(&r.encode()).unwrap();
        // The read is with the device now.
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        child.signal(sig);
        let status = child.wait(WAIT_MAX);
        let took = t.elapsed();
        let (_, _, err) = child.finish(WAIT_MAX);
        eprintln!("{sig}: serve exited {status} {took:?} after the signal");
        assert!(
            time_bound(sig, took, SIGNAL_BOUND),
            "{sig}: {took:?}: {err}"
        );
        assert_eq!(status.code(), Some(1), "{sig}: {err}");
        assert!(err.contains("exiting without waiting"), "{sig}: {err}");
    }
}

#[test]
fn serve_rejects_bad_command_lines() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .arg("serve")
            .args(args)
            .output()
            .unwrap()
    };
    let o = run(&[
        "--device",
        "ram,size=1M",
        "--device",
        "ram,size=1M",
        "--socket",
        "/tmp/x",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs an --export name"));
    let o = run(&[
        "--device",
        "ram,size=1M",
        "--socket",
        "/tmp/x",
        "--tls=require",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--tls-cert"));
    let o = run(&["--device", "bogus", "--socket", "/tmp/x"]);
    assert!(!o.status.success());
    let o = run(&["--device", "ram,size=1M"]);
    assert!(!o.status.success(), "a listen address is required");
}

/// nbdkit in the foreground on a unix socket in a scratch dir; killed
/// (by its pid) on drop, before the dir goes.
struct Kit {
    _nbdkit: Watched,
    sock: PathBuf,
    _dir: Scratch,
}

impl Kit {
    fn start(args: &[&str]) -> Kit {
        mqblk_test_support::require_tool("nbdkit");
        let dir = Scratch::new(&format!("kit-{}", args.len()));
        let sock = dir.path().join("kit.sock");
        let mut nbdkit = Watched::spawn(
            Command::new("nbdkit")
                .args(["-f", "-U"])
                .arg(&sock)
                .args(args),
        );
        nbdkit.wait_for_path(&sock);
        Kit {
            _nbdkit: nbdkit,
            sock,
            _dir: dir,
        }
    }

    fn spec(&self, opts: &str) -> String {
        format!("nbd+unix:///?socket={},{opts}", self.sock.display())
    }
}

fn bench_ok(device: &str) -> String {
    let bench = Watched::spawn(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args([
                "bench",
                "--rw=randrw",
                "--bs=4k",
                "--iodepth=16",
                "--numjobs=2",
            ])
            .args(["--size=32M", "--verify=crc32c", "--randseed=3"])
            .arg(format!("--device={device}")),
    );
    let (status, out, err) = bench.finish(Duration::from_secs(120));
    assert!(
        status.success(),
        "bench on {device}: {status}\n{out}\n{err}"
    );
    assert!(out.contains("verify"), "{out}");
    out
}

/// The client driver under the bench's crc32c verification: against
/// nbdkit's memory plugin (two connections), and against `mqblk serve`.
#[test]
fn bench_verify_through_the_nbd_client_driver() {
    let kit = Kit::start(&["memory", "64M"]);
    bench_ok(&kit.spec("conns=2"));

    let dir = Scratch::new("serve-bench");
    let (sock, mut srv) = serve(&dir, &["--device", "ram,size=64M"]);
    bench_ok(&format!("nbd+unix:///?socket={},conns=2", sock.display()));
    srv.signal("-TERM");
    let st = srv.wait(WAIT_MAX);
    assert!(st.success());
}

/// A `delay` table over a leg with an interrupt line (a file, through
/// io_uring) served over NBD: the server sleeps on the export's completion
/// fd, and the delay line's timer wakes it when a held child is due.
/// (Before the timer, nothing woke it and no I/O completed.) 100 reads at
/// depth 4 through a 20 ms delay take about 0.5 s; the bound only tells
/// a stall from a finish.
#[test]
fn a_delay_table_over_a_file_is_served() {
    let dir = Scratch::new("serve-delay");
    let img = dir.file("leg.img", 32 << 20);
    let table = format!("dm-table:0 65536 delay file:{} 0 20", img.display());
    let (sock, mut child) = serve(&dir, &[&table]);
    let t = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args([
            "bench",
            "--device",
            &format!("nbd+unix:///?socket={},io_timeout_ms=5000", sock.display()),
            "--rw=randread",
            "--bs=4k",
            "--iodepth=4",
            "--number_ios=100",
            "--output-format=json",
        ])
        .output()
        .unwrap();
    let took = t.elapsed();
    child.kill();
    drop(dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["jobs"][0]["read"]["total_ios"].as_u64().unwrap() >= 100);
    eprintln!("100 delayed reads in {took:?}");
    assert!(time_bound("", took, Duration::from_secs(5)), "{took:?}");
}
