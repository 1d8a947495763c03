//! The request: one or more merged bios sent to the device as one command
//! (Linux `struct request`).
//!
//! A request is preallocated per tag (see [`crate::tag`]) and owned, while in
//! use, through a unique [`RqRef`]: whoever holds the `RqRef` (the plug, a
//! software queue, a hardware queue's dispatch list, a driver, a completion
//! batch) is the only one touching it, so no lock guards it. Its state moves
//! `Idle → Queued → InFlight → Complete → Idle`, asserted on both sides of
//! every transition.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::bio::{Bio, BioFlags, Op, Segment};
use crate::bioset::BioNode;
use crate::error::Status;
use crate::limits::SECTOR_SHIFT;

/// Life-cycle state of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RqState {
    /// The tag is free.
    Idle = 0,
    /// Built from a bio; waiting in a plug, software queue or dispatch list.
    Queued = 1,
    /// Handed to the driver.
    InFlight = 2,
    /// The driver completed it; waiting for the owner to end its bios.
    Complete = 3,
}

impl RqState {
    fn from_u8(v: u8) -> RqState {
        match v {
            0 => RqState::Idle,
            1 => RqState::Queued,
            2 => RqState::InFlight,
            _ => RqState::Complete,
        }
    }
}

/// The context a request belongs to, as other contexts see it: where its
/// completions are routed (its remote queue) and how much it has in flight
/// (for freeze to watch). The request points at it; the context outlives
/// its requests.
pub(crate) struct RqOwner {
    pub(crate) remote: crate::sync::RemoteQueue<RqRef>,
    /// Mirror of the owner's in-flight count.
    pub(crate) in_flight: crossbeam_utils::CachePadded<std::sync::atomic::AtomicU32>,
}

/// The fields of a request that the timeout scan reads while the owner
/// works on the request. They live beside the request, not in it, so the
/// scan never forms a reference into a request someone else holds mutably.
#[derive(Debug, Default)]
pub(crate) struct RqAtomics {
    pub(crate) state: AtomicU8,
    pub(crate) hwq: std::sync::atomic::AtomicU16,
    pub(crate) deadline_ms: AtomicU64,
}

/// A request that passed its timeout while its driver still holds it
/// (Linux's "timing out command" with `BLK_EH_RESET_TIMER`): the driver
/// cannot give its memory back yet, so it has not completed, but its
/// caller may act on the timeout (stop, report, exit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overdue {
    /// The operation.
    pub op: Op,
    /// Byte offset on the device.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub len_bytes: u64,
}

impl Overdue {
    /// The request a driver holds past its deadline, as
    /// [`crate::driver::TimeoutAction::Held`] names it.
    pub fn of(rq: &Request) -> Overdue {
        Overdue {
            op: rq.op,
            offset_bytes: rq.sector << crate::op::SECTOR_SHIFT,
            len_bytes: rq.size_bytes,
        }
    }
}

/// A block request. Drivers see it through [`RqRef`].
#[derive(Debug)]
pub struct Request {
    atoms: NonNull<RqAtomics>,
    pub(crate) op: Op,
    pub(crate) flags: BioFlags,
    pub(crate) status: Status,
    pub(crate) hwq: u16,
    pub(crate) nr_bios: u16,
    pub(crate) nr_segs: u16,
    /// The submitting context's I/O priority.
    pub(crate) ioprio: crate::ioprio::IoPrio,
    /// The submitting context's group, and its weight when submitted.
    pub(crate) group: u16,
    pub(crate) weight: u16,
    /// The partition the request is counted in (`partition::NO_PART`:
    /// none).
    pub(crate) part: u16,
    pub(crate) tag: u32,
    pub(crate) sector: u64,
    pub(crate) size_bytes: u64,
    pub(crate) bio_head: Option<NonNull<BioNode>>,
    pub(crate) bio_tail: Option<NonNull<BioNode>>,
    /// The submitting context: completions are routed back to it.
    pub(crate) owner: Option<NonNull<RqOwner>>,
    pub(crate) start_ns: u64,
    /// When the driver finished it (monotonic ns), stamped only while the
    /// device is traced ([`crate::driver::Completions`]); 0 otherwise.
    pub(crate) done_ns: u64,
    driver_data: u64,
}

impl Request {
    pub(crate) fn new(tag: u32, hwq: u16, atoms: NonNull<RqAtomics>) -> Request {
        Request {
            atoms,
            op: Op::Read,
            flags: BioFlags::NONE,
            status: Status::Ok,
            hwq,
            nr_bios: 0,
            nr_segs: 0,
            ioprio: crate::ioprio::IoPrio::default(),
            group: 0,
            weight: crate::blkcg::DEFAULT_WEIGHT as u16,
            part: crate::partition::NO_PART,
            tag,
            sector: 0,
            size_bytes: 0,
            bio_head: None,
            bio_tail: None,
            owner: None,
            start_ns: 0,
            done_ns: 0,
            driver_data: 0,
        }
    }

    #[inline]
    pub(crate) fn atoms(&self) -> &RqAtomics {
        // SAFETY: atoms points into the Tags' atomics array, which lives as
        // long as the request slots and is only ever shared-borrowed.
        unsafe { self.atoms.as_ref() }
    }

    /// Current state.
    #[inline]
    pub fn state(&self) -> RqState {
        RqState::from_u8(self.atoms().state.load(Ordering::Relaxed))
    }

    /// Arm the timeout at the first dispatch: `ms` on the coarse clock, on
    /// hardware queue `hwq`. A requeued request keeps its first deadline, so
    /// the timeout bounds its whole life, however often the driver refuses
    /// it (Linux sets `rq->deadline` once, in `blk_mq_start_request`).
    #[inline]
    pub(crate) fn arm_timeout(&self, hwq: u16, ms: u64) {
        let a = self.atoms();
        a.hwq.store(hwq, Ordering::Relaxed);
        if a.deadline_ms.load(Ordering::Relaxed) == 0 {
            a.deadline_ms.store(ms, Ordering::Relaxed);
        }
    }

    /// The deadline armed at the first dispatch (0: none).
    #[inline]
    pub(crate) fn deadline_ms(&self) -> u64 {
        self.atoms().deadline_ms.load(Ordering::Relaxed)
    }

    /// Move from `from` to `to`, asserting both sides.
    #[inline]
    pub(crate) fn transition(&self, from: RqState, to: RqState) {
        debug_assert_eq!(self.state(), from, "request {} in wrong state", self.tag);
        if to == RqState::Idle {
            // The next owner arms its own deadline.
            self.atoms().deadline_ms.store(0, Ordering::Relaxed);
        }
        self.atoms().state.store(to as u8, Ordering::Release);
        debug_assert_eq!(self.state(), to);
    }

    /// The tag (index in the hardware queue's tag set).
    #[inline]
    pub fn tag(&self) -> u32 {
        self.tag
    }

    /// The hardware queue this request was mapped to.
    #[inline]
    pub fn hw_queue(&self) -> u16 {
        self.hwq
    }

    /// The operation.
    #[inline]
    pub fn op(&self) -> Op {
        self.op
    }

    /// The flags.
    #[inline]
    pub fn flags(&self) -> BioFlags {
        self.flags
    }

    /// Byte offset on the device.
    #[inline]
    pub fn offset_bytes(&self) -> u64 {
        self.sector << SECTOR_SHIFT
    }

    /// Length in bytes.
    #[inline]
    pub fn len_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Number of bios merged into this request.
    #[inline]
    pub fn nr_bios(&self) -> u16 {
        self.nr_bios
    }

    /// The I/O priority of the context that submitted it.
    #[inline]
    pub fn ioprio(&self) -> crate::ioprio::IoPrio {
        self.ioprio
    }

    /// The number of the submitting context's group (see
    /// [`crate::blkcg`]); 0 is the default group.
    #[inline]
    pub fn group(&self) -> u16 {
        self.group
    }

    /// The submitting group's weight when the request was made.
    #[inline]
    pub fn weight(&self) -> u16 {
        self.weight
    }

    /// Status set by the driver.
    #[inline]
    pub fn status(&self) -> Status {
        self.status
    }

    /// A word of driver-private data (Linux `blk_mq_rq_to_pdu`), e.g. a
    /// wire handle or a ring slot.
    #[inline]
    pub fn driver_data(&self) -> u64 {
        self.driver_data
    }

    /// Set the driver-private word.
    #[inline]
    pub fn set_driver_data(&mut self, v: u64) {
        self.driver_data = v;
    }

    /// Visit every data segment of every bio, in order.
    #[inline]
    pub fn for_each_segment(&self, mut f: impl FnMut(&Segment)) {
        let mut node = self.bio_head;
        while let Some(n) = node {
            // SAFETY: the request's bio chain is owned by the request while
            // the request is owned (RqRef is unique), and nodes stay valid
            // until the owner context ends them after completion.
            let n = unsafe { n.as_ref() };
            if let Some(bio) = n.bio.as_ref() {
                for s in bio.segments() {
                    f(s);
                }
            }
            node = n.next;
        }
    }

    /// The data of a write, segment by segment, in order: only ever read.
    /// Empty for any other operation.
    #[inline]
    pub fn write_bufs(&self) -> WriteBufs<'_> {
        WriteBufs {
            node: if self.op == Op::Write {
                self.bio_head
            } else {
                None
            },
            seg: 0,
            _rq: std::marker::PhantomData,
        }
    }

    /// The buffers of a read, segment by segment, in order, to be filled:
    /// the only `&mut` a driver ever gets, and only for memory the request
    /// owns exclusively. Empty for any other operation.
    #[inline]
    pub fn read_bufs(&mut self) -> ReadBufs<'_> {
        ReadBufs {
            node: if self.op == Op::Read {
                self.bio_head
            } else {
                None
            },
            seg: 0,
            _rq: std::marker::PhantomData,
        }
    }

    /// A bio for `offset_bytes` of another device with this request's operation,
    /// flags and data (Linux `bio_alloc_clone`): its segments view the
    /// request's memory, with the same direction, and nothing is copied. A
    /// stacked driver sends it to a lower device and completes this request
    /// from the clone's completion handler ([`crate::EndIo`]).
    ///
    /// # Safety
    ///
    /// The clone borrows memory this request owns: the caller must not give
    /// the request back (complete it, or drop its `RqRef` anywhere but into
    /// `Completions`) before the clone's completion has been reaped and the
    /// clone dropped, even on error or timeout.
    pub unsafe fn clone_bio(&self, offset_bytes: u64) -> Bio {
        let mut bio = match self.op {
            Op::Read | Op::Write => Bio::at(self.op, offset_bytes),
            Op::Flush => Bio::flush(),
            Op::Discard => Bio::discard_at(offset_bytes, self.size_bytes),
            Op::WriteZeroes => Bio::write_zeroes_at(offset_bytes, self.size_bytes),
        };
        bio.set_flags(self.flags);
        if self.op.has_data() {
            self.for_each_segment(|s| {
                // SAFETY: the view lies inside the segment's buffer, which
                // this request owns until it is given back; the caller
                // promised the clone ends first.
                let view = unsafe { s.buf().view(s.offset() as usize, s.len() as usize) };
                bio.push_segment(view, 0, s.len());
            });
        }
        bio
    }

    /// A bio for `len_bytes` of this request starting `rq_offset_bytes` into
    /// it, aimed at `offset_bytes` of another device (Linux `bio_split` of a
    /// clone): a stacked driver whose target maps pieces of one request to
    /// different lower devices (a stripe, a mirror leg, a table boundary)
    /// sends one such clone per piece. Data operations view the request's
    /// memory for that range; nothing is copied. A flush ignores the range.
    ///
    /// # Panics
    ///
    /// If the range runs past the request (a driver bug, not bad input).
    ///
    /// # Safety
    ///
    /// As for [`Request::clone_bio`]: the request must not be given back
    /// before every clone's completion has been reaped and the clone
    /// dropped, and clones of one request must cover disjoint ranges while
    /// any of them is in flight (unless every one is a write, which only
    /// reads the memory). While a clone is in flight, the request's buffers
    /// must not be reached through [`Request::read_bufs`] or
    /// [`Request::zero_range`]: fill zeros first, then send clones.
    pub unsafe fn clone_bio_range(
        &self,
        rq_offset_bytes: u64,
        len_bytes: u64,
        offset_bytes: u64,
    ) -> Bio {
        let mut bio = Bio::at(self.op, offset_bytes);
        // SAFETY: the caller's promise, passed on.
        unsafe { self.clone_bio_range_into(&mut bio, rq_offset_bytes, len_bytes, offset_bytes) };
        bio
    }

    /// [`Request::clone_bio_range`] into `bio`, a bio kept from an earlier
    /// clone ([`Bio::reuse_at`]): its segment list keeps the room it has,
    /// so a driver that reuses its clones allocates nothing per I/O.
    ///
    /// # Panics
    ///
    /// If the range runs past the request (a driver bug, not bad input).
    ///
    /// # Safety
    ///
    /// As for [`Request::clone_bio_range`]; `bio` then holds the clone.
    pub unsafe fn clone_bio_range_into(
        &self,
        bio: &mut Bio,
        rq_offset_bytes: u64,
        len_bytes: u64,
        offset_bytes: u64,
    ) {
        assert!(
            rq_offset_bytes + len_bytes <= self.size_bytes,
            "clone range {rq_offset_bytes}+{len_bytes} past a request of {} bytes",
            self.size_bytes
        );
        // A flush ignores the range (at 0, as `Bio::flush`).
        let at = if self.op == Op::Flush {
            0
        } else {
            offset_bytes
        };
        bio.reuse_at(self.op, at);
        if !self.op.has_data() && self.op != Op::Flush {
            // A discard or write-zeroes: a range, no memory.
            bio.set_len_bytes(len_bytes);
        }
        bio.set_flags(self.flags);
        if self.op.has_data() {
            let (start, end) = (rq_offset_bytes, rq_offset_bytes + len_bytes);
            let mut at = 0u64;
            self.for_each_segment(|s| {
                let (s_start, s_end) = (at, at + u64::from(s.len()));
                at = s_end;
                let (lo, hi) = (start.max(s_start), end.min(s_end));
                if lo >= hi {
                    return;
                }
                let skip = (lo - s_start) as usize;
                let n = (hi - lo) as usize;
                // SAFETY: [skip, skip + n) lies inside the segment, which
                // lies inside its buffer; the request owns that buffer until
                // it is given back, and the caller promised every clone ends
                // first and that in-flight clones do not overlap.
                let view = unsafe { s.buf().view(s.offset() as usize + skip, n) };
                bio.push_segment(view, 0, n as u32);
            });
        }
    }

    /// Fill `len_bytes` of a read's buffers, starting `rq_offset_bytes` into
    /// the request, with zeros (a hole, a `zero` target). Does nothing for
    /// other operations. Returns the bytes filled.
    pub fn zero_range(&mut self, rq_offset_bytes: u64, len_bytes: u64) -> u64 {
        let (start, end) = (rq_offset_bytes, rq_offset_bytes.saturating_add(len_bytes));
        let mut at = 0u64;
        let mut filled = 0u64;
        for buf in self.read_bufs() {
            let (b_start, b_end) = (at, at + buf.len() as u64);
            at = b_end;
            let (lo, hi) = (start.max(b_start), end.min(b_end));
            if lo < hi {
                buf[(lo - b_start) as usize..(hi - b_start) as usize].fill(0);
                filled += hi - lo;
            }
            if at >= end {
                break;
            }
        }
        filled
    }

    /// Number of data segments across all bios.
    pub fn nr_segments(&self) -> usize {
        let mut n = 0;
        self.for_each_segment(|_| n += 1);
        n
    }
}

/// Unique ownership of one in-use request. Not `Clone`: moving it moves the
/// right to touch the request.
#[derive(Debug)]
pub struct RqRef {
    ptr: NonNull<Request>,
}

// SAFETY: an RqRef is the only handle to its request (tags hand out each slot
// once); sending it sends that exclusive access, and every handoff between
// threads goes through a lock or an atomic with release/acquire ordering.
unsafe impl Send for RqRef {}

impl RqRef {
    /// # Safety
    ///
    /// The caller must own the tag of this slot (it was just allocated and
    /// has no other `RqRef`), and the slot must outlive the `RqRef`.
    #[inline]
    pub(crate) unsafe fn from_slot(ptr: NonNull<Request>) -> RqRef {
        RqRef { ptr }
    }
}

impl std::ops::Deref for RqRef {
    type Target = Request;
    #[inline]
    fn deref(&self) -> &Request {
        // SAFETY: from_slot's contract: the slot is live and this handle is
        // the only way to it.
        unsafe { self.ptr.as_ref() }
    }
}

impl std::ops::DerefMut for RqRef {
    #[inline]
    fn deref_mut(&mut self) -> &mut Request {
        // SAFETY: as for deref; &mut self makes the access exclusive.
        unsafe { self.ptr.as_mut() }
    }
}

/// Walks a request's bio chain segment by segment.
#[inline]
fn next_segment<'a>(node: &mut Option<NonNull<BioNode>>, seg: &mut usize) -> Option<&'a Segment> {
    loop {
        let n = (*node)?;
        // SAFETY: the iterator borrows the request (shared or unique) for 'a,
        // and with it the request's bio chain, whose nodes stay valid until
        // the owner context ends them after completion. Only shared
        // references to nodes are made here.
        let n: &'a BioNode = unsafe { n.as_ref() };
        if let Some(bio) = n.bio.as_ref() {
            if let Some(s) = bio.segments().get(*seg) {
                *seg += 1;
                return Some(s);
            }
        }
        *node = n.next;
        *seg = 0;
    }
}

/// The data of a write request (see [`Request::write_bufs`]).
pub struct WriteBufs<'a> {
    node: Option<NonNull<BioNode>>,
    seg: usize,
    _rq: std::marker::PhantomData<&'a Request>,
}

impl<'a> Iterator for WriteBufs<'a> {
    type Item = &'a [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a [u8]> {
        next_segment(&mut self.node, &mut self.seg).map(Segment::as_slice)
    }
}

/// The buffers of a read request (see [`Request::read_bufs`]).
pub struct ReadBufs<'a> {
    node: Option<NonNull<BioNode>>,
    seg: usize,
    _rq: std::marker::PhantomData<&'a mut Request>,
}

impl<'a> Iterator for ReadBufs<'a> {
    type Item = &'a mut [u8];

    #[inline]
    fn next(&mut self) -> Option<&'a mut [u8]> {
        let s = next_segment(&mut self.node, &mut self.seg)?;
        // SAFETY: 1. the request is a read (read_bufs checked), and every
        // buffer of a read bio is writable: callers can only build writable
        // buffers, and the layer's read-only views carry write data.
        // 2. The iterator holds the request mutably for 'a, so the driver
        // owns these bytes; each segment is yielded once, and segments of a
        // request never overlap.
        Some(unsafe { s.raw_mut_slice() })
    }
}
