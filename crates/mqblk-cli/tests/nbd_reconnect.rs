//! `reconnect_ms` end to end: `mqblk bench --verify` runs against `mqblk
//! serve` of a file; the server is killed (SIGKILL, by its pid) in the
//! middle of the run and started again on the same socket over the same
//! file. The client reconnects, sends what was in flight again, and the
//! run ends with 0 verify errors.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn mqblk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_mqblk"))
}

/// A server this test started, killed by its pid.
struct Server(Child);

impl Server {
    fn start(img: &std::path::Path, sock: &std::path::Path) -> Server {
        let child = mqblk()
            .arg("serve")
            .arg(format!("file:{}", img.display()))
            .arg("--socket")
            .arg(sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut s = Server(child);
        mqblk_test_support::wait_for_path(sock, "mqblk serve", Some(&mut s.0));
        s
    }

    fn kill(&mut self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill("-TERM");
    }
}

#[test]
fn a_verify_run_goes_through_a_server_killed_and_started_again() {
    let scratch = mqblk_test_support::Scratch::new("nbd-reconnect");
    let img = scratch.file("disk.img", 64 << 20);
    let sock = scratch.path().join("nbd.sock");
    let mut first = Server::start(&img, &sock);
    let bench = mqblk()
        .arg("bench")
        .arg(format!(
            "--device=nbd+unix:///?socket={},reconnect_ms=20000",
            sock.display()
        ))
        .args([
            "--rw=randrw",
            "--bs=4k",
            "--iodepth=16",
            "--size=64M",
            "--runtime=5",
            "--time_based",
            "--verify=crc32c",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    first.kill("-KILL");
    // The socket file a killed server leaves behind is stale: the next
    // server takes its place.
    std::thread::sleep(Duration::from_millis(500));
    let _second = Server::start(&img, &sock);
    let out = bench.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("reconnected after"),
        "the client did not reconnect:\n{stderr}"
    );
    let verify = stdout
        .lines()
        .find(|l| l.contains("verify") && l.contains("errors"))
        .unwrap_or_else(|| panic!("no verify line:\n{stdout}"));
    assert!(verify.ends_with(" 0 errors"), "{verify}");
}
