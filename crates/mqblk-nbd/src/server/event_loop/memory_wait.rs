//! One I/O thread's connections that wait for the server's memory budget
//! (`server/memory.rs`): parked when the budget stops them, all handed
//! back to the loop once any thread has freed memory since, and the line
//! that says the budget is full, at most once a second.

use std::time::{Duration, Instant};

use super::log_limit::LogLimit;
use crate::server::memory::MemoryBudget;

/// How often connections waiting for memory look at the budget again
/// (they are also woken by any wake-up after memory was freed).
pub(crate) const BUDGET_RETRY: Duration = Duration::from_millis(10);

/// The connections (by slot index) waiting for memory to free.
#[derive(Default)]
pub(crate) struct MemoryWait {
    waiting: Vec<u32>,
    /// The budget's `freed` count when the waiting were last handed back.
    freed_seen: u64,
    log: LogLimit,
}

impl MemoryWait {
    /// True while some connection waits.
    pub(crate) fn any(&self) -> bool {
        !self.waiting.is_empty()
    }

    /// Connection `idx` was stopped by the budget: it waits, and the
    /// budget being full is said (at its rate).
    pub(crate) fn park(&mut self, idx: u32, budget: &MemoryBudget, now: Instant) {
        self.waiting.push(idx);
        self.log.line(
            now,
            format_args!(
                "memory budget full: {} of {} MiB held in buffers (the rest is kept for \
                 connections holding under {} KiB each); the others take no requests until \
                 memory frees",
                budget.used() >> 20,
                budget.max() >> 20,
                budget.share() >> 10
            ),
        );
    }

    /// The waiting connections, if memory was freed since they were last
    /// handed back (they go back to waiting if it is still not enough).
    pub(crate) fn take_if_freed(&mut self, budget: &MemoryBudget) -> Option<Vec<u32>> {
        let freed = budget.freed();
        if freed == self.freed_seen {
            return None;
        }
        self.freed_seen = freed;
        Some(std::mem::take(&mut self.waiting))
    }
}
