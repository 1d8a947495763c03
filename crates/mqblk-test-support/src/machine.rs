//! What the machine must have for a test (tools that `scripts/test`
//! installs), what it may lack (kernel modules, privileges), and the
//! skips counted when it does.

use std::io::Write;

/// Kernel modules whose absence is a reason to skip, even in CI.
pub const OPTIONAL_MODULES: &[&str] = &["ublk_drv", "nbd", "null_blk", "dm_mod", "md_mod"];

/// The environment variable naming the skip log.
pub const SKIP_LOG: &str = "MQBLK_SKIP_LOG";

/// True when running in CI (`CI=true`, as GitHub Actions and `.ci/run` set).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The running test's name (libtest names each test's thread after it).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed test thread>")
        .to_string()
}

/// Whether `tool` is an executable on `PATH` (or in the sbin directories,
/// which a non-login root shell may leave out).
pub fn have_tool(tool: &str) -> bool {
    tool_path(tool).is_some()
}

/// Where `tool` is, as [`have_tool`] looks for it.
pub(crate) fn tool_path(tool: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(Into::into))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
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
