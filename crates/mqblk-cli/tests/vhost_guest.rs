//! Issue 35's acceptance in a real virtual machine: qemu (TCG) boots with
//! its one disk on a vhost-user-blk export, makes ext4 on it, writes
//! files whose SHA-256 the host knows, syncs and powers off; the host
//! runs `e2fsck -fn` on the device's bytes; a second boot on the same
//! export checks ext4 and reads the files back (mqblk-test-support's
//! `guest` module does the guest's part). The export is
//! qemu-storage-daemon, the peer, over a file: the harness itself is
//! shown to work against it, both on the backing file and on a copy
//! read over NBD.
//!
//! Every process a test starts (the server, qemu) is a `Watched` child,
//! killed by its own pid if the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::{
    e2fsck_clean, require_tool, run_ok, time_bound, Guest, Phase, Scratch, Watched, QUEUES,
};

/// How long a server has to drain and exit 0 after SIGTERM (issue 35's
/// bound for `mqblk serve`).
const STOP_MAX: Duration = Duration::from_secs(2);

/// The files' seed: the same files in every run.
const SEED: u64 = 35;

/// A vhost-user-blk export this test started, and where it listens.
/// Dropped while the test fails, the server is killed (by its pid) and
/// what it printed is shown.
struct Export {
    server: Option<Watched>,
    /// Its vhost-user-blk socket.
    vhost: PathBuf,
    /// The same device over NBD, where it exports that too.
    nbd_uri: Option<String>,
}

impl Export {
    /// SIGTERM: it must exit 0 within [`STOP_MAX`].
    fn stop(mut self) {
        let mut server = self.server.take().expect("stopped once");
        let start = Instant::now();
        server.signal("-TERM");
        let (status, _, stderr) = server.finish(STOP_MAX + Duration::from_secs(30));
        let within = time_bound("stop after SIGTERM", start.elapsed(), STOP_MAX);
        assert!(
            within,
            "the server took over {STOP_MAX:?} to exit:\n{stderr}"
        );
        assert!(status.success(), "the server exited {status}:\n{stderr}");
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        if let Some(mut server) = self.server.take() {
            server.kill();
            let (status, out, err) = server.finish(Duration::from_secs(10));
            if std::thread::panicking() {
                eprintln!("--- the server ({status}): stdout:\n{out}--- stderr:\n{err}");
            }
        }
    }
}

/// qemu-storage-daemon exporting `image` over vhost-user-blk with
/// [`QUEUES`] queues, and over NBD (read-only), its sockets in `dir`.
fn qsd_export(image: &Path, dir: &Path) -> Export {
    require_tool("qemu-storage-daemon");
    let vhost = dir.join("vhost.sock");
    let nbd = dir.join("nbd.sock");
    let blockdev = format!(
        "driver=file,node-name=f,filename={},cache.direct=off",
        image.display()
    );
    let export = format!(
        "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path={},writable=on,\
         num-queues={QUEUES}",
        vhost.display()
    );
    let nbd_server = format!("addr.type=unix,addr.path={}", nbd.display());
    let mut server = Watched::spawn(Command::new("qemu-storage-daemon").args([
        "--blockdev",
        &blockdev,
        "--export",
        &export,
        "--nbd-server",
        &nbd_server,
        "--export",
        "type=nbd,id=n,node-name=f,name=",
    ]));
    server.wait_for_path(&vhost);
    server.wait_for_path(&nbd);
    Export {
        server: Some(server),
        vhost,
        nbd_uri: Some(format!("nbd+unix:///?socket={}", nbd.display())),
    }
}

/// The device's bytes, copied over the export's NBD socket (`nbdcopy`)
/// into a file in `dir`: where the data lives only in the server.
fn copy_over_nbd(export: &Export, dir: &Path) -> PathBuf {
    require_tool("nbdcopy");
    let uri = export
        .nbd_uri
        .as_deref()
        .expect("the export has an NBD socket");
    let copy = dir.join("nbd-copy.img");
    let _ = std::fs::remove_file(&copy);
    run_ok("nbdcopy", &[uri, &copy.to_string_lossy()]);
    copy
}

/// The round trip through `export`, a device of `sectors`: a write boot,
/// `e2fsck -fn` on the bytes that `host_image` gives (after the write
/// boot), and a check boot. The export stays up for both boots.
fn round_trip(tag: &str, export: &Export, sectors: u64, host_image: impl FnOnce() -> PathBuf) {
    let guest = Guest::new(tag, SEED);
    let check_disk = |boot: &mqblk_test_support::Boot| {
        assert_eq!(
            boot.disk(),
            Some((sectors, QUEUES)),
            "the guest's disk (sectors, queues)\n{}",
            boot.tail()
        );
    };
    check_disk(&guest.boot(Phase::Write, &export.vhost));
    e2fsck_clean(&host_image());
    check_disk(&guest.boot(Phase::Check, &export.vhost));
}

#[test]
fn qemu_storage_daemon_the_peer_passes_the_round_trip_on_a_file() {
    let s = Scratch::new("vhost-guest-qsd");
    let bytes = 256 << 20;
    let image = s.file("disk.img", bytes);
    let export = qsd_export(&image, s.path());
    round_trip("qsd", &export, bytes >> 9, || {
        e2fsck_clean(&image);
        copy_over_nbd(&export, s.path())
    });
    export.stop();
}
