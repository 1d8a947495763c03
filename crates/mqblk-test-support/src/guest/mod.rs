//! A real virtual machine whose one disk is a vhost-user-blk export: qemu
//! under TCG boots Debian's kernel (`kernel.rs`) with an initramfs built
//! here (`initramfs.rs`: a static busybox, mke2fs and e2fsck, the virtio
//! and ext4 modules, and files made from a seed (`files.rs`)). A first
//! boot makes ext4 on the disk and writes the files; the host checks the
//! file system; a second boot reads the files back (`vm.rs`). A busy
//! guest reads and writes its disk for ever, and the test gets control
//! back while it does, to stop the export under it. The export
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
pub use vm::{Boot, Phase, Running, BOOT_MAX, BUSY, QUEUES};

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
    /// file in the file system's root.
    pub fn boot(&self, phase: Phase, socket: &Path) -> Boot {
        let boot = vm::boot(self.kernel, &self.initrd, socket, phase);
        if let Err(what) = verdict(&boot, &self.files) {
            panic!("{phase:?} boot: {what}\n{}", boot.tail());
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
            eprintln!(
                "guest: {} of {} checksums matched",
                boot.sha256s().len(),
                self.files.len()
            );
        }
        boot
    }

    /// Boot for `phase` with the vhost-user-blk backend on `socket`, and
    /// return once the guest says `until` (e.g. [`BUSY`]), within
    /// [`BOOT_MAX`], with its disk seen with [`QUEUES`] queues; qemu
    /// keeps running, owned by the [`Running`] guest.
    pub fn start(&self, phase: Phase, socket: &Path, until: &str) -> Running {
        let running = vm::start(self.kernel, &self.initrd, socket, phase, until);
        let (sectors, queues) = running.disk();
        assert_eq!(
            queues, QUEUES,
            "the {phase:?} guest's disk has {queues} queues, not {QUEUES}"
        );
        eprintln!(
            "guest: {phase:?} boot: said {until:?}; its disk {sectors} sectors, {queues} queues"
        );
        running
    }
}

/// Whether `boot` did all of its phase (as [`Guest::boot`] says), with
/// `files` on the disk; what it did not, if not.
fn verdict(boot: &Boot, files: &[GuestFile]) -> Result<(), String> {
    if let Some(m) = boot.marks().find(|m| m.starts_with("FAILED")) {
        return Err(format!("the guest says {m}"));
    }
    if boot.mark("done").is_none() {
        return Err("the guest never finished".into());
    }
    if !boot.status.success() {
        return Err(format!("qemu exited with {}", boot.status));
    }
    match boot.disk() {
        Some((_, queues)) if queues == QUEUES => {}
        other => {
            return Err(format!(
                "the guest's disk (sectors, queues) is {other:?}, not {QUEUES} queues"
            ))
        }
    }
    if boot.phase == Phase::Write && boot.mark("written").is_none() {
        return Err("the guest never wrote its files".into());
    }
    if boot.guest_e2fsck() != Some(0) {
        return Err(format!(
            "the guest's e2fsck -fn exited {:?}, not 0",
            boot.guest_e2fsck()
        ));
    }
    if boot.phase == Phase::Check {
        let mut made: Vec<(String, String)> = files
            .iter()
            .map(|f| (f.name.clone(), f.sha256.clone()))
            .collect();
        made.sort();
        let mut read = boot.sha256s();
        read.sort();
        if read != made {
            return Err(format!(
                "the files read back differ:\n  made:      {made:?}\n  read back: {read:?}"
            ));
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn boot(phase: Phase, console: &str, status: i32) -> Boot {
        Boot {
            phase,
            console: console.to_string(),
            qemu_stderr: String::new(),
            status: std::process::ExitStatus::from_raw(status),
            elapsed: Duration::ZERO,
        }
    }

    /// A check boot's console: the disk line, e2fsck's code, `sums`, done.
    fn check_console(queues: u32, e2fsck: i32, sums: &[(&str, &str)]) -> String {
        let mut c = format!(
            "mqblk-guest: vda 524288 sectors, {queues} queues\r\nmqblk-guest: e2fsck {e2fsck}\r\n"
        );
        for (name, sum) in sums {
            c.push_str(&format!("mqblk-guest: sha256 {sum}  /mnt/{name}\r\n"));
        }
        c.push_str("mqblk-guest: done at 9.1 s\r\n");
        c
    }

    #[test]
    fn a_check_boot_passes_only_with_every_file_read_back_whole() {
        let files = files::generate(1);
        let all: Vec<(&str, &str)> = files
            .iter()
            .map(|f| (f.name.as_str(), f.sha256.as_str()))
            .collect();
        let ok = boot(Phase::Check, &check_console(QUEUES, 0, &all), 0);
        assert_eq!(verdict(&ok, &files), Ok(()));

        let mut one_bad = all.clone();
        let other = "0".repeat(64);
        one_bad[2].1 = &other;
        let e = verdict(
            &boot(Phase::Check, &check_console(QUEUES, 0, &one_bad), 0),
            &files,
        );
        assert!(e.unwrap_err().contains("the files read back differ"));

        let e = verdict(
            &boot(Phase::Check, &check_console(QUEUES, 0, &all[1..]), 0),
            &files,
        );
        assert!(e.unwrap_err().contains("the files read back differ"));

        let mut extra = all.clone();
        extra.push(("stray.bin", &other));
        let e = verdict(
            &boot(Phase::Check, &check_console(QUEUES, 0, &extra), 0),
            &files,
        );
        assert!(e.unwrap_err().contains("the files read back differ"));
    }

    #[test]
    fn a_boot_fails_on_a_guest_failure_a_dirty_fsck_one_queue_or_no_end() {
        let files = files::generate(1);
        let all: Vec<(&str, &str)> = files
            .iter()
            .map(|f| (f.name.as_str(), f.sha256.as_str()))
            .collect();
        let good = check_console(QUEUES, 0, &all);
        let cases = [
            (
                format!("mqblk-guest: FAILED: mount /dev/vda\n{good}"),
                0,
                "the guest says FAILED: mount /dev/vda",
            ),
            (
                check_console(QUEUES, 4, &all),
                0,
                "e2fsck -fn exited Some(4)",
            ),
            (check_console(1, 0, &all), 0, "not 2 queues"),
            (
                good.replace("mqblk-guest: done", "panic"),
                0,
                "never finished",
            ),
            (good.clone(), 9, "qemu exited with"),
        ];
        for (console, status, says) in cases {
            let e = verdict(&boot(Phase::Check, &console, status), &files).unwrap_err();
            assert!(e.contains(says), "{e:?} should say {says:?}");
        }
        // A write boot must also say that it wrote the files.
        let e = verdict(
            &boot(Phase::Write, &check_console(QUEUES, 0, &[]), 0),
            &files,
        );
        assert!(e.unwrap_err().contains("never wrote"));
        let written = format!("mqblk-guest: written\n{}", check_console(QUEUES, 0, &[]));
        assert_eq!(verdict(&boot(Phase::Write, &written, 0), &files), Ok(()));
    }
}
