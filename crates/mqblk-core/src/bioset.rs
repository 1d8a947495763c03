//! The bio set: a context's preallocated slots for bios in flight (Linux
//! `struct bio_set`, a mempool of bios).
//!
//! A bio moved into the layer on submit lives in one slot of its context's
//! bio set until its completion is reaped; requests chain slots together
//! when bios merge. The set is sized when the context is created and never
//! grows, so the per-I/O path allocates nothing; when it is empty, the
//! submitter is pushed back until completions free slots.
//!
//! Like a mempool's reserve (Linux keeps one preallocated `flush_rq` per
//! hardware queue, and `bio_split` draws from a bio set with a reserve),
//! [`RESERVED`] slots, past the caller's, are kept for the bios the layer
//! makes for itself: the flush request of a flush sequence and the pieces
//! of a split bio, which take them first. A caller's bios never take them.
//! Without it, caller bios waiting in a flush sequence could fill every
//! slot and leave none for the flush they wait for: nothing in flight
//! would ever free one.

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::task::Waker;

use crate::bio::{Bio, Op};
use crate::error::Status;
use crate::slots::RawSlots;

/// Slots only the layer's own bios take ([`BioSet::insert`]). One is
/// enough: the layer issues one of its own at a time per context (one
/// flush request at a time; the pieces of a bio one after the other), and
/// each of them holds its slot only while its request is out, so a wait
/// for the slot always has a request in flight to reap.
pub(crate) const RESERVED: usize = 1;

/// How the completion of a slot's bio is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// To the bio's `end_io` or to the closure given to `poll`.
    Callback,
    /// A blocking call or a future waits on the slot itself.
    Waiter,
    /// The future that waited was dropped: drop the bio when it completes.
    Orphan,
    /// A piece of a split parent (`bio.private` is the parent's slot).
    Child,
    /// A bounced piece of a parent (`bio.private` is the parent's slot).
    Bounce,
    /// A flush the layer issued for its flush queue.
    FlushInternal,
    /// A bio of a bio-based device above, routed here whole
    /// (`crate::bio_based::BioDriver::route`): it goes back up to slot
    /// `up` of the context above when it ends, never to a callback here.
    Routed,
    /// A clone in a slot of a bio-based driver's clone set above
    /// (`crate::clone_set::CloneSet`), put into a request here itself: it
    /// goes back to its set when the request ends. Never a slot of a
    /// context's own set.
    Clone,
}

/// The life of a bio slot, asserted on both sides of every transition
/// (as a request's `RqState` is).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotState {
    /// On the free list.
    Free,
    /// Holds a bio the context is working on: validating, throttled, in a
    /// flush sequence, or a split parent whose pieces are out.
    Owned,
    /// Chained into a request: the request's holder (plug, queue, driver)
    /// reads it; the context does not touch it until the request ends.
    InFlight,
    /// Ended, with its status: waiting for its waiter or callback.
    Ended,
}

/// One slot.
#[derive(Debug)]
pub struct BioNode {
    pub(crate) bio: Option<Bio>,
    pub(crate) next: Option<NonNull<BioNode>>,
    /// Outstanding pieces of a split parent, plus one while it is being cut.
    pub(crate) aux: u32,
    pub(crate) delivery: Delivery,
    pub(crate) state: SlotState,
    /// The bio was split: its pieces, not it, went to requests.
    pub(crate) parent: bool,
    /// Flush-sequence stages still to run (see `flush`).
    pub(crate) stages: u8,
    /// A routed bio's slot on the device above ([`Delivery::Routed`]).
    pub(crate) up: u32,
}

/// A fixed set of bio slots with a free list.
#[derive(Debug)]
pub(crate) struct BioSet {
    // Raw slots: addresses are stable for the set's life, however the
    // context moves. Each node is in an UnsafeCell because a request owning
    // it may read it from another thread while the owner context touches
    // other nodes.
    nodes: RawSlots<UnsafeCell<BioNode>>,
    // Beside the nodes, not in them: only futures use wakers, and a node
    // stays within the descriptor budget without one.
    wakers: Box<[Option<Waker>]>,
    /// Free slots for anyone: indexes below `first_reserved`.
    free: Vec<u32>,
    /// Free slots of the reserve: indexes from `first_reserved` on.
    reserve: Vec<u32>,
    first_reserved: u32,
    /// Bytes the slots span, from the first.
    span: usize,
}

impl BioSet {
    /// A set of `capacity` slots for a caller's bios, plus [`RESERVED`].
    pub(crate) fn new(capacity: u32) -> BioSet {
        let first_reserved = capacity;
        let capacity = capacity + RESERVED as u32;
        let nodes = RawSlots::new(
            (0..capacity)
                .map(|_| {
                    UnsafeCell::new(BioNode {
                        bio: None,
                        next: None,
                        aux: 0,
                        delivery: Delivery::Callback,
                        state: SlotState::Free,
                        parent: false,
                        stages: 0,
                        up: 0,
                    })
                })
                .collect(),
        );
        BioSet {
            nodes,
            wakers: (0..capacity).map(|_| None).collect(),
            free: (0..first_reserved).rev().collect(),
            reserve: (first_reserved..capacity).rev().collect(),
            first_reserved,
            span: capacity as usize * std::mem::size_of::<UnsafeCell<BioNode>>(),
        }
    }

    /// The slot index of a node of this set.
    #[inline]
    pub(crate) fn index_of(&self, node: NonNull<BioNode>) -> u32 {
        let base = self.nodes.base() as usize;
        let i = (node.as_ptr() as usize - base) / std::mem::size_of::<UnsafeCell<BioNode>>();
        debug_assert!(i < self.nodes.len());
        i as u32
    }

    /// Never free the slots: a request that was never given back may still
    /// point into them (see `Context`'s drop).
    pub(crate) fn leak(self) {
        std::mem::forget(self.wakers);
        self.nodes.leak();
    }

    /// True if `node` is one of this set's slots (not a slot of a context
    /// above, routed here: [`Delivery::Routed`]'s cheaper form, where the
    /// slot above itself goes into a request here).
    #[inline(always)]
    pub(crate) fn owns(&self, node: NonNull<BioNode>) -> bool {
        let base = self.nodes.base() as usize;
        let at = node.as_ptr() as usize;
        at.wrapping_sub(base) < self.span
    }

    /// True once slot `index`'s bio has ended.
    #[inline]
    pub(crate) fn is_ended(&self, index: u32) -> bool {
        self.node(index).state == SlotState::Ended
    }

    /// Slots for a caller's bios (the reserve apart).
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.first_reserved as usize
    }

    /// Free slots a caller's bio may take.
    #[inline]
    pub(crate) fn available(&self) -> usize {
        self.free.len()
    }

    /// Free slots a bio the layer makes may take: the reserve too.
    #[inline]
    pub(crate) fn available_to_layer(&self) -> usize {
        self.free.len() + self.reserve.len()
    }

    /// Store a bio the layer made (a piece, a flush request) in a free
    /// slot, of the reserve first; gives it back if none is free.
    #[allow(clippy::result_large_err)]
    #[inline]
    pub(crate) fn insert(&mut self, bio: Bio, delivery: Delivery) -> Result<NonNull<BioNode>, Bio> {
        let index = match self.reserve.pop() {
            Some(index) => index,
            None => match self.free.pop() {
                Some(index) => index,
                None => return Err(bio),
            },
        };
        self.fill(index, bio, delivery);
        Ok(self.node_ptr(index))
    }

    /// Store a caller's `bio` in a free slot outside the reserve, giving
    /// the slot's index; gives the bio back if there is none.
    #[allow(clippy::result_large_err)]
    #[inline]
    pub(crate) fn insert_index(&mut self, bio: Bio, delivery: Delivery) -> Result<u32, Bio> {
        let Some(index) = self.free.pop() else {
            return Err(bio);
        };
        self.fill(index, bio, delivery);
        Ok(index)
    }

    /// Put `bio` in free slot `index`, just taken off a free list.
    #[inline(always)]
    fn fill(&mut self, index: u32, mut bio: Bio, delivery: Delivery) {
        // The status describes one submission: a bio that failed before
        // starts clean.
        bio.status = Status::Ok;
        let node = self.node_mut(index);
        debug_assert!(
            node.bio.as_ref().is_none_or(|b| b.segments().is_empty()),
            "bio slot {index} handed out twice"
        );
        node.bio = Some(bio);
        node.next = None;
        node.aux = 0;
        node.delivery = delivery;
        debug_assert_eq!(node.state, SlotState::Free, "bio slot {index}");
        node.state = SlotState::Owned;
        node.parent = false;
        node.stages = 0;
    }

    /// Take a free slot for a bio built in place: the slot's kept bio
    /// (blank, see [`BioSet::release_keep`]) or a new one, set up by
    /// `fill`. `fill` comes back, unused, if the set is full.
    #[inline]
    pub(crate) fn insert_with<F: FnOnce(&mut Bio)>(
        &mut self,
        delivery: Delivery,
        fill: F,
    ) -> Result<u32, F> {
        let Some(index) = self.free.pop() else {
            return Err(fill);
        };
        let node = self.node_mut(index);
        debug_assert_eq!(node.state, SlotState::Free, "bio slot {index}");
        let bio = node.bio.get_or_insert_with(|| Bio::at(Op::Read, 0));
        debug_assert!(bio.segments().is_empty(), "bio slot {index} kept buffers");
        fill(bio);
        bio.status = Status::Ok;
        node.next = None;
        node.aux = 0;
        node.delivery = delivery;
        node.state = SlotState::Owned;
        node.parent = false;
        node.stages = 0;
        Ok(index)
    }

    /// Free slot `index`, keeping its bio, blank, for the next
    /// [`BioSet::insert_with`]: a bio delivered and let go costs no move
    /// and no drop.
    #[inline(always)]
    pub(crate) fn release_keep(&mut self, index: u32) {
        let node = self.node_mut(index);
        debug_assert_ne!(node.state, SlotState::Free, "bio slot {index} freed twice");
        // Only bios delivered to a callback come here: no waiter ever set
        // this slot's waker.
        debug_assert_eq!(node.delivery, Delivery::Callback, "bio slot {index}");
        node.state = SlotState::Free;
        if let Some(bio) = node.bio.as_mut() {
            bio.blank();
        }
        node.next = None;
        debug_assert!(self.wakers[index as usize].is_none(), "bio slot {index}");
        debug_assert!(
            index < self.first_reserved,
            "bio slot {index} is the layer's"
        );
        debug_assert!(
            self.free.len() < self.nodes.len(),
            "bio slot {index} freed twice"
        );
        self.free.push(index);
    }

    /// Prepare an ended slot, still holding its bio, for another submission.
    #[inline]
    pub(crate) fn reuse(&mut self, index: u32) {
        let node = self.node_mut(index);
        debug_assert_eq!(node.state, SlotState::Ended, "bio slot {index} reused");
        if let Some(bio) = node.bio.as_mut() {
            bio.status = Status::Ok;
        } else {
            debug_assert!(false, "bio slot {index} reused without its bio");
        }
        node.state = SlotState::Owned;
        node.next = None;
        node.aux = 0;
        node.delivery = Delivery::Callback;
        node.parent = false;
        node.stages = 0;
    }

    /// Take a free slot (outside the reserve) for a bio routed from slot
    /// `up` of the device above: the bio is swapped in from `from`, which
    /// gets the slot's kept blank bio (or nothing) in exchange, so nothing
    /// is dropped or allocated. `None`, with `from` untouched, if no slot
    /// is free.
    #[inline]
    pub(crate) fn insert_routed(&mut self, from: &mut Option<Bio>, up: u32) -> Option<u32> {
        let index = self.free.pop()?;
        let node = self.node_mut(index);
        debug_assert_eq!(node.state, SlotState::Free, "bio slot {index}");
        debug_assert!(
            node.bio.as_ref().is_none_or(|b| b.segments().is_empty()),
            "bio slot {index} handed out twice"
        );
        std::mem::swap(&mut node.bio, from);
        if let Some(bio) = node.bio.as_mut() {
            bio.status = Status::Ok;
        }
        node.next = None;
        node.aux = 0;
        node.delivery = Delivery::Routed;
        node.state = SlotState::Owned;
        node.parent = false;
        node.stages = 0;
        node.up = up;
        Some(index)
    }

    /// Give the ended routed bio of slot `index` back up, into `to` (the
    /// slot above, which holds what [`BioSet::insert_routed`] left it),
    /// and free the slot, which keeps that in exchange. Returns the slot
    /// above.
    #[inline]
    pub(crate) fn take_routed(&mut self, index: u32, to: &mut Option<Bio>) -> u32 {
        let node = self.node_mut(index);
        debug_assert_eq!(node.state, SlotState::Ended, "bio slot {index}");
        debug_assert_eq!(node.delivery, Delivery::Routed, "bio slot {index}");
        std::mem::swap(&mut node.bio, to);
        // What the slot gets back is the blank bio (or nothing) it gave.
        debug_assert!(
            node.bio.as_ref().is_none_or(|b| b.segments().is_empty()),
            "bio slot {index} got a bio with buffers back"
        );
        node.state = SlotState::Free;
        node.next = None;
        let up = node.up;
        debug_assert!(
            self.free.len() < self.nodes.len(),
            "bio slot {index} freed twice"
        );
        self.free.push(index);
        up
    }

    /// Free slot `index`, returning its bio (if still there).
    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> Option<Bio> {
        let node = self.node_mut(index);
        debug_assert_ne!(node.state, SlotState::Free, "bio slot {index} freed twice");
        node.state = SlotState::Free;
        let bio = node.bio.take();
        node.next = None;
        self.wakers[index as usize] = None;
        debug_assert!(
            self.available_to_layer() < self.nodes.len(),
            "bio slot {index} freed twice"
        );
        if index < self.first_reserved {
            self.free.push(index);
        } else {
            self.reserve.push(index);
        }
        bio
    }

    /// A slot the context owns right now: free, or ended and back from its
    /// request. Never call this for a slot still chained to a live request.
    #[inline]
    pub(crate) fn node(&self, index: u32) -> &BioNode {
        // SAFETY: callers only name slots that no request holds (free, or
        // ended after completion came back to this context), so no other
        // thread reads it; &self excludes a writer here.
        unsafe { &*UnsafeCell::raw_get(self.nodes.ptr(index as usize).as_ptr()) }
    }

    /// The bio in slot `index`, which must hold one (see `node`).
    #[inline]
    pub(crate) fn bio(&self, index: u32) -> &Bio {
        self.node(index).bio.as_ref().expect("slot holds a bio")
    }

    /// A raw pointer to slot `index` (for chaining into requests).
    #[inline]
    pub(crate) fn node_ptr(&self, index: u32) -> NonNull<BioNode> {
        self.nodes.ptr(index as usize).cast()
    }

    /// Mutable access to a slot the context owns right now (see `node`).
    #[inline]
    pub(crate) fn node_mut(&mut self, index: u32) -> &mut BioNode {
        // SAFETY: as in `node`; &mut self makes this the only access.
        unsafe { &mut *UnsafeCell::raw_get(self.nodes.ptr(index as usize).as_ptr()) }
    }

    /// Record the end of a user bio; returns how it must be delivered.
    #[inline]
    pub(crate) fn end(&mut self, index: u32, status: Status) -> Delivery {
        let node = self.node_mut(index);
        debug_assert_ne!(node.state, SlotState::Ended, "bio slot {index} ended twice");
        debug_assert_ne!(
            node.state,
            SlotState::Free,
            "bio slot {index} ended while free"
        );
        node.state = SlotState::Ended;
        if let Some(bio) = node.bio.as_mut() {
            bio.status = status;
        }
        let delivery = node.delivery;
        // Only a waiter (a future) leaves a waker in its slot.
        if delivery == Delivery::Waiter {
            if let Some(w) = self.wakers[index as usize].take() {
                w.wake();
            }
        }
        delivery
    }
}

impl BioSet {
    /// The waker of slot `index` (futures).
    #[inline]
    pub(crate) fn waker_mut(&mut self, index: u32) -> &mut Option<Waker> {
        &mut self.wakers[index as usize]
    }
}
