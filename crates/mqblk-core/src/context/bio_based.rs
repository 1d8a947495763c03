//! The bio-based stage (Linux `__submit_bio` calling a disk's
//! `fops->submit_bio`): a bio checked, admitted and sequenced goes to the
//! device's bio-based driver in the submitting context, instead of the
//! data stage. No request, tag or software queue of this device is used:
//! the driver sends clones to lower devices, whose own pipelines make the
//! requests.
//!
//! Below submission, which sends bios here; above the end, where the
//! bios the driver ends are ended.

use std::ptr::NonNull;

use super::state::{feat, CtxState};
use crate::bio::Op;
use crate::bio_based::{BioEnds, BioRef};
use crate::bioset::BioNode;
use crate::queue::DeviceInner;
use crate::stats::bump;

impl CtxState {
    /// Hand bio `idx` to the bio-based driver. It stays in its slot until
    /// the driver ends it.
    #[inline]
    pub(super) fn submit_bio_based(&mut self, dev: &DeviceInner, idx: u32) {
        self.start_bio_based(dev, idx);
        self.hand_bio_based(dev, idx);
    }

    /// Count bio `idx` in flight, from now.
    #[inline]
    fn start_bio_based(&mut self, dev: &DeviceInner, idx: u32) {
        let op = self.bioset.bio(idx).op();
        self.start_bio_based_as(dev, idx, op);
    }

    /// [`CtxState::start_bio_based`] of a bio of operation `op`.
    #[inline(always)]
    fn start_bio_based_as(&mut self, dev: &DeviceInner, idx: u32, op: Op) {
        if self.on(feat::IOSTATS) {
            let now = self.batch_start(dev);
            self.bio_io[idx as usize].start_ns = now;
            bump(&self.stats.in_flight[op.is_write() as usize], 1);
        }
        self.in_flight += 1;
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Relaxed);
    }

    /// Bio `idx` in slot `node`, a plain read or write (`op`, `len_bytes`
    /// at `offset_bytes`) the fused check admitted (and a window shifted),
    /// on a context whose driver routes: counted in flight, then routed
    /// whole to a lower context, or else handed to the driver.
    #[inline(always)]
    pub(super) fn submit_routable(
        &mut self,
        dev: &DeviceInner,
        idx: u32,
        node: NonNull<BioNode>,
        io: (Op, u64, u64),
    ) {
        self.start_bio_based_as(dev, idx, io.0);
        if self.route(dev, idx, node, io) {
            self.routed_one();
        } else {
            self.hand_to_driver(dev, idx);
        }
    }

    /// Hand bio `idx`, in flight, to the driver: routed whole to a lower
    /// context if it is a plain read or write the driver routes, or else
    /// to its `submit_bio`.
    #[inline]
    fn hand_bio_based(&mut self, dev: &DeviceInner, idx: u32) {
        if self.routes {
            let plain = self
                .bioset
                .node(idx)
                .bio
                .as_ref()
                .filter(|b| (b.op() as u8) < 2 && b.flags().bits() == 0)
                .map(|b| (b.op(), b.offset_bytes(), b.len_bytes()));
            if let Some(io) = plain {
                if self.route(dev, idx, self.bioset.node_ptr(idx), io) {
                    self.routed_one();
                    return;
                }
            }
        }
        self.hand_to_driver(dev, idx);
    }

    /// A bio went down routed: unplugged with the rest of the batch.
    #[inline]
    fn routed_one(&mut self) {
        if self.on(feat::PLUG) {
            self.bio_plugged = true;
        } else {
            self.unplug_bio_based_now();
        }
    }

    /// Hand bio `idx`, in flight, to the driver's `submit_bio`.
    #[inline]
    fn hand_to_driver(&mut self, dev: &DeviceInner, idx: u32) {
        let plug = self.on(feat::PLUG);
        let CtxState {
            bio_q,
            bioset,
            bio_ended,
            bio_requeued,
            ..
        } = self;
        let q = bio_q.as_mut().expect("a bio-based context has its queue");
        let bio = bioset
            .node_mut(idx)
            .bio
            .as_mut()
            .expect("a submitted slot holds its bio");
        q.submit_bio(
            BioRef::new(bio, idx),
            &mut BioEnds::new(bio_ended, bio_requeued),
        );
        if plug {
            self.bio_plugged = true;
        } else {
            q.unplug();
            self.batch_ns = 0;
        }
        if !self.bio_ended.is_empty() {
            self.end_bio_based(dev);
        }
    }

    #[inline]
    fn unplug_bio_based_now(&mut self) {
        if let Some(q) = self.bio_q.as_mut() {
            q.unplug();
        }
        self.batch_ns = 0;
    }

    /// Send bio `idx` (in slot `node`: `len_bytes` of `op` at
    /// `offset_bytes`) down whole, as it is but for its offset, to the
    /// lower context the driver routes it to, if it routes it: into a
    /// request there itself, or else into a slot there, in exchange for
    /// what that slot kept, so the bio moves but nothing is copied,
    /// dropped or allocated. Its slot here stays taken, and in flight,
    /// until the reap takes the bio back up ([`CtxState::take_routed_up`]).
    /// The bio is a plain read or write. False if it was not routed: the
    /// driver does not route it, or a lower context has no free slot.
    #[inline(always)]
    fn route(
        &mut self,
        dev: &DeviceInner,
        idx: u32,
        node: NonNull<BioNode>,
        (op, from, len): (Op, u64, u64),
    ) -> bool {
        let CtxState {
            bio_q,
            bioset,
            bio_io,
            routed_out,
            ..
        } = self;
        let Some(q) = bio_q.as_mut() else {
            return false;
        };
        let Some(r) = q.route(op, from, len) else {
            return false;
        };
        let (lower, at) = (r.lower, r.offset_bytes);
        let cap = bioset.capacity();
        // SAFETY: `node` is slot `idx` of this context, owned (in no
        // request) and holding its bio. The bio set's slots stay where
        // they are for its life, and the slot stays in flight here until
        // the lower context hands it back up (`take_routed_up`): this
        // context's drop drains every bio in flight before the set is
        // freed (or leaks the set if they do not end), so no lower context
        // holds the slot past the set's life; and this context touches the
        // slot only once it is back up.
        let sent = unsafe { lower.route_bio(node, idx, cap, at, dev.devnum) };
        let e = &mut bio_io[idx as usize];
        e.cookie = r.cookie;
        if !sent {
            return false;
        }
        e.from_bytes = from;
        *routed_out += 1;
        true
    }

    /// Hand the bios the driver requeued to it again (from a poll or a
    /// wait, never from its own call).
    pub(super) fn requeue_bio_based(&mut self, dev: &DeviceInner) {
        // Those requeued anew while these are handed wait for the next
        // pass (the list holds each slot once, so it never grows).
        let n = self.bio_requeued.len();
        for i in 0..n {
            let idx = self.bio_requeued[i];
            self.hand_bio_based(dev, idx);
        }
        self.bio_requeued.drain(..n);
        // Handed from a poll or a wait: nobody may be left to unplug them.
        self.flush_plug(dev);
    }
}
