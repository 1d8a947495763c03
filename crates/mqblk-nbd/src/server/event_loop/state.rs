//! The loop's state, at the bottom of the I/O thread's files: the
//! connection slots, the per-export contexts, the timers and the lists
//! that the loop (`mod.rs`), taking connections in (`accept.rs`) and
//! arming completion fds (`completion_fd.rs`) all work on.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

use mqblk_core::Context;

use super::log_limit::LogLimit;
use super::memory_wait::MemoryWait;
use super::peer::Peer;
use crate::server::conn::{Conn, Done};
use crate::server::shared::Shared;

/// The epoll token of export `i`'s completion fd: `CTX_BASE + i`.
pub(super) const CTX_BASE: u64 = 1 << 40;
/// The epoll token of connection slot `i`: `CONN_BASE + i`.
pub(super) const CONN_BASE: u64 = 1 << 48;

/// The per-export context of this thread.
pub(super) struct Ctx {
    pub(super) ctx: Context,
    /// The completion fd is in the epoll set. It is asked for only once
    /// the loop is about to sleep with requests still in flight: a device
    /// that completes within `poll` (ram, null) never needs it, and then
    /// pays no eventfd signal per submission.
    pub(super) fd_armed: bool,
    /// The completion fd could not be made or put in the epoll set: the
    /// loop polls this context at least every
    /// [`super::completion_fd::POLL_FALLBACK`] while it has requests in flight,
    /// rather than sleep on a set that would not wake for them.
    pub(super) fd_failed: bool,
    /// Connections that stopped taking requests because this context had
    /// no room: driven again when it reaps a completion.
    pub(super) waiting: Vec<u32>,
}

pub(super) struct Slot<'s> {
    pub(super) conn: Option<Conn<'s>>,
    pub(super) generation: u32,
}

/// The loop's state.
pub(super) struct Loop<'s> {
    pub(super) sh: &'s Shared,
    /// This thread's entry among the peers.
    pub(super) me: &'s Peer,
    pub(super) epoll: rustix::fd::OwnedFd,
    pub(super) slots: Vec<Slot<'s>>,
    pub(super) free: Vec<u32>,
    pub(super) ctxs: Vec<Option<Ctx>>,
    pub(super) timers: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    pub(super) done: Vec<Done>,
    /// Connections to drive again after this round's reaping.
    pub(super) woken: Vec<u32>,
    /// Connections to look at again before sleeping.
    pub(super) dirty: Vec<u32>,
    /// Connections waiting for the memory budget to free.
    pub(super) memory_wait: MemoryWait,
    pub(super) scratch: Box<[u8]>,
    pub(super) accepting: bool,
    /// After an accept error (out of descriptors, say), when to listen
    /// again: the listener stays readable, so it is taken out of the epoll
    /// set meanwhile rather than spun on.
    pub(super) accept_resume: Option<Instant>,
    pub(super) draining: bool,
    /// Refused connections being answered.
    pub(super) refusing: usize,
    pub(super) log: LogLimit,
}

impl Loop<'_> {
    pub(super) fn mark_dirty(&mut self, idx: u32) {
        if let Some(c) = self.slots[idx as usize].conn.as_mut() {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(idx);
            }
        }
    }
}
