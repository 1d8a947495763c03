//! The file driver itself (Linux: the loop driver's `loop_mq_ops`, with
//! io_uring where loop has its worker): the [`Driver`] implementation at
//! the end of the pipeline, dispatching to the engine each hardware queue
//! was set up with.
//!
//! Capabilities are declared from discovery, honestly: the core validates,
//! splits and bounces against them, and refuses (or emulates) what is not
//! offered.

use std::sync::{Arc, Mutex};

use mqblk_core::bio::Op;
use mqblk_core::driver::{
    Completions, Driver, Extent, ExtentBuilder, HwQueueSetup, QueueRq, RqRef, TimeoutAction,
};
use mqblk_core::error::{Error, Result, Status};
use mqblk_core::limits::{Features, QueueLimits, SECTOR_SIZE};

use crate::config::WaitMode;
use crate::discover::{Geometry, TargetKind, MAX_RW_BYTES};
use crate::info::{note, Entry};
use crate::psync::PsyncQueue;
use crate::target::{Target, MAX_SEGMENTS};
use crate::uring::{RingConfig, UringQueue};

/// Which engine the hardware queues run.
#[derive(Clone, Debug)]
pub enum Engine {
    /// One io_uring per hardware queue.
    Uring(RingConfig),
    /// `workers` pread/pwrite threads per hardware queue.
    Psync {
        /// Threads per hardware queue.
        workers: u32,
    },
}

/// The driver data of one hardware queue.
#[derive(Debug)]
pub enum FileQueue {
    /// An io_uring.
    Uring(Box<UringQueue>),
    /// A worker set.
    Psync(PsyncQueue),
}

/// The file driver. [`crate::open`] builds it and the device around it.
#[derive(Debug)]
pub struct FileDriver {
    name: String,
    target: Target,
    geom: Geometry,
    engine: Engine,
    fixed_bufs_bytes: usize,
    entry: Arc<Entry>,
}

impl FileDriver {
    pub(crate) fn new(
        name: String,
        target: Target,
        geom: Geometry,
        engine: Engine,
        fixed_bufs_bytes: usize,
        entry: Arc<Entry>,
    ) -> FileDriver {
        FileDriver {
            name,
            target,
            geom,
            engine,
            fixed_bufs_bytes,
            entry,
        }
    }

    /// What discovery found.
    pub fn geometry(&self) -> &Geometry {
        &self.geom
    }

    /// True if the target carries `op` (discard and write-zeroes are
    /// optional).
    #[inline]
    fn offers(&self, op: Op) -> bool {
        match op {
            Op::Discard => self.target.discard.is_some(),
            Op::WriteZeroes => self.target.write_zeroes.is_some(),
            _ => true,
        }
    }

    fn setup_error(&self, reason: String) -> Error {
        Error::Setup {
            device: self.name.as_str().into(),
            reason,
        }
    }
}

/// `bytes` as sectors, rounded down to whole logical blocks and clamped
/// to a u32.
fn sectors_limit(bytes: u64, lbs: u32) -> u32 {
    let per_block = u64::from(lbs) / SECTOR_SIZE;
    let s = (bytes / SECTOR_SIZE).min(u64::from(u32::MAX));
    (s / per_block * per_block) as u32
}

impl Driver for FileDriver {
    type HwQueue = FileQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<FileQueue> {
        let depth = (setup.queue_depth + setup.reserved_tags) as usize;
        match &self.engine {
            Engine::Uring(cfg) => {
                let q = UringQueue::new(
                    self.target.clone(),
                    cfg.clone(),
                    setup.index,
                    depth,
                    setup.buf_regions,
                    setup.notifier,
                    self.entry.notes.clone(),
                )
                .map_err(|e| {
                    self.setup_error(format!(
                        "setting up the io_uring of hardware queue {}: {e}",
                        setup.index
                    ))
                })?;
                if setup.index == 0 {
                    let r = q.report();
                    let mut i = self.entry.info.lock().unwrap_or_else(|e| e.into_inner());
                    let mut flags = vec![r.flavor.describe().to_string()];
                    if cfg.iopoll {
                        flags.push("IOPOLL".into());
                    }
                    if cfg.sqpoll_idle_ms.is_some() {
                        flags.push("SQPOLL".into());
                    }
                    i.ring_flags = flags.join(", ");
                    i.fixed_bufs = r.fixed_bufs;
                    i.fixed_file = r.fixed_file;
                }
                Ok(FileQueue::Uring(Box::new(q)))
            }
            Engine::Psync { workers } => {
                let q = PsyncQueue::new(
                    self.target.clone(),
                    setup.index,
                    *workers,
                    depth,
                    setup.notifier,
                )
                .map_err(|e| self.setup_error(format!("starting psync workers: {e}")))?;
                if let (0, Some(why)) = (setup.index, q.interrupt_unavailable()) {
                    note(
                        &self.entry.notes,
                        format!(
                            "psync workers cannot be interrupted ({why}): a timed-out request \
                             inside pread/pwrite ends only when the call returns"
                        ),
                    );
                }
                Ok(FileQueue::Psync(q))
            }
        }
    }

    #[inline]
    fn queue_rq(
        &self,
        hq: &mut FileQueue,
        rq: RqRef,
        last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        if !self.offers(rq.op()) {
            // The core refuses ops the features do not declare; this is
            // the driver keeping its own promise regardless.
            done.complete(rq, Status::NotSupported);
            if last {
                self.commit_rqs(hq);
            }
            return QueueRq::Issued;
        }
        match hq {
            FileQueue::Uring(q) => match q.queue_rq(rq, last) {
                Ok(()) => QueueRq::Issued,
                Err(rq) => QueueRq::Busy(rq),
            },
            FileQueue::Psync(q) => {
                q.queue(rq, last);
                QueueRq::Issued
            }
        }
    }

    #[inline]
    fn commit_rqs(&self, hq: &mut FileQueue) {
        match hq {
            FileQueue::Uring(q) => q.submit(),
            FileQueue::Psync(q) => q.commit(),
        }
    }

    #[inline]
    fn poll(&self, hq: &mut FileQueue, done: &mut Completions<'_>) -> usize {
        match hq {
            FileQueue::Uring(q) => q.poll(done),
            FileQueue::Psync(q) => q.poll(done),
        }
    }

    /// A timed-out request is cancelled (io_uring: IORING_OP_ASYNC_CANCEL;
    /// psync: the worker is interrupted) and completes with
    /// [`Status::Timeout`] only once the kernel has let go of its buffers.
    fn timeout(&self, hq: &mut FileQueue, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        match hq {
            FileQueue::Uring(q) => q.timeout(tag, done),
            FileQueue::Psync(q) => q.timeout(tag, done),
        }
    }

    fn can_wait(&self) -> bool {
        matches!(self.engine, Engine::Uring(_))
    }

    /// io_uring with `wait=poll`: the ring's eventfd, drained by `poll`
    /// (see `uring.rs`). `wait=sleep` and psync complete from threads of
    /// their own, which wake the contexts themselves.
    fn irq_fd(&self, hq: &FileQueue) -> Option<std::os::fd::RawFd> {
        match hq {
            FileQueue::Uring(q) => q.irq_fd(),
            FileQueue::Psync(_) => None,
        }
    }

    fn wait(&self, hq: &mut FileQueue, timeout: std::time::Duration) -> bool {
        match hq {
            FileQueue::Uring(q) => q.wait(timeout),
            FileQueue::Psync(_) => false,
        }
    }

    fn limits(&self) -> QueueLimits {
        let g = &self.geom;
        let lbs = g.logical_block_size;
        QueueLimits {
            logical_block_size: lbs,
            physical_block_size: g.physical_block_size,
            max_sectors: sectors_limit(MAX_RW_BYTES, lbs),
            max_segments: MAX_SEGMENTS as u32,
            max_segment_size: u32::MAX,
            seg_boundary_mask: u64::MAX,
            chunk_sectors: 0,
            dma_alignment: g.dma_alignment,
            max_discard_sectors: if g.discard.is_some() {
                sectors_limit(g.max_discard_bytes, lbs)
            } else {
                0
            },
            max_write_zeroes_sectors: if g.write_zeroes.is_some() {
                sectors_limit(u64::MAX, lbs)
            } else {
                0
            },
        }
    }

    fn features(&self) -> Features {
        let g = &self.geom;
        Features {
            write_cache: g.write_cache,
            // RWF_DSYNC makes one write durable by itself.
            fua: g.write_cache && !g.read_only,
            discard: g.discard.is_some(),
            write_zeroes: g.write_zeroes.is_some(),
            read_only: g.read_only,
            rotational: g.rotational,
        }
    }

    fn completes_async(&self) -> bool {
        match &self.engine {
            Engine::Psync { .. } => true,
            Engine::Uring(cfg) => cfg.wait == WaitMode::Sleep,
        }
    }

    fn buffer_arena_bytes(&self) -> usize {
        match self.engine {
            Engine::Uring(_) => self.fixed_bufs_bytes,
            Engine::Psync { .. } => 0,
        }
    }

    /// SEEK_DATA/SEEK_HOLE on a regular file; a block device does not say.
    fn extents(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) -> Result<bool> {
        if self.geom.kind != TargetKind::Regular {
            return Ok(false);
        }
        let end = offset_bytes.saturating_add(len_bytes);
        let mut b = ExtentBuilder::new(out, offset_bytes, len_bytes);
        let mut pos = offset_bytes;
        while pos < end {
            let data = match seek(self.target.fd, pos, libc::SEEK_DATA) {
                Ok(d) => d,
                // ENXIO: no data at or after pos.
                Err(libc::ENXIO) => end,
                Err(e) => {
                    note(
                        &self.entry.notes,
                        format!(
                            "SEEK_DATA failed ({}); extents not reported",
                            Status::from_errno(e)
                        ),
                    );
                    return Ok(false);
                }
            };
            b.push_until(data, true, true);
            if data >= end {
                break;
            }
            let hole = seek(self.target.fd, data, libc::SEEK_HOLE).unwrap_or(end);
            b.push_until(hole, false, false);
            pos = hole;
        }
        Ok(true)
    }
}

/// lseek(2) returning the errno on failure.
fn seek(fd: libc::c_int, pos: u64, whence: libc::c_int) -> std::result::Result<u64, i32> {
    // SAFETY: lseek takes no pointers. The file offset it moves is not used
    // for I/O (every read and write names its offset).
    let r = unsafe { libc::lseek(fd, pos as libc::off_t, whence) };
    if r < 0 {
        Err(crate::target::errno())
    } else {
        Ok(r as u64)
    }
}

/// Shared with the registry: kept here so the driver owns its entry.
pub(crate) type SharedEntry = Arc<Entry>;

/// A fresh registry entry.
pub(crate) fn new_entry(info: crate::info::FileInfo, notes: Vec<String>) -> SharedEntry {
    Arc::new(Entry {
        info: Mutex::new(info),
        notes: Arc::new(Mutex::new(notes)),
    })
}
