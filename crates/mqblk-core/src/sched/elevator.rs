//! The elevator's interface (Linux `struct elevator_mq_ops` and `struct
//! elevator_type`), and where a queue with none draws requests from: the
//! leaf of `sched/` that the elevators implement and the hardware queue
//! calls.

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
