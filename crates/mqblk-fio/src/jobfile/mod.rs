//! fio job files (INI) for the option subset mqblk understands.
//!
//! ```ini
//! ; comment             # comment
//! [global]
//! rw=randread
//! bs=4k
//! time_based
//! runtime=10s
//! device=null,size=1G   ; repeated device= lines add devices
//!
//! [reader]
//! iodepth=32
//!
//! [writer]
//! rw=randwrite
//! ```
//!
//! As in fio, a `[global]` section applies to the job sections after it (a
//! file may have several), and every other `[name]` section is a job named
//! after the section. Keys are those of [`super::options::KEYS`]; a bare
//! key means `key=1` (`time_based`). Within one section repeated `device=`
//! lines add devices, and a section that names any device replaces the
//! devices it inherited. Lines starting with `;` or `#` are comments, as is
//! the rest of a line after a `;` or `#` that follows whitespace. fio's
//! `filename=PATH` is the device `file:PATH`, and `direct=` and
//! `ioengine=io_uring|psync` set the section's file devices (`libaio` and
//! `posixaio` leave their default engine, io_uring; any other engine is an
//! error that says why). The fio keys `thread` and `name` are accepted and
//! ignored (mqblk always runs jobs as threads, and names jobs by their
//! section); any other key is an error naming it and its line.
//!
//! The command line's options are laid over every job (see
//! [`super::options`]). Files are bounded: at most [`FILE_BYTES_MAX`]
//! bytes and lines of at most [`LINE_CHARS_MAX`] characters. The parser
//! never panics on any input; it is a fuzz target.

use std::io::Read;
use std::path::Path;

use super::job::JobSpec;
use mqblk::spec::parse_bool;

use super::options::{JobOptions, OptionError, KEYS, NAME_LEN_MAX};

mod engine;
mod error;
mod line;

use engine::{foreign_engine, not_block_engine, BLOCK_ENGINES};
use error::err;
pub use error::JobFileError;
use line::{strip_comment, substitute};

/// Largest job file, in bytes.
pub const FILE_BYTES_MAX: u64 = 1 << 20;
/// Longest line, in characters.
pub const LINE_CHARS_MAX: usize = 4096;

/// fio keys that are accepted and ignored.
pub(crate) const IGNORED_KEYS: &[&str] = &["name"];

/// fio's file keys, taken as fio means them: `filename=PATH` is the device
/// `file:PATH`; `direct=` and `ioengine=io_uring|psync` set `direct=` and
/// `engine=` of the section's file devices (`libaio` and `posixaio` leave
/// the default engine, io_uring).
pub(crate) const FIO_FILE_KEYS: &[&str] = &["filename", "direct", "buffered", "ioengine"];

/// Read and parse the job file at `path`, with `cli` laid over every job.
/// The notes on keys accepted without effect are printed to stderr.
pub fn load(path: &Path, cli: &JobOptions, sections: &[String]) -> anyhow::Result<Vec<JobSpec>> {
    use anyhow::Context as _;
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open job file {}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("job file {}: not UTF-8 text", path.display()))?;
    let (jobs, notes) = parse_sections(&text, cli, sections)
        .map_err(|e| anyhow::anyhow!("job file {}: {e}", path.display()))?;
    for n in notes {
        eprintln!("mqblk: {}:{n}", path.display());
    }
    Ok(jobs)
}

/// What a section header starts.
enum Section {
    /// `[global]`: options for the jobs after it.
    Global,
    /// A job, with the line of its header.
    Job { name: String, line: usize },
}

/// Parse a job file's text into jobs, with `cli` laid over every job.
#[cfg(test)]
pub fn parse(text: &str, cli: &JobOptions) -> Result<Vec<JobSpec>, JobFileError> {
    parse_with_notes(text, cli).map(|(jobs, _)| jobs)
}

/// [`parse`], plus a note (`LINE: key=value: ignored: why`) for each key
/// accepted without effect.
#[cfg(test)]
pub(crate) fn parse_with_notes(
    text: &str,
    cli: &JobOptions,
) -> Result<(Vec<JobSpec>, Vec<String>), JobFileError> {
    parse_sections(text, cli, &[])
}

/// [`parse_with_notes`] of only the job sections named in `sections`
/// (fio's `--section`; all when empty). `[global]` sections always apply.
pub(crate) fn parse_sections(
    text: &str,
    cli: &JobOptions,
    sections: &[String],
) -> Result<(Vec<JobSpec>, Vec<String>), JobFileError> {
    // The bound first: no pass over a text larger than a job file may be.
    if text.len() as u64 > FILE_BYTES_MAX {
        return Err(err(
            0,
            format!("larger than {FILE_BYTES_MAX} bytes; job files are limited to 1 MiB"),
        ));
    }
    let mut notes = Vec::new();
    // An engine that is not block I/O is the reason a file cannot run,
    // whatever other keys of that engine come before it.
    if let Some((line_no, engine)) = foreign_engine(text, sections) {
        return Err(not_block_engine(line_no, &engine));
    }
    // Inside a section not chosen by --section: its lines are skipped.
    let mut skipping = false;
    let mut global = JobOptions::default();
    let mut jobs = Vec::new();
    // The open section and the options it has set so far.
    let mut current: Option<(Section, JobOptions)> = None;

    for (index, raw) in text.lines().enumerate() {
        let line_no = index + 1;
        if raw.chars().count() > LINE_CHARS_MAX {
            return Err(err(
                line_no,
                format!("longer than {LINE_CHARS_MAX} characters"),
            ));
        }
        let line = substitute(strip_comment(raw).trim());
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('[') {
            let name = rest
                .strip_suffix(']')
                .ok_or_else(|| {
                    err(
                        line_no,
                        format!("section header {line:?} has no closing `]`"),
                    )
                })?
                .trim();
            if name.is_empty() {
                return Err(err(line_no, "empty section name `[]`"));
            }
            if name.len() > NAME_LEN_MAX || name.chars().any(char::is_control) {
                return Err(err(
                    line_no,
                    format!("section name must be 1 to {NAME_LEN_MAX} printable characters"),
                ));
            }
            close(current.take(), &mut global, &mut jobs, cli)?;
            skipping =
                name != "global" && !sections.is_empty() && !sections.iter().any(|s| s == name);
            if skipping {
                continue;
            }
            let section = if name == "global" {
                Section::Global
            } else {
                Section::Job {
                    name: name.to_string(),
                    line: line_no,
                }
            };
            current = Some((section, JobOptions::default()));
            continue;
        }
        if skipping {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (line, None),
        };
        let Some((_, options)) = current.as_mut() else {
            return Err(err(
                line_no,
                format!("option `{key}` before any section; start with [global] or [jobname]"),
            ));
        };
        // fio's file keys: filename= is a file device, direct= and a known
        // ioengine= set the section's file devices.
        match (key, value) {
            ("filename", Some(v)) => {
                let spec = format!("file:{}", v.trim());
                options
                    .set("device", Some(&spec))
                    .map_err(|e| describe(line_no, key, value, &e))?;
                options.filename = Some(v.trim().to_string());
                continue;
            }
            ("direct", v) => {
                let b = match v {
                    None => true,
                    Some(v) => parse_bool(v).ok_or_else(|| {
                        err(
                            line_no,
                            format!("direct={v}: expected 1 (O_DIRECT) or 0 (the page cache)"),
                        )
                    })?,
                };
                options.file_direct = Some(b);
                continue;
            }
            ("buffered", v) => {
                let b = match v {
                    None => true,
                    Some(v) => parse_bool(v).ok_or_else(|| {
                        err(
                            line_no,
                            format!("buffered={v}: expected 1 (the page cache) or 0 (O_DIRECT)"),
                        )
                    })?,
                };
                options.file_direct = Some(!b);
                continue;
            }
            ("ioengine", Some(v)) => {
                let v = v.trim();
                if !BLOCK_ENGINES.contains(&v) {
                    return Err(not_block_engine(line_no, v));
                }
                if v == "nbd" || v == "rbd" {
                    // mqblk has a driver for these: uri= (nbd) or pool= and
                    // rbdname= (rbd) name the device.
                    options.engine = Some(v.to_string());
                    notes.push(format!(
                        "{line_no}: ioengine={v}: mqblk's {v} driver runs the job (the device \
                         is named by {})",
                        if v == "nbd" {
                            "uri="
                        } else {
                            "pool= and rbdname="
                        }
                    ));
                    continue;
                }
                match super::options::file_engine(v) {
                    Ok(Some(e)) => options.file_engine = Some(e),
                    Ok(None) => notes.push(format!(
                        "{line_no}: ioengine={v}: {}",
                        super::options::ASYNC_ENGINE_NOTE
                    )),
                    Err(why) => notes.push(format!("{line_no}: ioengine={v}: {why}")),
                }
                continue;
            }
            _ => {}
        }
        if IGNORED_KEYS.contains(&key) {
            continue;
        }
        if let Some(why) = super::options::noted(key) {
            let shown = value.map_or(key.to_string(), |v| format!("{key}={v}"));
            // A key of mqblk's own is noted and taken.
            if !KEYS.contains(&key) {
                notes.push(format!("{line_no}: {shown}: ignored: {why}"));
                continue;
            }
            notes.push(format!("{line_no}: {shown}: {why}"));
        }
        // Repeated `device=` lines add devices within the section only.
        options
            .set(key, value)
            .map_err(|e| describe(line_no, key, value, &e))?;
        if let Some(note) = value.and_then(|v| super::options::value_note(key, v)) {
            notes.push(format!(
                "{line_no}: {key}={}: {note}",
                value.unwrap_or_default()
            ));
        }
    }
    close(current.take(), &mut global, &mut jobs, cli)?;
    if jobs.is_empty() {
        return Err(err(
            0,
            "no job sections; add one such as [job1] after [global]",
        ));
    }
    super::options::check_run(&jobs).map_err(|why| err(0, why))?;
    Ok((jobs, notes))
}

/// End a section: fold `[global]` into the globals, or build the job.
fn close(
    section: Option<(Section, JobOptions)>,
    global: &mut JobOptions,
    jobs: &mut Vec<JobSpec>,
    cli: &JobOptions,
) -> Result<(), JobFileError> {
    match section {
        None => Ok(()),
        Some((Section::Global, options)) => {
            global.overlay(&options);
            Ok(())
        }
        Some((Section::Job { name, line }, options)) => {
            if jobs.len() >= super::options::JOBS_MAX as usize {
                return Err(err(
                    line,
                    format!("more than {} job sections", super::options::JOBS_MAX),
                ));
            }
            let mut merged = global.clone();
            merged.overlay(&options);
            merged.overlay(cli);
            // The section names the job, whatever `--name` says.
            merged.name = Some(name.clone());
            let job = merged
                .build(&name)
                .map_err(|why| err(line, format!("section [{name}]: {why}")))?;
            jobs.push(job);
            Ok(())
        }
    }
}

fn describe(line: usize, key: &str, value: Option<&str>, e: &OptionError) -> JobFileError {
    let shown = match value {
        Some(v) => format!("{key}={v}"),
        None => key.to_string(),
    };
    let message = match e {
        OptionError::UnknownKey => {
            let all = KEYS.iter().chain(FIO_FILE_KEYS).copied();
            let hint = match mqblk::spec::nearest(key, all) {
                Some(near) => format!(" (did you mean `{near}`?)"),
                None => String::new(),
            };
            format!(
                "unknown key `{key}`{hint}; {}. mqblk job files take {}, {} (and accept and ignore {})",
                super::options::FIO_ENGINE_HINT,
                KEYS.iter()
                    .filter(|k| **k != "name")
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", "),
                FIO_FILE_KEYS.join(", "),
                IGNORED_KEYS.join(", ")
            )
        }
        other => format!("{shown}: {other}"),
    };
    err(line, message)
}

#[cfg(test)]
mod tests;
