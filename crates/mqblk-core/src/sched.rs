//! The scheduler hook (Linux's elevator, `struct elevator_mq_ops`).
//!
//! Fourth stage: `software queue → scheduler → hardware queue`. The
//! hardware queue's dispatch asks the scheduler for the next request. With
//! `none` (the default, and what fast devices use in Linux) requests pass
//! straight through in the order they were queued; other schedulers plug in
//! here by reordering or holding requests.

use crate::request::RqRef;
use crate::sw_queue::SwQueue;

/// The I/O scheduler of a queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheduler {
    /// FIFO pass-through.
    #[default]
    None,
}

/// Where a hardware queue's dispatch draws requests from.
pub(crate) trait DispatchSource {
    /// The next request to issue, if any.
    fn next(&mut self) -> Option<RqRef>;
    /// True if nothing is left.
    fn is_empty(&self) -> bool;
}

/// A software queue seen through a scheduler.
pub(crate) struct Scheduled<'a> {
    pub(crate) sched: Scheduler,
    pub(crate) sw: &'a mut SwQueue,
}

impl DispatchSource for Scheduled<'_> {
    #[inline]
    fn next(&mut self) -> Option<RqRef> {
        match self.sched {
            Scheduler::None => self.sw.pop(),
        }
    }

    #[inline]
    fn is_empty(&self) -> bool {
        match self.sched {
            Scheduler::None => self.sw.is_empty(),
        }
    }
}
