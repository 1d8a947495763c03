//! The software queue (Linux `struct blk_mq_ctx`): the staging queue of one
//! submitting context.
//!
//! Third stage: `plug → software queue → scheduler → hardware queue`. Each
//! context owns one, so inserting needs no lock; the context that owns it
//! also runs the dispatch that drains it into its mapped hardware queue.

use std::collections::VecDeque;

use crate::request::RqRef;

/// A FIFO of queued requests, preallocated to the tag depth.
#[derive(Debug)]
pub(crate) struct SwQueue {
    list: VecDeque<RqRef>,
}

impl SwQueue {
    pub(crate) fn new(capacity: usize) -> SwQueue {
        SwQueue {
            list: VecDeque::with_capacity(capacity),
        }
    }

    #[inline]
    pub(crate) fn push(&mut self, rq: RqRef) {
        debug_assert!(
            self.list.len() < self.list.capacity(),
            "software queue must not grow"
        );
        self.list.push_back(rq);
    }

    #[inline]
    pub(crate) fn pop(&mut self) -> Option<RqRef> {
        self.list.pop_front()
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The newest `n` waiting requests, newest first (merge candidates).
    #[inline]
    pub(crate) fn iter_mut_newest(&mut self, n: usize) -> impl Iterator<Item = &mut RqRef> {
        self.list.iter_mut().rev().take(n)
    }
}
