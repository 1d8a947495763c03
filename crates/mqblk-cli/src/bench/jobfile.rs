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
//! error that says why). The fio keys `thread`, `group_reporting` and
//! `name` are accepted and ignored (mqblk always runs jobs as threads,
//! prints every job, and names jobs by their section); any other key is an
//! error naming it and its line.
//!
//! The command line's options are laid over every job (see
//! [`super::options`]). Files are bounded: at most [`FILE_BYTES_MAX`]
//! bytes and lines of at most [`LINE_CHARS_MAX`] characters. The parser
//! never panics on any input; it is a fuzz target.

use std::fmt;
use std::io::Read;
use std::path::Path;

use super::job::JobSpec;
use mqblk::spec::parse_bool;

use super::options::{JobOptions, OptionError, KEYS, NAME_LEN_MAX};

/// Largest job file, in bytes.
pub const FILE_BYTES_MAX: u64 = 1 << 20;
/// Longest line, in characters.
pub const LINE_CHARS_MAX: usize = 4096;

/// fio keys that are accepted and ignored.
pub const IGNORED_KEYS: &[&str] = &["name"];

/// fio's file keys, taken as fio means them: `filename=PATH` is the device
/// `file:PATH`; `direct=` and `ioengine=io_uring|psync` set `direct=` and
/// `engine=` of the section's file devices (`libaio` and `posixaio` leave
/// the default engine, io_uring).
pub const FIO_FILE_KEYS: &[&str] = &["filename", "direct", "buffered", "ioengine"];

/// A job file that cannot be used, with the line at fault (1-based; 0 when
/// the fault is the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFileError {
    /// 1-based line number, or 0 for the whole file.
    pub line: usize,
    /// What is wrong and what would be accepted.
    pub message: String,
}

impl fmt::Display for JobFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for JobFileError {}

fn err(line: usize, message: impl Into<String>) -> JobFileError {
    JobFileError {
        line,
        message: message.into(),
    }
}

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

/// fio's keywords in a job file's values (`$pagesize`, `$mb_memory`,
/// `$ncpus`), with what they stand for on this machine.
fn keywords() -> [(&'static str, String); 3] {
    // SAFETY: sysconf only reads a system value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096);
    // SAFETY: as above.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) }.max(0);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    [
        ("$pagesize", page.to_string()),
        (
            "$mb_memory",
            ((pages as u64 * page as u64) >> 20).to_string(),
        ),
        ("$ncpus", cpus.to_string()),
    ]
}

/// A line with fio's substitutions made: `${VAR}` becomes the
/// environment variable VAR (empty when unset, as fio does), and a keyword
/// (`$ncpus`) its value.
fn substitute(line: &str) -> std::borrow::Cow<'_, str> {
    if !line.contains('$') {
        return line.into();
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("${") {
        out.push_str(&rest[..at]);
        match rest[at + 2..].find('}') {
            Some(end) if end > 0 => {
                let name = &rest[at + 2..at + 2 + end];
                out.push_str(&std::env::var(name).unwrap_or_default());
                rest = &rest[at + 3 + end..];
            }
            _ => {
                out.push_str("${");
                rest = &rest[at + 2..];
            }
        }
    }
    out.push_str(rest);
    for (word, value) in keywords() {
        if out.contains(word) {
            out = out.replace(word, &value);
        }
    }
    out.into()
}

/// fio's engines that do block I/O on a file or device: mqblk takes their
/// place (io_uring and the pread/pwrite family set a file device's engine).
const BLOCK_ENGINES: &[&str] = &[
    "libaio", "io_uring", "uring", "sync", "psync", "vsync", "pvsync", "pvsync2", "posixaio",
    "mmap", "null", "nbd", "rbd",
];

/// [`parse`], plus a note (`LINE: key=value: ignored: why`) for each key
/// accepted without effect.
#[cfg(test)]
pub fn parse_with_notes(
    text: &str,
    cli: &JobOptions,
) -> Result<(Vec<JobSpec>, Vec<String>), JobFileError> {
    parse_sections(text, cli, &[])
}

/// [`parse_with_notes`] of only the job sections named in `sections`
/// (fio's `--section`; all when empty). `[global]` sections always apply.
pub fn parse_sections(
    text: &str,
    cli: &JobOptions,
    sections: &[String],
) -> Result<(Vec<JobSpec>, Vec<String>), JobFileError> {
    let mut notes = Vec::new();
    // An engine that is not block I/O is the reason a file cannot run,
    // whatever other keys of that engine come before it.
    if let Some((line_no, engine)) = foreign_engine(text, sections) {
        return Err(not_block_engine(line_no, &engine));
    }
    // Inside a section not chosen by --section: its lines are skipped.
    let mut skipping = false;
    if text.len() as u64 > FILE_BYTES_MAX {
        return Err(err(
            0,
            format!("larger than {FILE_BYTES_MAX} bytes; job files are limited to 1 MiB"),
        ));
    }
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
                        "{line_no}: ioengine={v}: mqblk is the engine (file devices use io_uring)"
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
            // A key of mqblk's own is noted and taken (group_reporting is
            // noted for the report, and steady state takes it).
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
        if let Some(note) = value.and_then(|v| super::options::fio::value_note(key, v)) {
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

/// What a job file with a non-block engine is told.
fn not_block_engine(line_no: usize, engine: &str) -> JobFileError {
    err(
        line_no,
        format!(
            "ioengine={engine}: not an engine of block I/O on a file or device, which is what \
             mqblk bench runs; {}",
            super::options::FIO_ENGINE_HINT
        ),
    )
}

/// The first `ioengine=` of a section that runs (or of `[global]`) that
/// is not block I/O, with its line.
fn foreign_engine(text: &str, sections: &[String]) -> Option<(usize, String)> {
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

/// Cut a comment: the whole line after a leading `;`/`#`, or the rest of
/// the line after a `;`/`#` that follows whitespace (so that `#` inside a
/// value such as a URL survives).
fn strip_comment(line: &str) -> &str {
    let trimmed = line.trim_start();
    if trimmed.starts_with(';') || trimmed.starts_with('#') {
        return "";
    }
    // In an inline device-mapper table, `;` separates the table's lines.
    let table = line.find("dm-table:").unwrap_or(usize::MAX);
    let mut prev_space = false;
    for (i, c) in line.char_indices() {
        if prev_space && (c == '#' || (c == ';' && i < table)) {
            return &line[..i];
        }
        prev_space = c.is_whitespace();
    }
    line
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
mod tests {
    use super::*;
    use crate::bench::job::RwMode;
    use proptest::prelude::*;
    use std::time::Duration;

    fn parse_ok(text: &str) -> Vec<JobSpec> {
        parse(text, &JobOptions::default()).unwrap()
    }

    fn parse_err(text: &str) -> JobFileError {
        parse(text, &JobOptions::default()).unwrap_err()
    }

    #[test]
    fn global_and_two_jobs() {
        let jobs = parse_ok(
            "; a comment\n\
             # another\n\
             [global]\n\
             rw=randread\n\
             bs = 8k   ; trailing comment\n\
             ioengine=libaio\n\
             direct=1\n\
             group_reporting\n\
             time_based\n\
             runtime=2s\n\
             device=null,size=1G\n\
             \n\
             [a]\n\
             iodepth=32\n\
             \r\n\
             [b]\r\n\
             rw=randwrite\r\n\
             numjobs=2\n\
             device=null\n\
             device=null,size=2G\n",
        );
        assert_eq!(jobs.len(), 2);
        let (a, b) = (&jobs[0], &jobs[1]);
        assert_eq!(a.name, "a");
        assert_eq!(a.rw, RwMode::RandRead);
        assert_eq!(a.bs, 8192);
        assert_eq!(a.iodepth, 32);
        assert!(a.time_based);
        assert_eq!(a.runtime, Some(Duration::from_secs(2)));
        assert_eq!(a.devices, vec!["null,size=1G"]);
        assert_eq!(b.name, "b");
        assert_eq!(b.rw, RwMode::RandWrite);
        assert_eq!(b.iodepth, 1);
        assert_eq!(b.numjobs, 2);
        assert_eq!(b.devices, vec!["null", "null,size=2G"]);
    }

    #[test]
    fn fio_file_keys_are_taken_as_fio_means_them() {
        let jobs = parse_ok(
            "[global]\n\
             ioengine=io_uring\n\
             direct=0\n\
             [a]\n\
             filename=/data/disk.img\n\
             [b]\n\
             ioengine=psync\n\
             direct=1\n\
             device=file:/x,direct=0\n\
             device=null\n\
             [c]\n\
             ioengine=libaio\n\
             device=null\n",
        );
        assert_eq!(
            jobs[0].devices,
            vec!["file:/data/disk.img,direct=0,engine=uring"]
        );
        // A spec's own direct= wins; other kinds are left alone.
        assert_eq!(
            jobs[1].devices,
            vec!["file:/x,direct=0,engine=psync", "null"]
        );
        assert_eq!(jobs[2].devices, vec!["null"]);
        let e = parse_err("[a]\nioengine=spdk\ndevice=null\n");
        assert_eq!(e.line, 2);
        assert!(
            e.message
                .contains("ioengine=spdk: not an engine of block I/O")
                && e.message.contains("contrib/fio-engine"),
            "{e}"
        );
        let e = parse_err("[a]\ndirect=maybe\n");
        assert!(e.message.contains("direct=maybe: expected 1"), "{e}");
        let e = parse_err("[a]\niodeth=4\n");
        assert!(e.message.contains("(did you mean `iodepth`?)"), "{e}");
    }

    #[test]
    fn a_global_applies_to_the_jobs_after_it() {
        let jobs = parse_ok("[a]\n[global]\nbs=16k\n[b]\n");
        assert_eq!(jobs[0].bs, 4096);
        assert_eq!(jobs[1].bs, 16384);
    }

    #[test]
    fn command_line_overrides_the_file() {
        let mut cli = JobOptions::default();
        cli.set("bs", Some("64k")).unwrap();
        cli.set("name", Some("ignored")).unwrap();
        let jobs = parse("[global]\nbs=4k\n[a]\nbs=8k\n", &cli).unwrap();
        assert_eq!(jobs[0].bs, 65536);
        assert_eq!(jobs[0].name, "a");
    }

    #[test]
    fn fio_workload_keys_and_notes() {
        let text = "[global]\n\
                    ioengine=libaio\n\
                    iodepth_batch=8\n\
                    group_reporting\n\
                    directory=/tmp\n\
                    norandommap\n\
                    [a]\n\
                    rw=read:-8k\n\
                    blocksize=4k\n\
                    filesize=1m\n\
                    offset=64k\n\
                    number_ios=10\n\
                    loops=2\n\
                    fsync=4\n\
                    end_fsync=1\n\
                    rate_iops=100,50\n\
                    startdelay=1\n\
                    random_distribution=zipf:1.1\n\
                    randrepeat=0\n\
                    buffered=1\n\
                    filename=/dev/null\n\
                    [b]\n\
                    rwmixwrite=30\n\
                    rw=randrw\n\
                    timeout=5\n\
                    time_based\n\
                    stonewall\n\
                    rate=1m\n";
        let (jobs, notes) = parse_with_notes(text, &JobOptions::default()).unwrap();
        let a = &jobs[0];
        assert_eq!(a.seq_stride, -8192);
        assert_eq!(a.bs, 4096);
        assert_eq!(a.size, Some(1 << 20));
        assert_eq!(a.offset, 65536);
        assert_eq!(a.io_size, Some(40960));
        assert_eq!(a.loops, 2);
        assert_eq!(a.fsync_every, 4);
        assert!(a.end_fsync);
        assert_eq!(a.rate_iops, Some(150));
        assert_eq!(a.startdelay, Duration::from_secs(1));
        assert!(
            matches!(a.distribution, crate::bench::job::Distribution::Zipf { theta, .. } if theta == 1.1)
        );
        assert!(!a.randrepeat);
        assert_eq!(a.devices, vec!["file:/dev/null,direct=0"]);
        assert!(!a.stonewall);
        let b = &jobs[1];
        assert_eq!(b.rwmixread, 70);
        assert_eq!(b.runtime, Some(Duration::from_secs(5)));
        assert!(b.stonewall);
        assert_eq!(b.rate_bps, Some(1 << 20));
        let notes = notes.join("\n");
        assert!(
            notes.contains("2: ioengine=libaio: mqblk is the engine"),
            "{notes}"
        );
        assert!(
            notes.contains("3: iodepth_batch=8: ignored: mqblk batches"),
            "{notes}"
        );
        assert!(notes.contains("5: directory=/tmp: ignored"), "{notes}");
    }

    #[test]
    fn errors_name_the_line_and_key() {
        let e = parse_err("[global]\nbs=4k\n\n[a]\nioscheduler=bfq\n");
        assert_eq!(e.line, 5);
        assert!(e.to_string().contains("line 5"), "{e}");
        assert!(e.message.contains("`ioscheduler`"), "{e}");
        assert!(e.message.contains("contrib/fio-engine"), "{e}");
        assert!(e.message.contains("device, "), "{e}");
        assert!(
            e.message.contains("filename, direct, buffered, ioengine"),
            "{e}"
        );

        let e = parse_err("[a]\niodepth=0\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("iodepth=0"), "{e}");

        let e = parse_err("[a]\nrw=foo\n");
        assert!(e.message.contains("\"foo\""), "{e}");

        let e = parse_err("bs=4k\n[a]\n");
        assert_eq!(e.line, 1);

        let e = parse_err("[a\n");
        assert_eq!(e.line, 1);

        let e = parse_err("[]\n");
        assert_eq!(e.line, 1);

        let e = parse_err("[global]\nbs=4k\n");
        assert_eq!(e.line, 0);
        assert!(e.message.contains("no job sections"), "{e}");

        let e = parse_err("[a]\ntime_based\n");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("runtime"), "{e}");

        let e = parse_err("[a]\nbs\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("needs a value"), "{e}");
    }

    #[test]
    fn bounds() {
        let long = format!("[a]\nrw={}\n", "r".repeat(LINE_CHARS_MAX + 1));
        assert_eq!(parse_err(&long).line, 2);
        let big = ";\n".repeat((FILE_BYTES_MAX as usize) / 2 + 1);
        assert_eq!(parse_err(&big).line, 0);
        let many: String = (0..=1024).map(|i| format!("[j{i}]\n")).collect();
        assert!(parse(&many, &JobOptions::default()).is_err());
    }

    #[test]
    fn hash_inside_a_value_is_kept() {
        assert_eq!(strip_comment("device=a#b ; c"), "device=a#b ");
        assert_eq!(strip_comment("  # all"), "");
        assert_eq!(
            strip_comment("device=dm-table:0 8 zero ; 8 8 error ; c"),
            "device=dm-table:0 8 zero ; 8 8 error ; c"
        );
        assert_eq!(
            strip_comment("device=dm-table:0 8 zero # c"),
            "device=dm-table:0 8 zero "
        );
    }

    fn ini_line() -> impl Strategy<Value = String> {
        // Every known key, plus keys that are ignored or unknown.
        let keys: Vec<&'static str> = KEYS
            .iter()
            .copied()
            .chain(["ioengine", "direct", "filename", ""])
            .collect();
        let key = prop::sample::select(keys);
        prop_oneof![
            (key, ".{0,12}").prop_map(|(k, v)| format!("{k}={v}")),
            ".{0,16}".prop_map(|s| format!("[{s}]")),
            Just("[global]".to_string()),
            "[;#\\[\\]= a-z0-9\u{0}-\u{1f}\u{80}-\u{10ffff}]{0,24}",
        ]
    }

    proptest! {
        #[test]
        fn never_panics_on_any_text(text in "(?s).{0,512}") {
            let _ = parse(&text, &JobOptions::default());
        }

        #[test]
        fn never_panics_on_ini_like_text(lines in prop::collection::vec(ini_line(), 0..24)) {
            let _ = parse(&lines.join("\n"), &JobOptions::default());
        }
    }
}
