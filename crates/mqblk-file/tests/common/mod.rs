//! Helpers shared by the file driver's integration tests: scratch files on
//! a file system that supports O_DIRECT, a small tmpfs, and data patterns
//! (loop devices and ext4 mounts come from `mqblk_test_support`). A missing tool that scripts/test installs fails the test;
//! a loop device or a mount that cannot be had (no root) is a counted skip
//! on a developer's machine and a failure in CI (`mqblk_test_support`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use mqblk_core::queue::Device;

/// A directory under the system temp dir (the root file system here:
/// tmpfs does not do O_DIRECT), removed on drop.
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "mqblk-file-{}-{tag}-{}",
            std::process::id(),
            std::thread::current()
                .name()
                .unwrap_or("t")
                .replace("::", "-")
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A file of `len` bytes (sparse).
    pub fn file(&self, name: &str, len: u64) -> PathBuf {
        let p = self.path(name);
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(len).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A small tmpfs mounted on a fresh directory, unmounted on drop.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    /// Mount; None (the skip recorded) if mount cannot.
    pub fn mount(tag: &str, size: &str) -> Option<Tmpfs> {
        mqblk_test_support::require_tool("mount");
        let dir = std::env::temp_dir().join(format!("mqblk-tmpfs-{}-{tag}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .output();
        match st {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            Ok(o) => {
                let _ = std::fs::remove_dir(&dir);
                mqblk_test_support::skip_unless_ci(&format!(
                    "cannot mount a tmpfs: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                ));
                None
            }
            Err(e) => {
                let _ = std::fs::remove_dir(&dir);
                panic!("cannot run mount: {e}")
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        mqblk_test_support::unmount(&self.dir);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Open `file:<path>,<opts>`.
pub fn open(path: &Path, opts: &str) -> mqblk_core::Result<Device> {
    let spec = if opts.is_empty() {
        format!("file:{}", path.display())
    } else {
        format!("file:{},{opts}", path.display())
    };
    let s = mqblk_core::spec::parse(&spec)?;
    mqblk_file::open(s.target.as_deref().unwrap(), s.options)
}

/// Deterministic bytes for `offset`: every 8 bytes hold their own offset
/// mixed with a seed, so a block read from the wrong place never matches.
pub fn pattern(buf: &mut [u8], offset: u64, seed: u64) {
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let v = (offset + i as u64 * 8)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(seed);
        let b = v.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

pub fn expect_pattern(buf: &[u8], offset: u64, seed: u64) {
    let mut want = vec![0u8; buf.len()];
    pattern(&mut want, offset, seed);
    if buf != &want[..] {
        let at = buf.iter().zip(&want).position(|(a, b)| a != b).unwrap();
        panic!(
            "data mismatch at device offset {} (buffer byte {at}): got {:#x}, want {:#x}",
            offset + at as u64,
            buf[at],
            want[at]
        );
    }
}
