//! System calls per I/O, counted by strace: `mqblk bench` run under
//! `strace -f -c` twice with the same job, once with `FEW` I/Os and once
//! with `MANY`; what setup and teardown cost is the same in both, so the
//! difference over the difference in I/Os is the calls each I/O costs.
//! strace stops the process at every call, so these runs measure nothing
//! but the count.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _, Result};

/// A count of calls per I/O.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PerIo {
    /// Every system call.
    pub total: f64,
    /// `io_uring_enter` alone.
    pub io_uring_enter: f64,
}

/// Whether strace is installed (on `PATH`).
pub fn have_strace() -> bool {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).any(|d| d.join("strace").is_file())
}

/// Calls per I/O of `mqblk bench ARGS --number_ios=N`, N from `few` to
/// `many`; `scratch` holds strace's reports.
pub fn per_io(args: &[String], few: u64, many: u64, scratch: &Path) -> Result<PerIo> {
    debug_assert!(many > few);
    let a = count(args, few, &scratch.join("strace-few.txt"))?;
    let b = count(args, many, &scratch.join("strace-many.txt"))?;
    let ios = (many - few) as f64;
    Ok(PerIo {
        total: (b.0 as f64 - a.0 as f64) / ios,
        io_uring_enter: (b.1 as f64 - a.1 as f64) / ios,
    })
}

/// (every call, io_uring_enter calls) of one run.
fn count(args: &[String], ios: u64, report: &Path) -> Result<(u64, u64)> {
    let exe = std::env::current_exe().context("finding the mqblk binary to run under strace")?;
    let out = Command::new("strace")
        .arg("-f")
        .arg("-c")
        .arg("-o")
        .arg(report)
        .arg(&exe)
        .arg("bench")
        .args(args)
        .arg(format!("--number_ios={ios}"))
        .arg("--output-format=json")
        .output()
        .context("running strace (Debian: apt-get install strace)")?;
    if !out.status.success() {
        bail!(
            "strace -f -c {} bench {}: {}",
            exe.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = std::fs::read_to_string(report)
        .with_context(|| format!("reading strace's report {}", report.display()))?;
    let _ = std::fs::remove_file(report);
    parse(&text).with_context(|| format!("no total line in strace's report:\n{text}"))
}

/// (total calls, io_uring_enter calls) from `strace -c`'s table.
fn parse(text: &str) -> Option<(u64, u64)> {
    // Columns: % time, seconds, usecs/call, calls, [errors,] syscall.
    let calls = |name: &str| {
        text.lines().find_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.last() == Some(&name) && w.len() >= 5 {
                w[3].parse::<u64>().ok()
            } else {
                None
            }
        })
    };
    Some((calls("total")?, calls("io_uring_enter").unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_strace_summaries() {
        let text = "\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 61.00    0.010000           2      4000           io_uring_enter
 39.00    0.006000           3      1712        12 mmap
------ ----------- ----------- --------- --------- ----------------
100.00    0.016000           2      5712        12 total
";
        assert_eq!(parse(text), Some((5712, 4000)));
        let no_errors = "100.00    0.000000           0        29 total\n";
        assert_eq!(parse(no_errors), Some((29, 0)));
        assert_eq!(parse("nothing"), None);
    }
}
