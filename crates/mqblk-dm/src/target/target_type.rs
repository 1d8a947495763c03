//! What a target is (Linux `struct target_type`): the trait each line's
//! target implements, the piece of a request it is asked to map ([`Io`]),
//! where it sends that piece ([`Route`]) and what it does when a child ends
//! ([`EndAction`]).

use mqblk_core::driver::{BioFlags, Op, Status};
use mqblk_core::QueueLimits;

use crate::legs::LegId;

/// One piece of a request, as its target sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    /// Operation (never `Flush`: flushes go to every leg, unmapped).
    pub op: Op,
    /// The request's flags (FUA, ...).
    pub flags: BioFlags,
    /// Offset of the piece within the target's range, in bytes.
    pub offset_bytes: u64,
    /// Length of the piece, in bytes.
    pub len_bytes: u64,
}

/// Where a piece goes, filled by [`Target::map`].
#[derive(Debug, Default)]
pub struct Route {
    pub(crate) sends: smallvec::SmallVec<[Sent; 4]>,
    pub(crate) zero: bool,
    pub(crate) fail: Option<Status>,
    pub(crate) requeue: bool,
}

/// One child: the piece, remapped onto a leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The leg.
    pub leg: LegId,
    /// Offset on the leg, in bytes.
    pub offset_bytes: u64,
    /// Hold the child back this long before it is submitted (`delay`).
    pub delay_ns: u64,
}

impl Route {
    /// Send the piece to `leg` at `offset_bytes`. Called several times, the
    /// piece goes to every such leg (a mirror's write).
    #[inline]
    pub fn to_leg(&mut self, leg: LegId, offset_bytes: u64) {
        self.sends.push(Sent {
            leg,
            offset_bytes,
            delay_ns: 0,
        });
    }

    /// As [`Route::to_leg`], submitted only after `delay_ns`.
    pub fn to_leg_after(&mut self, leg: LegId, offset_bytes: u64, delay_ns: u64) {
        self.sends.push(Sent {
            leg,
            offset_bytes,
            delay_ns,
        });
    }

    /// End the piece here: a read gets zeros, anything else succeeds.
    pub fn zero(&mut self) {
        self.zero = true;
    }

    /// End the piece here with `status`.
    pub fn fail(&mut self, status: Status) {
        self.fail = Some(status);
    }

    /// Not now: the whole request goes back to the hardware queue and is
    /// mapped again later (Linux `DM_MAPIO_REQUEUE`; a mirror region being
    /// copied). Pieces of the same request already routed are handed to
    /// their target's [`Target::unmap`].
    pub fn requeue(&mut self) {
        self.requeue = true;
    }

    pub(crate) fn clear(&mut self) {
        self.sends.clear();
        self.zero = false;
        self.fail = None;
        self.requeue = false;
    }
}

/// What to do when a child ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndAction {
    /// This child is done; fold `status` into the request's.
    Done(Status),
    /// Send the same child again, to `leg` at `offset_bytes` (a mirror read
    /// that failed on one leg).
    Retry {
        /// The leg to try.
        leg: LegId,
        /// Offset on that leg.
        offset_bytes: u64,
    },
}

/// A target: one line of a table, built from its arguments.
pub trait Target: Send + Sync + 'static {
    /// The target's name, as in the table (`linear`).
    fn name(&self) -> &'static str;

    /// Bytes from `offset_bytes` (within the target) to the next boundary
    /// a piece must not cross: a stripe's chunk. Default: none.
    #[inline]
    fn max_io_len(&self, _offset_bytes: u64) -> u64 {
        u64::MAX
    }

    /// Route one piece. `hwq` is the hardware queue asking (for targets that
    /// balance or keep per-queue state).
    fn map(&self, io: &Io, hwq: u16, route: &mut Route);

    /// The leg and the offset on it that a plain read or write (`op`) of
    /// `len_bytes` at `offset_bytes` (within the target) maps to whole,
    /// when it is one piece on one leg and the target needs no word of
    /// its end but a failure ([`Target::end_io`] then), no zeros, no
    /// delay: the bio-based driver then sends the bio itself down, with no
    /// clone. `hwq` as for [`Target::map`]. Default: `None` (the I/O is
    /// mapped, [`Target::map`], and cloned).
    /// True if [`Target::route`] may route an I/O. Default: false.
    fn routes(&self) -> bool {
        false
    }

    /// True if [`Target::route`] may route a write. Default: as
    /// [`Target::routes`].
    fn routes_writes(&self) -> bool {
        self.routes()
    }

    #[inline]
    fn route(
        &self,
        _op: Op,
        _offset_bytes: u64,
        _len_bytes: u64,
        _hwq: u16,
    ) -> Option<(LegId, u64)> {
        None
    }

    /// A child sent to `leg` ended with `status`. Default: it is done.
    #[inline]
    fn end_io(&self, _io: &Io, _leg: LegId, status: Status) -> EndAction {
        EndAction::Done(status)
    }

    /// A child routed by [`Target::map`] to `leg` is dropped unsent,
    /// because another piece of its request asked for a requeue. Called
    /// once per such child, in place of [`Target::end_io`]. Default:
    /// nothing.
    fn unmap(&self, _io: &Io, _leg: LegId) {}

    /// A flush sent to `leg` (one of [`Target::legs`]) failed with
    /// `status`; return what the request should see. Default: the error.
    /// Called only on failure.
    fn end_flush(&self, _leg: LegId, status: Status) -> Status {
        status
    }

    /// This target as `Any`, for control-plane calls specific to one
    /// target type (`mirror::replace`). Default: none.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The legs this target sends to (flushes go to each).
    fn legs(&self) -> Vec<LegId>;

    /// A line for `mqblk dm status` (Linux `dmsetup status`).
    fn status(&self) -> String {
        String::new()
    }

    /// Limits this target adds on top of its legs' (a stripe's chunk).
    fn limits(&self, _lim: &mut QueueLimits) {}

    /// For a plain linear mapping: its leg and the offset on it, in bytes
    /// (a table of one such line is opened as a remapped window).
    fn linear(&self) -> Option<(LegId, u64)> {
        None
    }

    /// True if it holds children back in time ([`Route::to_leg_after`]):
    /// the device is then polled rather than slept on, so that a delayed
    /// child is sent when it is due.
    fn delays(&self) -> bool {
        false
    }

    /// True if it has a say in flushes ([`Target::map_flush`]).
    fn maps_flush(&self) -> bool {
        false
    }

    /// A flush of the device, which goes to every leg: fail it
    /// ([`Route::fail`]) or hold back its child to a leg
    /// ([`Route::to_leg_after`]; the offset is ignored). Called only if
    /// [`Target::maps_flush`].
    fn map_flush(&self, _hwq: u16, _route: &mut Route) {}
}
