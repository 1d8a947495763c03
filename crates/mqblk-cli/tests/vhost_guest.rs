//! Issue 35's acceptance in a real virtual machine: qemu (TCG) boots with
//! its one disk on a vhost-user-blk export, makes ext4 on it, writes
//! files whose SHA-256 the host knows, syncs and powers off; the host
//! runs `e2fsck -fn` on the device's bytes; a second boot on the same
//! export checks ext4 and reads the files back (mqblk-test-support's
//! `guest` module does the guest's part).
//!
//! The export is `mqblk serve --vhost-user-blk` on a `file:` device (the
//! host checks the backing file) and on a dm stripe over two `ram` legs
//! (the data lives only in the server: the host checks a copy read over
//! the same server's NBD export). qemu-storage-daemon, the peer, runs the
//! same round trip on a file, so that the harness itself is known to
//! work: switching a test between the two is the one call that makes
//! its [`Export`].
//!
//! Issue 35's stop bound with a real guest attached: a guest that reads
//! and writes its disk in two loops (`Phase::Busy`) while `mqblk serve`
//! gets SIGINT, which must end it (exit 0) within 2 s; qemu is then
//! killed by its pid, and what it did meanwhile is printed, not judged.
//!
//! Every process a test starts (the server, qemu) is a `Watched` child,
//! killed by its own pid if the test fails; the server's output is then
//! shown beside the guest's console.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::{
    e2fsck_clean, require_tool, run_ok_within, time_bound, Guest, Phase, Scratch, Watched, BUSY,
    QUEUES,
};

/// How long a server has to drain and exit 0 after SIGTERM or SIGINT
/// (issue 35's bound for `mqblk serve`).
const STOP_MAX: Duration = Duration::from_secs(2);

/// How long qemu is watched, once the server is gone, to see whether it
/// exits by itself (what it does is printed, not asserted).
const QEMU_WATCH: Duration = Duration::from_secs(5);

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
    /// SIGTERM: it must exit 0 within [`STOP_MAX`]. Its stderr.
    fn stop(self) -> String {
        self.stop_by("TERM")
    }

    /// Signal `sig` (`TERM`, `INT`) to its pid: it must exit 0 within
    /// [`STOP_MAX`], the time printed against it. Its stderr.
    fn stop_by(mut self, sig: &str) -> String {
        let mut server = self.server.take().expect("stopped once");
        let start = Instant::now();
        server.signal(&format!("-{sig}"));
        let (status, _, stderr) = server.finish(STOP_MAX + Duration::from_secs(30));
        let within = time_bound(&format!("stop after SIG{sig}"), start.elapsed(), STOP_MAX);
        assert!(
            within,
            "the server took over {STOP_MAX:?} to exit after SIG{sig}:\n{stderr}"
        );
        assert!(
            status.success(),
            "the server exited {status} after SIG{sig}:\n{stderr}"
        );
        stderr
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

/// `mqblk serve SPEC --vhost-user-blk SOCKET --num-queues QUEUES`, and
/// with `nbd`, `--socket NBD_SOCKET` too: the same device over NBD. Its
/// sockets are in `dir`.
fn mqblk_export(spec: &str, dir: &Path, nbd: bool) -> Export {
    let vhost = dir.join("vhost.sock");
    let nbd = nbd.then(|| dir.join("nbd.sock"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    cmd.args(["serve", spec, "--vhost-user-blk"])
        .arg(&vhost)
        .args(["--num-queues", &QUEUES.to_string()]);
    if let Some(nbd) = &nbd {
        cmd.arg("--socket").arg(nbd);
    }
    let mut export = Export {
        server: Some(Watched::spawn(&mut cmd)),
        vhost,
        nbd_uri: nbd
            .as_ref()
            .map(|p| format!("nbd+unix:///?socket={}", p.display())),
    };
    let server = export.server.as_mut().expect("just started");
    server.wait_for_path(&export.vhost);
    server.wait_err("mqblk serve: vhost-user-blk", Duration::from_secs(30));
    if let Some(nbd) = &nbd {
        server.wait_for_path(nbd);
    }
    export
}

/// Stop `mqblk serve` with `sig` (as [`Export::stop_by`]); it must have
/// served `frontends` frontends, each boot as one of its own (one VM at
/// a time, then the next).
fn stop_mqblk(export: Export, sig: &str, frontends: usize) {
    let stderr = export.stop_by(sig);
    let served = stderr
        .lines()
        .find(|l| l.contains("vhost-user-blk stopped after"))
        .unwrap_or_else(|| {
            panic!("mqblk serve never said how many frontends it served:\n{stderr}")
        });
    eprintln!("server: {served}");
    assert!(
        served.ends_with(&format!("stopped after {frontends} frontends")),
        "{frontends} boots, {frontends} frontends:\n{stderr}"
    );
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
    let server = Watched::spawn(Command::new("qemu-storage-daemon").args([
        "--blockdev",
        &blockdev,
        "--export",
        &export,
        "--nbd-server",
        &nbd_server,
        "--export",
        "type=nbd,id=n,node-name=f,name=",
    ]));
    let mut export = Export {
        server: Some(server),
        vhost,
        nbd_uri: Some(format!("nbd+unix:///?socket={}", nbd.display())),
    };
    let server = export.server.as_mut().expect("just started");
    server.wait_for_path(&export.vhost);
    server.wait_for_path(&nbd);
    export
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
    run_ok_within(
        Command::new("nbdcopy").arg(uri).arg(&copy),
        Duration::from_secs(120),
    );
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
fn a_vm_makes_and_checks_ext4_through_mqblk_on_a_file_device() {
    let s = Scratch::new("vhost-guest-file");
    let bytes = 256 << 20;
    let image = s.file("disk.img", bytes);
    let export = mqblk_export(&format!("file:{}", image.display()), s.path(), false);
    round_trip("file", &export, bytes >> 9, || image.clone());
    stop_mqblk(export, "TERM", 2);
}

#[test]
fn a_vm_makes_and_checks_ext4_through_mqblk_on_a_stripe_over_two_ram_legs() {
    let s = Scratch::new("vhost-guest-stripe");
    let leg_bytes: u64 = 64 << 20;
    let sectors = 2 * (leg_bytes >> 9);
    // Two legs, so two different specs: the same spec twice is one
    // device (mqblk-dm's legs), which a stripe refuses.
    let spec = format!(
        "dm-table:0 {sectors} striped 2 128 ram,size={leg_bytes},hw_queues=1 0 \
         ram,size={leg_bytes},hw_queues=2 0"
    );
    let export = mqblk_export(&spec, s.path(), true);
    round_trip("stripe", &export, sectors, || {
        copy_over_nbd(&export, s.path())
    });
    stop_mqblk(export, "TERM", 2);
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

#[test]
fn sigint_with_a_busy_guest_attached_ends_serve_within_2s() {
    let s = Scratch::new("vhost-guest-sigint");
    let bytes: u64 = 256 << 20;
    let export = mqblk_export(&format!("ram,size={bytes}"), s.path(), false);
    let guest = Guest::new("sigint", SEED);
    let mut vm = guest.start(Phase::Busy, &export.vhost, BUSY);
    assert_eq!(vm.disk(), (bytes >> 9, QUEUES), "the guest's disk");
    // Its loops go on after the mark: requests are in flight when the
    // signal comes, a second later, just after a round ends.
    let busy = Instant::now();
    let mut rounds = 0;
    let mut last = None;
    while rounds == 0 || busy.elapsed() < Duration::from_secs(1) {
        last = Some(vm.wait_mark("round ", Duration::from_secs(30)));
        rounds += 1;
    }
    let last = last.expect("a round");
    eprintln!(
        "guest: {rounds} rounds in the {} ms after {BUSY:?}, the last {:?} {} ms before SIGINT",
        busy.elapsed().as_millis(),
        last.text.trim(),
        last.at.elapsed().as_millis()
    );
    stop_mqblk(export, "INT", 1);
    let gone = Instant::now();
    // qemu sees its backend go away: watch what it does, then kill it by
    // its pid if it is still running.
    while vm.exited().is_none() && gone.elapsed() < QEMU_WATCH {
        std::thread::sleep(Duration::from_millis(50));
    }
    let exited = vm.exited().map(|st| (st, gone.elapsed()));
    let boot = vm.stop();
    match exited {
        Some((st, after)) => eprintln!(
            "qemu: exited by itself, {st}, {} ms after the server",
            after.as_millis()
        ),
        None => eprintln!(
            "qemu: still running {} s after the server exited; killed by its pid",
            QEMU_WATCH.as_secs()
        ),
    }
    let rounds = boot.marks().filter(|m| m.starts_with("round ")).count();
    eprintln!("guest: {rounds} rounds in all");
    for l in boot.qemu_stderr.lines() {
        eprintln!("qemu stderr: {l}");
    }
    let tail: Vec<&str> = boot.console.lines().rev().take(5).collect();
    for l in tail.iter().rev() {
        eprintln!("guest console: {}", l.trim_end());
    }
}
