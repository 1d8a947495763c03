//! fio's file layout: a job file's `filename=` that does not exist is
//! created before the devices open, at the job's `offset=` plus `size=`,
//! as fio lays out its files ("Laying out IO file"). It sits between the
//! jobs (`job`) and the engine, which opens the file as any other
//! `file:` device.
//!
//! Only a job file's `filename=` is laid out, and only when the job's
//! device is that file (a command line `--device` may replace it). A
//! missing file with no `size=` is left to the file driver, whose error
//! says how to give one; so is a path under a directory that does not
//! exist, or under `/dev`.

use std::path::Path;

use anyhow::{Context as _, Result};

use mqblk_fio::job::JobSpec;

/// What was laid out: the note for stderr of each file created.
pub fn lay_out(jobs: &[JobSpec]) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    // Jobs naming one file lay it out once, at the largest end any asks.
    let mut files: Vec<(&str, u64, &str)> = Vec::new();
    for job in jobs {
        let (Some(name), Some(size)) = (job.filename.as_deref(), job.size) else {
            continue;
        };
        if !job.devices.iter().any(|d| names_file(d, name)) {
            continue;
        }
        let end = job.offset.saturating_add(size);
        match files.iter_mut().find(|(f, _, _)| *f == name) {
            Some(f) if f.1 < end => {
                f.1 = end;
                f.2 = &job.name;
            }
            Some(_) => {}
            None => files.push((name, end, &job.name)),
        }
    }
    for (name, end, job) in files {
        let path = Path::new(name);
        if !wants_layout(path) {
            continue;
        }
        let file = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => f,
            // Created meanwhile: the driver opens what is there.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("job {job}: filename={name} does not exist and cannot be created")
                })
            }
        };
        file.set_len(end).with_context(|| {
            format!("job {job}: filename={name}: cannot size the new file to {end} bytes")
        })?;
        notes.push(format!(
            "job {job}: filename={name} did not exist: laid out at {end} bytes (offset= plus \
             size=), as fio lays out its files"
        ));
    }
    Ok(notes)
}

/// Whether the device spec `spec` is the file `name` (`file:NAME`, with
/// or without options).
fn names_file(spec: &str, name: &str) -> bool {
    spec.strip_prefix("file:")
        .and_then(|rest| rest.strip_prefix(name))
        .is_some_and(|tail| tail.is_empty() || tail.starts_with(','))
}

/// A missing path whose directory exists, outside `/dev` (what the file
/// driver would create given a size).
fn wants_layout(path: &Path) -> bool {
    if path.starts_with("/dev") || std::fs::symlink_metadata(path).is_ok() {
        return false;
    }
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_its_file_with_or_without_options() {
        assert!(names_file("file:a.img", "a.img"));
        assert!(names_file("file:a.img,direct=1", "a.img"));
        assert!(!names_file("file:a.img2", "a.img"));
        assert!(!names_file("ram,size=1G", "a.img"));
    }
}
