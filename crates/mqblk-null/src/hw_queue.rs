//! The null device's per-hardware-queue state (Linux null_blk's
//! `struct nullb_queue`, the driver data of one `blk_mq_hw_ctx`).
//!
//! Sits between the core's hardware queue and the completion stage: it
//! holds the requests the driver has taken but not yet given back, in two
//! bounded lists. The pending list feeds the deferred and timer completion
//! modes; the kept list holds requests that fault injection chose to "lose"
//! until the core's timeout handler asks for them. Both are sized when the
//! queue is created to the most requests the tags can put in flight, and
//! never grow. The core reaches this state only through `&mut`, one thread
//! at a time, so nothing here takes a lock.

use std::collections::VecDeque;

use mqblk_core::driver::Completions;
use mqblk_core::driver::RqRef;
use mqblk_core::driver::TimeoutAction;
use mqblk_core::error::Status;

use crate::config::CompletionMode;
use crate::fault::FaultInjector;
use mqblk_core::timer::IrqTimer;

/// A request waiting for the deferred or timer completion.
#[derive(Debug)]
struct Pending {
    rq: RqRef,
    status: Status,
    /// Monotonic nanoseconds at which the timer mode completes it (0 in
    /// deferred mode).
    due_ns: u64,
}

/// The driver data of one hardware queue.
#[derive(Debug)]
pub struct NullQueue {
    index: u16,
    pub(crate) completion: CompletionMode,
    pub(crate) completion_nsec: u64,
    /// False when every fault probability is 0: then `queue_rq` never calls
    /// the injector (one predictable branch).
    pub(crate) faults_enabled: bool,
    pub(crate) faults: FaultInjector,
    pending: VecDeque<Pending>,
    kept: Vec<RqRef>,
    /// Timer mode's interrupt line, set for the head of `pending`.
    irq: Option<IrqTimer>,
}

impl NullQueue {
    /// Queue `index`, able to hold `capacity` requests (the tag depth plus
    /// reserved tags) in each list. Timer mode makes its interrupt line, a
    /// timerfd, here (not under Miri, which has no timerfd: there the
    /// core polls, as it does for the deferred mode).
    pub(crate) fn new(
        index: u16,
        completion: CompletionMode,
        completion_nsec: u64,
        faults: FaultInjector,
        capacity: usize,
    ) -> std::io::Result<NullQueue> {
        let pending_capacity = match completion {
            CompletionMode::Inline => 0,
            CompletionMode::Deferred | CompletionMode::Timer => capacity,
        };
        let kept_capacity = if faults.is_enabled() { capacity } else { 0 };
        let irq = match completion {
            CompletionMode::Timer if !cfg!(miri) => Some(IrqTimer::new()?),
            _ => None,
        };
        Ok(NullQueue {
            index,
            completion,
            completion_nsec,
            faults_enabled: faults.is_enabled(),
            faults,
            pending: VecDeque::with_capacity(pending_capacity),
            kept: Vec::with_capacity(kept_capacity),
            irq,
        })
    }

    /// Timer mode's interrupt line.
    pub(crate) fn irq_fd(&self) -> Option<std::os::fd::RawFd> {
        self.irq.as_ref().map(IrqTimer::raw)
    }

    /// The hardware queue's index.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Requests waiting for the deferred or timer completion.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Requests kept by timeout injection, waiting for the core's timeout.
    pub fn kept_len(&self) -> usize {
        self.kept.len()
    }

    /// Hold `rq` until the next poll (deferred) or until `due_ns` (timer).
    #[inline]
    pub(crate) fn push_pending(&mut self, rq: RqRef, status: Status, due_ns: u64) {
        debug_assert!(
            self.pending.len() < self.pending.capacity(),
            "pending list must never grow: it is sized to the tag depth"
        );
        debug_assert!(
            self.pending.back().is_none_or(|p| p.due_ns <= due_ns),
            "timer deadlines are monotonic per queue"
        );
        if self.pending.is_empty() {
            if let Some(t) = self.irq.as_mut() {
                t.set(due_ns);
            }
        }
        self.pending.push_back(Pending { rq, status, due_ns });
    }

    /// Complete every pending request (deferred mode); returns how many.
    #[inline]
    pub(crate) fn complete_all(&mut self, done: &mut Completions<'_>) -> usize {
        let n = self.pending.len();
        for p in self.pending.drain(..) {
            done.complete(p.rq, p.status);
        }
        n
    }

    /// Complete the pending requests due at `now_ns` (timer mode). The list
    /// is in deadline order, so this stops at the first one not yet due.
    #[inline]
    pub(crate) fn complete_due(&mut self, now_ns: u64, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        while self.pending.front().is_some_and(|p| p.due_ns <= now_ns) {
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            // The device finished it when its timer expired (a trace's C
            // is that time, not this poll's).
            done.complete_at(p.rq, p.status, p.due_ns);
            n += 1;
        }
        if n > 0 {
            if let Some(t) = self.irq.as_mut() {
                t.set(self.pending.front().map_or(0, |p| p.due_ns));
            }
        }
        n
    }

    /// True if nothing waits for a poll.
    #[inline]
    pub(crate) fn pending_is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Keep `rq` without completing it (timeout injection).
    pub(crate) fn keep(&mut self, rq: RqRef) {
        debug_assert!(
            self.kept.len() < self.kept.capacity(),
            "kept list must never grow: it is sized to the tag depth"
        );
        self.kept.push(rq);
    }

    /// The core's timeout handler asks for `tag`: if we kept it, complete
    /// it as timed out. Otherwise it is still on its way (a pending timer
    /// completion, say), so ask for more time.
    pub(crate) fn complete_timed_out(
        &mut self,
        tag: u32,
        done: &mut Completions<'_>,
    ) -> TimeoutAction {
        match self.kept.iter().position(|rq| rq.tag() == tag) {
            Some(i) => {
                let rq = self.kept.swap_remove(i);
                debug_assert_eq!(rq.tag(), tag);
                done.complete(rq, Status::Timeout);
                TimeoutAction::Done
            }
            None => TimeoutAction::ResetTimer,
        }
    }
}
