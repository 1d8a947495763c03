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
//! and [`time_bound`], which prints a time bound's figure in the one line
//! `scripts/time-bounds.sh` reads.

#![forbid(unsafe_code)]

mod bound;
mod child;
mod name;
mod wait;

pub use bound::time_bound;
pub use child::{Line, Watched};
pub use name::test_name;
pub use wait::wait_for_path;

use std::io::Write;

/// Kernel modules whose absence is a reason to skip, even in CI.
pub const OPTIONAL_MODULES: &[&str] = &["ublk_drv", "nbd", "null_blk", "dm_mod", "md_mod"];

/// The environment variable naming the skip log.
pub const SKIP_LOG: &str = "MQBLK_SKIP_LOG";

/// True when running in CI (`CI=true`, as GitHub Actions and `.ci/run` set).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether `tool` is an executable on `PATH` (or in the sbin directories,
/// which a non-login root shell may leave out).
pub fn have_tool(tool: &str) -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(Into::into))
        .any(|d| d.join(tool).is_file())
}

/// Fail (never skip) when a tool that `scripts/test` installs is missing.
pub fn require_tool(tool: &str) {
    assert!(
        have_tool(tool),
        "`{tool}` is not installed: run scripts/test (as root it installs every tool the \
         tests use), or install it by hand"
    );
}

/// Run `cmd ARGS` (a tool, to its end) and fail the test unless it
/// succeeds, with its stdout and stderr; its stdout.
pub fn run_ok(cmd: &str, args: &[&str]) -> String {
    let o = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {cmd}: {e}"));
    assert!(
        o.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Skip the calling test because the kernel lacks `module`, one of
/// [`OPTIONAL_MODULES`]. The caller returns right after.
pub fn skip_no_module(module: &str, why: &str) {
    assert!(
        OPTIONAL_MODULES.contains(&module),
        "`{module}` is not an optional kernel module: the test must run ({why})"
    );
    record("kernel", why);
}

/// Skip the calling test for a missing privilege or facility (root, a loop
/// device, zram, a mount): allowed on a developer's machine, a failure in
/// CI. The caller returns right after.
pub fn skip_unless_ci(why: &str) {
    assert!(
        !in_ci(),
        "{} cannot run: {why}; CI runs as root with scripts/test's tools, so this must not \
         skip there",
        test_name()
    );
    record("env", why);
}

fn record(kind: &str, why: &str) {
    let name = test_name();
    let why = why.replace(['\n', '\t'], " ");
    eprintln!("SKIPPED {name}: {why}");
    if let Some(path) = std::env::var_os(SKIP_LOG) {
        // One short O_APPEND write per line, so parallel tests do not
        // interleave.
        let line = format!("{kind}\t{name}\t{why}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            panic!("cannot record the skip in {}: {e}", path.to_string_lossy());
        }
    }
}

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

/// A fresh directory under the system's temp dir for one test, named after
/// the test's tag and this process, and removed (with what is in it) when
/// dropped.
pub struct Scratch(pub std::path::PathBuf);

impl Scratch {
    /// Make (or empty) `mqblk-TAG-PID` in the temp dir.
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("mqblk-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a scratch directory");
        Scratch(dir)
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    /// A sparse file `name` of `len` bytes in it.
    pub fn file(&self, name: &str, len: u64) -> std::path::PathBuf {
        let p = self.0.join(name);
        std::fs::File::create(&p)
            .and_then(|f| f.set_len(len))
            .expect("create a scratch file");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_is_a_tool_and_a_made_up_name_is_not() {
        assert!(have_tool("sh"));
        assert!(!have_tool("mqblk-no-such-tool"));
    }

    #[test]
    #[should_panic(expected = "not an optional kernel module")]
    fn only_listed_modules_may_be_missing() {
        skip_no_module("zram", "zram is built in where CI runs");
    }
}
