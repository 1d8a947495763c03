//! The driver API (Linux `struct blk_mq_ops`): the only thing a driver
//! implements, and the only part of the core a driver sees.
//!
//! Sits at the end of the pipeline: the hardware queue hands requests to
//! [`Driver::queue_rq`], rings the doorbell with [`Driver::commit_rqs`], and
//! reaps with [`Driver::poll`]. Each hardware queue has its own driver state
//! (`Self::HwQueue`, Linux `hctx->driver_data`), always reached through
//! `&mut`: the core serialises access to one hardware queue, so a driver
//! needs no lock of its own for per-queue state.
//!
//! Ownership contract: a request handed to `queue_rq` belongs to the driver
//! until the driver gives it back, exactly once, either through
//! [`Completions::complete`] (from `queue_rq`, `poll` or `timeout`) or as
//! [`QueueRq::Busy`]. Nothing else may end it, so a request can neither be
//! lost nor completed twice.

pub use crate::bio::{BioFlags, Op, Segment};
pub use crate::buf::BufRegion;
pub use crate::completion::{Completions, HwNotifier};
pub use crate::error::{Error, InvalidKind, Result, Status};
pub use crate::limits::{Features, QueueLimits, SECTOR_SIZE};
pub use crate::request::{ReadBufs, Request, RqRef, RqState, WriteBufs};
pub use crate::sync::Notify;

/// The answer of [`Driver::queue_rq`] (Linux `blk_status_t` from `queue_rq`).
#[must_use = "a busy request must be requeued, not dropped"]
#[derive(Debug)]
pub enum QueueRq {
    /// The driver took the request (and may already have completed it).
    Issued,
    /// The driver cannot take it now (Linux `BLK_STS_RESOURCE`): the core puts
    /// it on the hardware queue's dispatch list and retries later.
    Busy(RqRef),
}

/// The answer of [`Driver::timeout`] (Linux `enum blk_eh_timer_return`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    /// The driver completed the request (through `done`) or will.
    Done,
    /// Still making progress: give it another timeout period.
    ResetTimer,
}

/// What a hardware queue is set up with (Linux `init_hctx`'s arguments).
#[derive(Debug)]
pub struct HwQueueSetup<'a> {
    /// Index of this hardware queue.
    pub index: u16,
    /// Wakes contexts sleeping on this queue. A driver that completes
    /// requests from another thread calls it after making completions
    /// available to `poll`.
    pub notifier: HwNotifier,
    /// Normal tags allocated for this queue's tag set (`queue_depth_max`):
    /// with `reserved_tags`, the most requests it can ever be handed at once,
    /// even after the depth is raised at run time.
    pub queue_depth: u32,
    /// Reserved tags.
    pub reserved_tags: u32,
    /// Memory the device's buffer pool hands out, for drivers that register
    /// buffers with their hardware (io_uring fixed buffers).
    pub buf_regions: &'a [BufRegion],
}

/// One run of a device's address space, as block status reports it (NBD
/// `base:allocation`, SEEK_HOLE/SEEK_DATA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Start, in bytes.
    pub offset_bytes: u64,
    /// Length, in bytes.
    pub len_bytes: u64,
    /// Not allocated: reads return zeros and the range takes no space.
    pub hole: bool,
    /// Known to read as zeros.
    pub zero: bool,
}

/// A block driver. Three required methods move requests; everything else has
/// a safe default.
pub trait Driver: Send + Sync + 'static {
    /// Per-hardware-queue state: a ring, a connection, a completion list.
    type HwQueue: Send + 'static;

    /// Set up one hardware queue (Linux `init_hctx`).
    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<Self::HwQueue, Error>;

    /// Issue one request. `last` is true for the last request of a batch:
    /// the driver may defer ringing its doorbell until then, or until
    /// [`Driver::commit_rqs`]. To complete at once, call `done.complete`.
    fn queue_rq(
        &self,
        hq: &mut Self::HwQueue,
        rq: RqRef,
        last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq;

    /// Ring the doorbell for requests queued without `last` (Linux
    /// `commit_rqs`): called when a batch ends early, e.g. after `Busy`.
    fn commit_rqs(&self, hq: &mut Self::HwQueue);

    /// Reap finished requests into `done`; returns how many.
    fn poll(&self, hq: &mut Self::HwQueue, done: &mut Completions<'_>) -> usize;

    /// Block until `poll` would find a completion, or `timeout` passes (an
    /// io_uring waits in `io_uring_enter(GETEVENTS, min_complete=1)`, as fio
    /// does). Returns false if this driver cannot wait, and the core sleeps
    /// on its own futex instead. The core calls this only for a hardware
    /// queue that one context has to itself, holding its lock, so the wait
    /// blocks nobody else.
    fn wait(&self, _hq: &mut Self::HwQueue, _timeout: std::time::Duration) -> bool {
        false
    }

    /// True if [`Driver::wait`] is implemented. Without it the core never
    /// takes the hardware queue's lock just to ask.
    fn can_wait(&self) -> bool {
        false
    }

    /// The interrupt line of `hq`: a file descriptor that is readable while
    /// `poll` on it would find a completion (a socket, an eventfd that a
    /// library signals). The core adds it to the completion fd of every
    /// context on the queue, so that an event loop sleeps until it fires
    /// instead of being kept awake while requests are in flight on a
    /// driver that completes only when polled. It must stay open, and the
    /// same, for the hardware queue's life. Default: none.
    fn irq_fd(&self, _hq: &Self::HwQueue) -> Option<std::os::fd::RawFd> {
        None
    }

    /// Request `tag` of this queue has been in flight past the timeout. The
    /// default keeps waiting.
    fn timeout(
        &self,
        _hq: &mut Self::HwQueue,
        _tag: u32,
        _done: &mut Completions<'_>,
    ) -> TimeoutAction {
        TimeoutAction::ResetTimer
    }

    /// Queue limits. Default: 512-byte blocks, no size limits.
    fn limits(&self) -> QueueLimits {
        QueueLimits::default()
    }

    /// Features. Default: no write cache, no FUA, no discard, writable.
    fn features(&self) -> Features {
        Features::default()
    }

    /// Requests the driver can hold at once per hardware queue, below the tag
    /// depth (Linux `get_budget`); `None` means the tags are the only bound.
    fn budget(&self) -> Option<u32> {
        None
    }

    /// True if completions arrive without `poll` being called (a thread or
    /// an interrupt calls the notifier); then waiters may sleep instead of
    /// polling.
    fn completes_async(&self) -> bool {
        false
    }

    /// Bytes of buffer arena the device's pool should carve buffers from, so
    /// the driver can register them (see [`HwQueueSetup::buf_regions`]).
    /// Default: none; buffers come from the heap.
    fn buffer_arena_bytes(&self) -> usize {
        0
    }

    /// Describe `[offset_bytes, offset_bytes + len_bytes)` as data and hole
    /// extents, in order and without gaps, into `out`. Returns false if the
    /// driver does not know (then everything is reported as data). Control
    /// plane: it may lock and allocate.
    fn extents(
        &self,
        _offset_bytes: u64,
        _len_bytes: u64,
        _out: &mut Vec<Extent>,
    ) -> Result<bool, Error> {
        Ok(false)
    }
}

/// The type-erased device-level driver the device holds.
pub(crate) trait DeviceOps: Send + Sync {
    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, Error>;
}

impl<D: Driver> DeviceOps for D {
    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, Error> {
        Driver::extents(self, offset_bytes, len_bytes, out)
    }
}

/// The type-erased per-queue driver the hardware queue holds.
pub(crate) trait HwQueueOps: Send {
    fn queue_rq(&mut self, rq: RqRef, last: bool, done: &mut Completions<'_>) -> QueueRq;
    fn commit_rqs(&mut self);
    fn poll(&mut self, done: &mut Completions<'_>) -> usize;
    fn timeout(&mut self, tag: u32, done: &mut Completions<'_>) -> TimeoutAction;
    fn wait(&mut self, timeout: std::time::Duration) -> bool;
    fn irq_fd(&self) -> Option<std::os::fd::RawFd>;
}

pub(crate) struct Bound<D: Driver> {
    pub(crate) driver: std::sync::Arc<D>,
    pub(crate) hq: D::HwQueue,
}

impl<D: Driver> HwQueueOps for Bound<D> {
    #[inline]
    fn queue_rq(&mut self, rq: RqRef, last: bool, done: &mut Completions<'_>) -> QueueRq {
        self.driver.queue_rq(&mut self.hq, rq, last, done)
    }
    #[inline]
    fn commit_rqs(&mut self) {
        self.driver.commit_rqs(&mut self.hq)
    }
    #[inline]
    fn poll(&mut self, done: &mut Completions<'_>) -> usize {
        self.driver.poll(&mut self.hq, done)
    }
    fn timeout(&mut self, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        self.driver.timeout(&mut self.hq, tag, done)
    }
    fn wait(&mut self, timeout: std::time::Duration) -> bool {
        self.driver.wait(&mut self.hq, timeout)
    }
    fn irq_fd(&self) -> Option<std::os::fd::RawFd> {
        self.driver.irq_fd(&self.hq)
    }
}
