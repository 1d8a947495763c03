//! What the integration tests need from the machine, and what a test does
//! when the machine lacks it (glommio's env-gated tests, io-uring-test's
//! `require!`).
//!
//! - A tool that `scripts/test` installs (fio, iostat, nbdkit, losetup, ...)
//!   must be there: [`require_tool`] fails the test when it is missing.
//! - A kernel module that a kernel may lack (ublk, nbd, null_blk, dm, md):
//!   [`skip_no_module`] prints `SKIPPED <test>: <why>` and counts the skip.
//! - Anything else a test cannot have (root, a loop device, zram, a tmpfs
//!   mount): [`skip_unless_ci`] skips the same way on a developer's machine,
//!   and fails the test when `CI=true`, because CI runs as root with every
//!   tool installed, so there it must run.
//!
//! Skips are counted by `scripts/test`: each one is appended as a line
//! `<kind>\t<test>\t<why>` to the file named by `MQBLK_SKIP_LOG`.
//!
//! Beside that, what several test files would otherwise write again: a
//! [`Scratch`] directory, [`wait_for_path`] for a server's socket, and a
//! [`Watched`] child (its output read line by line, stopped by its pid),
//! a [`LoopDev`] over a file and an [`Ext4`] mounted on one,
//! [`time_bound`], which prints a time bound's figure in the one line
//! `scripts/time-bounds.sh` reads, and a [`Guest`]: a virtual machine
//! under qemu whose disk is a vhost-user-blk export.
//!
//! And a test driver for the exports: [`vhost_frontend`], a minimal
//! virtio-blk driver over vhost-user that puts any chain of descriptors,
//! good or hostile, on a backend's queues.

#![forbid(unsafe_code)]

mod bound;
mod child;
mod guest;
mod loop_dev;
mod machine;
mod scratch;
pub mod vhost_frontend;
mod wait;

pub use bound::time_bound;
pub use child::{run_ok_within, Line, Watched};
pub use guest::{e2fsck_clean, Boot, Guest, GuestFile, Phase, Running, BOOT_MAX, BUSY, QUEUES};
pub use loop_dev::{unmount, Ext4, LoopDev};
pub use machine::{
    have_tool, in_ci, require_tool, run_ok, skip_no_module, skip_unless_ci, test_name,
    OPTIONAL_MODULES, SKIP_LOG,
};
pub use scratch::Scratch;
pub use vhost_frontend::{Outcome, VhostBlk};
pub use wait::wait_for_path;

/// The Debian source tree of the installed fio (its `examples/` job files
/// and its `tools/`: `fiologparser.py`, `hist/fiologparser_hist.py`),
/// fetched by `contrib/fio-engine/fetch-fio-source.sh` into the temp dir,
/// or reused from there; once per test binary. Needs fio and dpkg-source,
/// which scripts/test installs.
pub fn fio_source() -> std::path::PathBuf {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        require_tool("fio");
        require_tool("dpkg-source");
        let dir = std::env::temp_dir().join("mqblk-fio-source");
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../contrib/fio-engine/fetch-fio-source.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .arg(&dir)
            .output()
            .expect("run fetch-fio-source.sh");
        assert!(
            out.status.success(),
            "fetching fio's source failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}
