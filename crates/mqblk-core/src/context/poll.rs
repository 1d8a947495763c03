//! Polling (Linux `blk_mq_poll` and the completion side of `io_uring`'s
//! reap): a step that moves everything of a context forward, the delivery
//! of ended bios to their callbacks, and the waits of the public calls.
//!
//! The top of `context/`: a callback may resubmit its bio, and that
//! submission runs here, after the reap and the callbacks, so completions
//! never recurse into submission.

use super::state::{self, CtxState};
use super::wait::{Bound, Step};
use crate::bio::Completion;
use crate::bioset::Delivery;
use crate::queue::DeviceInner;

impl CtxState {
    /// One step of progress: dispatch what is plugged, reap completions,
    /// run the stages they made ready.
    #[inline]
    pub(super) fn progress(&mut self, dev: &DeviceInner) {
        self.flush_plug(dev);
        self.reap(dev);
        self.process_deferred(dev);
    }

    /// Wait for slot `idx` to end. Unbounded by design: the slot's bio
    /// may point at the caller's memory, which no return may hand back
    /// while a driver can still write it; every request ends by its
    /// timeout, so only a driver that keeps the memory itself (the kernel
    /// holding an io_uring buffer) can hold this wait longer.
    pub(super) fn wait_slot(&mut self, dev: &DeviceInner, idx: u32) {
        self.flush_plug(dev);
        self.reap_until(dev, Bound::Ended, |st, dev| {
            st.reap(dev);
            st.process_deferred(dev);
            if st.bioset.is_ended(idx) {
                Step::Done
            } else {
                Step::Again
            }
        });
    }

    /// Run callbacks for ended bios, oldest first. Bios the callbacks ask
    /// to resubmit are sent again afterwards, not from inside the callback.
    #[inline]
    pub(super) fn deliver(
        &mut self,
        dev: &DeviceInner,
        mut f: impl FnMut(Completion<'_>),
    ) -> usize {
        let mut n = 0;
        // What the callbacks see of the device: a view's window, or the
        // device itself (looked up once per batch, not per bio).
        let info = state::seen_info(&self.window, dev);
        while let Some(idx) = self.ended.pop_front() {
            let node = self.bioset.node_mut(idx);
            if node.delivery == Delivery::Orphan || node.bio.is_none() {
                self.bioset.remove(idx);
                continue;
            }
            let end_io = node.bio.as_ref().and_then(|b| b.end_io().cloned());
            let mut again = false;
            let c = Completion {
                slot: &mut node.bio,
                resubmit: &mut again,
                info,
            };
            // A panicking callback frees its own slot (the bio ended: no
            // driver holds it) and leaves the rest queued for the next poll.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match end_io {
                Some(end_io) => end_io.end_io(c),
                None => f(c),
            }));
            if let Err(panic) = ran {
                self.bioset.remove(idx);
                std::panic::resume_unwind(panic);
            }
            n += 1;
            if again && self.bioset.node(idx).bio.is_some() {
                debug_assert!(self.resubmit.len() < self.resubmit.capacity());
                self.resubmit.push(idx);
            } else {
                // The slot keeps the bio shell for an in-place submission.
                self.bioset.release_keep(idx);
            }
        }
        if !self.resubmit.is_empty() {
            self.resubmit_pending(dev);
        }
        n
    }
    /// Submit again the bios whose callbacks asked for it.
    #[inline]
    pub(super) fn resubmit_pending(&mut self, dev: &DeviceInner) {
        let mut pending = std::mem::take(&mut self.resubmit);
        // The kind of device is tested once for the batch.
        if self.on(state::feat::BIO_BASED) {
            for &idx in &pending {
                self.bioset.reuse(idx);
                self.submit_node_as::<true>(dev, idx);
            }
        } else {
            for &idx in &pending {
                self.bioset.reuse(idx);
                self.submit_node_as::<false>(dev, idx);
            }
        }
        pending.clear();
        self.resubmit = pending;
    }
}
