//! The plug (Linux `struct blk_plug`): a context's batch of requests not yet
//! handed to the software queue.
//!
//! Second stage of the pipeline: `bio → plug → software queue`. Holding
//! requests back for a moment lets the context dispatch them as one batch
//! (one hardware-queue lock, one doorbell) and, from the services layer on,
//! merge neighbours. The plug is flushed on an explicit unplug, when it
//! reaches its threshold, and before the context blocks.

use crate::request::RqRef;

/// A bounded list of requests.
#[derive(Debug)]
pub(crate) struct Plug {
    list: Vec<RqRef>,
    max: usize,
}

impl Plug {
    /// A plug that flushes at `max` requests (preallocated, never grows).
    pub(crate) fn new(max: u32) -> Plug {
        let max = max.max(1) as usize;
        Plug {
            list: Vec::with_capacity(max),
            max,
        }
    }

    /// Add a request; true if the plug is now full and must be flushed.
    #[inline]
    pub(crate) fn push(&mut self, rq: RqRef) -> bool {
        debug_assert!(self.list.len() < self.max, "plug overfilled");
        self.list.push(rq);
        self.list.len() >= self.max
    }

    /// Requests held (blktrace's unplug depth; the next tag batch's size).
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// True if empty.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The newest request, for merging.
    #[inline]
    pub(crate) fn last_mut(&mut self) -> Option<&mut RqRef> {
        self.list.last_mut()
    }

    /// Hand every request over, oldest first.
    #[inline]
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, RqRef> {
        self.list.drain(..)
    }
}
