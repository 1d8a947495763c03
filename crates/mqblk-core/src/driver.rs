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
pub use crate::irq::IrqLines;
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
    /// The driver cannot end it yet: its backend holds the request's
    /// memory (no cancel, or a cancel that has not reached it). Ask again
    /// in a timeout period; meanwhile the core names the request as
    /// overdue ([`crate::Context::take_overdue`]), so a caller that would
    /// rather stop than wait can. Made with [`crate::Overdue::of`].
    Held(crate::request::Overdue),
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
    /// The device's number in blktrace records: a stacked driver names it
    /// as the device its children come from
    /// ([`crate::Context::submit_remapped`]).
    pub devnum: crate::blktrace::event::DevNum,
    /// This queue's interrupt lines, for a stacked driver to put its
    /// contexts' lines on the legs in
    /// ([`crate::Context::forward_irq_lines`]), so that a completion fd
    /// on top holds every leaf directly. A leaf driver need not touch it:
    /// its [`Driver::irq_fd`] goes here.
    pub irq_lines: IrqLines,
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

/// Builds the answer of [`Driver::extents`] for the asked range
/// `[offset_bytes, offset_bytes + len_bytes)`: each run pushed is clipped to
/// that range, and a run that continues the last extent with the same `hole`
/// and `zero` grows it instead of starting a new one. Runs are pushed in
/// order and without gaps, as the answer must be; after clipping, an empty
/// run is dropped.
///
/// ```
/// use mqblk_core::driver::{Extent, ExtentBuilder};
///
/// let mut out = Vec::new();
/// let mut b = ExtentBuilder::new(&mut out, 1000, 9000);
/// b.push(0, 4096, false, false); // clipped to start at 1000
/// b.push(4096, 4096, false, false); // merged with the run before
/// b.push_until(8192, false, false); // already covered: nothing
/// b.fill_rest(true, true); // a hole up to 10000
/// assert_eq!(
///     out,
///     [
///         Extent { offset_bytes: 1000, len_bytes: 7192, hole: false, zero: false },
///         Extent { offset_bytes: 8192, len_bytes: 1808, hole: true, zero: true },
///     ]
/// );
/// ```
#[derive(Debug)]
pub struct ExtentBuilder<'a> {
    out: &'a mut Vec<Extent>,
    /// Where the extents pushed so far end (the asked offset before any).
    reached_bytes: u64,
    /// End of the asked range (saturated at `u64::MAX`).
    end_bytes: u64,
}

impl<'a> ExtentBuilder<'a> {
    /// A builder appending to `out` the extents of `[offset_bytes,
    /// offset_bytes + len_bytes)`. `out` should hold nothing of this range
    /// yet.
    pub fn new(out: &'a mut Vec<Extent>, offset_bytes: u64, len_bytes: u64) -> Self {
        Self {
            out,
            reached_bytes: offset_bytes,
            end_bytes: offset_bytes.saturating_add(len_bytes),
        }
    }

    /// Add the run `[offset_bytes, offset_bytes + len_bytes)`, clipped to
    /// the asked range and to start where the runs before it end. It must
    /// not start after that: extents have no gaps.
    pub fn push(&mut self, offset_bytes: u64, len_bytes: u64, hole: bool, zero: bool) {
        let start = offset_bytes.max(self.reached_bytes);
        let end = offset_bytes.saturating_add(len_bytes).min(self.end_bytes);
        if start >= end {
            return;
        }
        debug_assert!(
            offset_bytes <= self.reached_bytes,
            "extent at {offset_bytes} leaves a gap after {}",
            self.reached_bytes
        );
        self.reached_bytes = end;
        if let Some(last) = self.out.last_mut() {
            let contiguous = last.offset_bytes + last.len_bytes == start;
            if contiguous && last.hole == hole && last.zero == zero {
                last.len_bytes += end - start;
                return;
            }
        }
        self.out.push(Extent {
            offset_bytes: start,
            len_bytes: end - start,
            hole,
            zero,
        });
    }

    /// Cover `[reached_bytes(), end_bytes)` (clipped) with one run of this
    /// kind: nothing if the runs pushed so far already reach `end_bytes`.
    pub fn push_until(&mut self, end_bytes: u64, hole: bool, zero: bool) {
        let from = self.reached_bytes;
        self.push(from, end_bytes.saturating_sub(from), hole, zero);
    }

    /// Cover the rest of the asked range with one run of this kind.
    pub fn fill_rest(&mut self, hole: bool, zero: bool) {
        self.push_until(self.end_bytes, hole, zero);
    }

    /// Where the runs pushed so far end: the asked offset before the first.
    pub fn reached_bytes(&self) -> u64 {
        self.reached_bytes
    }
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
    /// library signals). The core adds it to the queue's
    /// [`IrqLines`], and so to the completion fd of every context on the
    /// queue, so that an event loop sleeps until it fires
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

#[cfg(test)]
mod tests {
    use super::{Extent, ExtentBuilder};

    fn ext(offset_bytes: u64, len_bytes: u64, hole: bool) -> Extent {
        Extent {
            offset_bytes,
            len_bytes,
            hole,
            zero: hole,
        }
    }

    #[test]
    fn runs_of_one_kind_merge() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 0, 400);
        b.push(0, 100, true, true);
        b.push(100, 100, true, true);
        b.push(200, 50, false, false);
        b.push(250, 150, false, false);
        assert_eq!(b.reached_bytes(), 400);
        assert_eq!(out, [ext(0, 200, true), ext(200, 200, false)]);
    }

    #[test]
    fn runs_are_clipped_to_the_asked_range() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 4096, 8192);
        b.push(0, 4096, true, true); // wholly before: dropped
        b.push(4096 - 512, 4096, false, false);
        b.push(8192 - 512, 8192, true, true);
        b.push(16384, 4096, false, false); // wholly after: dropped
        assert_eq!(out, [ext(4096, 3584, false), ext(7680, 4608, true)]);
    }

    #[test]
    fn a_different_zero_flag_starts_a_new_extent() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 0, 300);
        b.push(0, 100, false, false);
        b.push(100, 100, false, true);
        b.push(200, 100, false, true);
        assert_eq!(out.len(), 2);
        assert_eq!(out[1].offset_bytes, 100);
        assert_eq!(out[1].len_bytes, 200);
        assert!(out[1].zero);
        assert!(!out[1].hole);
    }

    #[test]
    fn push_until_fills_from_where_the_runs_reach() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 100, 400);
        b.push_until(50, false, false); // before the range: nothing
        b.push_until(200, true, true);
        b.push_until(150, false, false); // already covered: nothing
        b.push_until(300, false, false);
        b.push_until(1000, false, false);
        assert_eq!(out, [ext(100, 100, true), ext(200, 300, false)]);
    }

    #[test]
    fn fill_rest_covers_to_the_end_once() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 10, 90);
        b.fill_rest(true, true);
        b.fill_rest(false, false); // nothing is left
        assert_eq!(b.reached_bytes(), 100);
        assert_eq!(out, [ext(10, 90, true)]);
    }

    #[test]
    fn empty_range_and_empty_runs_push_nothing() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 512, 0);
        b.push(0, 4096, false, false);
        b.fill_rest(true, true);
        assert_eq!(b.reached_bytes(), 512);
        let mut b = ExtentBuilder::new(&mut out, 0, 100);
        b.push(0, 0, false, false);
        assert!(out.is_empty());
    }

    #[test]
    fn a_range_past_u64_max_saturates() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, u64::MAX - 10, 100);
        b.push(u64::MAX - 20, 100, true, true);
        assert_eq!(out, [ext(u64::MAX - 10, 10, true)]);
    }

    #[test]
    fn an_extent_already_in_out_is_not_grown() {
        let mut out = vec![ext(0, 100, true)];
        let mut b = ExtentBuilder::new(&mut out, 200, 100);
        b.fill_rest(true, true);
        assert_eq!(out, [ext(0, 100, true), ext(200, 100, true)]);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "leaves a gap")]
    fn a_gap_is_a_bug() {
        let mut out = Vec::new();
        let mut b = ExtentBuilder::new(&mut out, 0, 300);
        b.push(0, 100, false, false);
        b.push(200, 100, true, true);
    }
}
