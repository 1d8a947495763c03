//! The `mqblk serve` binary: serves NBD on a unix socket, and on SIGTERM
//! stops accepting, drains the requests in flight (their replies all
//! arrive), flushes, and exits 0.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use mqblk_nbd_proto::consts::{cmd, opt, rep};
use mqblk_nbd_proto::handshake::{encode_option, OptionReplyHeader};
use mqblk_nbd_proto::{InfoRequest, ReplyHeader, Request};

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
    let dir = std::env::temp_dir().join(format!("mqblk-serve-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("nbd.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "--device", "ram,size=64M", "--export", "disk"])
        .args([
            "--device",
            "null,size=1M,memory_backed=1",
            "--export",
            "small",
        ])
        .arg("--socket")
        .arg(&sock)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mqblk serve");
    mqblk_test_support::wait_for_path(&sock, "mqblk serve", None);
    let connect = || {
        let s = UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    };
    let mut c = connect();
    handshake(&mut c, "disk");
    let mut small = connect();
    handshake(&mut small, "small");
    // An idle client still negotiating.
    let mut idle = connect();
    let mut g = [0u8; 18];
    idle.read_exact(&mut g).unwrap();

    c.write_all(&writes(32, 0)).unwrap();
    for _ in 0..32 {
        assert_eq!(reply(&mut c).unwrap().0, 0);
    }
    // More writes, then SIGTERM while they may be in flight: every reply
    // that comes is a success and whole, then the server hangs up.
    c.write_all(&writes(32, 100)).unwrap();
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let mut got = 0;
    while let Some((err, cookie)) = reply(&mut c) {
        assert_eq!(err, 0, "cookie {cookie}");
        assert!((100..132).contains(&cookie));
        got += 1;
    }
    assert!(got <= 32);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "mqblk serve did not exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "exit {status}: {err}");
    assert!(err.contains("stopped after 3 connections"), "{err}");
    let mut b = [0u8; 1];
    assert!(matches!(idle.read(&mut b), Ok(0) | Err(_)));
    assert!(matches!(small.read(&mut b), Ok(0) | Err(_)));
    assert!(!sock.exists(), "the socket is removed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 26: a stop signal ends `serve` within 2 s, whatever its devices
/// hold. Here a read waits on a device that completes nothing for 100 s,
/// with no timeout: the server says so, and exits (status 1) without it.
#[test]
fn a_signal_ends_serve_within_2s_while_a_device_holds_a_request() {
    const SIGNAL_BOUND: Duration = Duration::from_secs(2);
    for sig in ["-INT", "-TERM"] {
        let dir = std::env::temp_dir().join(format!("mqblk-serve-stuck-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("nbd.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args([
                "serve",
                "null,size=1G,completion=timer,completion_nsec=100000000000,io_timeout_ms=0",
                "--socket",
            ])
            .arg(&sock)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mqblk serve");
        mqblk_test_support::wait_for_path(&sock, "mqblk serve", None);
        let mut c = UnixStream::connect(&sock).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
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
        let st = Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{sig}: mqblk serve never exited"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = t.elapsed();
        let mut err = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        eprintln!("{sig}: serve exited {status} {took:?} after the signal");
        assert!(took < SIGNAL_BOUND, "{sig}: {took:?}: {err}");
        assert_eq!(status.code(), Some(1), "{sig}: {err}");
        assert!(err.contains("exiting without waiting"), "{sig}: {err}");
        let _ = std::fs::remove_dir_all(&dir);
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

/// nbdkit in the foreground on a unix socket; killed on drop.
struct Kit(std::process::Child, std::path::PathBuf);

impl Kit {
    fn start(args: &[&str]) -> Kit {
        mqblk_test_support::require_tool("nbdkit");
        let dir =
            std::env::temp_dir().join(format!("mqblk-kit-{}-{}", std::process::id(), args.len()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("kit.sock");
        let child = Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(&sock)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .expect("start nbdkit");
        mqblk_test_support::wait_for_path(&sock, "nbdkit", None);
        Kit(child, dir)
    }

    fn spec(&self, opts: &str) -> String {
        format!(
            "nbd+unix:///?socket={},{opts}",
            self.1.join("kit.sock").display()
        )
    }
}

impl Drop for Kit {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.1);
    }
}

fn bench_ok(device: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args([
            "bench",
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=16",
            "--numjobs=2",
        ])
        .args(["--size=32M", "--verify=crc32c", "--randseed=3"])
        .arg(format!("--device={device}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("mqblk bench on {device} did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
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

    let dir = std::env::temp_dir().join(format!("mqblk-serve-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("nbd.sock");
    let mut srv = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "--device", "ram,size=64M", "--socket"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    mqblk_test_support::wait_for_path(&sock, "mqblk serve", None);
    bench_ok(&format!("nbd+unix:///?socket={},conns=2", sock.display()));
    let _ = Command::new("kill")
        .args(["-TERM", &srv.id().to_string()])
        .status();
    let st = srv.wait().unwrap();
    assert!(st.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `delay` table over a leg with an interrupt line (a file, through
/// io_uring) served over NBD: the server sleeps on the export's completion
/// fd, and the delay line's timer wakes it when a held child is due.
/// (Before the timer, nothing woke it and no I/O completed.) 100 reads at
/// depth 4 through a 20 ms delay take about 0.5 s; the bound only tells
/// a stall from a finish.
#[test]
fn a_delay_table_over_a_file_is_served() {
    let dir = std::env::temp_dir().join(format!("mqblk-serve-delay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("leg.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let sock = dir.join("nbd.sock");
    let table = format!("dm-table:0 65536 delay file:{} 0 20", img.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", &table, "--socket"])
        .arg(&sock)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mqblk serve");
    mqblk_test_support::wait_for_path(&sock, "mqblk serve", Some(&mut child));
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
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["jobs"][0]["read"]["total_ios"].as_u64().unwrap() >= 100);
    eprintln!("100 delayed reads in {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}
