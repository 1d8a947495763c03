//! fio's `ioengine=`: which engines are block I/O that mqblk takes the
//! place of, and what a file that names another is told.

use super::error::{err, JobFileError};
use super::line::{strip_comment, substitute};

/// fio's engines that do block I/O on a file or device: mqblk takes their
/// place (io_uring and the pread/pwrite family set a file device's engine).
pub(super) const BLOCK_ENGINES: &[&str] = &[
    "libaio", "io_uring", "uring", "sync", "psync", "vsync", "pvsync", "pvsync2", "posixaio",
    "mmap", "null", "nbd", "rbd",
];

/// What a job file with a non-block engine is told.
pub(super) fn not_block_engine(line_no: usize, engine: &str) -> JobFileError {
    err(
        line_no,
        format!(
            "ioengine={engine}: not an engine of block I/O on a file or device, which is what \
             mqblk bench runs; {}",
            crate::options::FIO_ENGINE_HINT
        ),
    )
}

/// The first `ioengine=` of a section that runs (or of `[global]`) that
/// is not block I/O, with its line.
pub(super) fn foreign_engine(text: &str, sections: &[String]) -> Option<(usize, String)> {
    let mut skipping = false;
    for (index, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if let Some(name) = line.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.trim();
            skipping =
                name != "global" && !sections.is_empty() && !sections.iter().any(|s| s == name);
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = substitute(v.trim()).into_owned();
        if !skipping && k.trim() == "ioengine" && !BLOCK_ENGINES.contains(&v.as_str()) {
            return Some((index + 1, v));
        }
    }
    None
}
