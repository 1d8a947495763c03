//! Completion: reaping the ring, waiting on it, the interrupt line kept
//! quiet, and timeouts (a cancel entry for the request at the tag).

use std::os::fd::AsRawFd;

use io_uring::opcode;
use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::driver::{Completions, TimeoutAction};
use mqblk_core::error::Status;

use crate::info::note;
use crate::target::MAX_RETRIES;

use super::queue::*;
use super::ring::Flavor;
use super::setup::tid;

impl UringQueue {
    /// Reap completions into `done`.
    #[inline]
    pub fn poll(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = match self.side.as_mut() {
            Some(side) => side.poll(done),
            None => 0,
        };
        if self.in_flight == 0 {
            if self.line_dirty {
                n += self.quiet_line(done);
            }
            return n;
        }
        if self.unsubmitted > 0 {
            self.submit();
        }
        n += self.reap(done);
        if n == 0 && self.should_enter() {
            self.getevents();
            n += self.reap(done);
        }
        // While every poll finds completions the line is left alone: a
        // waiter that wakes for it finds completions, or quiets it.
        if self.line_dirty && (n == 0 || self.in_flight == 0) {
            n += self.quiet_line(done);
        }
        if self.iopoll_refused {
            self.iopoll_refused = false;
            let before = done.len();
            self.drop_iopoll(done);
            n += done.len() - before;
        }
        if !self.resubmit.is_empty() {
            self.resubmit_pending();
        }
        n
    }

    /// Block until the completion queue has an entry or `timeout` passes:
    /// one `io_uring_enter(GETEVENTS, min_complete=1)` with a timeout, as
    /// fio waits. False when this thread may not wait on the ring (a
    /// DEFER_TASKRUN ring owned by another thread).
    pub fn wait(&mut self, timeout: std::time::Duration) -> bool {
        if self.in_flight == 0 || !self.ring.completion().is_empty() {
            return true;
        }
        if self.flavor == Flavor::Defer && self.owner != tid() {
            return false;
        }
        if self.cfg.sqpoll_idle_ms.is_some() {
            return false;
        }
        let ts = io_uring::types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = io_uring::types::SubmitArgs::new().timespec(&ts);
        // Submits anything still queued and waits for one completion;
        // ETIME (timeout) and EINTR are fine: the caller polls again.
        match self.ring.submitter().submit_with_args(1, &args) {
            Ok(n) => {
                self.unsubmitted -= (n as u32).min(self.unsubmitted);
                true
            }
            Err(e)
                if e.raw_os_error() == Some(libc::ETIME)
                    || e.raw_os_error() == Some(libc::EINTR) =>
            {
                true
            }
            Err(_) => false,
        }
    }

    /// Request `tag` has timed out (see the module's doc).
    #[cold]
    pub fn timeout(&mut self, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        let t = tag as usize;
        let on_ring = self.slots.get(t).is_some_and(|s| s.rq.is_some());
        if !on_ring {
            // A discard on the side queue, or finished and not yet reaped.
            return match self.side.as_mut() {
                Some(side) => side.timeout(tag, done),
                None => TimeoutAction::ResetTimer,
            };
        }
        // Waiting to be resubmitted (short or EAGAIN): nothing of it is in
        // the kernel, so it ends here.
        if let Some(pos) = self.resubmit.iter().position(|&r| r == tag) {
            self.resubmit.swap_remove(pos);
            let rq = self.slots[t].rq.take().expect("checked above");
            debug_assert!(self.in_flight > 0);
            self.in_flight -= 1;
            done.complete(rq, Status::Timeout);
            return TimeoutAction::Done;
        }
        self.slots[t].timed_out = true;
        let preflush = self.slots[t]
            .rq
            .as_ref()
            .is_some_and(|rq| rq.op() == Op::Write && rq.flags().contains(BioFlags::PREFLUSH));
        let targets = [UD_MAIN | u64::from(tag), UD_PREFLUSH | u64::from(tag)];
        let n = if preflush { 2 } else { 1 };
        for &ud in &targets[..n] {
            if !self.sq_has_room(1) {
                self.submit();
                if !self.sq_has_room(1) {
                    // Asked again next period.
                    break;
                }
            }
            let e = opcode::AsyncCancel::new(ud)
                .build()
                .user_data(UD_CANCEL | u64::from(tag));
            self.push(&e);
        }
        self.submit();
        // The kernel holds it until the cancel (or the I/O) lands.
        match self.slots[t].rq.as_ref() {
            Some(rq) => TimeoutAction::Held(mqblk_core::Overdue::of(rq)),
            None => TimeoutAction::ResetTimer,
        }
    }

    /// Quiet the interrupt line after `poll` took completions, once the
    /// ring goes quiet (see the module's doc): drain the eventfd, then take what was posted in the
    /// meantime and run the task work that was queued (its signal went
    /// with the drain). Anything taken may have signalled after the
    /// drain: go round again, a bounded number of times (past that the
    /// line stays marked, and the next `poll` quiets it). Returns the
    /// requests completed.
    pub(super) fn quiet_line(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        for _ in 0..LINE_QUIET_ROUNDS {
            let Some(line) = &self.line else {
                self.line_dirty = false;
                return n;
            };
            self.line_dirty = false;
            let mut count = 0u64;
            // SAFETY: read writes 8 bytes into `count`, a live local; the
            // eventfd is non-blocking (EAGAIN: it was quiet already).
            unsafe { libc::read(line.as_raw_fd(), (&mut count as *mut u64).cast(), 8) };
            n += self.reap(done);
            if self.should_enter() {
                self.getevents();
                n += self.reap(done);
            }
            if !self.line_dirty {
                break;
            }
        }
        n
    }

    /// Must we enter the kernel for completions to show up?
    #[inline]
    pub(super) fn should_enter(&mut self) -> bool {
        if self.cfg.iopoll {
            return true;
        }
        match self.flavor {
            Flavor::Plain => false,
            Flavor::Coop => self.ring.submission().taskrun(),
            Flavor::Defer => self.owner == tid() && self.ring.submission().taskrun(),
        }
    }

    #[inline]
    pub(super) fn getevents(&mut self) {
        let flags = io_uring::EnterFlags::GETEVENTS.bits();
        // SAFETY: no submissions and no argument; only runs completion
        // work and (IOPOLL) polls the device.
        let _ = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(0, 0, flags, None)
        };
        // The task work it ran signalled the line, completions or not.
        self.line_dirty = self.line.is_some();
    }

    #[inline]
    pub(super) fn reap(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        let iopoll = self.cfg.iopoll;
        let Self {
            ring,
            slots,
            resubmit,
            in_flight,
            iopoll_refused,
            line,
            line_dirty,
            ..
        } = self;
        let mut cq = ring.completion();
        // Each completion posted signalled the line.
        *line_dirty |= line.is_some() && !cq.is_empty();
        for cqe in &mut cq {
            let ud = cqe.user_data();
            let res = cqe.result();
            let tag = (ud & 0xffff_ffff) as usize;
            debug_assert!(tag < slots.len(), "completion for unknown tag {tag}");
            if ud & UD_CANCEL != 0 {
                continue;
            }
            let slot = &mut slots[tag];
            if ud & UD_PREFLUSH != 0 {
                if res < 0 {
                    slot.status = Status::from_errno(-res);
                }
                continue;
            }
            let Some(rq) = slot.rq.as_ref() else {
                debug_assert!(false, "completion for idle tag {tag}");
                continue;
            };
            let status = match rq.op() {
                // Whatever it ended with, the core has given up on it.
                _ if slot.timed_out => Status::Timeout,
                Op::Read | Op::Write if res >= 0 => {
                    slot.done_bytes += res as u64;
                    if slot.done_bytes >= rq.len_bytes() {
                        slot.status
                    } else if res == 0 {
                        // End of file (truncated under us) or of device:
                        // never pass a short transfer off as success.
                        Status::IoError
                    } else {
                        debug_assert!(resubmit.len() < resubmit.capacity());
                        resubmit.push(tag as u32);
                        continue;
                    }
                }
                // Try again (EAGAIN, EINTR), whatever the op: a flush or
                // a fallocate answered EAGAIN is resubmitted as a read or
                // write is, never handed up as the caller's error while
                // retries remain. EOPNOTSUPP on a polled ring is a read's
                // or write's only.
                op if (res == -libc::EAGAIN
                    || res == -libc::EINTR
                    || (res == -libc::EOPNOTSUPP
                        && iopoll
                        && matches!(op, Op::Read | Op::Write)))
                    && slot.retries < MAX_RETRIES
                    && slot.status.is_ok() =>
                {
                    *iopoll_refused |= res == -libc::EOPNOTSUPP;
                    slot.retries += 1;
                    debug_assert!(resubmit.len() < resubmit.capacity());
                    resubmit.push(tag as u32);
                    continue;
                }
                _ if !slot.status.is_ok() => slot.status,
                _ if res < 0 => Status::from_errno(-res),
                _ => Status::Ok,
            };
            let rq = slot.rq.take().expect("checked above");
            debug_assert!(*in_flight > 0);
            *in_flight -= 1;
            done.complete(rq, status);
            n += 1;
        }
        n
    }

    /// The first polled read or write answered EOPNOTSUPP: the file cannot
    /// be polled after all. Let the rest of the ring's I/O finish, then
    /// carry on with a ring without IOPOLL, resubmitting what failed.
    #[cold]
    pub(super) fn drop_iopoll(&mut self, done: &mut Completions<'_>) {
        let mut steps = 0u32;
        while self.in_flight as usize > self.resubmit.len() && steps < 100_000 {
            steps += 1;
            self.getevents();
            self.reap(done);
        }
        if self.in_flight as usize > self.resubmit.len() {
            return;
        }
        self.cfg.iopoll = false;
        if self.replace_ring(true, tid()) {
            note(
                &self.notes,
                format!(
                    "iopoll=1: the first polled I/O answered EOPNOTSUPP; hardware queue {} \
                     fell back to interrupt-driven completions",
                    self.index
                ),
            );
        } else {
            self.cfg.iopoll = true;
        }
    }
}
