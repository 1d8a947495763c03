//! The end of a request (Linux `blk_mq_end_request`, `bio_endio` and
//! `blk_account_io_done`): reaping the hardware queue, routing requests
//! that other contexts built back to them, accounting, and ending bios:
//! a piece to its split parent, a bounce piece copied back, a flush to the
//! flush machine, a user bio to its waiter or the callback list.
//!
//! Completions never submit: nothing here imports the stages above it.
//! What a completion makes ready (the next stage of a flush sequence, a
//! resubmission) waits for the submitting side to pick it up.

use super::state::{feat, CtxState};
use crate::bio_based::RoutedUp;
use crate::bioset::{Delivery, SlotState};
use crate::bounce;
use crate::clock;
use crate::error::Status;
use crate::op::{Op, SECTOR_SHIFT};
use crate::queue::DeviceInner;
use crate::request::{RqRef, RqState};
use crate::split;
use crate::stats::{bump, drop_by, LatencyRun, StatGroup, StatShard};

impl CtxState {
    /// Reap the hardware queue and the remote queue, then end completions.
    /// Timeouts are counted when their requests end (`end_request`).
    #[inline]
    pub(super) fn reap(&mut self, dev: &DeviceInner) {
        if self.on(feat::BIO_BASED) {
            self.reap_bio_based(dev);
            return;
        }
        let remote = self.shared.remote.drain_into(&mut self.done);
        if self.in_flight as usize > remote {
            let hq = &dev.hw_queues[self.hwq as usize];
            let out = {
                let _legacy = dev.lock.hold();
                match self.trace.as_mut() {
                    Some(t) if self.feat & feat::TRACE != 0 => {
                        hq.reap(&mut self.sw, &mut self.done, self.timeout_ms, t)
                    }
                    _ => hq.reap(&mut self.sw, &mut self.done, self.timeout_ms, &mut ()),
                }
            };
            if out.busy > 0 {
                bump(&self.stats.requeues, u64::from(out.busy));
            }
        }
        self.complete_done(dev);
    }

    /// A bio-based device's reap: its driver reaps the lower devices and
    /// ends the bios whose clones have all ended.
    #[inline]
    fn reap_bio_based(&mut self, dev: &DeviceInner) {
        if self.in_flight == 0 {
            return;
        }
        let CtxState {
            bio_q,
            bio_ended,
            bio_requeued,
            ..
        } = self;
        if let Some(q) = bio_q.as_mut() {
            q.poll(&mut crate::bio_based::BioEnds::new(bio_ended, bio_requeued));
        }
        if !self.bio_ended.is_empty() {
            self.end_bio_based(dev);
        }
        if self.routed_out > 0 {
            self.take_routed_up(dev);
        }
    }

    /// End the bios the bio-based driver ended: stats, then each to its
    /// waiter, its flush sequence or the callback list.
    pub(super) fn end_bio_based(&mut self, dev: &DeviceInner) {
        self.end_bio_based_as::<false>(dev);
    }

    /// [`CtxState::end_bio_based`] of the driver's list, or (`ROUTED`) of
    /// the routed bios that came back up failed (`take_routed_up` ends the
    /// others as it takes them): plain reads and writes, which no flush
    /// sequence or split waits for, so each goes straight to its end,
    /// unless its driver maps it again.
    #[inline]
    pub(super) fn end_bio_based_as<const ROUTED: bool>(&mut self, dev: &DeviceInner) {
        let now = if self.on(feat::IOSTATS) {
            clock::now_ns()
        } else {
            0
        };
        let mut run = LatencyRun::default();
        let mut ended = if ROUTED {
            std::mem::take(&mut self.routed_ended)
        } else {
            std::mem::take(&mut self.bio_ended)
        };
        for &(idx, status) in &ended {
            if ROUTED && !status.is_ok() && self.map_again(idx, status) {
                continue;
            }
            self.account_bio_end(idx, now, &mut run);
            if !status.is_ok() {
                bump(&self.stats.errors, 1);
            }
            debug_assert!(self.in_flight > 0);
            self.in_flight -= 1;
            if ROUTED {
                self.finish(idx, status);
            } else {
                self.end_bio(idx, status);
            }
        }
        ended.clear();
        if ROUTED {
            self.routed_ended = ended;
        } else {
            self.bio_ended = ended;
        }
        self.publish_bio_ends(dev, now, &mut run);
    }

    /// Account the end of bio `idx` of a bio-based device, which went to
    /// its driver at its `BioIo::start_ns` (Linux `bio_end_io_acct`): counters of
    /// this context's shard, the latency run, no clock read (`now` is the
    /// batch's).
    #[inline(always)]
    fn account_bio_end(&mut self, idx: u32, now: u64, run: &mut LatencyRun) {
        if !self.on(feat::IOSTATS) {
            return;
        }
        let bio = self.bioset.bio(idx);
        let (op, bytes) = (bio.op(), bio.len_bytes());
        let start_ns = self.bio_io[idx as usize].start_ns;
        self.account_bio_end_as(op, bytes, start_ns, now, run);
    }

    /// [`CtxState::account_bio_end`] of a bio of `bytes` of `op`, started
    /// at `start_ns`; `IOSTATS` is on.
    #[inline(always)]
    fn account_bio_end_as(
        &mut self,
        op: Op,
        bytes: u64,
        start_ns: u64,
        now: u64,
        run: &mut LatencyRun,
    ) {
        let g = StatGroup::of(op);
        let lat = now.saturating_sub(start_ns);
        let sh: &StatShard = &self.stats;
        bump(&sh.ios[g as usize], 1);
        bump(&sh.sectors[g as usize], bytes >> SECTOR_SHIFT);
        bump(&sh.nsecs[g as usize], lat);
        drop_by(&sh.in_flight[op.is_write() as usize], 1);
        run.push(&mut self.hist, g, lat);
    }

    /// After a round of bio ends: the count in flight others read, the
    /// latency run into the histogram, and the busy time.
    #[inline]
    fn publish_bio_ends(&mut self, dev: &DeviceInner, now: u64, run: &mut LatencyRun) {
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Release);
        run.flush(&mut self.hist);
        if self.on(feat::IOSTATS) {
            self.dstats(dev).update_io_ticks(now / 1_000_000, true);
        }
    }

    /// End every request in `done`: route foreign ones to their owners, and
    /// end our own (stats, bios, tags). Callbacks do not run here.
    #[inline]
    pub(super) fn complete_done(&mut self, dev: &DeviceInner) {
        if self.done.is_empty() {
            return;
        }
        let now = if self.on(feat::IOSTATS) {
            clock::now_ns()
        } else {
            0
        };
        let me = self.shared_ptr();
        let mut done = std::mem::take(&mut self.done);
        // Hardware queues whose contexts were handed completions: each is
        // notified once for the batch, not once per request (a notify
        // signals every completion fd subscribed to the queue).
        let mut routed: Option<usize> = None;
        let mut run = LatencyRun::default();
        let mut async_writes = 0u32;
        // One hold of the legacy lock (single and global modes) for the
        // batch, as the old queue lock was held over a completion run.
        let legacy = dev.lock.hold();
        for rq in done.drain(..) {
            match rq.owner {
                Some(owner) if owner != me => {
                    let hwq = rq.hwq as usize;
                    // SAFETY: a context outlives its requests (its Drop waits
                    // for all of them), so the owner's RqOwner is alive.
                    unsafe { owner.as_ref() }.remote.push(rq);
                    match routed {
                        Some(h) if h == hwq => {}
                        Some(h) => {
                            dev.hw_queues[h].notify.notify();
                            routed = Some(hwq);
                        }
                        None => routed = Some(hwq),
                    }
                }
                _ => {
                    async_writes += u32::from(self.on(feat::ASYNC_DEPTH) && rq.op.is_write());
                    self.end_request(rq, now, &mut run);
                }
            }
        }
        drop(legacy);
        if async_writes > 0 {
            dev.hw_queues[self.hwq as usize]
                .async_writes
                .fetch_sub(async_writes, std::sync::atomic::Ordering::Relaxed);
        }
        run.flush(&mut self.hist);
        if let Some(h) = routed {
            dev.hw_queues[h].notify.notify();
        }
        self.done = done;
        self.tags.put_batch(&mut self.freed_tags);
        if self.on(feat::IOSTATS) {
            self.dstats(dev).update_io_ticks(now / 1_000_000, true);
        }
    }

    #[inline]
    pub(super) fn end_request(&mut self, mut rq: RqRef, now_ns: u64, run: &mut LatencyRun) {
        debug_assert_eq!(rq.state(), RqState::Complete);
        let status = rq.status;
        if self.on(feat::IOSTATS) {
            let g = StatGroup::of(rq.op);
            let lat = now_ns.saturating_sub(rq.start_ns);
            let sh: &StatShard = &self.stats;
            bump(&sh.ios[g as usize], 1);
            bump(&sh.sectors[g as usize], rq.size_bytes >> SECTOR_SHIFT);
            bump(&sh.nsecs[g as usize], lat);
            drop_by(&sh.in_flight[rq.op.is_write() as usize], 1);
            run.push(&mut self.hist, g, lat);
            // Without partitions, one bit test of the feature word.
            if self.feat & feat::PARTS != 0 {
                if let Some(p) = &self.parts {
                    if rq.part != crate::partition::NO_PART {
                        let sectors = rq.size_bytes >> SECTOR_SHIFT;
                        p.end(rq.part, g, sectors, lat, rq.op.is_write(), now_ns);
                    }
                }
            }
        }
        if !status.is_ok() {
            bump(&self.stats.errors, 1);
            if status == Status::Timeout {
                bump(&self.stats.timeouts, 1);
            }
        }
        // Traced: the bios' C carries the driver's time.
        self.done_ns = std::mem::take(&mut rq.done_ns);
        let mut node = rq.bio_head.take();
        rq.bio_tail = None;
        while let Some(n) = node {
            // SAFETY: the request came back to its owner, so its bio chain
            // (slots of this context's bio set, or of the context above
            // that routed them here) is ours again.
            let next = unsafe { n.as_ref().next };
            node = next;
            if !self.bioset.owns(n) {
                // A slot of the context above, or a clone: back up it goes.
                self.foreign_done(n, status);
                continue;
            }
            let idx = self.bioset.index_of(n);
            let slot = self.bioset.node_mut(idx);
            debug_assert_eq!(slot.state, SlotState::InFlight);
            slot.state = SlotState::Owned;
            self.end_bio(idx, status);
        }
        self.done_ns = 0;
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Release);
        self.tags.retire(rq, &mut self.freed_tags);
    }

    /// A slot of the context above (a bio routed here whole) or of a
    /// clone set above, which went into a request here itself, ended with
    /// `status`: it waits to be taken back up.
    #[inline(always)]
    pub(super) fn foreign_done(
        &mut self,
        n: std::ptr::NonNull<crate::bioset::BioNode>,
        status: Status,
    ) {
        // SAFETY: the slot was lent to this context until it goes back up
        // (`take_routed_node`); nothing else touches it meanwhile.
        if unsafe { n.as_ref() }.delivery == Delivery::Clone {
            debug_assert!(self.clone_ends.len() < self.clone_ends.capacity());
            self.clone_ends.push((n, status));
        } else {
            self.routed_nodes.push((n, status));
        }
    }

    /// A bio's request ended: route by what the bio is.
    #[inline(always)]
    pub(super) fn end_bio(&mut self, idx: u32, status: Status) {
        let n = self.bioset.node(idx);
        match n.delivery {
            // A clone slot is never one of this set's (it ends through
            // `foreign_done`): should one be, it still ends, once.
            Delivery::Callback
            | Delivery::Waiter
            | Delivery::Orphan
            | Delivery::Routed
            | Delivery::Clone => self.data_done(idx, status),
            Delivery::Child => {
                let parent = n.bio.as_ref().map_or(0, |b| b.private as u32);
                self.bioset.remove(idx);
                self.child_done(parent, status);
            }
            Delivery::Bounce => {
                let child = self.bioset.remove(idx).expect("bounce piece holds its bio");
                let parent = child.private as u32;
                if status.is_ok() && child.op() == Op::Read {
                    let pbio = self.bioset.node(parent).bio.as_ref();
                    let pbio = pbio.expect("parent holds its bio");
                    let offset = (child.sector() - pbio.sector()) << SECTOR_SHIFT;
                    let len = child.len_bytes() as usize;
                    let n =
                        bounce::copy_to_bio(pbio, offset, &child.segments()[0].as_slice()[..len]);
                    bump(&self.stats.bytes_copied, n);
                }
                if let Some(buf) = child.into_buffers().next() {
                    self.bounce.put(buf);
                }
                self.child_done(parent, status);
            }
            Delivery::FlushInternal => {
                self.bioset.remove(idx);
                self.flush_done(status);
            }
        }
    }

    /// End a user bio for good: to its waiter, or queued for callbacks.
    #[inline(always)]
    pub(super) fn finish(&mut self, idx: u32, status: Status) {
        // Without a window or a trace, one bit test of the feature word.
        if self.feat & (feat::WINDOW | feat::TRACE) != 0 {
            if self.on(feat::TRACE) {
                self.trace_complete(idx, status);
            }
            // The window's shift undone (by 0 without a window): the
            // caller sees its own offset.
            self.shift(idx, true);
        }
        let final_status = ended_with(self.bioset.node(idx).bio.as_ref(), status);
        match self.bioset.end(idx, final_status) {
            Delivery::Waiter => {}
            Delivery::Routed => {
                // Up to the device above, which takes it from its reap.
                debug_assert!(self.routed.len() < self.routed.capacity());
                self.routed.push(idx);
            }
            _ => {
                debug_assert!(self.ended.len() < self.ended.capacity());
                self.ended.push_back(idx);
            }
        }
    }

    /// A user bio ends on a traced context: blktrace's C, at the sector
    /// its Q named, the lower device's on a window (Linux
    /// `trace_block_bio_complete`), before the window's shift is undone.
    #[cold]
    #[inline(never)]
    fn trace_complete(&mut self, idx: u32, status: Status) {
        if let (Some(t), Some(b)) = (self.trace.as_mut(), self.bioset.node(idx).bio.as_ref()) {
            t.complete(b, b.sector(), ended_with(Some(b), status), self.done_ns);
        }
    }

    /// A piece of parent `idx` ended (or the cutting did).
    pub(super) fn child_done(&mut self, idx: u32, status: Status) {
        if let Some(status) = split::parent::piece_done(self.bioset.node_mut(idx), status) {
            self.data_done(idx, status);
        }
    }

    /// The data stage of bio `idx` ended with `status`.
    #[inline(always)]
    pub(super) fn data_done(&mut self, idx: u32, status: Status) {
        if self.bioset.node(idx).stages != 0 && status.is_ok() {
            // More stages (a POSTFLUSH): run them from a submitting path.
            self.flush.stage_done(idx);
        } else {
            self.finish(idx, status);
        }
    }

    /// The running flush ended.
    pub(super) fn flush_done(&mut self, status: Status) {
        let mut failed = std::mem::take(&mut self.failed);
        self.flush
            .flush_done(status, |idx, s| failed.push((idx, s)));
        for (idx, s) in failed.drain(..) {
            self.finish(idx, s);
        }
        self.failed = failed;
    }

    /// A routed bio failed below: if its driver wants it mapped again (a
    /// mirror's read, to another leg), it is requeued, still in flight,
    /// with its error cleared; true then.
    #[cold]
    fn map_again(&mut self, idx: u32, status: Status) -> bool {
        let cookie = self.bio_io[idx as usize].cookie;
        let Some(bio) = self.bioset.node_mut(idx).bio.as_mut() else {
            return false;
        };
        let (op, off, len) = (bio.op(), bio.offset_bytes(), bio.len_bytes());
        let Some(q) = self.bio_q.as_mut() else {
            return false;
        };
        if !q.routed_error(cookie, op, off, len, status) {
            return false;
        }
        bio.status = Status::Ok;
        debug_assert!(self.bio_requeued.len() < self.bio_requeued.capacity());
        self.bio_requeued.push(idx);
        true
    }

    /// Take back up the routed bios that ended in the lower contexts, each
    /// into its slot here, and end them: at their offset here again,
    /// accounted and ended. One that failed below waits on the routed
    /// list for its driver's word (`end_bio_based_as`): mapped again, or
    /// ended with its error.
    #[inline]
    pub(super) fn take_routed_up(&mut self, dev: &DeviceInner) {
        let CtxState {
            bio_q,
            bioset,
            routed_ended,
            ..
        } = self;
        let Some(q) = bio_q.as_mut() else {
            return;
        };
        let mut up = RoutedUp {
            bioset,
            ended: routed_ended,
        };
        q.lower_contexts(&mut |lower| lower.take_up(&mut up));
        if self.routed_ended.is_empty() {
            return;
        }
        let now = if self.on(feat::IOSTATS) {
            clock::now_ns()
        } else {
            0
        };
        let mut run = LatencyRun::default();
        let mut back = std::mem::take(&mut self.routed_ended);
        let mut failed = false;
        for &(slot, status) in &back {
            failed |= !self.routed_back(slot, status, now, &mut run);
        }
        self.publish_bio_ends(dev, now, &mut run);
        if failed {
            back.retain(|(_, s)| !s.is_ok());
            self.routed_ended = back;
            self.end_bio_based_as::<true>(dev);
        } else {
            back.clear();
            self.routed_ended = back;
        }
    }

    /// Hand the routed bios that ended here back up, into the context
    /// above (`up`): a slot of it that went into a request here is its
    /// own again; a bio moved into a slot here moves back into its slot.
    #[inline]
    pub(super) fn give_routed_up(&mut self, up: &mut RoutedUp<'_>) {
        for &i in &self.routed {
            let node = self.bioset.node(i);
            let slot = node.up;
            let status = node.bio.as_ref().map_or(Status::Ok, |b| b.status());
            let to = &mut up.bioset.node_mut(slot).bio;
            self.bioset.take_routed(i, to);
            up.back(slot, status);
        }
        self.routed.clear();
        for &(n, status) in &self.routed_nodes {
            let slot = up.bioset.index_of(n);
            let node = up.bioset.node_mut(slot);
            debug_assert_eq!(node.state, SlotState::InFlight);
            node.state = SlotState::Owned;
            node.next = None;
            up.back(slot, status);
        }
        self.routed_nodes.clear();
    }

    /// Routed bio of slot `slot`, back in its slot, ended below with
    /// `status`: at its offset here again, and ended if `status` is good
    /// (true); a failed one (false) is left for its driver's word.
    #[inline(always)]
    fn routed_back(&mut self, slot: u32, status: Status, now: u64, run: &mut LatencyRun) -> bool {
        let e = self.bio_io[slot as usize];
        // A routed slot always holds its bio; should one come back without
        // it, it still ends, once.
        let (op, bytes) = match self.bioset.node_mut(slot).bio.as_mut() {
            Some(b) => {
                b.set_offset_bytes(e.from_bytes);
                (b.op(), b.len_bytes())
            }
            None => (Op::Read, 0),
        };
        debug_assert!(self.routed_out > 0);
        self.routed_out -= 1;
        if !status.is_ok() {
            return false;
        }
        if self.on(feat::IOSTATS) {
            self.account_bio_end_as(op, bytes, e.start_ns, now, run);
        }
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.finish(slot, status);
        true
    }
}

/// The status a user bio ends with: its own, if something below set one
/// (a stacked target's), or else its request's.
#[inline(always)]
fn ended_with(bio: Option<&crate::bio::Bio>, status: Status) -> Status {
    match bio {
        Some(b) if !b.status.is_ok() => b.status,
        _ => status,
    }
}
