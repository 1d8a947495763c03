//! Requests (Linux `blk_mq_get_new_requests`, `blk_mq_bio_to_request`,
//! `blk_mq_flush_plug_list` and `blk_mq_run_hw_queue`): taking a tag,
//! building the request from its bio, plugging it, and dispatching the plug
//! through the software queue to the hardware queue.
//!
//! Above the end of requests (dispatch ends what the driver completed
//! inline) and waiting (a tag may have to be waited for), below the data
//! stage that merges and splits bios.

use std::ptr::NonNull;
use std::time::Duration;

use super::state::{feat, CtxState};
use super::wait::{Bound, Step};
use crate::bioset::{BioNode, SlotState};
use crate::error::Status;
use crate::flush;
use crate::queue::DeviceInner;
use crate::request::{RqRef, RqState};
use crate::stats::bump;

impl CtxState {
    /// Get a request (a tag), waiting if all are in use. `None` when no
    /// tag came free within the bound (see [`CtxState::get_rq_slow`]).
    #[inline(always)]
    pub(super) fn get_rq(&mut self, dev: &DeviceInner) -> Option<RqRef> {
        if let Some(rq) = self.tags.take_cached(&mut self.tag_cache) {
            return Some(rq);
        }
        // No batches under a scheduler: cached tags would be scheduler
        // tags that nobody else may use.
        let want = if self.feat & (feat::PLUG | feat::SCHED) == feat::PLUG {
            self.plug_last.clamp(1, dev.cfg.plug_max.clamp(1, 64))
        } else {
            1
        };
        self.tags
            .get_batch(&mut self.hint, want, &mut self.tag_cache);
        if let Some(rq) = self.tags.take_cached(&mut self.tag_cache) {
            return Some(rq);
        }
        self.get_rq_slow(dev)
    }

    /// Wait for a tag. Our own plugged and in-flight requests hold tags,
    /// so they are pushed on and reaped; tags other contexts hold come
    /// back through the tag set's wait queue. Bounded by the request
    /// timeout plus the grace period: a tag that another context keeps
    /// that long (plugged, never unplugged) fails this bio with
    /// [`Status::Resource`] rather than hang it.
    #[cold]
    fn get_rq_slow(&mut self, dev: &DeviceInner) -> Option<RqRef> {
        let mut got = None;
        self.reap_until(dev, Bound::Timeout, |st, dev| {
            st.flush_plug(dev);
            st.reap(dev);
            if let Some(rq) = st.tags.get(&mut st.hint) {
                got = Some(rq);
                return Step::Done;
            }
            if st.in_flight > 0 && !dev.completes_async {
                // Our completions need polling: poll, with a short sleep.
                return Step::Again;
            }
            match st.tags.get_wait(&mut st.hint, Duration::from_millis(1)) {
                Some(rq) => {
                    got = Some(rq);
                    Step::Done
                }
                None => Step::Slept,
            }
        });
        got
    }

    /// Queue the bio in slot `node` as a new request: take a tag, build the
    /// request, plug it (dispatching the plug when it is full). A bio that
    /// gets no tag within the bound ends with [`Status::Resource`]; the
    /// caller's `fail` ends it (a user bio, a piece, a flush end apart).
    #[inline]
    pub(super) fn queue_bio(&mut self, dev: &DeviceInner, node: NonNull<BioNode>) -> Status {
        self.queue_bio_inline(dev, node)
    }

    /// [`CtxState::queue_bio`], always inlined: for the one caller whose
    /// function stands where `submit_node` does (a bio routed here whole
    /// from a context above).
    #[inline(always)]
    pub(super) fn queue_bio_inline(&mut self, dev: &DeviceInner, node: NonNull<BioNode>) -> Status {
        let Some(rq) = self.get_rq(dev) else {
            return Status::Resource;
        };
        let full = {
            let _legacy = dev.lock.hold();
            self.queue_rq(dev, rq, node)
        };
        if full {
            self.flush_plug(dev);
        }
        Status::Ok
    }

    /// Build the request from the bio and queue it. Returns true if the plug
    /// is full.
    #[inline(always)]
    fn queue_rq(&mut self, dev: &DeviceInner, mut rq: RqRef, mut node: NonNull<BioNode>) -> bool {
        {
            // SAFETY: the slot was just filled by this context and no
            // request holds it yet: this is the only access.
            let n = unsafe { node.as_mut() };
            debug_assert_eq!(n.state, SlotState::Owned);
            n.state = SlotState::InFlight;
        }
        // SAFETY: as above; the request that will hold it is ours too.
        let bio = unsafe { node.as_ref() }
            .bio
            .as_ref()
            .expect("slot holds a bio");
        rq.op = bio.op();
        rq.flags = flush::request_flags(bio.flags(), &dev.info.features);
        rq.sector = bio.sector();
        rq.size_bytes = bio.len_bytes();
        rq.nr_bios = 1;
        rq.nr_segs = bio.segments().len().min(u16::MAX as usize) as u16;
        rq.bio_head = Some(node);
        rq.bio_tail = Some(node);
        rq.owner = Some(self.shared_ptr());
        rq.hwq = self.hwq;
        // Without an elevator or a trace, one bit test of the feature word.
        if self.feat & (feat::SCHED | feat::TRACE) != 0 {
            if self.on(feat::SCHED) {
                if self.on(feat::ASYNC_DEPTH) && rq.op.is_write() {
                    dev.hw_queues[self.hwq as usize]
                        .async_writes
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let g = &self.group.0;
                rq.ioprio = self.ioprio.unwrap_or_else(|| g.ioprio());
                rq.group = g.id();
                rq.weight = g.weight() as u16;
            }
            if let Some(t) = self.trace.as_mut() {
                t.get_rq(&rq, self.feat & feat::PLUG != 0 && self.plug.is_empty());
            }
        }
        rq.status = Status::Ok;
        rq.set_driver_data(0);
        if self.on(feat::IOSTATS) {
            rq.start_ns = self.batch_start(dev);
            bump(&self.stats.in_flight[rq.op.is_write() as usize], 1);
            rq.part = match self.parts.as_mut() {
                None => crate::partition::NO_PART,
                Some(p) => p.start(rq.sector, rq.op.is_write(), rq.start_ns / 1_000_000),
            };
        }
        rq.transition(RqState::Idle, RqState::Queued);
        bump(&self.stats.requests, 1);
        self.in_flight += 1;
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Relaxed);
        if self.on(feat::PLUG) {
            self.plug.push(rq)
        } else {
            self.sw.push(rq);
            true
        }
    }

    /// Dispatch the plug and run the hardware queue. With nothing older
    /// waiting in the software queue, the plug's requests go straight to
    /// the hardware queue, and only what it does not take is queued.
    #[inline]
    pub(super) fn flush_plug(&mut self, dev: &DeviceInner) {
        if self.bio_plugged {
            self.unplug_bio_based();
        }
        if self.plug.is_empty() && self.sw.is_empty() {
            return;
        }
        // The batch now taken is the size of the next tag batch.
        self.plug_last = self.plug.len() as u32;
        if self.on(feat::TRACE) {
            self.flush_plug_traced(dev);
            return;
        }
        self.flush_plug_as::<false>(dev);
    }

    /// `flush_plug` of a traced context: U for the plug's depth, then
    /// dispatch telling the recorder of each request (D, R).
    #[cold]
    #[inline(never)]
    fn flush_plug_traced(&mut self, dev: &DeviceInner) {
        if let Some(t) = self.trace.as_mut() {
            if !self.plug.is_empty() {
                t.unplug(self.plug.len());
            }
        }
        self.flush_plug_as::<true>(dev);
    }

    /// The dispatch of `flush_plug`; `TRACED`: with the recorder told of
    /// each request issued.
    #[inline]
    fn flush_plug_as<const TRACED: bool>(&mut self, dev: &DeviceInner) {
        self.tags.drain_cache(&mut self.tag_cache);
        if !self.sw.is_empty() {
            for rq in self.plug.drain() {
                self.sw.push(rq);
            }
            self.run_hw_queue::<TRACED>(dev);
            return;
        }
        let hq = &dev.hw_queues[self.hwq as usize];
        let out = {
            let _legacy = dev.lock.hold();
            let mut list = self.plug.drain();
            let out = match self.trace.as_mut() {
                Some(t) if TRACED => hq.run(&mut list, &mut self.done, self.timeout_ms, t),
                _ => hq.run(&mut list, &mut self.done, self.timeout_ms, &mut ()),
            };
            for rq in list {
                self.sw.push(rq);
            }
            out
        };
        self.dispatched(dev, out.busy);
    }

    /// Dispatch the software queue to the hardware queue (Linux
    /// `blk_mq_run_hw_queue`), then end what completed inline.
    #[inline]
    fn run_hw_queue<const TRACED: bool>(&mut self, dev: &DeviceInner) {
        let hq = &dev.hw_queues[self.hwq as usize];
        let out = {
            let _legacy = dev.lock.hold();
            match self.trace.as_mut() {
                Some(t) if TRACED => hq.run(&mut self.sw, &mut self.done, self.timeout_ms, t),
                _ => hq.run(&mut self.sw, &mut self.done, self.timeout_ms, &mut ()),
            }
        };
        self.dispatched(dev, out.busy);
    }

    /// A bio-based device's unplug: its driver issues what it was handed
    /// since the last one (the lower devices' plugs), and the batch ends.
    #[cold]
    fn unplug_bio_based(&mut self) {
        self.bio_plugged = false;
        self.batch_ns = 0;
        if let Some(q) = self.bio_q.as_mut() {
            q.unplug();
        }
    }

    /// After a dispatch: count what the driver pushed back, end the batch,
    /// and end what completed inline.
    #[inline]
    fn dispatched(&mut self, dev: &DeviceInner, busy: u32) {
        if busy > 0 {
            bump(&self.stats.requeues, u64::from(busy));
        }
        self.batch_ns = 0;
        self.complete_done(dev);
    }
}
