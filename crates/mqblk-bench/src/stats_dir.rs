//! The stats directory a run keeps up to date, for tools that exist:
//! `DIR/diskstats` in `/proc/diskstats` format (so `iostat -x -f DIR -p
//! ALL 1` shows mqblk devices) and `DIR/mqblk.json` with the layer's own
//! counters, which `mqblk stat DIR` reads back.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result};
use mqblk::Device;
use serde_json::json;
/// The major number written for mqblk devices (a "local/experimental" one).
pub const MAJOR: u32 = 252;

/// Keeps a stats directory up to date for a set of devices.
pub struct StatsDir {
    dir: PathBuf,
    devices: Vec<Device>,
    started: Instant,
}

/// `devices` with each partition device (a window of a disk that counts
/// it as one of its partitions) replaced by its disk, once: the disk's
/// line is followed by every partition's.
fn disks_before_partitions(devices: Vec<Device>) -> Vec<Device> {
    let mut out: Vec<Device> = Vec::new();
    for d in devices {
        let d = match d.remapped_from() {
            Some((disk, _))
                if disk
                    .partition_stats()
                    .iter()
                    .any(|(p, _)| p.name == d.name()) =>
            {
                disk
            }
            _ => d,
        };
        if !out.iter().any(|x| x.same(&d)) {
            out.push(d);
        }
    }
    out
}

impl StatsDir {
    /// Create `dir` if needed. A partition opened as a device of its own
    /// (`SPEC,part=N`) is written as its disk's partition line, after
    /// the disk, as Linux's diskstats orders them.
    pub fn new(dir: impl Into<PathBuf>, devices: Vec<Device>) -> Result<StatsDir> {
        let devices = disks_before_partitions(devices);
        let dir = dir.into();
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("creating stats dir {}", dir.display()))?;
        Ok(StatsDir {
            dir,
            devices,
            started: Instant::now(),
        })
    }

    /// Write both files now (each replaced atomically, so a reader never
    /// sees half a file). `done` marks a finished run.
    pub fn write(&self, done: bool) -> Result<()> {
        let mut diskstats = String::new();
        let mut devs = Vec::new();
        // Each disk's line, then its partitions' lines (Linux numbers a
        // disk's partitions after it).
        let mut minor = 0u32;
        for d in self.devices.iter() {
            let s = d.stats().snapshot();
            diskstats.push_str(&s.diskstats_line(MAJOR, minor, d.name()));
            diskstats.push('\n');
            minor += 1;
            for (p, ps) in d.partition_stats() {
                diskstats.push_str(&ps.diskstats_line(MAJOR, minor, &p.name));
                diskstats.push('\n');
                minor += 1;
            }
            devs.push(json!({
                "name": d.name(),
                "queue_mode": d.queue_mode().name(),
                "capacity_bytes": d.capacity_bytes(),
                "diskstats": s.fields().to_vec(),
                "requests": s.requests,
                "bios": s.bios,
                "splits": s.splits,
                "bytes_copied": s.bytes_copied,
                "requeues": s.requeues,
                "timeouts": s.timeouts,
                "errors": s.errors,
                // A mirror in this device's table with a leg out.
                "degraded": mqblk::degraded_legs(d)
                    .iter()
                    .filter(|l| l.device == d.name())
                    .map(|l| crate::degraded::json(l, None))
                    .collect::<Vec<_>>(),
            }));
        }
        let meta = json!({
            "pid": std::process::id(),
            "elapsed_ms": self.started.elapsed().as_millis() as u64,
            "done": done,
            "devices": devs,
        });
        replace(&self.dir.join("diskstats"), diskstats.as_bytes())?;
        replace(&self.dir.join("mqblk.json"), meta.to_string().as_bytes())?;
        Ok(())
    }
}

fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}
