//! Completion: the last stage of the pipeline, as a driver sees it.
//!
//! A driver hands finished requests to a [`Completions`] batch. The context
//! that reaped them routes each one to the context that submitted it (its
//! own list, or that context's remote queue: Linux's IPI to the submitting
//! CPU), and the owner then ends the bios and runs the callbacks only after
//! the whole batch is reaped, so a callback that resubmits can never recurse
//! into the reap path. A driver that completes from its own thread wakes the
//! hardware queue's waiters through its [`HwNotifier`].

use crate::error::Status;
use crate::request::{RqRef, RqState};
use crate::sync::Notify;

/// A batch of completed requests, filled by a driver.
pub struct Completions<'a> {
    list: &'a mut Vec<RqRef>,
    /// Stamp each request with the time its driver finished it (the
    /// device is traced: blktrace's C is that time, not the reap's).
    stamp: bool,
}

impl<'a> Completions<'a> {
    pub(crate) fn new(list: &'a mut Vec<RqRef>, stamp: bool) -> Self {
        Completions { list, stamp }
    }

    /// Complete `rq` with `status`. The request goes back to the core.
    /// While the device is traced, this is the time its trace gives the
    /// completion (C): call it where the device finished the request (the
    /// CQE, the reply, the callback), or give that time with
    /// [`Completions::complete_at`].
    #[inline]
    pub fn complete(&mut self, mut rq: RqRef, status: Status) {
        if self.stamp {
            rq.done_ns = crate::clock::now_ns();
        }
        self.push(rq, status);
    }

    /// Complete `rq` with `status`, finished by the device at `done_ns`
    /// (monotonic, [`crate::clock::now_ns`]'s clock): a driver that knows
    /// when (a timer's expiry) gives it, and no clock is read.
    #[inline]
    pub fn complete_at(&mut self, mut rq: RqRef, status: Status, done_ns: u64) {
        if self.stamp {
            rq.done_ns = done_ns;
        }
        self.push(rq, status);
    }

    #[inline]
    fn push(&mut self, mut rq: RqRef, status: Status) {
        rq.transition(RqState::InFlight, RqState::Complete);
        rq.status = status;
        debug_assert!(
            self.list.len() < self.list.capacity(),
            "completion batch must never grow: it is sized to the tag depth"
        );
        self.list.push(rq);
    }

    /// Requests completed so far in this batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True if none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// The handle a driver uses to wake contexts waiting on its hardware queue.
#[derive(Clone, Debug)]
pub struct HwNotifier(pub(crate) crate::sync::Arc<Notify>);

impl HwNotifier {
    /// Wake contexts waiting on this hardware queue.
    #[inline]
    pub fn notify(&self) {
        self.0.notify();
    }
}
