//! mqblk's file driver: direct I/O to regular files and raw block devices
//! (a loop device, `/dev/zram0`, an NVMe namespace), through io_uring or,
//! where the kernel refuses io_uring, a pread/pwrite thread pool.
//!
//! A driver sits at the end of the pipeline: `caller → Bio → plug →
//! software queue → scheduler → hardware queue → driver → completion`.
//! Each hardware queue of a file device owns one io_uring (or one set of
//! worker threads): its submission queue is the hardware queue's, its
//! completion queue is reaped by `poll`. Buffers from the device's pool
//! are carved from one arena registered with every ring, so reads and
//! writes use READ_FIXED/WRITE_FIXED and the kernel pins nothing per I/O.
//!
//! A device is named by a spec string:
//!
//! ```text
//! file:/path[,engine=uring|psync][,direct=0|1][,iopoll=0|1][,sqpoll=0|1][,ro=1]
//!           [,wait=poll|sleep][,fixed_bufs=SIZE][,size=SIZE][,create=1]
//!           [,workers=N][,taskrun=auto|defer|coop|off][,sqpoll_idle_ms=MS]
//! ```
//!
//! Opening never changes the target's size unless asked: `size=` creates
//! a missing file, exposes a prefix of a larger target, and grows an
//! existing file only with `create=1`.
//!
//! plus the options every device takes (`hw_queues`, `queue_depth`, ...;
//! see [`mqblk_core::queue::DeviceConfig::take_common`]). See
//! [`FileConfig`] for each option and its default. The engine in use and
//! any fallback taken are reported by [`info()`](fn@info).
//!
//! Modules, in the order a request meets them: [`config`] and [`discover`]
//! with its image lock ([`lock`]; control plane), [`driver`], then the
//! engines ([`uring`], [`psync`])
//! over the shared [`target`].
//!
//! ```no_run
//! let spec = mqblk_core::spec::parse("file:/dev/loop0,direct=1").unwrap();
//! let dev = mqblk_file::open(spec.target.as_deref().unwrap(), spec.options).unwrap();
//! println!("{}", mqblk_file::info(dev.name()).unwrap().summary());
//! ```

#![warn(missing_docs)]

// Control plane: options, discovery, what was set up.
pub mod config;

pub mod discover;

pub mod lock;

pub mod info;

// Data plane.
pub mod driver;

pub mod target;

pub mod uring;

pub mod psync;

use std::sync::atomic::{AtomicU32, Ordering};

use io_uring::{opcode, types};
use mqblk_core::buf::IoBuf;
use mqblk_core::error::{Error, Result};
use mqblk_core::queue::{Device, DeviceConfig};
use mqblk_core::spec::SpecOptions;

pub use crate::config::{EngineChoice, FileConfig, TaskRun, WaitMode};
pub use crate::discover::{Geometry, TargetKind};
pub use crate::driver::{Engine, FileDriver, FileQueue};
pub use crate::info::{info, FileInfo};

/// Set this environment variable to `1` to treat io_uring as unavailable,
/// as `kernel.io_uring_disabled=2` or a seccomp filter would (the automatic
/// fallback to psync, and its tests).
pub const NO_IO_URING_ENV: &str = "MQBLK_NO_IO_URING";

/// The number of the next file device (`file0`, `file1`, ...).
static NEXT_DEVICE: AtomicU32 = AtomicU32::new(0);

/// Open a file device: `target` is the path after `file:`, `opts` the
/// options after it. Any unknown option is an error naming it.
pub fn open(target: &str, mut opts: SpecOptions) -> Result<Device> {
    let cfg = FileConfig::from_options(target, &mut opts)?;
    let mut dev = DeviceConfig::new(String::new(), 0);
    dev.take_common(&mut opts)?;
    opts.finish()?;
    dev.name = format!("file{}", NEXT_DEVICE.fetch_add(1, Ordering::Relaxed));
    create(cfg, dev)
}

/// Why io_uring cannot be used here, if it cannot.
pub fn io_uring_unavailable() -> Option<String> {
    if std::env::var(NO_IO_URING_ENV).is_ok_and(|v| v == "1") {
        return Some(format!("{NO_IO_URING_ENV}=1"));
    }
    if let Ok(s) = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled") {
        if s.trim() == "2" {
            return Some("kernel.io_uring_disabled=2".into());
        }
    }
    match io_uring::IoUring::new(8) {
        Ok(_) => None,
        Err(e) => Some(format!("io_uring_setup: {e}")),
    }
}

/// Create a file device from a configuration built in code; `dev` supplies
/// the name and the common settings (its capacity is replaced by the
/// target's).
pub fn create(cfg: FileConfig, mut dev: DeviceConfig) -> Result<Device> {
    let setup = |reason: String| Error::Setup {
        device: dev.name.as_str().into(),
        reason,
    };
    let (file, mut geom) = discover::open(&cfg).map_err(setup)?;
    if geom.capacity_bytes < u64::from(geom.logical_block_size) {
        return Err(setup(format!(
            "{} has {} bytes, less than one {}-byte block; add create=1,size=1G to grow \
             the file (or use another file)",
            cfg.path.display(),
            geom.capacity_bytes,
            geom.logical_block_size
        )));
    }
    let mut notes = std::mem::take(&mut geom.notes);
    let use_uring = match cfg.engine {
        EngineChoice::Psync => false,
        EngineChoice::Uring => match io_uring_unavailable() {
            None => true,
            Some(why) => {
                return Err(setup(format!(
                    "engine=uring, but io_uring is unavailable ({why}); use engine=psync"
                )))
            }
        },
        EngineChoice::Auto => match io_uring_unavailable() {
            None => true,
            Some(why) => {
                notes.push(format!(
                    "io_uring is unavailable ({why}): using engine=psync"
                ));
                false
            }
        },
    };
    let target = target::Target::new(file, &geom);
    let mut iopoll = cfg.iopoll && use_uring;
    if iopoll {
        if let Some(why) = iopoll_refused(&target, &geom) {
            notes.push(format!(
                "iopoll=1 requested, but {why}: falling back to interrupt-driven completions"
            ));
            iopoll = false;
        }
    }
    if cfg.wait == WaitMode::Sleep && cfg.taskrun == TaskRun::Coop {
        return Err(setup(
            "wait=sleep with taskrun=coop: a COOP_TASKRUN ring signals its eventfd only when \
             the sleeping thread runs the completion work; use taskrun=defer, off or auto"
                .into(),
        ));
    }
    let fixed_bufs_bytes = if use_uring {
        let (bytes, note) = fit_arena_to_memlock(cfg.fixed_bufs_bytes, dev.nr_hw_queues);
        notes.extend(note);
        bytes
    } else {
        0
    };
    let depth = dev.queue_depth + dev.reserved_tags;
    let engine = if use_uring {
        driver::Engine::Uring(uring::RingConfig {
            entries: uring::RingConfig::entries_for(depth),
            iopoll,
            sqpoll_idle_ms: cfg.sqpoll.then_some(cfg.sqpoll_idle_ms),
            taskrun: cfg.taskrun,
            wait: cfg.wait,
        })
    } else {
        driver::Engine::Psync {
            workers: cfg.workers,
        }
    };
    dev.capacity_bytes = geom.capacity_bytes;
    let entry = driver::new_entry(
        FileInfo {
            name: dev.name.clone(),
            path: cfg.path.display().to_string(),
            target_kind: match geom.kind {
                TargetKind::Regular => "regular file",
                TargetKind::Block => "block device",
            },
            engine: if use_uring { "uring" } else { "psync" },
            ring_flags: String::new(),
            direct: cfg.direct,
            iopoll,
            sqpoll: cfg.sqpoll && use_uring,
            wait: if use_uring { cfg.wait.name() } else { "sleep" },
            fixed_bufs: false,
            fixed_file: false,
            align_source: geom.align_source,
            notes: Vec::new(),
        },
        notes,
    );
    info::register(&entry);
    let driver = FileDriver::new(
        dev.name.clone(),
        target,
        geom,
        engine,
        fixed_bufs_bytes,
        entry,
    );
    Device::new(driver, dev)
}

/// The prefix of the note [`fit_arena_to_memlock`] leaves when it shrinks
/// the arena: a program that prints every note on each run can leave this
/// one to `mqblk info`.
pub const ARENA_NOTE_PREFIX: &str = "fixed_bufs=";

/// Smallest arena worth registering; below it fixed buffers are turned off.
const MIN_ARENA_BYTES: usize = 1 << 20;

/// The buffer arena size that fits the memory this process may lock.
///
/// The arena is registered with every ring (one per hardware queue), and
/// io_uring charges each registration to RLIMIT_MEMLOCK unless the process
/// has CAP_IPC_LOCK; a rebuilt ring is charged again for a moment. A non-root user's limit is often 8 MiB, less than the
/// default 64 MiB arena, and every registration would fail; instead the
/// arena is shrunk to fit what is left of the limit (whole MiB), or turned
/// off, and the returned note says so.
pub fn fit_arena_to_memlock(want_bytes: usize, rings: u16) -> (usize, Option<String>) {
    if want_bytes == 0 || has_cap_ipc_lock() {
        return (want_bytes, None);
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one struct rlimit to the pointer, a live
    // local.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0
        || lim.rlim_cur == libc::RLIM_INFINITY
    {
        return (want_bytes, None);
    }
    fit_arena(want_bytes, rings, lim.rlim_cur, locked_bytes())
}

/// [`fit_arena_to_memlock`]'s arithmetic, for a limit of `limit` bytes of
/// which `locked` are locked already.
fn fit_arena(want_bytes: usize, rings: u16, limit: u64, locked: u64) -> (usize, Option<String>) {
    // Each ring's registration is charged, and a ring rebuilt for a second
    // thread (SINGLE_ISSUER) registers the arena again before the old
    // ring's charge is released: budget two registrations per ring. An
    // arena that does not start on a page boundary pins one page more
    // than its length; leave two pages of room too.
    let registrations = 2 * u64::from(rings.max(1));
    let per_ring = (limit.saturating_sub(locked) / registrations).saturating_sub(8192);
    if per_ring >= want_bytes as u64 {
        return (want_bytes, None);
    }
    let fit = (per_ring as usize) & !(MIN_ARENA_BYTES - 1);
    let mib = |b: u64| b >> 20;
    let why = format!(
        "RLIMIT_MEMLOCK is {} MiB ({} MiB already locked) for {rings} ring(s), each \
         registering the arena (twice while it is rebuilt)",
        mib(limit),
        mib(locked)
    );
    if fit < MIN_ARENA_BYTES {
        return (
            0,
            Some(format!(
                "{ARENA_NOTE_PREFIX}0: {} MiB of registered buffers do not fit: {why}; raise \
                 `ulimit -l` for READ_FIXED/WRITE_FIXED",
                mib(want_bytes as u64)
            )),
        );
    }
    (
        fit,
        Some(format!(
            "{ARENA_NOTE_PREFIX}{}M instead of {}M: {why}; raise `ulimit -l` for a larger arena",
            mib(fit as u64),
            mib(want_bytes as u64)
        )),
    )
}

/// Whether the process may lock memory beyond RLIMIT_MEMLOCK
/// (CAP_IPC_LOCK in its effective set).
fn has_cap_ipc_lock() -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    status_field("CapEff:")
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// Bytes this process has locked already (`VmLck`).
fn locked_bytes() -> u64 {
    status_field("VmLck:")
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib << 10)
}

fn status_field(name: &str) -> Option<String> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(name).map(str::to_string))
}

/// Why IOPOLL cannot be used on this target, if it cannot: a block device
/// without poll queues, or a file whose file system cannot poll (EOPNOTSUPP
/// on a probing read).
fn iopoll_refused(target: &target::Target, geom: &Geometry) -> Option<String> {
    // A file polls through the block device under its file system.
    if let Some(dev) = geom.blockdev {
        if !discover::blockdev_polls(dev) {
            let whose = match geom.kind {
                TargetKind::Block => "the block device",
                TargetKind::Regular => "the file system's block device",
            };
            return Some(format!(
                "{whose} {}:{} has no poll queues (queue/io_poll is 0)",
                dev.0, dev.1
            ));
        }
    }
    let mut ring: io_uring::IoUring = match io_uring::IoUring::builder().setup_iopoll().build(8) {
        Ok(r) => r,
        Err(e) => return Some(format!("an IOPOLL ring cannot be set up ({e})")),
    };
    let lbs = geom.logical_block_size as usize;
    let mut buf = IoBuf::new(lbs, (geom.dma_alignment as usize + 1).max(4096));
    let e = opcode::Read::new(
        types::Fd(target.fd),
        buf.as_mut_slice().as_mut_ptr(),
        lbs as u32,
    )
    .offset(0)
    .build()
    .user_data(1);
    // SAFETY: `buf` outlives the read: we wait for its completion below
    // and, if it never comes, leak the buffer.
    if unsafe { ring.submission().push(&e) }.is_err() {
        return Some("the probing read could not be queued".into());
    }
    if let Err(e) = ring.submit_and_wait(1) {
        std::mem::forget(buf);
        return Some(format!("the probing read failed to submit ({e})"));
    }
    let res = ring
        .completion()
        .next()
        .map(|c: io_uring::cqueue::Entry| c.result());
    match res {
        Some(r) if r >= 0 => None,
        Some(r) if -r == libc::EOPNOTSUPP => Some(format!(
            "{} cannot be polled (EOPNOTSUPP)",
            target_name(geom)
        )),
        Some(r) => Some(format!(
            "a polled read failed ({})",
            std::io::Error::from_raw_os_error(-r)
        )),
        None => {
            std::mem::forget(buf);
            Some("the probing read did not complete".into())
        }
    }
}

fn target_name(geom: &Geometry) -> &'static str {
    match geom.kind {
        TargetKind::Regular => "the file's file system",
        TargetKind::Block => "the block device",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_arena_fits_the_memlock_limit() {
        // A user's usual 8 MiB: 2 rings, each charged twice.
        let (n, note) = fit_arena(64 << 20, 2, 8 * MIB, 0);
        assert_eq!(n, 1 << 20);
        let note = note.unwrap();
        assert!(note.starts_with("fixed_bufs=1M instead of 64M"), "{note}");
        assert!(note.contains("RLIMIT_MEMLOCK is 8 MiB"), "{note}");
        // Enough room: unchanged, nothing said.
        assert_eq!(fit_arena(64 << 20, 2, 1 << 30, 0), (64 << 20, None));
        // Too little for one MiB a ring: fixed buffers off, said so.
        let (n, note) = fit_arena(64 << 20, 8, 8 * MIB, 0);
        assert_eq!(n, 0);
        assert!(note.unwrap().starts_with("fixed_bufs=0:"));
        // What is locked already counts.
        let (n, _) = fit_arena(64 << 20, 1, 8 * MIB, 6 * MIB);
        assert_eq!(n, 0);
    }
}
