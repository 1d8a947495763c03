//! One I/O thread of the server: an epoll loop over the listener, the
//! thread's connections, and one [`Context`] per export (whose completion
//! fd is in the same epoll set).
//!
//! Every I/O thread has the listener in its epoll set (`EPOLLEXCLUSIVE`,
//! so one thread wakes per new connection) and keeps what it accepts:
//! there is no hand-off between threads and no thread per connection.
//! Connections are edge-triggered; a connection that stops reading
//! because it hit its bounds remembers that its socket may still hold
//! input, and reads again when completions free room.
//!
//! Deadlines (handshake, stall, idle) sit in a min-heap; `epoll_wait`
//! sleeps until the earliest one. An entry that fires for a connection
//! whose deadline has moved on is re-armed, so the heap holds at most a
//! few entries per connection and nothing is scanned.
//!
//! Completions are reaped from the contexts into a per-thread list and
//! then routed to their connections (`bio.private` = connection index and
//! slot): a completion never runs inside a submission.
//!
//! Connections that stopped because the server's memory budget is past
//! its soft mark wait in a per-thread list, and are driven again when any
//! thread has freed memory since (looked at on every wake-up, and at least
//! every `BUDGET_RETRY` while some wait).
//!
//! By call order: this file (the loop: wait, dispatch, drive, settle),
//! `accept` (taking connections in, under `admission` and across
//! `peer`s), `completion_fd` (arming the contexts' fds), `state` (what
//! they all work on), then `memory_wait` and `log_limit`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::event::epoll;

use super::conn::{Done, End};

mod accept;

mod admission;
mod completion_fd;
mod log_limit;
mod memory_wait;
mod peer;
mod state;

use super::shared::{Listener, Shared};
pub(crate) use admission::Admission;
pub(crate) use log_limit::LogLimit;
use memory_wait::{MemoryWait, BUDGET_RETRY};
pub(crate) use peer::Peer;
use state::{Ctx, Loop, CONN_BASE, CTX_BASE};

const LISTENER: u64 = 0;
const WAKE: u64 = 1;
const INBOX: u64 = 2;

/// Events taken per `epoll_wait`.
const EVENTS_MAX: usize = 256;
/// Scratch bytes for reading requests: many headers per `read`.
pub(crate) const SCRATCH_BYTES: usize = 64 * 1024;

/// Run one I/O thread until shutdown has drained it.
pub(crate) fn run(
    sh: &Shared,
    listener: &Listener,
    admission: &Mutex<Admission>,
    me: usize,
    peers: &[Peer],
) {
    let epoll = match epoll::create(epoll::CreateFlags::CLOEXEC) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("mqblk serve: epoll_create: {e}");
            return;
        }
    };
    let lfd = listener.as_fd();
    let add = epoll::add(
        &epoll,
        lfd,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN | epoll::EventFlags::EXCLUSIVE,
    )
    .and_then(|()| {
        epoll::add(
            &epoll,
            sh.wake.0.as_fd(),
            epoll::EventData::new_u64(WAKE),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )
    })
    .and_then(|()| {
        epoll::add(
            &epoll,
            peers[me].wake.0.as_fd(),
            epoll::EventData::new_u64(INBOX),
            epoll::EventFlags::IN,
        )
    });
    if let Err(e) = add {
        eprintln!("mqblk serve: epoll_ctl: {e}");
        return;
    }
    let mut lp = Loop {
        sh,
        me: &peers[me],
        epoll,
        slots: Vec::new(),
        free: Vec::new(),
        ctxs: (0..sh.exports.len()).map(|_| None).collect(),
        timers: BinaryHeap::new(),
        done: Vec::with_capacity(256),
        woken: Vec::new(),
        dirty: Vec::with_capacity(64),
        memory_wait: MemoryWait::default(),
        scratch: vec![0u8; SCRATCH_BYTES].into_boxed_slice(),
        accepting: true,
        accept_resume: None,
        draining: false,
        refusing: 0,
        log: LogLimit::default(),
    };
    let mut events: Vec<epoll::Event> = Vec::with_capacity(EVENTS_MAX);
    loop {
        if sh.shutdown.load(Ordering::Relaxed) && !lp.draining {
            lp.start_drain(lfd);
        }
        if lp.draining && lp.open_conns() == 0 {
            break;
        }
        if let Some(at) = lp.accept_resume {
            if Instant::now() >= at {
                lp.accept_resume = None;
                if lp.accepting {
                    let again = epoll::add(
                        &lp.epoll,
                        lfd,
                        epoll::EventData::new_u64(LISTENER),
                        epoll::EventFlags::IN | epoll::EventFlags::EXCLUSIVE,
                    );
                    if let Err(e) = again {
                        eprintln!("mqblk serve: epoll_ctl: {e}");
                        break;
                    }
                }
            }
        }
        let rearmed = lp.arm_completion_fds();
        let timeout = if rearmed {
            Some(rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            })
        } else {
            lp.next_timeout()
        };
        let timeout = lp.cap_for_polling(timeout);
        let timeout = match lp.accept_resume {
            Some(at) => {
                // Round up to a whole millisecond, as next_timeout does.
                let d =
                    at.saturating_duration_since(Instant::now()) + Duration::from_nanos(999_999);
                let resume = rustix::event::Timespec {
                    tv_sec: d.as_secs() as i64,
                    tv_nsec: i64::from(d.subsec_millis()) * 1_000_000,
                };
                Some(match timeout {
                    Some(t) if (t.tv_sec, t.tv_nsec) < (resume.tv_sec, resume.tv_nsec) => t,
                    _ => resume,
                })
            }
            None => timeout,
        };
        events.clear();
        let r = epoll::wait(
            &lp.epoll,
            rustix::buffer::spare_capacity(&mut events),
            timeout.as_ref(),
        );
        match r {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => {
                eprintln!("mqblk serve: epoll_wait: {e}");
                break;
            }
        }
        let now = Instant::now();
        for ev in &events {
            let token = ev.data.u64();
            let flags = ev.flags;
            if token == LISTENER {
                if lp.accepting {
                    lp.accept_all(listener, admission, now, me, peers);
                }
            } else if token == INBOX {
                let mut b = [0u8; 64];
                while matches!((&peers[me].wake.0).read(&mut b), Ok(n) if n > 0) {}
                let handed =
                    std::mem::take(&mut *peers[me].inbox.lock().unwrap_or_else(|p| p.into_inner()));
                for limbo in handed {
                    lp.insert(limbo, now, admission);
                }
            } else if token == WAKE {
                // The shutdown flag is looked at on top of the loop.
            } else if token >= CONN_BASE {
                let idx = (token - CONN_BASE) as u32;
                lp.conn_event(idx, flags, now);
            } else if token >= CTX_BASE {
                // Reaped below, with every context.
            }
        }
        lp.expire(now, admission);
        lp.settle(now, admission);
    }
    // Nothing may stay in flight: the bios own our buffers and our
    // contexts must outlive them.
    for c in lp.ctxs.iter_mut().flatten() {
        while c.ctx.in_flight() > 0 {
            c.ctx.poll_wait(1, |_| {});
        }
    }
}

impl<'s> Loop<'s> {
    fn open_conns(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn start_drain(&mut self, lfd: BorrowedFd<'_>) {
        self.draining = true;
        self.accepting = false;
        let _ = epoll::delete(&self.epoll, lfd);
        for i in 0..self.slots.len() as u32 {
            if let Some(c) = self.slots[i as usize].conn.as_mut() {
                c.start_drain();
                self.mark_dirty(i);
            }
        }
    }

    fn next_timeout(&mut self) -> Option<rustix::event::Timespec> {
        if !self.dirty.is_empty() || self.ctxs_busy() {
            return Some(rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            });
        }
        let retry = self
            .ctxs
            .iter()
            .flatten()
            .any(|c| c.ctx.in_flight() == 0 && !c.waiting.is_empty());
        let budget = self.memory_wait.any();
        let Some(Reverse((at, _, _))) = self.timers.peek() else {
            return match (retry, budget) {
                (true, _) => Some(rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 1_000_000,
                }),
                (false, true) => Some(rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: BUDGET_RETRY.as_nanos() as i64,
                }),
                (false, false) => None,
            };
        };
        let mut d = at.saturating_duration_since(Instant::now());
        if retry {
            d = d.min(Duration::from_micros(1));
        }
        if budget {
            d = d.min(BUDGET_RETRY);
        }
        // Round up to a whole millisecond: waking early only to sleep
        // again would be a busy loop.
        let d = d + Duration::from_nanos(999_999);
        Some(rustix::event::Timespec {
            tv_sec: d.as_secs() as i64,
            tv_nsec: i64::from(d.subsec_millis()) * 1_000_000,
        })
    }

    /// True while a context holds completions or plugged bios that its
    /// fd may not announce (work queued by this thread itself).
    fn ctxs_busy(&self) -> bool {
        self.ctxs.iter().flatten().any(|c| c.ctx.ready() > 0)
    }

    fn conn_event(&mut self, idx: u32, flags: epoll::EventFlags, _now: Instant) {
        let Some(c) = self
            .slots
            .get_mut(idx as usize)
            .and_then(|s| s.conn.as_mut())
        else {
            return;
        };
        if flags.intersects(
            epoll::EventFlags::IN
                | epoll::EventFlags::RDHUP
                | epoll::EventFlags::HUP
                | epoll::EventFlags::ERR,
        ) {
            c.readable = true;
        }
        if flags
            .intersects(epoll::EventFlags::RDHUP | epoll::EventFlags::HUP | epoll::EventFlags::ERR)
        {
            c.peer_closed = true;
        }
        if flags.intersects(epoll::EventFlags::OUT | epoll::EventFlags::HUP) {
            c.writable = true;
        }
        self.mark_dirty(idx);
    }

    /// Drive every dirty connection and every context until nothing moves.
    fn settle(&mut self, now: Instant, admission: &Mutex<Admission>) {
        let mut rounds = 0u32;
        // Connections waiting on a context with nothing in flight wait for
        // tags that other threads hold: nothing of ours will complete to
        // wake them, so they try again once per wake-up (`next_timeout`
        // makes that at least once a millisecond).
        for i in 0..self.ctxs.len() {
            let w = match self.ctxs[i].as_mut() {
                Some(c) if c.ctx.in_flight() == 0 && !c.waiting.is_empty() => {
                    std::mem::take(&mut c.waiting)
                }
                _ => continue,
            };
            self.wake_waiting(&w);
        }
        // Connections waiting for memory try again once some was freed.
        if let Some(woken) = self.memory_wait.take_if_freed(&self.sh.budget) {
            for idx in woken {
                if let Some(c) = self.slots[idx as usize].conn.as_mut() {
                    c.budget_waiting = false;
                }
                self.mark_dirty(idx);
            }
        }
        loop {
            // 1. Connections: read, parse, submit, write.
            let mut i = 0;
            while i < self.dirty.len() {
                let idx = self.dirty[i];
                i += 1;
                self.drive(idx, now, admission);
            }
            self.dirty.clear();
            // 2. Contexts: issue what is plugged, reap what is done.
            let mut reaped = 0;
            for slot in self.ctxs.iter_mut() {
                let Some(c) = slot.as_mut() else { continue };
                let done = &mut self.done;
                let n = c.ctx.poll(|comp| {
                    let private = comp.private();
                    let status = comp.status();
                    done.push(Done {
                        private,
                        status,
                        bio: comp.into_bio(),
                    });
                });
                reaped += n;
                if n > 0 && !c.waiting.is_empty() {
                    self.woken.append(&mut c.waiting);
                }
            }
            let woken = std::mem::take(&mut self.woken);
            self.wake_waiting(&woken);
            self.woken = woken;
            self.woken.clear();
            // 3. Route completions to their connections.
            let mut done = std::mem::take(&mut self.done);
            for d in done.drain(..) {
                let idx = (d.private >> 32) as u32;
                debug_assert!((idx as usize) < self.slots.len());
                if let Some(c) = self.slots[idx as usize].conn.as_mut() {
                    c.complete(d);
                    self.mark_dirty(idx);
                }
            }
            self.done = done;
            rounds += 1;
            if (self.dirty.is_empty() && reaped == 0) || rounds >= SETTLE_ROUNDS_MAX {
                break;
            }
        }
    }

    /// Drive again the connections in `idx` that wait for room.
    fn wake_waiting(&mut self, idx: &[u32]) {
        for &i in idx {
            if let Some(c) = self.slots[i as usize].conn.as_mut() {
                c.waiting = false;
            }
            self.mark_dirty(i);
        }
    }

    fn ctx_for(&mut self, export: usize) -> Result<(), End> {
        if self.ctxs[export].is_none() {
            let dev = &self.sh.exports[export].device;
            let ctx = dev
                .context()
                .map_err(|e| End::Dropped(format!("no context: {e}")))?;
            self.ctxs[export] = Some(Ctx {
                ctx,
                fd_armed: false,
                fd_failed: false,
                waiting: Vec::new(),
            });
        }
        Ok(())
    }

    /// Drive one connection as far as it goes without blocking.
    fn drive(&mut self, idx: u32, now: Instant, admission: &Mutex<Admission>) {
        let Some(mut conn) = self.slots[idx as usize].conn.take() else {
            return;
        };
        conn.dirty = false;
        let mut result;
        // A connection in transmission needs its export's context.
        if let Some(export) = conn.export() {
            result = self.ctx_for(export);
            if let (Ok(()), Some(c)) = (&result, self.ctxs[export].as_mut()) {
                result = conn.drive(
                    Some((&mut c.ctx, &mut self.done)),
                    idx,
                    &mut self.scratch,
                    now,
                );
            }
        } else {
            result = conn.drive(None, idx, &mut self.scratch, now);
            // Negotiation may have just finished: go round again with the
            // context.
            if result.is_ok() && conn.export().is_some() {
                conn.dirty = true;
                self.dirty.push(idx);
            }
        }
        if let Err(end) = result {
            if let Some(line) = conn.fail(end, self.sh) {
                self.log.line(now, format_args!("{line}"));
            }
        }
        if conn.more {
            conn.dirty = true;
            self.dirty.push(idx);
        }
        if conn.stalled {
            conn.stalled = false;
            if let Some(c) = conn.export().and_then(|e| self.ctxs[e].as_mut()) {
                if !conn.waiting {
                    conn.waiting = true;
                    c.waiting.push(idx);
                }
            }
        }
        if conn.over_budget {
            conn.over_budget = false;
            if !conn.budget_waiting {
                conn.budget_waiting = true;
                self.memory_wait.park(idx, &self.sh.budget, now);
            }
        }
        if conn.finished() {
            let _ = epoll::delete(&self.epoll, conn.fd());
            if conn.is_refusal() {
                self.refusing -= 1;
            } else {
                self.release(conn.peer(), admission);
            }
            self.me.conns.fetch_sub(1, Ordering::Relaxed);
            conn.close(self.sh);
            self.slots[idx as usize].generation =
                self.slots[idx as usize].generation.wrapping_add(1);
            self.free.push(idx);
            return;
        }
        // Arm a timer if the connection's deadline moved earlier.
        if let Some(at) = conn.deadline() {
            if conn.timer_at.is_none_or(|t| at < t) {
                conn.timer_at = Some(at);
                let generation = self.slots[idx as usize].generation;
                self.timers.push(Reverse((at, idx, generation)));
            }
        }
        self.slots[idx as usize].conn = Some(conn);
    }

    /// Fire the deadlines that are due.
    fn expire(&mut self, now: Instant, admission: &Mutex<Admission>) {
        while let Some(&Reverse((at, idx, generation))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            let slot = &mut self.slots[idx as usize];
            if slot.generation != generation {
                continue;
            }
            let Some(c) = slot.conn.as_mut() else {
                continue;
            };
            if c.timer_at != Some(at) {
                // A newer entry stands for this connection.
                continue;
            }
            c.timer_at = None;
            match c.deadline() {
                Some(d) if d <= now => {
                    let why = c.expired(self.sh);
                    self.log.line(now, format_args!("{why}"));
                    self.mark_dirty(idx);
                }
                Some(d) => {
                    c.timer_at = Some(d);
                    self.timers.push(Reverse((d, idx, generation)));
                }
                None => {}
            }
        }
        let _ = admission;
    }
}

/// Rounds of connections and contexts per wake-up before sleeping: the
/// loop goes back to epoll (with a zero timeout if work remains), so new
/// connections and deadlines are never starved.
const SETTLE_ROUNDS_MAX: u32 = 64;
