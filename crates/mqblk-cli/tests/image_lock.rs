//! Two processes on one image, as qemu keeps them apart: a bench that
//! would write an image `mqblk serve` exports read-write is refused, named
//! by the server's pid, before any I/O; `lock=0` opts out. qemu's own
//! locks and mqblk's keep each other out too.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mqblk_test_support::Scratch;

/// A server this test started; killed (by its pid) when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(spec: &str, sock: &Path) -> Server {
    let s = Server(
        Command::new(env!("CARGO_BIN_EXE_mqblk"))
            .args(["serve", spec, "--socket"])
            .arg(sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start mqblk serve"),
    );
    let t = Instant::now();
    loop {
        let mut g = [0u8; 8];
        let up = UnixStream::connect(sock).and_then(|mut c| {
            c.set_read_timeout(Some(Duration::from_secs(5)))?;
            c.read_exact(&mut g)
        });
        if up.is_ok() && &g == b"NBDMAGIC" {
            return s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server never answered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bench(spec: &str) -> (bool, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_mqblk"))
        .args([
            "bench",
            "--device",
            spec,
            "--rw=write",
            "--bs=4k",
            "--size=64k",
        ])
        .output()
        .expect("run mqblk bench");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn a_bench_writing_a_served_image_is_refused_naming_the_server() {
    let d = Scratch::new("image-lock");
    let img = d.file("disk.img", 1 << 20);
    let spec = format!("file:{}", img.display());
    let srv = serve(&spec, &d.path().join("s.sock"));
    let (ok, err) = bench(&spec);
    assert!(!ok, "{err}");
    assert!(
        err.contains(&format!(
            "{} is locked: pid {} (mqblk) has it open with a write lock, and two writers of one image corrupt it",
            img.display(),
            srv.0.id()
        )),
        "{err}"
    );
    // Told it may, it does.
    let (ok, err) = bench(&format!("{spec},lock=0"));
    assert!(ok, "{err}");
    drop(srv);
    // With the server gone, the image is free.
    let (ok, err) = bench(&spec);
    assert!(ok, "{err}");
}

#[test]
fn qemu_and_mqblk_keep_each_other_from_writing_one_image() {
    mqblk_test_support::require_tool("qemu-io");
    let d = Scratch::new("image-lock-qemu");
    let img = d.file("disk.img", 1 << 20);
    let spec = format!("file:{}", img.display());
    // mqblk serves it read-write: qemu-io may not write it.
    let srv = serve(&spec, &d.path().join("s.sock"));
    let q = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write 0 4k"])
        .arg(&img)
        .output()
        .expect("run qemu-io");
    let qerr = String::from_utf8_lossy(&q.stderr);
    assert!(!q.status.success(), "qemu-io wrote a served image: {qerr}");
    assert!(qerr.contains("Failed to lock byte"), "{qerr}");
    drop(srv);
    // Once the server's lock is gone (a bench may write again)...
    let (ok, err) = bench(&spec);
    assert!(ok, "{err}");
    // ...qemu-io holds it open: a bench may not write it, and is told who.
    let mut held = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "sleep 60000"])
        .arg(&img)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start qemu-io");
    // Wait until qemu-io has locked it (a bench before would lock it
    // first, and keep qemu-io out instead).
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&img).unwrap());
    let t = Instant::now();
    while !std::fs::read_to_string("/proc/locks")
        .unwrap()
        .lines()
        .any(|l| l.contains("OFDLCK") && l.contains(&format!(":{ino} ")))
    {
        assert!(
            held.try_wait().unwrap().is_none(),
            "qemu-io could not open the image"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "qemu-io never locked it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, err) = bench(&spec);
    let _ = held.kill();
    let _ = held.wait();
    assert!(!ok, "a bench wrote an image qemu-io holds");
    assert!(
        err.contains(&format!(
            "{} is locked: pid {} (qemu-io) has it open",
            img.display(),
            held.id()
        )),
        "{err}"
    );
}
