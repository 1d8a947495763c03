//! Bio-based devices (Linux: a disk whose `block_device_operations`
//! have a `submit_bio`, as device-mapper and md have): no request queue of
//! their own. A bio submitted to such a device is checked against its
//! limits, admitted by its throttle, counted in its stats and traced, and
//! then handed, in the submitting context, to the driver's
//! [`BioDriver::submit_bio`], which maps it onto lower devices as clone
//! bios ([`BioRef::clone_range`]) and ends it once its clones have ended.
//! Requests form only at the bottom of a stack: a stripe costs a remap and
//! the requests of its legs, not a second pipeline.
//!
//! State is per context ([`BioDriver::Queue`], opened with the context),
//! reached only through `&mut`: a stacked driver keeps there its contexts
//! on the lower devices, so submitting to a leg touches nothing another
//! context touches, as the context itself does not.

use crate::bio::Bio;
use crate::driver::{
    Completions, Driver, Error, Extent, Features, HwNotifier, HwQueueSetup, IrqLines, QueueLimits,
    QueueRq, RqRef, Status,
};

/// What a context's bio queue is opened with.
#[derive(Debug)]
pub struct BioQueueSetup {
    /// The context's index on the device.
    pub ctx: u32,
    /// The hardware queue the context is mapped to: a driver that balances
    /// (a mirror's reads) may use it.
    pub hwq: u16,
    /// Wakes the context when it sleeps: a lower context's completions are
    /// forwarded here ([`crate::Context::forward_completions`]).
    pub notifier: HwNotifier,
    /// The interrupt lines the context's completion fd watches: a lower
    /// context on a polled device forwards its lines here
    /// ([`crate::Context::forward_irq_lines`]).
    pub irq_lines: IrqLines,
    /// The device's number, which a lower device's trace names as where a
    /// clone came from ([`crate::Context::submit_remapped`]).
    pub devnum: crate::blktrace::DevNum,
    /// The context's bio slots: every [`BioRef::tag`] is below this.
    pub slots: u32,
}

/// A bio handed to [`BioDriver::submit_bio`]: the caller's bio, in its
/// slot, which it keeps until the driver ends it through [`BioEnds`].
pub struct BioRef<'a> {
    bio: &'a mut Bio,
    tag: u32,
}

impl<'a> BioRef<'a> {
    pub(crate) fn new(bio: &'a mut Bio, tag: u32) -> BioRef<'a> {
        BioRef { bio, tag }
    }

    /// The bio's slot: what [`BioEnds::end`] names it by, below
    /// [`BioQueueSetup::slots`].
    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// The bio.
    #[inline]
    pub fn bio(&self) -> &Bio {
        self.bio
    }

    /// Fill `len_bytes` of a read's memory from `offset_bytes` into the
    /// bio with zeros (a `zero` target, a hole). Does nothing for other
    /// operations. Call it before any clone of that range is sent.
    pub fn zero_range(&mut self, offset_bytes: u64, len_bytes: u64) -> u64 {
        if self.bio.op() != crate::bio::Op::Read {
            return 0;
        }
        let (start, end) = (offset_bytes, offset_bytes.saturating_add(len_bytes));
        let mut at = 0u64;
        let mut filled = 0u64;
        for seg in self.bio.segments_mut() {
            let (s_start, s_end) = (at, at + u64::from(seg.len()));
            at = s_end;
            let (lo, hi) = (start.max(s_start), end.min(s_end));
            if lo < hi {
                seg.as_mut_slice()[(lo - s_start) as usize..(hi - s_start) as usize].fill(0);
                filled += hi - lo;
            }
            if at >= end {
                break;
            }
        }
        filled
    }

    /// A bio for `new_offset_bytes` of a lower device, of `len_bytes` of
    /// this bio from `offset_bytes` into it, with its operation and flags
    /// (Linux `bio_alloc_clone` with `bio_trim`): its segments view this
    /// bio's memory, with the same direction, and nothing is copied. A
    /// flush's clone is a flush; a discard's or write-zeroes' has no
    /// memory.
    ///
    /// # Panics
    ///
    /// If the range runs past the bio.
    ///
    /// # Safety
    ///
    /// The clone borrows memory this bio's caller lent until the bio ends:
    /// the driver must not end the bio ([`BioEnds::end`]) before every
    /// clone of it has been reaped and dropped, even on error. Clones of
    /// one bio must cover disjoint ranges while any is in flight, unless
    /// they only read the memory (a write sent to several legs), and
    /// [`BioRef::zero_range`] must not touch a range a clone is in flight
    /// on.
    pub unsafe fn clone_range(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        new_offset_bytes: u64,
    ) -> Bio {
        let mut bio = Bio::at(crate::bio::Op::Read, 0);
        // SAFETY: the caller's promise, passed on.
        unsafe { self.clone_range_into(&mut bio, offset_bytes, len_bytes, new_offset_bytes) };
        bio
    }

    /// [`BioRef::clone_range`] built in place, into `dst`, a blank bio (a
    /// slot's, from [`crate::Context::submit_remapped_with`]): no move of
    /// the clone.
    ///
    /// # Panics
    ///
    /// If the range runs past the bio, or `dst` has segments already.
    ///
    /// # Safety
    ///
    /// As [`BioRef::clone_range`].
    // Inlined into each caller (a clone per leg of every write): the call
    // of eight arguments cost as much as the common one-segment body.
    #[inline(always)]
    pub unsafe fn clone_range_into(
        &self,
        dst: &mut Bio,
        offset_bytes: u64,
        len_bytes: u64,
        new_offset_bytes: u64,
    ) {
        use crate::bio::Op;
        let src = &*self.bio;
        let op = src.op();
        assert!(
            op == Op::Flush
                || offset_bytes
                    .checked_add(len_bytes)
                    .is_some_and(|e| e <= src.len_bytes()),
            "clone range {offset_bytes}+{len_bytes} past a bio of {} bytes",
            src.len_bytes()
        );
        assert!(
            dst.segments().is_empty(),
            "a clone is built into a blank bio"
        );
        dst.set_op(op);
        dst.set_flags(src.flags());
        match op {
            Op::Read | Op::Write => {
                dst.set_offset_bytes(new_offset_bytes);
                dst.set_len_bytes(0);
            }
            Op::Flush => {
                dst.set_offset_bytes(0);
                dst.set_len_bytes(0);
            }
            Op::Discard | Op::WriteZeroes => {
                dst.set_offset_bytes(new_offset_bytes);
                dst.set_len_bytes(len_bytes);
            }
        }
        if !op.has_data() {
            return;
        }
        if let [s] = src.segments() {
            // One segment (the common bio): the view is one range of it.
            // SAFETY: as below; the range was checked against the bio's
            // length, which is the segment's.
            let view = unsafe {
                s.buf().view(
                    s.offset() as usize + offset_bytes as usize,
                    len_bytes as usize,
                )
            };
            dst.push_segment(view, 0, len_bytes as u32);
            return;
        }
        let (start, end) = (offset_bytes, offset_bytes + len_bytes);
        let mut at = 0u64;
        for s in src.segments() {
            let (s_start, s_end) = (at, at + u64::from(s.len()));
            at = s_end;
            let (lo, hi) = (start.max(s_start), end.min(s_end));
            if lo < hi {
                let skip = (lo - s_start) as usize;
                let n = (hi - lo) as usize;
                // SAFETY: [skip, skip + n) lies inside the segment, which
                // lies inside its buffer; the bio's caller lent that
                // memory until the bio ends, and the driver promised every
                // clone ends first and that clones in flight do not
                // overlap unless they only read.
                let view = unsafe { s.buf().view(s.offset() as usize + skip, n) };
                dst.push_segment(view, 0, n as u32);
            }
            if at >= end {
                break;
            }
        }
    }
}

/// Where a bio-based driver ends bios: each tag once, with its status.
/// The core ends them (stats, trace, the caller's callback) once the
/// driver's call returns, never inside it.
pub struct BioEnds<'a> {
    ended: &'a mut Vec<(u32, Status)>,
    requeued: &'a mut Vec<u32>,
}

impl<'a> BioEnds<'a> {
    pub(crate) fn new(
        ended: &'a mut Vec<(u32, Status)>,
        requeued: &'a mut Vec<u32>,
    ) -> BioEnds<'a> {
        BioEnds { ended, requeued }
    }

    /// Not now: hand the bio of slot `tag` (which has no clone in flight)
    /// to [`BioDriver::submit_bio`] again later, from the context's next
    /// poll or wait (Linux `DM_MAPIO_REQUEUE`: a mirror region being
    /// copied). The bio stays in flight.
    #[inline]
    pub fn requeue(&mut self, tag: u32) {
        debug_assert!(self.requeued.len() < self.requeued.capacity());
        self.requeued.push(tag);
    }

    /// End the bio of slot `tag` with `status`. Each bio handed to
    /// [`BioDriver::submit_bio`] is ended exactly once.
    #[inline]
    pub fn end(&mut self, tag: u32, status: Status) {
        debug_assert!(self.ended.len() < self.ended.capacity());
        self.ended.push((tag, status));
    }
}

/// Where [`BioDriver::route`] sends a bio.
pub struct Routed<'q> {
    /// The lower context.
    pub lower: &'q mut dyn Lower,
    /// The bio's offset there.
    pub offset_bytes: u64,
    /// What [`BioDriver::routed_error`] gets back should the bio fail
    /// there (a dm table line and leg).
    pub cookie: u64,
}

/// A context on a lower device, as a bio-based driver hands it to the
/// core to route a bio to ([`BioDriver::route`]) or to take routed bios
/// back up from ([`BioDriver::lower_contexts`]): a
/// [`crate::Context`] (`&mut ctx` coerces). Sealed: its methods are the
/// core's. A trait, not the context itself: a context holds its bio
/// queue, whose route names the lower context, so the module that
/// declares the queue must not name the context.
pub trait Lower: sealed::Sealed {
    /// Send the bio of slot `up` of the context above (at `node`, a plain
    /// read or write) down here whole, at `offset_bytes`: the slot itself
    /// into a request here, where this context puts nothing between a bio
    /// and its request; or else the bio moved out of the slot into a free
    /// slot here and submitted. False, with the slot untouched, if neither
    /// can be done now. One call: both ways are decided here, with the
    /// leg's data stage inlined.
    ///
    /// # Safety
    ///
    /// `node` is slot `up` of the one context above whose driver owns
    /// this context (of `up_slots` slots, of the device numbered `above`),
    /// owned by it, in no request, holding its bio; it stays allocated
    /// until it comes back up ([`Lower::take_up`]), and nothing else
    /// touches it until then.
    #[doc(hidden)]
    unsafe fn route_bio(
        &mut self,
        node: std::ptr::NonNull<crate::bioset::BioNode>,
        up: u32,
        up_slots: usize,
        offset_bytes: u64,
        above: crate::blktrace::DevNum,
    ) -> bool;

    /// Hand the routed bios that ended here back up into `up`.
    #[doc(hidden)]
    fn take_up(&mut self, up: &mut RoutedUp<'_>);

    /// Put `node`, a clone in a slot of a [`crate::clone_set::CloneSet`]
    /// above (of `slots` slots), into a request here itself, at
    /// `offset_bytes`, as [`Lower::route_bio`] puts a slot above. False,
    /// with the slot untouched, if this context cannot take it so.
    ///
    /// # Safety
    ///
    /// `node` is a slot of the set, holding a plain read or write, owned
    /// by it, in no request; it stays allocated until it comes back
    /// ([`Lower::take_clones`]), and nothing else touches it until then.
    #[doc(hidden)]
    unsafe fn route_clone(
        &mut self,
        node: std::ptr::NonNull<crate::bioset::BioNode>,
        offset_bytes: u64,
        slots: usize,
    ) -> bool;

    /// Append the clones that ended here, each with its status, to `out`
    /// (sized to hold every clone the set has).
    #[doc(hidden)]
    fn take_clones(&mut self, out: &mut Vec<(std::ptr::NonNull<crate::bioset::BioNode>, Status)>);
}

pub(crate) mod sealed {
    /// Only the core's context is a [`super::Lower`].
    pub trait Sealed {}
}

/// The side of the context above that routed bios come back up into
/// ([`Lower::take_up`]): its slots, and the list of the slots whose bios
/// are back, each with its status, which the context above ends as soon
/// as the lower contexts have been through.
pub struct RoutedUp<'a> {
    pub(crate) bioset: &'a mut crate::bioset::BioSet,
    pub(crate) ended: &'a mut Vec<(u32, Status)>,
}

impl RoutedUp<'_> {
    /// Routed bio of slot `slot`, back in its slot, ended with `status`.
    #[inline(always)]
    pub(crate) fn back(&mut self, slot: u32, status: Status) {
        debug_assert!(self.ended.len() < self.ended.capacity());
        self.ended.push((slot, status));
    }
}

/// A bio-based driver (Linux `block_device_operations::submit_bio`).
pub trait BioDriver: Send + Sync + 'static {
    /// A context's state: its contexts on lower devices, the bios it holds.
    type Queue: Send + 'static;

    /// Open the state of a context, when the context is opened. Control
    /// plane.
    fn open_queue(&self, setup: BioQueueSetup) -> Result<Self::Queue, Error>;

    /// Map `bio` (checked against the device, admitted, counted): send
    /// clones of it down, or end it now. Never blocks on the caller's own
    /// completions.
    fn submit_bio(&self, q: &mut Self::Queue, bio: BioRef<'_>, ends: &mut BioEnds<'_>);

    /// True if [`BioDriver::route`] may route a bio (asked once, when a
    /// context opens). Default: false.
    fn routes(&self) -> bool {
        false
    }

    /// Where a plain read or write (`op`) of `len_bytes` at
    /// `offset_bytes` of this device goes whole, as it is but for its
    /// offset: the lower context, the offset there, and a cookie the
    /// driver gets back if the bio fails there
    /// ([`BioDriver::routed_error`]); `None` for a bio to map and clone
    /// ([`BioDriver::submit_bio`]). Linux's dm clones every bio; a bio
    /// that lands whole on one leg is here sent down itself: no clone, no
    /// remaining count, no second end. It comes back up through the
    /// context's reap, which finds it in one of
    /// [`BioDriver::lower_contexts`]. Default: `None`.
    fn route<'q>(
        &self,
        _q: &'q mut Self::Queue,
        _op: crate::bio::Op,
        _offset_bytes: u64,
        _len_bytes: u64,
    ) -> Option<Routed<'q>> {
        None
    }

    /// A routed bio (`op`, `len_bytes` at `offset_bytes` of this device,
    /// routed with `cookie`) failed below with `status`: true to have it
    /// mapped again ([`BioDriver::submit_bio`], from the next poll: a
    /// mirror's read, once the failed leg is marked), false to end it
    /// with the error. Default: false.
    fn routed_error(
        &self,
        _q: &mut Self::Queue,
        _cookie: u64,
        _op: crate::bio::Op,
        _offset_bytes: u64,
        _len_bytes: u64,
        _status: Status,
    ) -> bool {
        false
    }

    /// Call `f` with every lower context a bio was routed to and may still
    /// be in (including one taken out of the table, until its routed bios
    /// were taken back up: see [`crate::Context::routed_ready`]).
    fn lower_contexts(&self, _q: &mut Self::Queue, _f: &mut dyn FnMut(&mut dyn Lower)) {}

    /// Issue what was submitted since the last call (the caller's unplug:
    /// the lower contexts' plugs).
    fn unplug(&self, q: &mut Self::Queue);

    /// Reap the lower devices and end the bios whose clones have all
    /// ended. Returns how many bios it ended. Never blocks.
    fn poll(&self, q: &mut Self::Queue, ends: &mut BioEnds<'_>) -> usize;

    /// The device's limits (stacked from the lower devices').
    fn limits(&self) -> QueueLimits;

    /// The device's features.
    fn features(&self) -> Features;

    /// True if every bio ends without the context polling (each lower
    /// device completes from a thread of its own and forwards its
    /// notifies): a waiting context may then sleep until notified.
    fn completes_async(&self) -> bool {
        false
    }

    /// True if a lower device has interrupt lines (a polled device that
    /// a context may sleep on): the context's completion fd then watches
    /// the lines the queues forward ([`BioQueueSetup::irq_lines`]).
    fn has_irq_lines(&self) -> bool {
        false
    }

    /// What is allocated in a range (as [`Driver::extents`]). Default:
    /// not known.
    fn extents(
        &self,
        _offset_bytes: u64,
        _len_bytes: u64,
        _out: &mut Vec<Extent>,
    ) -> Result<bool, Error> {
        Ok(false)
    }
}

/// The type-erased bio queue a context holds.
pub(crate) trait BioQueueOps: Send {
    fn routes(&self) -> bool;
    fn route(
        &mut self,
        op: crate::bio::Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<Routed<'_>>;
    fn routed_error(
        &mut self,
        cookie: u64,
        op: crate::bio::Op,
        offset_bytes: u64,
        len_bytes: u64,
        status: Status,
    ) -> bool;
    fn lower_contexts(&mut self, f: &mut dyn FnMut(&mut dyn Lower));
    fn submit_bio(&mut self, bio: BioRef<'_>, ends: &mut BioEnds<'_>);
    fn unplug(&mut self);
    fn poll(&mut self, ends: &mut BioEnds<'_>) -> usize;
}

struct BoundQueue<B: BioDriver> {
    driver: std::sync::Arc<B>,
    q: B::Queue,
}

impl<B: BioDriver> BioQueueOps for BoundQueue<B> {
    fn routes(&self) -> bool {
        self.driver.routes()
    }
    #[inline]
    fn route(
        &mut self,
        op: crate::bio::Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<Routed<'_>> {
        self.driver.route(&mut self.q, op, offset_bytes, len_bytes)
    }
    fn routed_error(
        &mut self,
        cookie: u64,
        op: crate::bio::Op,
        offset_bytes: u64,
        len_bytes: u64,
        status: Status,
    ) -> bool {
        self.driver
            .routed_error(&mut self.q, cookie, op, offset_bytes, len_bytes, status)
    }
    #[inline]
    fn lower_contexts(&mut self, f: &mut dyn FnMut(&mut dyn Lower)) {
        self.driver.lower_contexts(&mut self.q, f)
    }
    #[inline]
    fn submit_bio(&mut self, bio: BioRef<'_>, ends: &mut BioEnds<'_>) {
        self.driver.submit_bio(&mut self.q, bio, ends)
    }
    #[inline]
    fn unplug(&mut self) {
        self.driver.unplug(&mut self.q)
    }
    #[inline]
    fn poll(&mut self, ends: &mut BioEnds<'_>) -> usize {
        self.driver.poll(&mut self.q, ends)
    }
}

/// What the device keeps of its bio-based driver: opens a context's queue.
pub(crate) trait BioOpener: Send + Sync {
    fn open(&self, setup: BioQueueSetup) -> Result<Box<dyn BioQueueOps>, Error>;
}

impl<B: BioDriver> BioOpener for std::sync::Arc<B> {
    fn open(&self, setup: BioQueueSetup) -> Result<Box<dyn BioQueueOps>, Error> {
        let q = self.open_queue(setup)?;
        Ok(Box::new(BoundQueue {
            driver: self.clone(),
            q,
        }))
    }
}

/// The request driver a bio-based device is made with: its hardware
/// queues hold no requests (every bio goes to [`BioDriver::submit_bio`]),
/// but they keep what a context waits on: the notify, the interrupt
/// lines.
pub(crate) struct NoRequests<B: BioDriver> {
    pub(crate) driver: std::sync::Arc<B>,
}

pub(crate) struct NoQueue;

impl<B: BioDriver> Driver for NoRequests<B> {
    type HwQueue = NoQueue;

    fn init_hw_queue(&self, _setup: HwQueueSetup<'_>) -> Result<NoQueue, Error> {
        Ok(NoQueue)
    }

    fn queue_rq(
        &self,
        _hq: &mut NoQueue,
        rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        // Unreachable: a bio-based context builds no request. Should one
        // come, it ends with an error rather than vanish.
        debug_assert!(false, "a request on a bio-based device");
        done.complete(rq, Status::IoError);
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut NoQueue) {}

    fn poll(&self, _hq: &mut NoQueue, _done: &mut Completions<'_>) -> usize {
        0
    }

    fn limits(&self) -> QueueLimits {
        self.driver.limits()
    }

    fn features(&self) -> Features {
        self.driver.features()
    }

    fn completes_async(&self) -> bool {
        self.driver.completes_async()
    }

    fn extents(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        out: &mut Vec<Extent>,
    ) -> Result<bool, Error> {
        self.driver.extents(offset_bytes, len_bytes, out)
    }
}
