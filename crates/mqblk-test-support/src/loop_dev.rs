//! Block devices and file systems a test makes for itself: a loop device
//! over a scratch file, and an ext4 file system on one, mounted on a
//! scratch directory. Each is undone when dropped (unmounted, detached),
//! and only what the test itself made.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::machine::{require_tool, run_ok, skip_unless_ci};
use crate::scratch::Scratch;

/// A loop device over a file (`losetup --find --show`), detached on drop.
pub struct LoopDev {
    /// Its path (`/dev/loopN`).
    pub dev: String,
}

impl LoopDev {
    /// Attach `file`; None (the skip recorded) if losetup cannot (no root,
    /// no loop device), which fails the test in CI.
    pub fn attach(file: &Path) -> Option<LoopDev> {
        require_tool("losetup");
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .unwrap_or_else(|e| panic!("cannot run losetup: {e}"));
        if !out.status.success() {
            skip_unless_ci(&format!(
                "no loop device: losetup failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return None;
        }
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Some(LoopDev { dev })
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        // This device only, by its name: never `losetup -D`.
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
    }
}

/// An ext4 file system made on a loop device over a sparse scratch file
/// and mounted on a scratch directory: a file system with a volatile
/// write cache (flushes really go to the journal), unlike tmpfs. Dropped,
/// it is unmounted, its loop device detached and its scratch removed.
pub struct Ext4 {
    mnt: PathBuf,
    // Dropped in this order, after the unmount: the device, then the
    // directory that holds its backing file and the mount point.
    _loop_dev: LoopDev,
    _scratch: Scratch,
}

impl Ext4 {
    /// Make and mount an ext4 of `bytes` for the test tagged `tag`; None
    /// (the skip recorded) where no loop device can be had.
    pub fn new(tag: &str, bytes: u64) -> Option<Ext4> {
        require_tool("mkfs.ext4");
        require_tool("mount");
        require_tool("umount");
        let scratch = Scratch::new(tag);
        let img = scratch.file("ext4.img", bytes);
        let loop_dev = LoopDev::attach(&img)?;
        run_ok("mkfs.ext4", &["-q", "-F", &loop_dev.dev]);
        let mnt = scratch.path().join("mnt");
        std::fs::create_dir_all(&mnt).expect("create the mount point");
        let out = Command::new("mount")
            .args(["-t", "ext4", &loop_dev.dev])
            .arg(&mnt)
            .output()
            .unwrap_or_else(|e| panic!("cannot run mount: {e}"));
        if !out.status.success() {
            skip_unless_ci(&format!(
                "cannot mount ext4 on {}: {}",
                loop_dev.dev,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return None;
        }
        Some(Ext4 {
            mnt,
            _loop_dev: loop_dev,
            _scratch: scratch,
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// A sparse file `name` of `len` bytes on the file system.
    pub fn file(&self, name: &str, len: u64) -> PathBuf {
        let p = self.mnt.join(name);
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(len))
            .expect("create a file on the ext4 mount");
        p
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        unmount(&self.mnt);
    }
}

/// Unmount `dir`, retrying while the mount is busy (the kernel lets go of
/// an io_uring's registered file a moment after the ring closes), for at
/// most 5 s; says so if it could not.
pub fn unmount(dir: &Path) {
    for _ in 0..250 {
        let unmounted = Command::new("umount")
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if unmounted {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("could not unmount {} within 5 s", dir.display());
}
