//! The I/O scheduler of a hardware queue (Linux's elevator,
//! `struct elevator_mq_ops`).
//!
//! Fourth stage: `software queue → scheduler → hardware queue`. Without an
//! elevator (`none`, what fast devices use in Linux) a hardware queue's
//! dispatch takes requests straight from the software queue, in the order
//! they were queued. With one, dispatch moves the software queue's requests
//! into the elevator (`insert`) and asks it which to issue next
//! (`dispatch`); a request the driver refuses goes back to it (`requeue`),
//! and it hears of every completion (`completed`). Each hardware queue has
//! its own elevator, called under that queue's lock only, so an elevator
//! needs no lock of its own.
//!
//! Scheduler tags: with an elevator, a device's tag sets hold
//! [`ElevatorType::nr_requests`] requests (Linux `nr_requests`, the
//! scheduler tags), while the driver is handed at most `queue_depth` at once
//! (the driver tags, enforced as the hardware queue's budget). Requests
//! waiting in the elevator hold scheduler tags only.

mod bfq;
mod kyber;
mod mq_deadline;

pub use bfq::{BfqParams, BfqType};
pub use kyber::{KyberParams, KyberType};
pub use mq_deadline::{DeadlineParams, MqDeadlineType};

use crate::request::{Request, RqRef};
use crate::sw_queue::SwQueue;

/// One hardware queue's scheduler instance.
pub trait Elevator: Send {
    /// Take a request from a software queue.
    fn insert(&mut self, rq: RqRef);

    /// The request to issue now, if any.
    fn dispatch(&mut self) -> Option<RqRef>;

    /// True if `dispatch` would return a request now.
    fn has_work(&self) -> bool;

    /// The driver could not take `rq` (busy): keep it, and issue it again
    /// before anything that should not overtake it. Default: insert it again.
    fn requeue(&mut self, rq: RqRef) {
        self.insert(rq);
    }

    /// `rq` completed (with `rq.status()`), for latency targets and
    /// fairness accounting. Default: nothing.
    fn completed(&mut self, _rq: &Request) {}
}

/// A kind of elevator (Linux `struct elevator_type`): makes one instance
/// per hardware queue.
pub trait ElevatorType: Send + Sync {
    /// Its name, as `scheduler=` and `info` show it.
    fn name(&self) -> &str;

    /// Scheduler tags per hardware queue (Linux `nr_requests`): how many
    /// requests may wait in the elevator and the driver together. Default:
    /// twice `queue_depth`, as Linux sizes them.
    fn nr_requests(&self, queue_depth: u32) -> u32 {
        queue_depth.saturating_mul(2)
    }

    /// Scheduler tags that writes may hold at once, of `nr_requests`
    /// (Linux's `async_depth`, what `limit_depth` enforces): the rest stay
    /// free for reads, so a write flood cannot keep a read from even
    /// entering the scheduler. Default: no limit.
    fn async_depth(&self, _nr_requests: u32) -> Option<u32> {
        None
    }

    /// The instance for hardware queue `hwq`.
    fn init(&self, hwq: u16, nr_requests: u32) -> Box<dyn Elevator>;
}

impl std::fmt::Debug for dyn ElevatorType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a hardware queue's dispatch draws requests from when it has no
/// elevator.
pub(crate) trait DispatchSource {
    /// The next request to issue, if any.
    fn next(&mut self) -> Option<RqRef>;
    /// True if nothing is left.
    fn is_empty(&self) -> bool;
}

impl DispatchSource for SwQueue {
    #[inline]
    fn next(&mut self) -> Option<RqRef> {
        self.pop()
    }

    #[inline]
    fn is_empty(&self) -> bool {
        SwQueue::is_empty(self)
    }
}

/// The plug's list, dispatched straight (Linux `blk_mq_dispatch_plug_list`):
/// what is not issued stays in the drain for the caller to queue.
impl DispatchSource for std::vec::Drain<'_, RqRef> {
    #[inline]
    fn next(&mut self) -> Option<RqRef> {
        Iterator::next(self)
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
