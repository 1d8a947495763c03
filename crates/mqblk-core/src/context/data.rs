//! The data stage (Linux `blk_mq_submit_bio` after the checks): a bio
//! that fits joins a waiting request (`blk-merge.c`) or becomes a request of
//! its own; one that does not is cut into pieces (`split`), each bounced
//! through an aligned buffer where its memory breaks the device's
//! alignment (`bounce`).
//!
//! Above requests, which it queues, and below submission, which sends
//! bios here once they are checked, admitted and sequenced.

use std::ptr::NonNull;

use super::state::{feat, CtxState};
use super::wait::{Bound, Step};
use crate::bio::{Bio, BioFlags, Op};
use crate::bioset::{BioNode, BioSet, Delivery};
use crate::bounce;
use crate::error::Status;
use crate::flush;
use crate::merge;
use crate::queue::DeviceInner;
use crate::split::{self, Fit, Piece};
use crate::stats::{bump, StatGroup};

/// The slot index a slot of the context above has here, when it went
/// into a request here itself (`CtxState::take_routed_node`): none.
pub(super) const ROUTED_NODE: u32 = u32::MAX;

impl CtxState {
    /// The data stage of a plain read or write that the fused check
    /// admitted (valid, fits, no flags), in slot `idx` at `node`: merge it
    /// or make it a request.
    #[inline(always)]
    pub(super) fn submit_plain(&mut self, dev: &DeviceInner, idx: u32, node: NonNull<BioNode>) {
        if !self.on(feat::NOMERGES) && self.try_merge(dev, node, BioFlags::NONE) {
            return;
        }
        self.queue_data::<false>(dev, idx, node);
    }

    /// [`CtxState::submit_plain`] of a slot of the context above, routed
    /// here whole (`take_routed_node`), with the merge and the request
    /// built inline: the route's function stands where the caller's
    /// `submit_node` does for a plain bio, and the data stage inlines
    /// into it as into that.
    #[inline(always)]
    pub(super) fn submit_routed_plain(&mut self, dev: &DeviceInner, node: NonNull<BioNode>) {
        if !self.on(feat::NOMERGES) && self.try_merge_inline(dev, node, BioFlags::NONE) {
            return;
        }
        self.queue_data::<true>(dev, ROUTED_NODE, node);
    }

    /// Send the data of bio `idx` on: merge it, make it a request, or split
    /// (and bounce) it.
    #[inline]
    pub(super) fn submit_data(&mut self, dev: &DeviceInner, idx: u32) {
        let node = self.bioset.node_ptr(idx);
        // SAFETY: slot `idx` is owned by this context and not in a request.
        let bio = unsafe { node.as_ref() }
            .bio
            .as_ref()
            .expect("slot holds a bio");
        let emulate_zeroes = bio.op() == Op::WriteZeroes && !dev.info.features.write_zeroes;
        if emulate_zeroes || split::fits(bio, &self.limits) == Fit::Split {
            self.split_submit(dev, idx, emulate_zeroes);
            return;
        }
        if !self.on(feat::NOMERGES) && merge::mergeable(bio) {
            let flags = flush::request_flags(bio.flags(), &dev.info.features);
            if self.try_merge(dev, node, flags) {
                return;
            }
        }
        self.queue_data::<false>(dev, idx, node);
    }

    /// Make bio `idx` a request of its own (`INLINE`: with the request
    /// built inline, see `submit_routed_plain`).
    #[inline(always)]
    fn queue_data<const INLINE: bool>(
        &mut self,
        dev: &DeviceInner,
        idx: u32,
        node: NonNull<BioNode>,
    ) {
        if self.on(feat::ASYNC_DEPTH) {
            // SAFETY: slot `idx` is owned by this context, in no request.
            let write = unsafe { node.as_ref() }
                .bio
                .as_ref()
                .is_some_and(|b| b.op().is_write());
            if write {
                self.wait_async_room(dev);
            }
        }
        let status = if INLINE {
            self.queue_bio_inline(dev, node)
        } else {
            self.queue_bio(dev, node)
        };
        if !status.is_ok() {
            bump(&self.stats.errors, 1);
            if idx == ROUTED_NODE {
                // A slot of the context above, or a clone: it ends there.
                self.foreign_done(node, status);
            } else {
                self.data_done(idx, status);
            }
        }
    }

    /// Try to join a waiting request: the plug's newest, then (with
    /// `nomerges=0`) the last few in the software queue.
    #[inline]
    fn try_merge(&mut self, dev: &DeviceInner, node: NonNull<BioNode>, flags: BioFlags) -> bool {
        self.try_merge_inline(dev, node, flags)
    }

    /// [`CtxState::try_merge`], always inlined (see `submit_routed_plain`).
    #[inline(always)]
    fn try_merge_inline(
        &mut self,
        dev: &DeviceInner,
        node: NonNull<BioNode>,
        flags: BioFlags,
    ) -> bool {
        // SAFETY: the slot is owned by this context and not in a request.
        let bio = unsafe { node.as_ref() }
            .bio
            .as_ref()
            .expect("slot holds a bio");
        let _legacy = dev.lock.hold();
        let lim = &self.limits;
        let candidates = if self.on(feat::MERGE_PLUG_ONLY) { 1 } else { 8 };
        let target = match self.plug.last_mut() {
            Some(rq) => merge::can_merge(rq, bio, flags, lim).map(|side| (rq, side)),
            None if self.sw.is_empty() => None,
            None => self
                .sw
                .iter_mut_newest(candidates)
                .find_map(|rq| merge::can_merge(rq, bio, flags, lim).map(|side| (rq, side))),
        };
        let Some((rq, side)) = target else {
            return false;
        };
        let group = StatGroup::of(bio.op());
        merge::attach(
            rq,
            node,
            bio.sector(),
            bio.len_bytes(),
            bio.segments().len(),
            side,
        );
        bump(&self.stats.merges[group as usize], 1);
        // Without partitions or a trace, one bit test of the feature word.
        if self.feat & (feat::PARTS | feat::TRACE) != 0 {
            if let Some(p) = &self.parts {
                p.merged(rq.part, group);
            }
            if let Some(t) = self.trace.as_mut() {
                t.merge(bio, side == merge::Merge::Front);
            }
        }
        true
    }

    /// Cut bio `idx` into pieces that fit (bouncing misaligned ones) and
    /// submit each; the parent ends once, after all of them.
    fn split_submit(&mut self, dev: &DeviceInner, idx: u32, emulate_zeroes: bool) {
        split::parent::begin(self.bioset.node_mut(idx));
        let parent = self.bioset.node_ptr(idx);
        let lim = self.limits;
        let zero = emulate_zeroes.then_some(&dev.zero_buf);
        // SAFETY: the parent slot is owned by this context and in no
        // request until its last piece ends; `issue_piece` reaches it only
        // through the bio set, to read its bio (bouncing) and to count its
        // pieces, and never writes the bio.
        let (pieces, status) =
            unsafe { split::cut(parent, &lim, zero, |p| self.issue_piece(dev, idx, p)) };
        if pieces > 1 {
            bump(&self.stats.splits, 1);
        }
        self.child_done(idx, status);
    }

    /// Queue one piece of parent `idx`: in a slot of its own, with an
    /// aligned buffer if it is bounced.
    fn issue_piece(&mut self, dev: &DeviceInner, idx: u32, piece: Piece) -> Status {
        let mut child = piece.bio;
        child.private = u64::from(idx);
        if piece.offset_in_parent > 0 && self.on(feat::TRACE) {
            self.trace_split(idx, child.sector());
        }
        let delivery = if piece.bounce {
            // SAFETY: the parent slot is owned by this context (it is being
            // cut); this shared view ends before any slot changes.
            let parent = unsafe { self.bioset.node_ptr(idx).as_ref() }
                .bio
                .as_ref()
                .expect("parent holds its bio");
            if !self.bounced_once {
                self.bounced_once = true;
                report_first_bounce(dev, parent);
            }
            let len = child.len_bytes() as usize;
            let mut buf = self.bounce.get(len);
            if child.op() == Op::Write {
                let n = bounce::copy_from_bio(
                    parent,
                    piece.offset_in_parent,
                    &mut buf.as_mut_slice()[..len],
                );
                bump(&self.stats.bytes_copied, n);
            }
            child.set_len_bytes(0);
            child.push_segment(buf, 0, len as u32);
            Delivery::Bounce
        } else {
            Delivery::Child
        };
        let cnode = match self.insert_internal(dev, child, delivery) {
            Ok(n) => n,
            Err(child) => {
                // No slot can be freed: end the parent with what was
                // issued so far, failed, rather than spin.
                if let Some(buf) = (delivery == Delivery::Bounce)
                    .then(|| child.into_buffers().next())
                    .flatten()
                {
                    self.bounce.put(buf);
                }
                return Status::Resource;
            }
        };
        split::parent::add_piece(self.bioset.node_mut(idx));
        let status = self.queue_bio(dev, cnode);
        if !status.is_ok() {
            // The piece got no request: it ends here, failed, as if it had
            // gone out (its parent counted it).
            let cidx = self.bioset.index_of(cnode);
            self.end_bio(cidx, status);
        }
        status
    }

    /// blktrace's X: parent `idx` was cut, its next piece starting at
    /// `at_sector` (Linux `trace_block_split`).
    #[cold]
    fn trace_split(&mut self, idx: u32, at_sector: u64) {
        if let (Some(t), Some(parent)) = (self.trace.as_mut(), self.bioset.node(idx).bio.as_ref()) {
            t.split(parent, at_sector);
        }
    }

    /// Put a bio the layer made (a piece, a flush) in a slot, the bio
    /// set's reserve included: when none is free, reap this context's own
    /// completions to free one. The reserve holds only such bios, each
    /// with its request out, so a wait here always has one to reap; the
    /// bio comes back only if that request outlived its timeout and the
    /// grace, and the caller fails the bio it serves.
    #[allow(clippy::result_large_err)]
    pub(super) fn insert_internal(
        &mut self,
        dev: &DeviceInner,
        bio: Bio,
        delivery: Delivery,
    ) -> std::result::Result<NonNull<BioNode>, Bio> {
        match self.bioset.insert(bio, delivery) {
            Ok(n) => Ok(n),
            Err(bio) => {
                self.wait_room(dev, BioSet::available_to_layer);
                self.bioset.insert(bio, delivery)
            }
        }
    }

    /// Wait (bounded by the request timeouts) until a slot for a caller's
    /// bio is free, or nothing is left in flight to free one.
    pub(super) fn make_room(&mut self, dev: &DeviceInner) {
        self.wait_room(dev, BioSet::available);
    }

    /// Wait (bounded by the request timeouts) until `free` counts a slot,
    /// or nothing is left in flight to free one.
    fn wait_room(&mut self, dev: &DeviceInner, free: fn(&BioSet) -> usize) {
        self.reap_until(dev, Bound::Timeout, |st, dev| {
            if free(&st.bioset) > 0 || st.in_flight == 0 {
                return Step::Done;
            }
            st.flush_plug(dev);
            st.reap(dev);
            if free(&st.bioset) > 0 {
                Step::Done
            } else {
                Step::Again
            }
        });
    }

    /// Under a scheduler with an `async_depth`, wait until the writes
    /// holding scheduler tags on this hardware queue are fewer than it
    /// (Linux's `dd_limit_depth`): the rest of the tags, and of the
    /// driver's depth when it is set below that, stay for reads. Contexts
    /// that check at once may each go one over; completions bring the
    /// count back. Bounded by the request timeout: past it the write goes
    /// over the soft limit rather than wait longer.
    #[cold]
    fn wait_async_room(&mut self, dev: &DeviceInner) {
        use std::sync::atomic::Ordering::Relaxed;
        self.reap_until(dev, Bound::Timeout, |st, dev| {
            let hq = &dev.hw_queues[st.hwq as usize];
            if hq.async_writes.load(Relaxed) < st.async_depth {
                return Step::Done;
            }
            st.flush_plug(dev);
            st.reap(dev);
            if hq.async_writes.load(Relaxed) < st.async_depth {
                Step::Done
            } else {
                Step::Again
            }
        });
    }
}

/// Say once per context that a bio is bounced, and why: the copy is
/// silent otherwise, and it costs what zero-copy I/O is for.
#[cold]
fn report_first_bounce(dev: &DeviceInner, bio: &Bio) {
    let dma = dev.info.limits.dma_alignment as usize;
    let seg = bio
        .segments()
        .iter()
        .find(|s| (s.addr() | s.len() as usize) & dma != 0);
    let (addr, len) = seg.map_or((0, 0), |s| (s.addr(), s.len()));
    eprintln!(
        "mqblk: {}: {} at offset {}: buffer segment at {addr:#x} of {len} bytes is not aligned to {} bytes; it is copied through a bounce buffer (counted in bytes_copied). Buffers from Device::alloc_buf avoid the copy; bounce=0 refuses such I/O instead. Said once per context.",
        dev.info.name,
        bio.op(),
        bio.offset_bytes(),
        dma + 1
    );
}
