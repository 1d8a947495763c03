//! A queue's state: its ring, target, slots and interrupt line, and the
//! user_data words its entries carry.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use io_uring::IoUring;
use mqblk_core::buf::BufRegion;
use mqblk_core::driver::RqRef;
use mqblk_core::error::Status;

use crate::info::Notes;
use crate::psync::PsyncQueue;
use crate::target::Target;

use super::irq::Irq;
use super::ring::{Flavor, RingConfig};

/// `user_data` bits above the tag: what the entry is.
pub(super) const UD_MAIN: u64 = 0;
/// The fdatasync linked before a PREFLUSH write.
pub(super) const UD_PREFLUSH: u64 = 1 << 32;
/// An IORING_OP_ASYNC_CANCEL for the request at the tag (its own result
/// is ignored: the cancelled request's completion is what counts).
pub(super) const UD_CANCEL: u64 = 2 << 32;
/// Longest the ring's drop waits for stray in-flight I/O, in 100 ms steps.
pub(super) const DROP_WAIT_STEPS: u32 = 100;
/// Most drains of the interrupt line per `poll` (see `quiet_line`).
pub(super) const LINE_QUIET_ROUNDS: u32 = 4;

/// One in-flight request of the ring, at its tag.
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) rq: Option<RqRef>,
    /// Bytes already transferred (a short read or write continues here).
    pub(super) done_bytes: u64,
    /// EAGAIN/EINTR retries so far.
    pub(super) retries: u8,
    /// Outcome of the linked PREFLUSH, if it failed.
    pub(super) status: Status,
    /// Timed out: cancel sent; its completion ends it with `Timeout`.
    pub(super) timed_out: bool,
}

/// What a queue reports about its ring, for `mqblk info`.
#[derive(Clone, Debug)]
pub struct RingReport {
    /// The flavor in use.
    pub flavor: Flavor,
    /// Registered buffers in use.
    pub fixed_bufs: bool,
    /// Registered file in use.
    pub fixed_file: bool,
}

/// One hardware queue of the io_uring engine.
pub struct UringQueue {
    pub(super) ring: IoUring,
    pub(super) cfg: RingConfig,
    pub(super) flavor: Flavor,
    pub(super) target: Target,
    pub(super) index: u16,
    /// The file is registered at index 0.
    pub(super) fixed_file: bool,
    /// Registered buffers: (arena id, buffer index).
    pub(super) fixed_bufs: Vec<(u16, u16)>,
    pub(super) regions: Vec<BufRegion>,
    pub(super) slots: Box<[Slot]>,
    /// MAX_SEGMENTS iovecs per tag, for vectored requests.
    pub(super) iovecs: Box<[libc::iovec]>,
    /// Requests whose rest must be resubmitted (short or EAGAIN).
    pub(super) resubmit: Vec<u32>,
    /// Requests on the ring (not the side queue).
    pub(super) in_flight: u32,
    /// Entries pushed and not yet consumed by the kernel.
    pub(super) unsubmitted: u32,
    /// The bound issuer of a SINGLE_ISSUER ring (0: not bound yet).
    pub(super) owner: i32,
    /// Another thread wants the ring: take nothing new until it is idle.
    pub(super) draining: bool,
    /// Operations the ring cannot carry (BLKDISCARD) run here.
    pub(super) side: Option<PsyncQueue>,
    /// The helper thread's eventfd of `wait=sleep`.
    pub(super) irq: Option<Irq>,
    /// The interrupt line of `wait=poll`: a non-blocking eventfd the ring
    /// signals (see the module's doc).
    pub(super) line: Option<OwnedFd>,
    /// Completions were taken, or task work run, since the line was last
    /// drained: it may be readable for them.
    pub(super) line_dirty: bool,
    pub(super) notes: Notes,
    /// A polled I/O answered EOPNOTSUPP: drop IOPOLL at the next chance.
    pub(super) iopoll_refused: bool,
    /// Every entry is issued from an io-wq worker (IOSQE_ASYNC): the
    /// file's requests may block the thread that issues them.
    pub(super) force_async: bool,
}

// SAFETY: the ring's raw pointers (its mmaps, the iovecs handed to the
// kernel) are owned by this queue and move with it; the core reaches a
// hardware queue through &mut only, from one thread at a time.
unsafe impl Send for UringQueue {}

impl std::fmt::Debug for UringQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringQueue")
            .field("index", &self.index)
            .field("flavor", &self.flavor)
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl UringQueue {
    /// What this ring uses.
    pub fn report(&self) -> RingReport {
        RingReport {
            flavor: self.flavor,
            fixed_bufs: !self.fixed_bufs.is_empty(),
            fixed_file: self.fixed_file,
        }
    }

    /// The interrupt line of `wait=poll` (see the module's doc), the same
    /// for the queue's life: a rebuilt ring is registered with it again.
    pub fn irq_fd(&self) -> Option<RawFd> {
        self.line.as_ref().map(|l| l.as_raw_fd())
    }

    /// Requests taken and not yet given back.
    pub fn in_flight(&self) -> u32 {
        self.in_flight + self.side.as_ref().map_or(0, |s| s.in_flight())
    }
}
