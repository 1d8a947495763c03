//! The servers: `mqblk serve` and the peer, qemu-storage-daemon, each
//! started on a socket in a scratch directory and watched by its pid.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use mqblk_test_support::vhost_frontend::{Options, VhostBlk};
use mqblk_test_support::{require_tool, time_bound, Watched};

/// The device every server exports: 64 MiB, 4 KiB blocks (so that a
/// discard can be unaligned).
pub(crate) const MQBLK_SPEC: &str = "ram,size=64M,block_size=4k";
/// Its size, for the peer's image.
pub(crate) const DEVICE_BYTES: u64 = 64 << 20;
/// SIGINT: the server drains and exits 0 within this (issue 35).
pub(crate) const SIGINT_EXIT_MAX: Duration = Duration::from_secs(2);

/// A vhost-user-blk server this test started, on its socket.
pub(crate) struct Server {
    pub(crate) name: &'static str,
    pub(crate) socket: PathBuf,
    /// The same device's NBD export (`--socket`), if it has one.
    pub(crate) nbd: Option<PathBuf>,
    pub(crate) proc: Watched,
}

/// Starts a server in a directory, read-only or not.
pub(crate) type Serve = fn(&Path, bool) -> Server;

/// `mqblk serve MQBLK_SPEC --vhost-user-blk SOCKET --num-queues 2
/// --socket NBD_SOCKET`: the device to VMs, and over NBD to host tools.
pub(crate) fn serve_mqblk(dir: &Path, read_only: bool) -> Server {
    serve_mqblk_with(dir, if read_only { &["--read-only"] } else { &[] })
}

/// As [`serve_mqblk`], with `extra` options.
pub(crate) fn serve_mqblk_with(dir: &Path, extra: &[&str]) -> Server {
    let socket = dir.join("vhost.sock");
    let nbd = dir.join("nbd.sock");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mqblk"));
    cmd.args(["serve", MQBLK_SPEC, "--vhost-user-blk"])
        .arg(&socket)
        .args(["--num-queues", "2", "--socket"])
        .arg(&nbd)
        .args(extra);
    let mut proc = Watched::spawn(&mut cmd);
    proc.wait_for_path(&socket);
    proc.wait_for_path(&nbd);
    Server {
        name: "mqblk serve",
        socket,
        nbd: Some(nbd),
        proc,
    }
}

/// qemu-storage-daemon exporting a raw image of `DEVICE_BYTES` on 2
/// queues: the peer.
pub(crate) fn serve_qsd(dir: &Path, read_only: bool) -> Server {
    require_tool("qemu-storage-daemon");
    let socket = dir.join("vhost.sock");
    let img = dir.join("disk.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(DEVICE_BYTES))
        .expect("create the peer's image");
    let writable = if read_only { "off" } else { "on" };
    let mut cmd = Command::new("qemu-storage-daemon");
    cmd.arg("--blockdev")
        .arg(format!(
            "driver=file,node-name=f,filename={},cache.direct=off",
            img.display()
        ))
        .arg("--export")
        .arg(format!(
            "type=vhost-user-blk,id=e,node-name=f,addr.type=unix,addr.path={},\
             writable={writable},num-queues=2",
            socket.display()
        ));
    let mut proc = Watched::spawn(&mut cmd);
    proc.wait_for_path(&socket);
    Server {
        name: "qemu-storage-daemon",
        socket,
        nbd: None,
        proc,
    }
}

impl Server {
    /// A new frontend on 2 queues.
    pub(crate) fn connect(&self) -> VhostBlk {
        VhostBlk::connect(&self.socket, Options::default())
            .unwrap_or_else(|e| panic!("{}: a frontend cannot connect: {e}", self.name))
    }

    /// Fails the test if it has exited.
    pub(crate) fn assert_alive(&mut self, after: &str) {
        if let Some(st) = self.proc.try_wait() {
            panic!("{} exited ({st}) after {after}", self.name);
        }
    }

    /// SIGINT; it must exit 0 within `SIGINT_EXIT_MAX`. What it printed.
    pub(crate) fn interrupt(mut self) -> String {
        let start = Instant::now();
        self.proc.signal("-INT");
        let (st, _, err) = self.proc.finish(SIGINT_EXIT_MAX + Duration::from_secs(10));
        let took = start.elapsed();
        assert!(
            time_bound("SIGINT exit", took, SIGINT_EXIT_MAX),
            "{} took {took:?} to exit after SIGINT, bound {SIGINT_EXIT_MAX:?}; stderr:\n{err}",
            self.name
        );
        assert!(
            st.success(),
            "{} exited {st} after SIGINT; stderr:\n{err}",
            self.name
        );
        err
    }
}
