//! A server connection's state, one layer above its wire (`wire.rs`) and
//! its reply queue (`out.rs`): where it is in the protocol, its request
//! slots, and its cache of data buffers. The files above (`reply.rs`,
//! `request.rs`, `handshake.rs`, and the public face in `mod.rs`) are each
//! one stage of the state machine over this [`Conn`].

use std::io;
use std::net::IpAddr;
use std::time::Instant;

use mqblk_core::{Device, IoBuf};
use mqblk_nbd_proto::{Negotiation, Request, Session};

use super::out::{Out, OutQueue};
use super::wire::Wire;
use crate::server::shared::{ConnLimits, Shared};

/// Why a connection ended early.
#[derive(Debug)]
pub(crate) enum End {
    /// The peer closed or aborted: nothing wrong.
    Closed,
    /// The peer broke the protocol or stalled.
    Dropped(String),
    /// The socket failed.
    Io(io::Error),
}

/// Smallest data buffer class (one page).
pub(super) const MIN_CLASS_SHIFT: u32 = 12;
/// Buffer size classes: 4 KiB .. 64 MiB.
const NR_CLASSES: usize = 15;

/// A request between submission and reply.
#[derive(Clone, Copy, Default)]
pub(super) struct Slot {
    pub(super) cookie: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
    pub(super) cmd: u16,
    pub(super) fast_zero: bool,
}

/// A write whose payload has not all arrived.
pub(super) struct Pending {
    pub(super) req: Request,
    pub(super) buf: IoBuf,
    pub(super) got: usize,
    pub(super) len: usize,
}

/// Where the connection is in the protocol.
pub(super) enum Phase<'s> {
    /// Negotiating.
    Handshake {
        neg: Box<Negotiation<'s>>,
        got_flags: bool,
        /// `STARTTLS` was acknowledged: start TLS once the ack is out.
        tls_next: bool,
    },
    /// Refused: answer the first option with the reason, then close.
    Refusing { reason: String, got_flags: bool },
    /// Serving requests.
    Transmission(Session),
}

/// How a connection is ending.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Closing {
    /// Send what is queued (and TLS close_notify), then close.
    Graceful,
    /// Close now; only wait for the I/O in flight.
    Abort,
}

/// One connection.
pub(crate) struct Conn<'s> {
    pub(super) sh: &'s Shared,
    pub(super) wire: Wire,
    pub(super) phase: Phase<'s>,
    pub(super) peer: Option<IpAddr>,
    pub(super) limits: ConnLimits,
    /// Unparsed input: a partial header, negotiation bytes, or requests
    /// held back by the bounds.
    pub(super) stash: Vec<u8>,
    pub(super) pending: Option<Pending>,
    /// Negotiation output not yet sent.
    pub(super) hs_out: Vec<u8>,
    /// Replies not yet sent.
    pub(super) out: OutQueue,
    pub(super) slots: Vec<Slot>,
    pub(super) free_slots: Vec<u32>,
    pub(super) cache: [Vec<IoBuf>; NR_CLASSES],
    pub(super) cached_bytes: u64,
    pub(super) held_bytes: u64,
    /// Bytes of the server's budget taken for a buffer not yet allocated.
    pub(super) prepaid_bytes: u64,
    /// Bytes of the server's budget taken for the queued replies that hold
    /// no data buffer (errors, block status): the reply queue's
    /// `meta_bytes` as of the last [`Conn::settle_meta_budget`].
    pub(super) meta_charged: u64,
    pub(super) submitted: u32,
    pub(super) busy_slots: u32,
    pub(super) device: Option<Device>,
    /// The socket may have input (edge-triggered: cleared on `WouldBlock`).
    pub(crate) readable: bool,
    /// The peer shut its side, or the socket failed: input ends with
    /// what is queued, and is read to its end (not stopped at a short
    /// read).
    pub(crate) peer_closed: bool,
    /// The socket may take output.
    pub(crate) writable: bool,
    /// In the loop's dirty list.
    pub(crate) dirty: bool,
    /// The deadline the loop's timer heap holds for us.
    pub(crate) timer_at: Option<Instant>,
    /// Stopped reading after `READS_PER_WAKE` reads with input left.
    pub(crate) more: bool,
    /// Stopped taking requests because the export's context had no room
    /// (every tag in use): the loop drives us again once it reaps a
    /// completion of that context. The requests wait in the socket.
    pub(crate) stalled: bool,
    /// In its export context's list of connections waiting for room.
    pub(crate) waiting: bool,
    /// Stopped taking requests because the server's memory budget is past
    /// its soft mark and this connection holds more than its share: the
    /// loop drives it again when memory frees.
    pub(crate) over_budget: bool,
    /// In its thread's list of connections waiting for memory.
    pub(crate) budget_waiting: bool,
    pub(super) accepted_at: Instant,
    pub(super) last_active: Instant,
    pub(super) partial_since: Option<Instant>,
    pub(super) blocked_since: Option<Instant>,
    pub(super) draining: bool,
    pub(super) closing: Option<Closing>,
    pub(super) requests: u64,
    pub(super) errors: u64,
}

pub(super) fn class_of(len: usize) -> usize {
    let c = len
        .max(1 << MIN_CLASS_SHIFT)
        .next_power_of_two()
        .trailing_zeros()
        - MIN_CLASS_SHIFT;
    (c as usize).min(NR_CLASSES - 1)
}

impl Conn<'_> {
    pub(super) fn session(&self) -> &Session {
        match &self.phase {
            Phase::Transmission(s) => s,
            _ => unreachable!("only called in transmission"),
        }
    }

    pub(super) fn structured(&self) -> bool {
        matches!(&self.phase, Phase::Transmission(s) if s.structured)
    }

    pub(super) fn device(&self) -> &Device {
        self.device.as_ref().expect("set when transmission starts")
    }

    /// Bytes of the server's memory budget this connection holds: its
    /// buffers in use, in its cache, and paid for ahead.
    pub(super) fn owned_bytes(&self) -> u64 {
        self.held_bytes + self.cached_bytes + self.prepaid_bytes + self.meta_charged
    }

    /// Bring the budget's count of this connection's data-less replies up
    /// to date (after a round of requests and replies). They are charged
    /// as they come, not asked for: each is small, and a connection past
    /// its share takes no requests that would queue more (`request.rs`).
    pub(super) fn settle_meta_budget(&mut self) {
        let now = self.out.meta_bytes() as u64;
        if now > self.meta_charged {
            self.sh.budget.charge(now - self.meta_charged);
        } else {
            self.sh.budget.credit(self.meta_charged - now);
        }
        self.meta_charged = now;
    }

    /// Make sure a buffer for `len` bytes can be had without breaking the
    /// server's memory budget: one in the cache, or one paid for now.
    /// False: the budget says wait (the connection stops taking requests
    /// until memory frees).
    pub(super) fn budget_for(&mut self, len: usize) -> bool {
        let c = class_of(len);
        let size = 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        if !self.cache[c].is_empty() || self.prepaid_bytes >= size {
            return true;
        }
        if self.sh.budget.try_charge(self.owned_bytes(), size) {
            self.prepaid_bytes += size;
            return true;
        }
        false
    }

    pub(super) fn get_buf(&mut self, len: usize) -> IoBuf {
        let c = class_of(len);
        let size = 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        self.held_bytes += size;
        if let Some(b) = self.cache[c].pop() {
            self.cached_bytes -= b.len() as u64;
            return b;
        }
        // New memory: paid for by `budget_for` (which every request that
        // takes a buffer passes first).
        debug_assert!(self.prepaid_bytes >= size, "a buffer not paid for");
        self.prepaid_bytes = self.prepaid_bytes.saturating_sub(size);
        self.device().alloc_buf(size as usize)
    }

    /// A buffer comes back: kept in the cache while the connection's bound
    /// and the server's budget allow, else freed and given back to the
    /// budget.
    pub(super) fn put_buf(&mut self, buf: IoBuf) {
        let c = class_of(buf.len());
        let size = 1u64 << (c as u32 + MIN_CLASS_SHIFT);
        debug_assert!(self.held_bytes >= size);
        self.held_bytes -= size;
        if self.closing.is_none()
            && buf.len() as u64 == size
            && self.cached_bytes + self.held_bytes + size <= self.limits.max_bytes
            && self.sh.budget.may_cache(size)
        {
            self.cached_bytes += size;
            self.cache[c].push(buf);
        } else {
            // Freed, not pooled: memory the budget no longer counts must
            // not stay allocated.
            drop(buf);
            self.sh.budget.credit(size);
        }
    }

    /// Free the cache and what was paid ahead, and give them back to the
    /// budget (the connection is closing).
    pub(super) fn release_budget(&mut self) {
        self.settle_meta_budget();
        for c in self.cache.iter_mut() {
            c.clear();
        }
        self.sh
            .budget
            .credit(self.cached_bytes + self.prepaid_bytes);
        self.cached_bytes = 0;
        self.prepaid_bytes = 0;
    }

    pub(super) fn take_slot(&mut self, s: Slot) -> u32 {
        let idx = match self.free_slots.pop() {
            Some(i) => i,
            None => {
                debug_assert!(self.slots.len() < self.limits.max_requests as usize);
                self.slots.push(Slot::default());
                (self.slots.len() - 1) as u32
            }
        };
        debug_assert!((idx as usize) < self.slots.len());
        self.slots[idx as usize] = s;
        self.busy_slots += 1;
        idx
    }

    pub(super) fn free_slot(&mut self, idx: u32) {
        debug_assert!(self.busy_slots > 0);
        self.busy_slots -= 1;
        self.free_slots.push(idx);
    }

    /// A reply leaves the queue (sent, or dropped with the connection).
    pub(super) fn drop_out(&mut self, o: Out) {
        match o {
            Out::Data { data, .. } | Out::Sparse { data, .. } => self.put_buf(data),
            Out::Small { .. } | Out::Bytes(_) => {}
        }
    }
}
