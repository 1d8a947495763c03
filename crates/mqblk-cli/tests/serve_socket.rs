//! `mqblk serve --socket PATH` never destroys what the user did not name:
//! a path holding anything but a socket is refused and left byte for byte
//! as it was, a running server's socket is not taken over (a lock file
//! keeps two servers apart), a stale socket is replaced, and a server
//! removes only the socket and lock it made. Every process a test kills
//! is one it started, by its pid.

use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use mqblk_test_support::Scratch;

/// A server this test started; killed (by its pid) if the test fails.
struct Server(Option<Child>);

impl Server {
    fn start(sock: &Path, extra: &[&str]) -> Server {
        let child = Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", "ram,size=1M", "--socket"])
            .arg(sock)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start mqblk serve");
        let s = Server(Some(child));
        wait_for_greeting(sock);
        s
    }

    /// SIGTERM, and the exit status with stderr.
    fn stop(mut self) -> Output {
        let child = self.0.take().unwrap();
        let st = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        child.wait_with_output().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Connect and read the NBD greeting (NBDMAGIC).
fn greeting(sock: &Path) -> std::io::Result<[u8; 8]> {
    let mut s = UnixStream::connect(sock)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut g = [0u8; 8];
    s.read_exact(&mut g)?;
    Ok(g)
}

fn wait_for_greeting(sock: &Path) {
    let t = Instant::now();
    loop {
        if greeting(sock).is_ok_and(|g| &g == b"NBDMAGIC") {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server never answered on {}",
            sock.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn mqblk(args: &[&str], sock: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(args)
        .arg("--socket")
        .arg(sock)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_regular_file_at_the_socket_path_is_left_byte_identical() {
    let s = Scratch::new("sock-file");
    let p = s.0.join("data.img");
    let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&p, &bytes).unwrap();
    let o = mqblk(&["serve", "ram,size=1M"], &p);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("exists and is a regular file, not a socket; it is left alone"),
        "{err}"
    );
    assert_eq!(std::fs::read(&p).unwrap(), bytes, "byte-identical");
    let mut left: Vec<_> = std::fs::read_dir(&s.0)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(left, ["data.img"], "no lock file or socket left behind");
}

#[test]
fn a_second_server_is_refused_and_the_first_keeps_its_socket() {
    let s = Scratch::new("sock-two");
    let sock = s.0.join("nbd.sock");
    let first = Server::start(&sock, &[]);
    let o = mqblk(&["serve", "null"], &sock);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("another mqblk serve holds"), "{err}");
    // The first server still answers, on the same path.
    assert_eq!(&greeting(&sock).unwrap(), b"NBDMAGIC");
    let o = first.stop();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!sock.exists(), "its own socket is removed");
    assert!(
        !s.0.join("nbd.sock.lock").exists(),
        "its own lock file is removed"
    );
}

#[test]
fn another_programs_listener_is_not_taken_over() {
    let s = Scratch::new("sock-foreign");
    let sock = s.0.join("other.sock");
    let _listener = UnixListener::bind(&sock).unwrap();
    let o = mqblk(&["serve", "null"], &sock);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("a server is listening on it"), "{err}");
    assert!(sock.exists());
}

#[test]
fn a_stale_socket_is_replaced() {
    let s = Scratch::new("sock-stale");
    let sock = s.0.join("nbd.sock");
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists(), "a stale socket: nothing listens");
    let server = Server::start(&sock, &[]);
    let o = server.stop();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(!sock.exists());
}

#[test]
fn a_busy_tcp_port_is_said_once() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args(["serve", "null", "--listen", &addr])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(
        err.lines().next().unwrap_or(""),
        format!(
            "mqblk: error: cannot listen on {addr}: Address already in use (os error 98); \
             another server listens on that port: stop it, or choose another with \
             --listen HOST:PORT (`ss -ltnp` shows who has it)"
        )
    );
}
