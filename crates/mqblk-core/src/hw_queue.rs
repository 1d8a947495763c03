//! The hardware queue (Linux `struct blk_mq_hw_ctx`): one of the driver's
//! dispatch queues, such as an io_uring ring or an NBD connection.
//!
//! Fifth stage: `scheduler → hardware queue → driver`. Dispatch takes
//! requests from the dispatch list (requests the driver once answered busy)
//! and then from the scheduler, issues them with `queue_rq` while the budget
//! allows, and rings the doorbell once (`commit_rqs`) if the batch ended
//! early. The hardware queue's lock is taken once per batch, and only by the
//! contexts mapped to it: in `mq` mode with a hardware queue per context, by
//! one context only.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_utils::CachePadded;

use crate::clock;
use crate::completion::Completions;
use crate::driver::{HwQueueOps, QueueRq, TimeoutAction};
use crate::request::{RqRef, RqState};
use crate::sched::{DispatchSource, Elevator};
use crate::sw_queue::SwQueue;
use crate::sync::Notify;
use crate::tag::Tags;

/// Longest time between two timeout scans of a hardware queue.
const SCAN_MAX_MS: u64 = 250;

/// One hardware queue.
pub(crate) struct HwQueue {
    /// Contexts mapped to this queue (control plane writes, waiters read).
    pub(crate) nr_ctx: std::sync::atomic::AtomicU32,
    /// Writes holding scheduler tags on this queue, counted against the
    /// elevator's `async_depth` (Linux `dd->async_depth`, a limit for the
    /// whole queue). Touched only under an elevator that sets one.
    pub(crate) async_writes: std::sync::atomic::AtomicU32,
    pub(crate) notify: crate::sync::Arc<Notify>,
    pub(crate) tags: Arc<Tags>,
    /// The queue's interrupt lines: the driver's
    /// ([`crate::driver::Driver::irq_fd`]), or those a stacked driver
    /// forwards from its legs. `None` if it had none once set up.
    pub(crate) irq: Option<crate::irq::IrqLines>,
    /// Set when the timeout scan finds a request its driver holds past
    /// its deadline ([`HwInner::overdue`]): read without the lock.
    has_overdue: std::sync::atomic::AtomicBool,
    inner: CachePadded<Mutex<HwInner>>,
}

/// What the hardware queue's lock protects.
pub(crate) struct HwInner {
    index: u16,
    ops: Box<dyn HwQueueOps>,
    /// Requests the driver answered busy, retried first (Linux `hctx->dispatch`).
    dispatch: VecDeque<RqRef>,
    /// Requests the driver holds now.
    in_driver: u32,
    /// The device is traced: completions carry the driver's time
    /// (`Device::start_trace` sets it).
    pub(crate) stamp: bool,
    /// Most requests the driver may hold (its budget).
    budget: u32,
    timeout_ms: u32,
    next_scan_ms: u64,
    expired: Vec<u32>,
    /// The first request found past its timeout that the driver still
    /// held, until a context takes it ([`HwQueue::take_overdue`]).
    overdue: Option<crate::request::Overdue>,
    /// Dispatch is stopped (Linux `blk_mq_quiesce_queue`): requests wait in
    /// the software queues and the dispatch list until it is lifted.
    pub(crate) quiesced: bool,
    /// The scheduler of this queue; `None` is Linux's `none`.
    pub(crate) elevator: Option<Box<dyn Elevator>>,
}

/// Told of each request a dispatch hands to the driver, and of each the
/// driver hands back busy (Linux's `block_rq_issue` and
/// `block_rq_requeue` trace points): the context's blktrace recorder, or
/// `()`, which compiles to nothing, when the context does not trace.
pub(crate) trait DispatchTrace {
    /// `rq` goes to the driver now.
    fn issue(&mut self, rq: &crate::request::Request);
    /// The driver was busy: `rq` waits for another dispatch.
    fn requeue(&mut self, rq: &crate::request::Request);
}

impl DispatchTrace for () {
    #[inline(always)]
    fn issue(&mut self, _: &crate::request::Request) {}
    #[inline(always)]
    fn requeue(&mut self, _: &crate::request::Request) {}
}

/// What one dispatch run did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct DispatchOutcome {
    pub(crate) issued: u32,
    pub(crate) busy: u32,
}

impl HwQueue {
    pub(crate) fn new(
        index: u16,
        ops: Box<dyn HwQueueOps>,
        notify: crate::sync::Arc<Notify>,
        tags: Arc<Tags>,
        budget: Option<u32>,
        timeout_ms: u32,
        irq: crate::irq::IrqLines,
    ) -> HwQueue {
        let total = tags.total() as usize;
        if let Some(fd) = ops.irq_fd() {
            irq.add(fd);
        }
        HwQueue {
            nr_ctx: std::sync::atomic::AtomicU32::new(0),
            async_writes: std::sync::atomic::AtomicU32::new(0),
            notify,
            irq: (!irq.is_empty()).then_some(irq),
            has_overdue: std::sync::atomic::AtomicBool::new(false),
            inner: CachePadded::new(Mutex::new(HwInner {
                index,
                ops,
                dispatch: VecDeque::with_capacity(total),
                in_driver: 0,
                stamp: false,
                budget: budget.unwrap_or(u32::MAX).max(1),
                timeout_ms,
                next_scan_ms: 0,
                expired: Vec::with_capacity(total),
                overdue: None,
                quiesced: false,
                elevator: None,
            })),
            tags,
        }
    }

    /// Take the hardware queue for a dispatch or reap run.
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, HwInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run the queue (Linux `blk_mq_run_hw_queue`): dispatch what waits in
    /// `sw` (through the elevator, if any) under the queue's lock, once per
    /// batch. Inline completions land in `done`; `trace` hears of each
    /// request issued.
    #[inline(always)]
    pub(crate) fn run(
        &self,
        sw: &mut impl DispatchSource,
        done: &mut Vec<RqRef>,
        timeout_ms: u32,
        trace: &mut impl DispatchTrace,
    ) -> DispatchOutcome {
        let deadline_ms = deadline_after(timeout_ms);
        self.lock().dispatch(sw, done, deadline_ms, trace)
    }

    /// The first request found past its timeout that the driver still
    /// holds, if one was found since the last call (control plane).
    #[inline]
    pub(crate) fn take_overdue(&self) -> Option<crate::request::Overdue> {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.has_overdue.load(Relaxed) {
            return None;
        }
        let mut inner = self.lock();
        self.has_overdue.store(false, Relaxed);
        inner.overdue.take()
    }

    /// Reap the driver into `done`; then dispatch again what waits (the
    /// driver refused it, or a quiesce held it), and end requests past their
    /// deadline (Linux `blk_mq_timeout_work`).
    #[inline]
    pub(crate) fn reap(
        &self,
        sw: &mut SwQueue,
        done: &mut Vec<RqRef>,
        timeout_ms: u32,
        trace: &mut impl DispatchTrace,
    ) -> DispatchOutcome {
        let mut inner = self.lock();
        inner.poll(done);
        let mut out = DispatchOutcome::default();
        if inner.has_dispatch() || !sw.is_empty() {
            out = inner.dispatch(sw, done, deadline_after(timeout_ms), trace);
        }
        if timeout_ms > 0 {
            inner.check_timeouts(&self.tags, clock::coarse_ms(), done, &self.has_overdue);
        }
        out
    }
}

/// The deadline of a request dispatched now (0: no timeout).
#[inline]
fn deadline_after(timeout_ms: u32) -> u64 {
    if timeout_ms > 0 {
        clock::coarse_ms() + u64::from(timeout_ms)
    } else {
        0
    }
}

impl HwInner {
    /// Issue requests from the dispatch list, then from `src`, until both are
    /// empty, the driver is busy, or the budget is spent. Completions the
    /// driver makes inline land in `done`.
    pub(crate) fn dispatch(
        &mut self,
        src: &mut impl DispatchSource,
        done: &mut Vec<RqRef>,
        deadline_ms: u64,
        trace: &mut impl DispatchTrace,
    ) -> DispatchOutcome {
        if self.quiesced {
            return DispatchOutcome::default();
        }
        if self.elevator.is_none() && self.dispatch.is_empty() {
            return self.dispatch_direct(src, done, deadline_ms, trace);
        }
        self.dispatch_general(src, done, deadline_ms, trace)
    }

    /// No elevator and nothing requeued: issue straight from `src`, in
    /// order (Linux `blk_mq_try_issue_list_directly`).
    #[inline]
    fn dispatch_direct(
        &mut self,
        src: &mut impl DispatchSource,
        done: &mut Vec<RqRef>,
        deadline_ms: u64,
        trace: &mut impl DispatchTrace,
    ) -> DispatchOutcome {
        let mut out = DispatchOutcome::default();
        let mut need_commit = false;
        while self.in_driver < self.budget {
            let Some(rq) = src.next() else { break };
            let last = src.is_empty() || self.in_driver + 1 >= self.budget;
            if let Err(rq) = self.issue(rq, last, done, deadline_ms, &mut out, trace) {
                debug_assert!(self.dispatch.len() < self.dispatch.capacity());
                self.dispatch.push_front(rq);
                need_commit = true;
                break;
            }
            need_commit = !last;
        }
        if need_commit {
            self.ops.commit_rqs();
        }
        out
    }

    /// Dispatch through the elevator, or after requeued requests.
    fn dispatch_general(
        &mut self,
        src: &mut impl DispatchSource,
        done: &mut Vec<RqRef>,
        deadline_ms: u64,
        trace: &mut impl DispatchTrace,
    ) -> DispatchOutcome {
        let mut out = DispatchOutcome::default();
        if let Some(e) = self.elevator.as_mut() {
            // Everything the software queue holds goes to the elevator,
            // which decides the order (the scheduler tags bound it).
            while let Some(rq) = src.next() {
                e.insert(rq);
            }
        }
        let mut need_commit = false;
        loop {
            if self.in_driver >= self.budget {
                break;
            }
            let next = match self.dispatch.pop_front() {
                Some(rq) => Some(rq),
                None => match self.elevator.as_mut() {
                    Some(e) => e.dispatch(),
                    None => src.next(),
                },
            };
            let Some(rq) = next else { break };
            let more = match self.elevator.as_ref() {
                Some(e) => e.has_work(),
                None => !src.is_empty(),
            };
            let last = self.dispatch.is_empty() && !more || self.in_driver + 1 >= self.budget;
            let before = done.len();
            match self.issue(rq, last, done, deadline_ms, &mut out, trace) {
                Ok(()) => {
                    self.tell_elevator(&done[before..]);
                    need_commit = !last;
                }
                Err(rq) => {
                    match self.elevator.as_mut() {
                        Some(e) => e.requeue(rq),
                        None => {
                            debug_assert!(self.dispatch.len() < self.dispatch.capacity());
                            self.dispatch.push_front(rq);
                        }
                    }
                    need_commit = true;
                    break;
                }
            }
        }
        if need_commit {
            self.ops.commit_rqs();
        }
        out
    }

    /// Hand `rq` to the driver (`last`: no more follow in this batch).
    /// What it completed inline lands in `done`. The request comes back,
    /// queued again, if the driver was busy.
    #[inline(always)]
    fn issue(
        &mut self,
        rq: RqRef,
        last: bool,
        done: &mut Vec<RqRef>,
        deadline_ms: u64,
        out: &mut DispatchOutcome,
        trace: &mut impl DispatchTrace,
    ) -> Result<(), RqRef> {
        rq.transition(RqState::Queued, RqState::InFlight);
        if deadline_ms != 0 {
            rq.arm_timeout(self.index, deadline_ms);
        }
        trace.issue(&rq);
        let before = done.len();
        match self
            .ops
            .queue_rq(rq, last, &mut Completions::new(done, self.stamp))
        {
            QueueRq::Issued => {
                out.issued += 1;
                self.in_driver += 1;
                self.in_driver -= (done.len() - before) as u32;
                Ok(())
            }
            QueueRq::Busy(rq) => {
                rq.transition(RqState::InFlight, RqState::Queued);
                trace.requeue(&rq);
                out.busy += 1;
                Err(rq)
            }
        }
    }

    /// True if requests wait on the dispatch list or in the elevator.
    #[inline]
    pub(crate) fn has_dispatch(&self) -> bool {
        !self.dispatch.is_empty() || self.elevator.as_ref().is_some_and(|e| e.has_work())
    }

    /// The elevator hears of completions (nothing to do without one).
    #[inline]
    fn tell_elevator(&mut self, completed: &[RqRef]) {
        if let Some(e) = self.elevator.as_mut() {
            for rq in completed {
                e.completed(rq);
            }
        }
    }

    /// Install `elevator` (or none). Control plane: only with the queue
    /// frozen, when no request waits in the old one.
    pub(crate) fn set_elevator(&mut self, elevator: Option<Box<dyn Elevator>>) {
        assert!(self.elevator.as_ref().is_none_or(|e| !e.has_work()));
        self.elevator = elevator;
    }

    /// Raise or lower how many requests the driver may hold at once.
    pub(crate) fn set_budget(&mut self, budget: u32) {
        self.budget = budget.max(1);
    }

    /// Let the driver block until it has completions (see `Driver::wait`).
    #[inline]
    pub(crate) fn driver_wait(&mut self, timeout: std::time::Duration) -> bool {
        self.ops.wait(timeout)
    }

    /// Reap the driver.
    #[inline]
    pub(crate) fn poll(&mut self, done: &mut Vec<RqRef>) -> usize {
        let before = done.len();
        self.ops.poll(&mut Completions::new(done, self.stamp));
        let n = done.len() - before;
        self.in_driver -= n as u32;
        self.tell_elevator(&done[before..]);
        n
    }

    /// Ask the driver about requests past their deadline (Linux
    /// `blk_mq_timeout_work`). Scans at most every quarter timeout.
    pub(crate) fn check_timeouts(
        &mut self,
        tags: &Tags,
        now_ms: u64,
        done: &mut Vec<RqRef>,
        has_overdue: &std::sync::atomic::AtomicBool,
    ) -> u32 {
        if self.timeout_ms == 0 || now_ms < self.next_scan_ms {
            return 0;
        }
        // A quarter of the timeout, and at most SCAN_MAX_MS: a request
        // past its deadline is seen soon after.
        self.next_scan_ms = now_ms + u64::from(self.timeout_ms / 4).clamp(1, SCAN_MAX_MS);
        // Requests the driver refused and that wait for another try: the
        // deadline bounds their whole life, so one past it ends here, with
        // no driver involved (it does not hold them).
        let mut timed_out = 0;
        for _ in 0..self.dispatch.len() {
            let Some(rq) = self.dispatch.pop_front() else {
                break;
            };
            let d = rq.deadline_ms();
            if d != 0 && d <= now_ms {
                rq.transition(RqState::Queued, RqState::InFlight);
                Completions::new(done, self.stamp).complete(rq, crate::error::Status::Timeout);
                timed_out += 1;
            } else {
                self.dispatch.push_back(rq);
            }
        }
        let mut expired = std::mem::take(&mut self.expired);
        tags.for_each_in_flight(self.index, |tag, deadline| {
            let d = deadline.load(std::sync::atomic::Ordering::Relaxed);
            if d != 0 && d <= now_ms {
                assert!(expired.len() < expired.capacity());
                expired.push(tag);
            }
        });
        for &tag in &expired {
            let before = done.len();
            let action = self
                .ops
                .timeout(tag, &mut Completions::new(done, self.stamp));
            let n = (done.len() - before) as u32;
            self.in_driver -= n;
            self.tell_elevator(&done[before..]);
            timed_out += n;
            if n == 0 {
                match action {
                    TimeoutAction::Done => {}
                    TimeoutAction::ResetTimer => {
                        tags.rearm(tag, now_ms + u64::from(self.timeout_ms));
                    }
                    TimeoutAction::Held(o) => {
                        // Past its timeout, but its memory is the backend's
                        // until it lets go: named for the caller.
                        if self.overdue.is_none() {
                            self.overdue = Some(o);
                            has_overdue.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        tags.rearm(tag, now_ms + u64::from(self.timeout_ms));
                    }
                }
            }
        }
        expired.clear();
        self.expired = expired;
        timed_out
    }
}
