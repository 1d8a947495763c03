//! What a run's jobs will pin, checked against the memory there is before
//! anything is allocated: `--iodepth=65536 --numjobs=64` asks for 4M I/O
//! slots, and a run that cannot have them is refused with the figures,
//! not ended by the kernel's OOM killer. `--allow-overcommit` skips the
//! check.
//!
//! Per slot a job pins its I/O buffers (`segments` pieces of `bs`, each
//! rounded up as the job's buffer arena carves it: a power of two of at
//! least a page) and its bio; a verifying job adds its busy list, its
//! scratch block, and the record of what it wrote (bounded by its budget,
//! and by the blocks of its `size=`). Stonewall groups run one after
//! another and free their slots in between: the peak is the largest
//! group's.
//!
//! The memory there is: the smallest of `MemAvailable` (/proc/meminfo),
//! the room under each memory limit of this process's cgroups (v2
//! `memory.max`, v1 `memory.limit_in_bytes`, up to the root), and the
//! room under `RLIMIT_AS`.

use anyhow::{bail, Result};

use crate::verify::record::RECORD_ENTRIES_MAX;
use mqblk_fio::job::JobSpec;

/// Bytes one entry of a verify record costs (a `BTreeMap` of 24-byte
/// entries: 11 to a 280-byte leaf, nodes part full, plus the inner
/// nodes).
pub const RECORD_ENTRY_BYTES: u64 = 48;

/// What one copy of a job pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobMemory {
    /// I/O slots (iodepth).
    pub slots: u64,
    /// Bytes per slot: its buffers as carved, and its bio.
    pub slot_bytes: u64,
    /// The verify record, busy list and scratch block.
    pub verify_bytes: u64,
    /// The random map (a bit per block of a sized random job).
    pub map_bytes: u64,
}

impl JobMemory {
    /// All of it.
    pub fn total(&self) -> u64 {
        self.slots
            .saturating_mul(self.slot_bytes)
            .saturating_add(self.verify_bytes)
            .saturating_add(self.map_bytes)
    }
}

/// The bytes a buffer of `len` takes in a job's arena: a power of two of
/// at least a page (the arena's size classes).
pub fn carved_bytes(len: u64) -> u64 {
    len.max(mqblk::buf::PAGE_SIZE as u64)
        .checked_next_power_of_two()
        .unwrap_or(u64::MAX)
}

/// What one copy of `job` pins; `writers` is the number of jobs in its
/// stonewall group (they share the verify records' budget).
pub fn of_job(job: &JobSpec, writers: u64) -> JobMemory {
    let segments = u64::from(job.segments.max(1));
    let piece = job.block_sizes.max(job.bs) / segments;
    let slot_bytes = segments
        .saturating_mul(carved_bytes(piece))
        .saturating_add(std::mem::size_of::<mqblk::Bio>() as u64);
    let verify_bytes = if job.verify.is_some() {
        let budget = (RECORD_ENTRIES_MAX as u64 / writers.max(1)).max(1 << 12);
        let entries = match job.size {
            Some(size) => budget.min(size / job.bs.max(1) + 1),
            None => budget,
        };
        entries
            .saturating_mul(RECORD_ENTRY_BYTES)
            .saturating_add(u64::from(job.iodepth) * 8)
            .saturating_add(job.bs)
    } else {
        0
    };
    // Counted when size= gives the blocks; a job sized by its device is
    // not (its map: a bit per block, 32 MiB for a terabyte of 4k blocks).
    let map_bytes = match job.size {
        Some(size) if job.rw.is_random() && !job.norandommap => {
            let unit = crate::pattern::unit_bytes(job);
            crate::random_map::RandomMap::bytes_for(size / unit)
        }
        _ => 0,
    };
    JobMemory {
        slots: u64::from(job.iodepth),
        slot_bytes,
        verify_bytes,
        map_bytes,
    }
}

/// The bytes the run needs at its peak (its largest stonewall group), and
/// how that group's jobs add up, for the message.
pub fn needed(jobs: &[JobSpec]) -> (u64, String) {
    // Stonewall groups: a job with `stonewall` starts a new one.
    let mut groups: Vec<Vec<&JobSpec>> = Vec::new();
    for job in jobs {
        if job.stonewall || groups.is_empty() {
            groups.push(Vec::new());
        }
        if let Some(g) = groups.last_mut() {
            g.push(job);
        }
    }
    let mut peak = (0u64, String::new());
    for group in groups {
        let writers: u64 = group.iter().map(|j| u64::from(j.numjobs)).sum();
        let mut bytes = 0u64;
        let mut parts = Vec::new();
        for job in group {
            let m = of_job(job, writers);
            let copies = u64::from(job.numjobs);
            bytes = bytes.saturating_add(m.total().saturating_mul(copies));
            let verify = if m.verify_bytes > 0 {
                format!(" + {} bytes of verify record each", m.verify_bytes)
            } else {
                String::new()
            };
            parts.push(format!(
                "job {}: iodepth={} x numjobs={} = {} slots of {} bytes (bs={}{}, its bio){verify}",
                job.name,
                job.iodepth,
                job.numjobs,
                m.slots.saturating_mul(copies),
                m.slot_bytes,
                job.block_sizes.max(job.bs),
                if job.segments > 1 {
                    format!(" in {} segments", job.segments)
                } else {
                    String::new()
                },
            ));
        }
        if bytes > peak.0 {
            peak = (bytes, parts.join("; "));
        }
    }
    peak
}

/// The memory this process may still take, and which limit says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Available {
    /// Bytes.
    pub bytes: u64,
    /// Where the figure comes from (`MemAvailable`, `RLIMIT_AS`, a
    /// cgroup's limit file).
    pub source: String,
}

/// The smallest of MemAvailable, the room under the cgroups' memory
/// limits and the room under RLIMIT_AS; `None` if none can be read.
pub fn available() -> Option<Available> {
    let mut best: Option<Available> = None;
    let mut take = |bytes: u64, source: String| {
        if best.as_ref().is_none_or(|b| bytes < b.bytes) {
            best = Some(Available { bytes, source });
        }
    };
    if let Some(kb) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| field_kb(&m, "MemAvailable:"))
    {
        take(
            kb.saturating_mul(1024),
            "MemAvailable in /proc/meminfo".into(),
        );
    }
    for (room, source) in cgroup_rooms() {
        take(room, source);
    }
    if let Some(room) = rlimit_as_room() {
        take(
            room,
            "RLIMIT_AS, less the address space already mapped".into(),
        );
    }
    best
}

/// A `Key:   N kB` line of /proc/meminfo or /proc/self/status.
fn field_kb(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Limits at or above this are "no limit" (cgroup v1 writes
/// `PAGE_COUNTER_MAX` pages as bytes: 2^63 rounded down to a page).
const NO_LIMIT: u64 = 1 << 62;

/// The room under every memory limit of this process's cgroups, from its
/// own cgroup up to the root, with the file that sets each.
fn cgroup_rooms() -> Vec<(u64, String)> {
    let Ok(me) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in me.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let (mounts, limit, usage): (&[&str], _, _) = if controllers.is_empty() {
            (
                &["/sys/fs/cgroup", "/sys/fs/cgroup/unified"],
                "memory.max",
                "memory.current",
            )
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                &["/sys/fs/cgroup/memory"],
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        for mount in mounts {
            let mut dir = std::path::PathBuf::from(format!("{mount}{path}"));
            if !dir.is_dir() {
                continue;
            }
            loop {
                let read = |name: &str| -> Option<u64> {
                    std::fs::read_to_string(dir.join(name))
                        .ok()?
                        .trim()
                        .parse()
                        .ok()
                };
                if let (Some(max), Some(used)) = (read(limit), read(usage)) {
                    if max < NO_LIMIT {
                        out.push((
                            max.saturating_sub(used),
                            format!("{} less {usage}", dir.join(limit).display()),
                        ));
                    }
                }
                if dir.as_os_str() == *mount || !dir.pop() {
                    break;
                }
            }
            break;
        }
    }
    out
}

/// RLIMIT_AS less the address space this process has mapped, if the
/// limit is set.
fn rlimit_as_room() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let mapped = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| field_kb(&s, "VmSize:"))
        .unwrap_or(0)
        .saturating_mul(1024);
    Some(lim.rlim_cur.saturating_sub(mapped))
}

/// Refuse `jobs` if what they pin is more than the memory available.
pub fn check(jobs: &[JobSpec]) -> Result<()> {
    let (need, how) = needed(jobs);
    let Some(avail) = available() else {
        return Ok(());
    };
    if need > avail.bytes {
        bail!(
            "the jobs would pin {need} bytes ({}) of memory, and {} bytes ({}) are available \
             ({}): {how}; lower iodepth, numjobs or bs, or pass --allow-overcommit to run it \
             anyway",
            human(need),
            avail.bytes,
            human(avail.bytes),
            avail.source
        );
    }
    Ok(())
}

/// Bytes in binary units, one decimal.
fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", units[u])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(args: &[(&str, &str)]) -> JobSpec {
        let mut o = mqblk_fio::options::JobOptions::default();
        for (k, v) in args {
            o.set(k, Some(v)).unwrap();
        }
        o.build("job0").unwrap()
    }

    #[test]
    fn a_4k_slot_pins_its_page_and_its_bio_not_two_pages() {
        let m = of_job(&job(&[("iodepth", "65536")]), 1);
        assert_eq!(m.slots, 65536);
        assert_eq!(
            m.slot_bytes,
            4096 + std::mem::size_of::<mqblk::Bio>() as u64
        );
        assert_eq!(m.verify_bytes, 0);
    }

    #[test]
    fn iodepth_65536_numjobs_64_counts_4m_slots() {
        let (need, how) = needed(&[job(&[("iodepth", "65536"), ("numjobs", "64")])]);
        let slot = 4096 + std::mem::size_of::<mqblk::Bio>() as u64;
        assert_eq!(need, 65536 * 64 * slot);
        assert!(how.contains("4194304 slots"), "{how}");
    }

    #[test]
    fn buffers_are_counted_as_the_arena_carves_them() {
        assert_eq!(carved_bytes(512), 4096);
        assert_eq!(carved_bytes(4096), 4096);
        assert_eq!(carved_bytes(12 << 10), 16 << 10);
        assert_eq!(carved_bytes(64 << 20), 64 << 20);
    }

    #[test]
    fn a_verify_record_is_bounded_by_the_blocks_of_its_size() {
        let m = of_job(
            &job(&[("rw", "write"), ("verify", "crc32c"), ("size", "64m")]),
            1,
        );
        assert_eq!(
            m.verify_bytes,
            (16384 + 1) * RECORD_ENTRY_BYTES + 8 + 4096,
            "{m:?}"
        );
    }

    #[test]
    fn stonewall_groups_peak_apart() {
        let a = job(&[("iodepth", "1000")]);
        let mut b = job(&[("iodepth", "3000")]);
        b.stonewall = true;
        let (need, _) = needed(&[a.clone(), b.clone()]);
        assert_eq!(need, of_job(&b, 1).total());
        b.stonewall = false;
        let (both, _) = needed(&[a, b]);
        assert!(both > need);
    }

    #[test]
    fn the_memory_available_is_read() {
        let a = available().expect("/proc/meminfo has MemAvailable");
        assert!(a.bytes > 0, "{a:?}");
    }
}
