//! Helpers of the NBD integration tests: an in-process server on a unix
//! socket (or loopback TCP), real clients run with a bounded wait, and
//! scratch directories. A test that needs a tool scripts/test installs fails
//! when the tool is missing.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mqblk_nbd::{ConnLimits, Export, Listen, Server, ServerConfig, TlsMode};

/// Fail (not skip) when a tool that scripts/test installs is missing.
pub fn require(tool: &str) {
    mqblk_test_support::require_tool(tool);
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A scratch directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "mqblk-nbd-{tag}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An in-process server; stops (drains) on drop.
pub struct TestServer {
    pub dir: TempDir,
    pub socket: PathBuf,
    pub tcp: Option<std::net::SocketAddr>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub server: Arc<Server>,
}

impl TestServer {
    pub fn start(exports: Vec<Export>) -> TestServer {
        Self::start_with(exports, ConnLimits::default(), TlsMode::Off, None, false)
    }

    pub fn start_with(
        exports: Vec<Export>,
        limits: ConnLimits,
        tls_mode: TlsMode,
        tls: Option<Arc<rustls::ServerConfig>>,
        tcp: bool,
    ) -> TestServer {
        Self::start_full(exports, limits, tls_mode, tls, tcp, None)
    }

    /// On a unix socket, with `n` I/O threads.
    pub fn start_on_threads(exports: Vec<Export>, n: usize) -> TestServer {
        Self::start_full(
            exports,
            ConnLimits::default(),
            TlsMode::Off,
            None,
            false,
            Some(n),
        )
    }

    fn start_full(
        exports: Vec<Export>,
        limits: ConnLimits,
        tls_mode: TlsMode,
        tls: Option<Arc<rustls::ServerConfig>>,
        tcp: bool,
        io_threads: Option<usize>,
    ) -> TestServer {
        let dir = TempDir::new("srv");
        let socket = dir.path().join("nbd.sock");
        let listen = if tcp {
            Listen::Tcp("127.0.0.1:0".into())
        } else {
            Listen::Unix(socket.clone())
        };
        let mut server = Server::bind(
            ServerConfig {
                exports,
                tls_mode,
                tls,
                limits,
            },
            &listen,
        )
        .expect("bind");
        if let Some(n) = io_threads {
            server = server.with_io_threads(n);
        }
        let server = Arc::new(server);
        let stop = server.shutdown_handle();
        let s2 = server.clone();
        let thread = std::thread::spawn(move || s2.run().expect("server run"));
        TestServer {
            tcp: server.local_addr(),
            dir,
            socket,
            stop,
            thread: Some(thread),
            server,
        }
    }

    /// `nbd+unix:///EXPORT?socket=...`
    pub fn uri(&self, export: &str) -> String {
        match self.tcp {
            Some(a) => format!("nbd://{a}/{export}"),
            None => format!("nbd+unix:///{export}?socket={}", self.socket.display()),
        }
    }

    /// The same, as qemu spells it.
    pub fn qemu_uri(&self, export: &str) -> String {
        self.uri(export)
    }

    pub fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        self.server.stop();
        if let Some(t) = self.thread.take() {
            t.join().expect("server thread");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// A writable export of `spec`.
pub fn export(name: &str, spec: &str) -> Export {
    Export::new(name, mqblk::open(spec).expect("open device"))
}

/// Run a command with a bounded wait; panics with its output on timeout.
pub fn run_timeout(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let te = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let e = te.join().unwrap();
            panic!(
                "{cmd:?} did not finish within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&e)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: to.join().unwrap(),
        stderr: te.join().unwrap(),
    }
}

/// Run and require success; returns stdout.
pub fn run_ok(cmd: &mut Command, limit: Duration) -> String {
    let o = run_timeout(cmd, limit);
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}): stdout: {} stderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Deterministic pseudo-random bytes (xorshift), for data that must
/// round-trip.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

/// A raw NBD client for malformed-input tests: negotiates with
/// `OPT_GO` (optionally structured replies), then speaks requests.
pub struct RawClient {
    pub s: UnixStream,
}

impl RawClient {
    pub fn handshake(s: UnixStream, export: &str, structured: bool) -> RawClient {
        use mqblk_nbd_proto::consts::{opt, rep};
        use mqblk_nbd_proto::handshake::{encode_option, OptionReplyHeader};
        let mut c = RawClient { s };
        let mut g = [0u8; 18];
        c.s.read_exact(&mut g).unwrap();
        c.s.write_all(&3u32.to_be_bytes()).unwrap();
        if structured {
            let mut v = Vec::new();
            encode_option(opt::STRUCTURED_REPLY, &[], &mut v);
            c.s.write_all(&v).unwrap();
            let (h, _) = c.option_reply();
            assert_eq!(h.reply_type, rep::ACK);
        }
        let mut d = Vec::new();
        mqblk_nbd_proto::InfoRequest {
            name: export,
            requests: vec![],
        }
        .encode(&mut d);
        let mut v = Vec::new();
        encode_option(opt::GO, &d, &mut v);
        c.s.write_all(&v).unwrap();
        loop {
            let (h, _): (OptionReplyHeader, _) = c.option_reply();
            if h.reply_type == rep::ACK {
                break;
            }
            assert_eq!(h.reply_type, rep::INFO, "GO failed: {h:?}");
        }
        c
    }

    pub fn option_reply(&mut self) -> (mqblk_nbd_proto::OptionReplyHeader, Vec<u8>) {
        let mut h = [0u8; 20];
        self.s.read_exact(&mut h).unwrap();
        let h = mqblk_nbd_proto::OptionReplyHeader::decode(&h).unwrap();
        let mut d = vec![0u8; h.len as usize];
        self.s.read_exact(&mut d).unwrap();
        (h, d)
    }

    pub fn send(&mut self, cmd: u16, flags: u16, cookie: u64, offset: u64, len: u32, data: &[u8]) {
        let r = mqblk_nbd_proto::Request {
            flags,
            cmd,
            cookie,
            offset,
            len,
        };
        self.s.write_all(&r.encode()).unwrap();
        self.s.write_all(data).unwrap();
    }

    /// Read one simple reply: (error, cookie).
    pub fn simple_reply(&mut self) -> (u32, u64) {
        let mut b = [0u8; 16];
        self.s.read_exact(&mut b).unwrap();
        match mqblk_nbd_proto::ReplyHeader::decode(&b).unwrap() {
            mqblk_nbd_proto::ReplyHeader::Simple { error, cookie } => (error, cookie),
            other => panic!("expected a simple reply, got {other:?}"),
        }
    }

    /// True if the server closed the connection (EOF) within the read
    /// timeout.
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.s.read(&mut b), Ok(0) | Err(_))
    }
}

/// nbdkit in the foreground on a unix socket; killed (by its pid) on drop.
pub struct Nbdkit {
    child: std::process::Child,
    pub sock: PathBuf,
    _dir: TempDir,
}

impl Nbdkit {
    pub fn start(args: &[&str]) -> Nbdkit {
        require("nbdkit");
        let dir = TempDir::new("nbdkit");
        let sock = dir.path().join("kit.sock");
        let child = Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(&sock)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .expect("start nbdkit");
        let t = Instant::now();
        // The socket file exists from bind(), before listen(): wait until
        // a connection is accepted, or a client started now is refused.
        while UnixStream::connect(&sock).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "nbdkit did not listen on its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Nbdkit {
            child,
            sock,
            _dir: dir,
        }
    }

    /// The export's URL.
    pub fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.sock.display())
    }

    /// A device spec for the export with `opts` after a comma.
    pub fn spec_with(&self, opts: &str) -> String {
        format!("{},{opts}", self.uri())
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kill this nbdkit (if it still runs) and start another on the same
    /// socket with `args`.
    pub fn restart(&mut self, args: &[&str]) {
        self.kill();
        let _ = std::fs::remove_file(&self.sock);
        self.child = Command::new("nbdkit")
            .args(["-f", "-U"])
            .arg(&self.sock)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .expect("start nbdkit");
        let t = Instant::now();
        while UnixStream::connect(&self.sock).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "nbdkit did not listen on its socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A TCP connection to `to` from the loopback address `from` (any of
/// 127.0.0.0/8 is this machine), so that a test can be several peers.
pub fn connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddr) -> std::net::TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).expect("socket");
    rustix::net::bind(&fd, &std::net::SocketAddrV4::new(from, 0)).expect("bind the source address");
    rustix::net::connect(&fd, &to).expect("connect");
    std::net::TcpStream::from(fd)
}

/// Raise the soft limit of open files to `n` (or the hard limit, if
/// lower): a test that holds many client sockets and the in-process
/// server's side of each needs more than the usual 1,024.
pub fn raise_fd_limit(n: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the live struct we pass.
    let got = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    assert_eq!(got, 0, "getrlimit");
    if r.rlim_cur < n && r.rlim_max > r.rlim_cur {
        r.rlim_cur = r.rlim_max.min(n);
        // SAFETY: setrlimit reads the live struct we pass.
        let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
        assert_eq!(set, 0, "setrlimit");
    }
    assert!(
        r.rlim_cur >= n,
        "open files are limited to {} (hard limit {}), the test needs {n}",
        r.rlim_cur,
        r.rlim_max
    );
}

/// How a negotiation with `OPT_GO` ended.
#[derive(Debug)]
pub enum Go {
    /// In transmission.
    Served,
    /// Refused, with the server's message.
    Refused(u32, String),
    /// The server closed without an answer.
    Closed,
}

/// Greeting, flags, `OPT_GO` for the default export: whether the server
/// serves this connection.
pub fn go<S: Read + Write>(s: &mut S) -> Go {
    use mqblk_nbd_proto::consts::{opt, rep};
    use mqblk_nbd_proto::handshake::{encode_option, OptionReplyHeader};
    let mut g = [0u8; 18];
    if s.read_exact(&mut g).is_err() {
        return Go::Closed;
    }
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut d = Vec::new();
    mqblk_nbd_proto::InfoRequest {
        name: "",
        requests: vec![],
    }
    .encode(&mut d);
    let mut v = Vec::new();
    encode_option(opt::GO, &d, &mut v);
    if s.write_all(&v).is_err() {
        return Go::Closed;
    }
    loop {
        let mut h = [0u8; 20];
        if s.read_exact(&mut h).is_err() {
            return Go::Closed;
        }
        let h = OptionReplyHeader::decode(&h).unwrap();
        let mut d = vec![0u8; h.len as usize];
        if s.read_exact(&mut d).is_err() {
            return Go::Closed;
        }
        match h.reply_type {
            rep::ACK => return Go::Served,
            rep::INFO => {}
            t => return Go::Refused(t, String::from_utf8_lossy(&d).into_owned()),
        }
    }
}
