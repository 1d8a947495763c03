//! Submission (Linux `submit_bio_noacct` and `blk_mq_submit_bio`'s front):
//! the gate a bio passes when the queue was frozen or reconfigured, the
//! checks against the device (and the window of a remapped view), the
//! throttle and io.max admission, and the flush sequence of a flush or
//! FUA bio (`blk-flush.c`), before the data stage takes the bio.
//!
//! Also the deferred work completions make ready (the next stage of a
//! flush sequence, a throttled bio whose time came): it runs here, from a
//! submitting path, never from the reap.

use super::state::{feat, CtxState};
use super::wait::{Bound, Step};
use crate::bio::{Bio, BioFlags, Op};
use crate::bioset::Delivery;
use crate::clock;
use crate::error::{Error, Status};
use crate::flush::{self, FlushMachine};
use crate::queue::DeviceInner;
use crate::stats::bump;
use crate::throttle::Admit;

impl CtxState {
    /// Put `bio` in a slot and send it down the pipeline. Gives it back
    /// when every slot holds a completion the caller has not polled.
    #[allow(clippy::result_large_err)]
    #[inline]
    pub(super) fn submit(
        &mut self,
        dev: &DeviceInner,
        bio: Bio,
        delivery: Delivery,
    ) -> std::result::Result<u32, Bio> {
        if self.bioset.available() == 0 {
            self.make_room(dev);
            if self.bioset.available() == 0 {
                return Err(bio);
            }
        }
        let idx = self.bioset.insert_index(bio, delivery)?;
        self.submit_node(dev, idx);
        Ok(idx)
    }

    /// [`CtxState::submit`] of a bio built in place in a free slot by
    /// `fill` (no move of the bio); `fill` comes back, unused, when every
    /// slot holds a completion the caller has not polled.
    #[inline]
    pub(super) fn submit_with<F: FnOnce(&mut Bio)>(
        &mut self,
        dev: &DeviceInner,
        fill: F,
    ) -> std::result::Result<(), F> {
        if self.bioset.available() == 0 {
            self.make_room(dev);
        }
        let idx = self.bioset.insert_with(Delivery::Callback, fill)?;
        self.submit_node(dev, idx);
        Ok(())
    }

    /// Validate the bio in slot `idx` (just filled or reused, owned by this
    /// context, in no request) and send it down the pipeline. The common
    /// bio (a plain read or write that is valid and fits, on a context with
    /// no admission or trace) is checked in one pass, against the window
    /// on a view, and, once admitted, goes straight to its request; any
    /// other takes the full checks.
    #[inline(always)]
    pub(super) fn submit_node(&mut self, dev: &DeviceInner, idx: u32) {
        // One function per kind of device: a bio-based device's route and
        // a request-based device's data stage each inline whole into
        // their own.
        if self.on(feat::BIO_BASED) {
            self.submit_node_as::<true>(dev, idx);
        } else {
            self.submit_node_as::<false>(dev, idx);
        }
    }

    /// [`CtxState::submit_node`] on a bio-based device (`BIO`) or a
    /// request-based one.
    #[inline(never)]
    pub(super) fn submit_node_as<const BIO: bool>(&mut self, dev: &DeviceInner, idx: u32) {
        if dev.gate.load(std::sync::atomic::Ordering::Acquire) != self.gate_seen
            && !self.pass_gate(dev)
        {
            bump(&self.stats.bios, 1);
            bump(&self.stats.errors, 1);
            if self.on(feat::TRACE) {
                self.trace_queue(idx);
            }
            if self.on(feat::WINDOW) {
                // `finish` undoes the window's shift: make it first, so
                // the bio comes back at the offset it was given.
                self.shift(idx, false);
            }
            self.finish(idx, Status::Resource);
            return;
        }
        bump(&self.stats.bios, 1);
        // The slot is taken once, before the remap writes it, and handed
        // to the data stage: nothing it loaded is loaded again.
        let node = self.bioset.node_ptr(idx);
        let bio = self.bioset.node_mut(idx).bio.as_mut();
        let bio = bio.expect("slot holds a bio");
        let path = self.feat & (feat::ADMIT | feat::TRACE | feat::BIO_BASED);
        if !BIO && path == 0 && self.fast.admits(bio) {
            // On a view the fused check saw the window (its capacity, its
            // read-only flag), so the remap is one add: of 0 without a
            // window, which costs less than a branch around it. No
            // overflow: the window lies inside its lower device.
            bio.set_offset_bytes(bio.offset_bytes() + self.window_start_bytes);
            self.submit_plain(dev, idx, node);
            return;
        }
        if BIO && path == feat::BIO_BASED && self.routes && self.fast.admits(bio) {
            // A plain bio of a bio-based device that routes: shifted by a
            // window as above, then routed whole to a lower context if
            // its driver routes it.
            let from = bio.offset_bytes() + self.window_start_bytes;
            bio.set_offset_bytes(from);
            let io = (bio.op(), from, bio.len_bytes());
            self.submit_routable(dev, idx, node, io);
            return;
        }
        self.submit_other(dev, idx);
    }

    /// A bio on a context with admission or a trace, or one the fused
    /// check does not admit. Admission still takes the fused check.
    #[inline(never)]
    fn submit_other(&mut self, dev: &DeviceInner, idx: u32) {
        if self.fast.admits(self.bioset.bio(idx)) {
            // Here for admission or the trace (the fused mask). The Q (and
            // a window's A) names the bio before its shift.
            if self.on(feat::TRACE) {
                self.trace_queue(idx);
            }
            if self.on(feat::WINDOW) {
                self.shift(idx, false);
            }
            if !(self.on(feat::ADMIT) && self.admit(dev, idx)) {
                if self.on(feat::BIO_BASED) {
                    self.submit_bio_based(dev, idx);
                } else {
                    self.submit_plain(dev, idx, self.bioset.node_ptr(idx));
                }
            }
            return;
        }
        self.submit_checked(dev, idx);
    }

    /// blktrace's Q for bio `idx`, at the sector of the device it goes
    /// down (Linux `trace_block_bio_queue`). Before it, the A that maps it
    /// here: from a stacked device's sector (`Context::submit_remapped`),
    /// or on a window from the window's own sector (Linux's
    /// `blk_partition_remap`; the bio itself is shifted later, once
    /// checked).
    #[cold]
    #[inline(never)]
    fn trace_queue(&mut self, idx: u32) {
        let Some(rec) = self.trace.as_mut() else {
            return;
        };
        let bio = self.bioset.bio(idx);
        let mut sector = bio.sector();
        if let Some((from, from_sector)) = self.remap_from.take() {
            rec.remap(bio, sector, from, from_sector);
        }
        if let Some(w) = &self.window {
            if bio.op() != Op::Flush {
                let from = sector;
                sector = from.wrapping_add(w.start_bytes >> crate::op::SECTOR_SHIFT);
                rec.remap(bio, sector, w.devnum, from);
            }
        }
        rec.queue(bio, sector);
    }

    /// The full checks: the device's limits and features, the window,
    /// admission, then the bio's flush sequence or its data stage.
    fn submit_checked(&mut self, dev: &DeviceInner, idx: u32) {
        let (op, flags, mut status) = {
            let bio = self.bioset.bio(idx);
            (
                bio.op(),
                bio.flags(),
                dev.info.validate(bio, self.on(feat::BOUNCE)),
            )
        };
        // Without a window or a trace, one bit test of the feature word.
        if self.feat & (feat::WINDOW | feat::TRACE) != 0 {
            if self.on(feat::TRACE) {
                self.trace_queue(idx);
            }
            if self.on(feat::WINDOW) {
                // The window's check is the one that counts.
                status = self.remap(idx);
            }
        }
        if !status.is_ok() {
            bump(&self.stats.errors, 1);
            self.finish(idx, status);
            return;
        }
        if self.on(feat::ADMIT) && op != Op::Flush && self.admit(dev, idx) {
            return;
        }
        self.issue(dev, idx, op, flags);
    }

    /// A user bio on a remapped view that the fused check did not admit
    /// (a flush, a discard, one to split, a bad one): check it against the
    /// window (the device's own check, just made, saw a window offset),
    /// then aim it at the lower device.
    #[cold]
    #[inline(never)]
    fn remap(&mut self, idx: u32) -> Status {
        let Some(w) = &self.window else {
            return Status::Ok;
        };
        let bio = self.bioset.bio(idx);
        let status = w.info.validate(bio, self.on(feat::BOUNCE));
        self.shift(idx, false);
        status
    }

    /// Charge bio `idx` to the throttle and the io.max buckets; true if it
    /// must wait (it is queued on `throttled`, oldest first).
    #[inline(never)]
    fn admit(&mut self, dev: &DeviceInner, idx: u32) -> bool {
        let now = clock::now_ns();
        let bio = self.bioset.bio(idx);
        let mut at = now;
        if let Some(t) = self.throttle.as_mut() {
            if let Admit::At(t) = t.admit(bio, now) {
                at = t;
            }
        }
        for m in [&*dev.io_max, self.group.0.io_max()] {
            if m.is_limited() {
                at = at.max(m.charge(bio.op(), bio.len_bytes(), now));
            }
        }
        if at > now {
            debug_assert!(self.throttled.len() < self.throttled.capacity());
            self.throttled.push_back((at, idx));
            return true;
        }
        false
    }

    /// Send bio `idx`, validated and admitted, down the pipeline: its flush
    /// sequence, or straight to its data stage.
    #[inline]
    fn issue(&mut self, dev: &DeviceInner, idx: u32, op: Op, flags: BioFlags) {
        if self.on(feat::BIO_BASED) && op == Op::Flush {
            // A bio-based driver sends a flush to each lower device, whose
            // own flush machinery sequences it.
            self.submit_bio_based(dev, idx);
            return;
        }
        if op == Op::Flush || flags.bits() & (BioFlags::FUA.bits() | BioFlags::PREFLUSH.bits()) != 0
        {
            let stages = flush::policy(op, flags, &dev.info.features);
            if stages != flush::DATA {
                self.bioset.node_mut(idx).stages = stages;
                self.advance(dev, idx);
                return;
            }
        }
        self.submit_stage(dev, idx);
    }

    /// The stage after the checks and the flush sequence: the data stage,
    /// or a bio-based device's driver.
    #[inline]
    fn submit_stage(&mut self, dev: &DeviceInner, idx: u32) {
        if self.on(feat::BIO_BASED) {
            self.submit_bio_based(dev, idx);
        } else {
            self.submit_data(dev, idx);
        }
    }

    /// Issue the throttled bios whose time has come, oldest first.
    fn release_throttled(&mut self, dev: &DeviceInner) {
        if self.throttled.is_empty() {
            return;
        }
        let now = clock::now_ns();
        let mut released = false;
        while let Some(&(at, idx)) = self.throttled.front() {
            if at > now {
                break;
            }
            self.throttled.pop_front();
            let bio = self.bioset.node(idx).bio.as_ref();
            let (op, flags) = bio.map_or((Op::Flush, BioFlags::NONE), |b| (b.op(), b.flags()));
            self.issue(dev, idx, op, flags);
            released = true;
        }
        if released {
            // Released from a poll or a wait, not a submission: nobody may
            // be left to unplug them.
            self.flush_plug(dev);
        }
    }

    /// The queue was frozen or reconfigured: drain while frozen (our own
    /// in-flight I/O must finish for the freeze to complete), then take a
    /// fresh copy of the settings. False if the queue stayed frozen past
    /// the request timeout plus the grace period: the bio at the gate then
    /// fails with [`Status::Resource`] rather than wait without end.
    #[cold]
    fn pass_gate(&mut self, dev: &DeviceInner) -> bool {
        use std::sync::atomic::Ordering::Acquire;
        let frozen = |dev: &DeviceInner| dev.gate.load(Acquire) & crate::queue::GATE_FROZEN != 0;
        let thawed = self.reap_until(dev, Bound::Timeout, |st, dev| {
            if !frozen(dev) {
                return Step::Done;
            }
            st.flush_plug(dev);
            // Tags taken in a batch but not used yet count as in use.
            st.tags.drain_cache(&mut st.tag_cache);
            st.reap(dev);
            st.process_deferred(dev);
            if frozen(dev) {
                Step::Again
            } else {
                Step::Done
            }
        });
        if thawed {
            self.refresh(dev);
        }
        thawed
    }

    /// Run the next stage of bio `idx`'s flush sequence.
    fn advance(&mut self, dev: &DeviceInner, idx: u32) {
        match FlushMachine::next_step(&mut self.bioset.node_mut(idx).stages) {
            flush::Step::Flush => {
                if self.flush.join(idx) {
                    self.issue_flush(dev);
                }
            }
            flush::Step::Data => self.submit_stage(dev, idx),
            flush::Step::End => self.finish(idx, Status::Ok),
        }
    }

    /// Issue the flush request the flush machine asked for.
    fn issue_flush(&mut self, dev: &DeviceInner) {
        self.flush.issued();
        let node = match self.insert_internal(dev, Bio::flush(), Delivery::FlushInternal) {
            Ok(n) => n,
            Err(_) => {
                // The bio set's reserve keeps a slot for this request, and
                // only the layer's own bios, each with its request out,
                // take it: it frees once that request ends. Only one that
                // outlived its timeout and the grace leaves it taken; the
                // waiters then fail, typed, instead of spinning.
                self.flush_done(Status::Resource);
                return;
            }
        };
        let idx = self.bioset.index_of(node);
        if self.on(feat::BIO_BASED) {
            self.submit_bio_based(dev, idx);
            return;
        }
        let status = self.queue_bio(dev, node);
        if !status.is_ok() {
            self.end_bio(idx, status);
        }
    }

    /// Stages that completions made ready; run here, never from the reap,
    /// so no completion recurses into submission.
    pub(super) fn process_deferred(&mut self, dev: &DeviceInner) {
        self.release_throttled(dev);
        if !self.bio_requeued.is_empty() {
            self.requeue_bio_based(dev);
        }
        // Bounded: each pass either issues a stage or ends a bio, and a
        // sequence has at most three stages.
        while self.flush.has_work() {
            while self.flush.has_work() {
                let mut ready = std::mem::take(&mut self.seq_scratch);
                if self.flush.take_work(&mut ready) {
                    self.issue_flush(dev);
                }
                for &idx in &ready {
                    self.advance(dev, idx);
                }
                ready.clear();
                self.seq_scratch = ready;
            }
            // Sequence stages go straight to dispatch, as Linux's flush
            // machinery does: nobody may be left to unplug them. Dispatch
            // can complete them inline and make the next stage ready.
            self.flush_plug(dev);
        }
    }

    /// The error for a bio given back because every slot holds a
    /// completion the caller has not polled.
    #[cold]
    pub(super) fn unpolled_error(&self, dev: &DeviceInner, bio: &Bio) -> Error {
        Error::Unpolled {
            device: dev.info.name.clone(),
            op: bio.op(),
            offset_bytes: bio.offset_bytes(),
            slots: self.bioset.capacity(),
        }
    }

    /// Put `node`, a slot of the context above holding a plain read or
    /// write routed here whole, into a request here itself, at
    /// `offset_bytes`: no slot here, no move. Only on a context with
    /// nothing between a bio and its request (no admission, trace or
    /// driver of bios) and for a bio the fused check admits as one
    /// request; false otherwise, with the slot untouched. `up_slots` is
    /// the bio set size above, which bounds how many come here.
    ///
    /// # Safety
    ///
    /// `node` is a slot of the one context above whose driver owns this
    /// context (or, `CLONE`, of that driver's clone set), owned
    /// by it, in no request, holding its bio; it stays allocated until it
    /// comes back up (`routed_nodes`, `clone_ends`), and nothing else
    /// touches it until then.
    #[inline(always)]
    pub(super) unsafe fn take_routed_node<const CLONE: bool>(
        &mut self,
        dev: &DeviceInner,
        mut node: std::ptr::NonNull<crate::bioset::BioNode>,
        offset_bytes: u64,
        up_slots: usize,
    ) -> bool {
        if self.feat & (feat::ADMIT | feat::TRACE | feat::BIO_BASED) != 0
            || dev.gate.load(std::sync::atomic::Ordering::Acquire) != self.gate_seen
        {
            return false;
        }
        // SAFETY: the caller's promise: the slot is ours to use until it
        // goes back up, and nothing else touches it.
        let n = unsafe { node.as_mut() };
        let Some(bio) = n.bio.as_mut() else {
            return false;
        };
        let from = bio.offset_bytes();
        // The fused check against this device (a window's too), at the
        // offset here.
        bio.set_offset_bytes(offset_bytes);
        if !self.fast.admits(bio) {
            bio.set_offset_bytes(from);
            return false;
        }
        bio.set_offset_bytes(offset_bytes + self.window_start_bytes);
        // The list it comes back on holds every slot the set above could
        // have here: no allocation once warm.
        debug_assert_eq!(CLONE, n.delivery == Delivery::Clone);
        let back = if CLONE {
            &mut self.clone_ends
        } else {
            &mut self.routed_nodes
        };
        if back.capacity() < up_slots {
            back.reserve(up_slots - back.len());
        }
        bump(&self.stats.bios, 1);
        self.submit_routed_plain(dev, node);
        true
    }

    /// Take a bio routed from slot `up` of the device numbered `above`
    /// into a free slot here, at `offset_bytes`, and submit it. False, with
    /// `bio` untouched, if no slot is free (the bio is then mapped and
    /// cloned above: a clone waits for room, a routed bio does not).
    #[inline]
    pub(super) fn take_routed_in(
        &mut self,
        dev: &DeviceInner,
        bio: &mut Option<crate::bio::Bio>,
        up: u32,
        offset_bytes: u64,
        above: crate::blktrace::DevNum,
    ) -> bool {
        let Some(idx) = self.bioset.insert_routed(bio, up) else {
            return false;
        };
        let b = self.bioset.node_mut(idx).bio.as_mut();
        let b = b.expect("a routed slot holds its bio");
        let from = b.sector();
        b.set_offset_bytes(offset_bytes);
        // Traced here, or the gate moved (a trace may have started): the
        // trace's A names where the bio came from.
        let gate = dev.gate.load(std::sync::atomic::Ordering::Relaxed);
        let noted = self.on(feat::TRACE) || gate != self.gate_seen;
        if noted {
            self.remap_from = Some((above, from));
        }
        self.submit_node(dev, idx);
        if noted {
            self.remap_from = None;
        }
        self.kick_fd(dev);
        true
    }
}
