//! `mqblk serve` out of file descriptors (issue 26, item 6): under
//! `ulimit -n 32`, 40 clients connect and say nothing. The server accepts
//! what its descriptors allow, and when accept(2) fails (EMFILE) it rests
//! its listener for 100 ms instead of spinning on it, saying so at most
//! once a second. The silent ones are dropped at the handshake deadline,
//! the ones still in the backlog are taken in turn, and nbdinfo, which
//! connected after all of them, is served. The server is killed by its
//! own pid.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mqblk_test_support::{require_tool, Scratch};

const HANDSHAKE_MS: u64 = 1000;
const SILENT: usize = 40;

/// A server this test started; killed (by its pid) when the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn out_of_descriptors_the_server_backs_off_and_serves_after_the_silent_ones_go() {
    require_tool("nbdinfo");
    let dir = Scratch::new("serve-fds");
    let log_path = dir.path().join("serve.log");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let log = std::fs::File::create(&log_path).unwrap();
    // One I/O thread: its descriptors are counted against the 32 too.
    let script = format!(
        "ulimit -n 32 && exec \"$0\" serve null,size=1G --listen {addr} \
         --handshake-timeout-ms {HANDSHAKE_MS} --io-threads 1"
    );
    let child = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_mqblk")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start mqblk serve");
    let _server = Server(child);
    let t = Instant::now();
    while TcpStream::connect(&addr).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Connected, and silent from here on.
    let silent: Vec<TcpStream> = (0..SILENT)
        .map(|_| TcpStream::connect(&addr).expect("connect a silent client"))
        .collect();

    let t = Instant::now();
    let out = Command::new("timeout")
        .args(["60", "nbdinfo", &format!("nbd://{addr}")])
        .output()
        .unwrap();
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("nbdinfo answered after {took:?}");
    assert!(
        out.status.success(),
        "nbdinfo was not served: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("export-size: 1073741824"), "{text}");
    drop(silent);

    let log = std::fs::read_to_string(&log_path).unwrap();
    let lines = log.lines().count();
    let accept_lines = log.lines().filter(|l| l.contains("accept:")).count();
    println!("serve said {lines} lines, {accept_lines} about accept");
    assert!(
        accept_lines > 0,
        "the server never ran out of descriptors, so the test tested nothing:\n{log}"
    );
    assert!(
        lines < 1000,
        "the server logged {lines} lines:\n{}",
        &log[..log.len().min(2000)]
    );
}
