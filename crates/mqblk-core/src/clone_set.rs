//! The clone slots of a bio-based driver (Linux: the `bio_set` a dm device
//! takes its clones from, `alloc_tio`): a clone of a bio, built in a slot
//! the driver owns, goes into a request of a lower context itself, as a
//! bio routed whole does ([`crate::bio_based::Lower::route_bio`]): no slot
//! of the lower context is taken, no callback runs there, and the clone
//! comes back to its set when its request ends
//! ([`CloneSet::take_ended`]). A write sent to every leg of a mirror costs
//! a request per leg and nothing above it.
//!
//! Beside the bio-based stage: the driver sends and takes clones in the
//! submitting context, and the lower context only lends its requests.

use std::cell::UnsafeCell;
use std::ptr::NonNull;

use crate::bio::{Bio, Op};
use crate::bio_based::{BioRef, Lower};
use crate::bioset::{BioNode, Delivery, SlotState};
use crate::error::Status;
use crate::slots::RawSlots;

/// Slots for clone bios, owned by one context's bio-based driver queue
/// ([`crate::bio_based::BioDriver::Queue`]), which must outlive every
/// lower context its clones went to, or drain them first (a queue keeps
/// its set after its lower contexts, which drain when dropped).
pub struct CloneSet {
    nodes: RawSlots<UnsafeCell<BioNode>>,
    free: Vec<u32>,
    /// Clones that ended below, as a lower context hands them back.
    ended: Vec<(NonNull<BioNode>, Status)>,
    /// Bytes the slots span, from the first.
    span: usize,
    in_flight: u32,
}

// SAFETY: the set is owned by one driver queue, itself owned by one
// context, and reached only through `&mut`; the nodes it lends to a lower
// context's request are touched by whoever holds that request, one at a
// time, as a context's own bio slots are (`BioSet`).
unsafe impl Send for CloneSet {}

impl std::fmt::Debug for CloneSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloneSet")
            .field("slots", &self.nodes.len())
            .field("in_flight", &self.in_flight)
            .finish()
    }
}

impl CloneSet {
    /// A set of `slots` clone slots. Control plane.
    pub fn new(slots: u32) -> CloneSet {
        let nodes = RawSlots::new(
            (0..slots)
                .map(|_| {
                    UnsafeCell::new(BioNode {
                        bio: Some(Bio::at(Op::Read, 0)),
                        next: None,
                        aux: 0,
                        delivery: Delivery::Clone,
                        state: SlotState::Owned,
                        parent: false,
                        stages: 0,
                        up: 0,
                    })
                })
                .collect(),
        );
        CloneSet {
            nodes,
            free: (0..slots).rev().collect(),
            ended: Vec::with_capacity(slots as usize),
            span: slots as usize * std::mem::size_of::<UnsafeCell<BioNode>>(),
            in_flight: 0,
        }
    }

    /// Clones in flight below.
    #[inline]
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Slot `i`, while this set holds it (free, or back from below).
    #[inline(always)]
    fn slot_mut(&mut self, i: usize) -> &mut BioNode {
        // SAFETY: the slot lives as long as the set; `&mut self` and the
        // callers' word that no request holds the slot make this the only
        // access.
        unsafe { &mut *UnsafeCell::raw_get(self.nodes.ptr(i).as_ptr()) }
    }

    #[inline(always)]
    fn owns(&self, node: NonNull<BioNode>) -> bool {
        let at = node.as_ptr() as usize;
        at.wrapping_sub(self.nodes.base() as usize) < self.span
    }

    /// Send a clone of `len_bytes` of `parent` from `offset_bytes` into
    /// it, at `new_offset_bytes` of `lower`, into a request there itself;
    /// `private` comes back with its end ([`CloneSet::take_ended`]). A
    /// plain read or write only. False, with nothing sent, if no slot is
    /// free or `lower` cannot take the clone so (it has admission, a
    /// trace or a driver of bios, its gate moved, or its fused check does
    /// not admit the clone whole): send it the usual way then.
    ///
    /// # Safety
    ///
    /// As [`BioRef::clone_range`]: the parent must not end before this
    /// clone has been taken back ([`CloneSet::take_ended`]), and clones in
    /// flight must not overlap unless they only read the memory. `lower`
    /// must be a context this set's owner keeps until the clone is taken
    /// back, or drains before it drops it.
    #[inline]
    pub unsafe fn send(
        &mut self,
        parent: &BioRef<'_>,
        offset_bytes: u64,
        len_bytes: u64,
        new_offset_bytes: u64,
        private: u64,
        lower: &mut dyn Lower,
    ) -> bool {
        debug_assert!(matches!(parent.bio().op(), Op::Read | Op::Write));
        let Some(&i) = self.free.last() else {
            return false;
        };
        let node = self.nodes.ptr(i as usize).cast::<BioNode>();
        {
            // Slot `i` is on the free list: no request holds it.
            let n = self.slot_mut(i as usize);
            debug_assert_eq!(n.state, SlotState::Owned);
            debug_assert_eq!(n.delivery, Delivery::Clone);
            let b = n.bio.as_mut().expect("a clone slot keeps its bio");
            // SAFETY: the caller's promise, passed on; `b` is blank (made
            // so when its last clone was taken back).
            unsafe { parent.clone_range_into(b, offset_bytes, len_bytes, new_offset_bytes) };
            b.private = private;
        }
        // SAFETY: the slot is ours, in no request, holding its bio; it
        // stays allocated until it comes back (`take_ended`, or this set
        // leaks if it never does), and nothing else touches it meanwhile.
        if unsafe { lower.route_clone(node, new_offset_bytes, self.nodes.len()) } {
            self.free.pop();
            self.in_flight += 1;
            return true;
        }
        // Not sent: the slot is still ours alone.
        let n = self.slot_mut(i as usize);
        n.bio.as_mut().expect("a clone slot keeps its bio").blank();
        false
    }

    /// Take back the clones that ended in `lower`: `f(private, status)`
    /// for each, once, after its slot is free again (its view of the
    /// parent's memory let go). Returns how many.
    #[inline]
    pub fn take_ended(&mut self, lower: &mut dyn Lower, mut f: impl FnMut(u64, Status)) -> usize {
        lower.take_clones(&mut self.ended);
        let n = self.ended.len();
        for k in 0..n {
            let (node, status) = self.ended[k];
            debug_assert!(self.owns(node), "a clone of another set");
            // A node of another set (a lower context shared between sets)
            // gives an index past the end, which `slot_mut` refuses.
            let i = (node.as_ptr() as usize - self.nodes.base() as usize)
                / std::mem::size_of::<UnsafeCell<BioNode>>();
            // The clone came back from the request that held it: the slot
            // is ours again.
            let slot = self.slot_mut(i);
            debug_assert_ne!(slot.state, SlotState::Free);
            // In flight once it went into a request (or still owned, if
            // none could be had for it there).
            slot.state = SlotState::Owned;
            slot.next = None;
            let b = slot.bio.as_mut().expect("a clone slot keeps its bio");
            let private = b.private;
            b.blank();
            debug_assert!(self.free.len() < self.free.capacity());
            self.free.push(i as u32);
            debug_assert!(self.in_flight > 0);
            self.in_flight -= 1;
            f(private, status);
        }
        self.ended.clear();
        n
    }
}

impl Drop for CloneSet {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            // A lower context dropped with clones it never gave back (a
            // driver that kept a request past every deadline): its
            // requests may still point here.
            let nodes = std::mem::replace(&mut self.nodes, RawSlots::new(Box::new([])));
            nodes.leak();
        }
    }
}
