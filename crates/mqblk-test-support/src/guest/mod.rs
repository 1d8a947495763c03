//! A real virtual machine whose one disk is a vhost-user-blk export: qemu
//! under TCG boots Debian's kernel (`kernel.rs`) with an initramfs built
//! here (`initramfs.rs`: a static busybox, mke2fs and e2fsck, the virtio
//! and ext4 modules, and files made from a seed (`files.rs`)). A first
//! boot makes ext4 on the disk and writes the files; the host checks the
//! file system; a second boot reads the files back (`vm.rs`). The export
//! under test is started by the test (mqblk's, or qemu-storage-daemon's
//! as the peer); this module needs only its socket.

mod files;
mod initramfs;
mod kernel;
mod vm;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use files::GuestFile;
pub use vm::{Boot, Phase, BOOT_MAX, QUEUES};

use crate::child::Watched;
use crate::machine::require_tool;
use crate::scratch::Scratch;

/// A guest ready to boot: the kernel, an initramfs with its files, and
/// the scratch directory that holds the initramfs.
pub struct Guest {
    kernel: &'static kernel::Kernel,
    initrd: PathBuf,
    files: Vec<GuestFile>,
    _scratch: Scratch,
}

impl Guest {
    /// Fetch the kernel (or reuse it from the cache) and build the
    /// initramfs for the test tagged `tag`, with the files for `seed`.
    pub fn new(tag: &str, seed: u64) -> Guest {
        let kernel = kernel::Kernel::debian();
        let scratch = Scratch::new(&format!("guest-{tag}"));
        let files = files::generate(seed);
        let initrd = scratch.path().join("initramfs.cpio");
        initramfs::build(kernel, &files, &initrd);
        eprintln!(
            "guest: kernel {}, initramfs {} KiB",
            kernel.release,
            std::fs::metadata(&initrd).map_or(0, |m| m.len() / 1024)
        );
        Guest {
            kernel,
            initrd,
            files,
            _scratch: scratch,
        }
    }

    /// The files the write phase puts on the disk.
    pub fn files(&self) -> &[GuestFile] {
        &self.files
    }

    /// Boot for `phase` with the vhost-user-blk backend on `socket`, and
    /// fail the test, with the end of the console, unless the guest did
    /// all of the phase and powered off: its disk seen with [`QUEUES`]
    /// queues, its own `e2fsck -fn` clean, and (for [`Phase::Check`])
    /// every file's SHA-256 the one the host made it with, and no other
    /// file.
    pub fn boot(&self, phase: Phase, socket: &Path) -> Boot {
        let boot = vm::boot(self.kernel, &self.initrd, socket, phase);
        let fail = |what: String| -> ! { panic!("{phase:?} boot: {what}\n{}", boot.tail()) };
        if let Some(m) = boot.marks().find(|m| m.starts_with("FAILED")) {
            fail(format!("the guest says {m}"));
        }
        if boot.mark("done").is_none() {
            fail("the guest never finished".into());
        }
        if !boot.status.success() {
            fail(format!("qemu exited with {}", boot.status));
        }
        match boot.disk() {
            Some((_, queues)) if queues == QUEUES => {}
            other => fail(format!(
                "the guest's disk (sectors, queues) is {other:?}, not {QUEUES} queues"
            )),
        }
        if phase == Phase::Write && boot.mark("written").is_none() {
            fail("the guest never wrote its files".into());
        }
        if boot.guest_e2fsck() != Some(0) {
            fail(format!(
                "the guest's e2fsck -fn exited {:?}, not 0",
                boot.guest_e2fsck()
            ));
        }
        if let Some(summary) = boot
            .console
            .lines()
            .find(|l| l.starts_with("/dev/vda: ") && l.contains(" files ("))
        {
            eprintln!(
                "guest: {phase:?} boot: e2fsck -fn: exit 0: {}",
                summary.trim()
            );
        }
        if phase == Phase::Check {
            let mut want: Vec<(String, String)> = self
                .files
                .iter()
                .map(|f| (f.name.clone(), f.sha256.clone()))
                .collect();
            want.sort();
            let mut got = boot.sha256s();
            got.sort();
            if got != want {
                fail(format!(
                    "the files read back differ:\n  made:    {want:?}\n  read back: {got:?}"
                ));
            }
            eprintln!("guest: {} of {} checksums matched", got.len(), want.len());
        }
        boot
    }
}

/// Run `e2fsck -fn` on `image` (a disk's bytes, on the host), fail the
/// test unless it is clean (exit 0), and print and return its summary
/// line (`IMAGE: N/M files (...), B/T blocks`).
pub fn e2fsck_clean(image: &Path) -> String {
    require_tool("e2fsck");
    let (status, out, err) = Watched::spawn(Command::new("e2fsck").arg("-fn").arg(image))
        .finish(Duration::from_secs(120));
    let text = out + &err;
    assert!(
        status.success(),
        "e2fsck -fn {} exited {status}:\n{text}",
        image.display()
    );
    let summary = text
        .lines()
        .find(|l| l.contains(" files (") && l.contains(" blocks"))
        .unwrap_or_else(|| panic!("e2fsck -fn printed no summary line:\n{text}"))
        .to_string();
    eprintln!("host: e2fsck -fn: exit 0: {summary}");
    summary
}
