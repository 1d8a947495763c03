//! Waiting: the one loop every wait of a context goes through (Linux
//! `io_schedule` under `blk_mq_get_tag`, and `blk_hctx_poll` for polled
//! queues), and the completion fd a caller's event loop sleeps on.
//!
//! Below every stage that waits (tags, bio slots, the freeze, a blocking
//! call): the caller hands [`CtxState::reap_until`] its own step (what
//! moves its wait forward: dispatch, reap, deferred stages) and a bound,
//! so this file calls nothing above it. Between steps a context spins a
//! little, then sleeps on its hardware queue's notify, its driver's own
//! wait, or its completion fd (which the driver's interrupt line wakes).
//!
//! The bound: every request ends by its timeout (`timeout_ms`, checked as
//! requests are reaped), so a wait for this context's own I/O ends within
//! the timeout plus [`GRACE`]. A wait that passes its bound returns false
//! and the caller fails what it was waiting for with a typed status,
//! except a wait on memory a driver still holds, which must not return.

use std::sync::Arc;
use std::time::Duration;

use super::state::CtxState;
use crate::clock;
use crate::queue::DeviceInner;

/// Polls before a waiting context goes to sleep on its hardware queue.
const SPIN_POLLS: u32 = 256;
/// Longest sleep between polls for a driver that only completes when polled.
const POLL_SLEEP: Duration = Duration::from_micros(50);
/// Longest a driver's own wait blocks before the context looks around
/// (timeouts, freeze) again.
const DRIVER_WAIT: Duration = Duration::from_millis(10);
/// Longest sleep for a driver that notifies.
const NOTIFY_SLEEP: Duration = Duration::from_millis(10);
/// Added to the request timeout for waits that must end.
pub(super) const GRACE: Duration = Duration::from_secs(5);

/// What one step of a wait came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// What the wait was for has happened.
    Done,
    /// Not yet: back off, then step again.
    Again,
    /// Not yet, but the step got something done: step again at once, and
    /// start spinning afresh.
    Progress,
    /// Not yet, and the step slept already (on a tag's wait queue): step
    /// again at once.
    Slept,
}

/// How long a wait may last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bound {
    /// The request timeout plus [`GRACE`]: every request of this context
    /// ends by then.
    Timeout,
    /// At most this long.
    For(Duration),
    /// Until it is done: only for I/O on memory that a driver may still
    /// write, which no return may hand back (see `Context::submit_wait`).
    Ended,
}

impl CtxState {
    /// The wait's limit, from now.
    fn limit(&self, bound: Bound) -> Option<Duration> {
        match bound {
            Bound::Timeout => Some(Duration::from_millis(u64::from(self.timeout_ms)) + GRACE),
            Bound::For(d) => Some(d),
            Bound::Ended => None,
        }
    }

    /// Run `step` until it says [`Step::Done`], backing off between steps,
    /// for at most `bound`. True if done; false if the bound passed first.
    /// The clock is read only once the wait has spun without success.
    pub(super) fn reap_until(
        &mut self,
        dev: &DeviceInner,
        bound: Bound,
        mut step: impl FnMut(&mut CtxState, &DeviceInner) -> Step,
    ) -> bool {
        let limit = self.limit(bound);
        let mut spins = 0u32;
        let mut start_ns = 0u64;
        loop {
            let seen = dev.hw_queues[self.hwq as usize].notify.seq();
            match step(self, dev) {
                Step::Done => return true,
                Step::Slept => spins = SPIN_POLLS,
                Step::Progress => {
                    spins = 0;
                    continue;
                }
                Step::Again => self.backoff(dev, seen, &mut spins),
            }
            if spins >= SPIN_POLLS {
                if let Some(limit) = limit {
                    let now = clock::now_ns();
                    if start_ns == 0 {
                        start_ns = now;
                    } else if Duration::from_nanos(now - start_ns) > limit {
                        return false;
                    }
                }
            }
        }
    }

    /// One step of waiting: spin-poll for a while, then sleep on the
    /// hardware queue's futex (bounded), woken by a driver's notifier or a
    /// remote completion.
    fn backoff(&mut self, dev: &DeviceInner, seen: u32, spins: &mut u32) {
        let hq = &dev.hw_queues[self.hwq as usize];
        // A hardware queue of our own, with requests out: let the driver
        // block in its own completion source (one wakeup, no spinning), if
        // it can. The legacy modes keep the core's wait.
        if dev.driver_waits
            && self.in_flight > 0
            && matches!(dev.lock, crate::queue::QueueLock::None)
            && hq.nr_ctx.load(std::sync::atomic::Ordering::Relaxed) == 1
            && hq.lock().driver_wait(DRIVER_WAIT)
        {
            *spins = SPIN_POLLS;
            return;
        }
        if self.in_flight > 0 && !dev.completes_async && hq.irq.is_some() && !self.fd_degraded() {
            // A polled driver with an interrupt line, on a queue shared
            // with other contexts: sleep on this context's completion fd,
            // which the line wakes, and so does another context that
            // routes a completion here. No spinning: each spin would be a
            // poll of the driver.
            if let Ok(fd) = self.completion_fd(dev) {
                // Quiet the fd's own sources first, or the wait returns at
                // once for as long as the caller does not poll (a bio
                // waiting for a tag inside `submit` would spin): our
                // eventfd (what it announced is what the caller's loop is
                // about to look at) and a throttle timer that fired. A
                // notify since the caller looked (`seen`) means go round
                // again; one after this check signals the fd anew. The
                // public calls signal it again on their way out if
                // completions wait for the caller (`kick_fd`).
                self.quiet_fd();
                *spins = SPIN_POLLS;
                if hq.notify.seq() != seen {
                    return;
                }
                let mut t = NOTIFY_SLEEP;
                if let Some(until) = self.throttle_wait() {
                    t = t.min(until);
                }
                crate::sync::wait_readable(fd, t);
                return;
            }
        }
        *spins += 1;
        if *spins < SPIN_POLLS {
            std::hint::spin_loop();
            return;
        }
        let mut t = if dev.completes_async {
            NOTIFY_SLEEP
        } else {
            POLL_SLEEP
        };
        if let Some(until) = self.throttle_wait() {
            // A throttled bio's time is the timer this sleep must not miss.
            t = t.min(until);
        }
        hq.notify.wait(seen, t);
    }

    /// Read the completion fd's own sources so it is quiet again: the
    /// eventfd this context signalled, and a throttle timer that fired.
    pub(super) fn quiet_fd(&mut self) {
        if let Some(fd) = &self.efd {
            fd.drain();
            self.fd_signalled = false;
        }
        if let Some(t) = self.fd_timer.as_mut() {
            if t.is_armed() {
                t.clear_fired(clock::now_ns());
            }
        }
    }

    /// The completion fd (see `Context::completion_fd`), made on first
    /// use: an epoll set that watches the hardware queue's lines.
    pub(super) fn completion_fd(
        &mut self,
        dev: &DeviceInner,
    ) -> std::io::Result<std::os::fd::RawFd> {
        self.fd_sources(dev)?;
        let t = self.fd_timer.as_ref().expect("made by fd_sources");
        let (raw, set) = (t.raw(), t.set().clone());
        if !self.lines_watched {
            if let Some(lines) = &dev.hw_queues[self.hwq as usize].irq {
                // The hardware queue (and so its lines) outlives every
                // context on it; `release_fd` stops the watch.
                lines.watch(&set);
                self.lines_watched = true;
                self.irq_in_fd = true;
            }
        }
        Ok(raw)
    }

    /// Put this context's eventfd and timer, and its hardware queue's
    /// lines as they are and as they change, in `up` (see
    /// `Context::forward_irq_lines`), until the context is dropped.
    pub(super) fn forward_irq_lines(
        &mut self,
        dev: &DeviceInner,
        up: &crate::irq::IrqLines,
    ) -> std::io::Result<()> {
        if self.lent.is_some() {
            return Ok(());
        }
        self.fd_sources(dev)?;
        let event = self.efd.as_ref().expect("made by fd_sources").raw();
        let timer = self
            .fd_timer
            .as_ref()
            .expect("made by fd_sources")
            .timer_raw();
        up.add(event);
        up.add(timer);
        if let Some(lines) = &dev.hw_queues[self.hwq as usize].irq {
            lines.forward_to(up);
            self.irq_in_fd = true;
        }
        self.lent = Some(up.clone());
        self.kick_fd(dev);
        Ok(())
    }

    /// The eventfd and the timer behind the completion fd, made on first
    /// use.
    fn fd_sources(&mut self, dev: &DeviceInner) -> std::io::Result<()> {
        if self.fd_timer.is_none() {
            let fd = Arc::new(crate::sync::EventFd::new()?);
            let timer = crate::sync::FdTimer::new(&fd)?;
            dev.hw_queues[self.hwq as usize]
                .notify
                .subscribe_fd(fd.clone());
            self.efd = Some(fd);
            self.fd_timer = Some(timer);
            self.kick_fd(dev);
        }
        Ok(())
    }

    /// Take this context's fds out of every line set and notify list,
    /// before they are closed (the context is being dropped).
    pub(super) fn release_fd(&mut self, dev: &DeviceInner) {
        let hq = &dev.hw_queues[self.hwq as usize];
        if let (Some(t), Some(lines)) = (&self.fd_timer, &hq.irq) {
            if self.lines_watched {
                lines.unwatch(t.set());
            }
        }
        if let Some(up) = self.lent.take() {
            if let Some(lines) = &hq.irq {
                lines.unforward(&up);
            }
            if let (Some(e), Some(t)) = (&self.efd, &self.fd_timer) {
                up.remove(e.raw());
                up.remove(t.timer_raw());
            }
        }
        if let Some(fd) = self.efd.take() {
            hq.notify.unsubscribe_fd(&fd);
        }
    }

    /// True if the completion fd's set could not take one of the lines:
    /// then it does not hear them, and requests in flight keep it
    /// readable instead (the caller polls).
    #[inline]
    fn fd_degraded(&self) -> bool {
        self.fd_timer
            .as_ref()
            .is_some_and(|t| t.set().is_degraded())
    }

    /// How long a sleeper may go before a poll must look for timed-out
    /// requests (None: nothing in flight can time out).
    pub(super) fn timeout_recheck(&self) -> Option<Duration> {
        if self.in_flight == 0 || self.timeout_ms == 0 {
            return None;
        }
        // The coarse clock that deadlines are read from lags by up to a
        // few milliseconds: wake a little after.
        Some(Duration::from_millis(u64::from(self.timeout_ms) + 10))
    }

    /// A caller about to sleep on the completion fd with requests in
    /// flight: have the fd's timer fire by the time the oldest of them
    /// can have timed out, since only a poll notices a timeout (the
    /// blocking waits poll every few milliseconds; a sleeping future
    /// would not). A throttled bio's earlier time stays.
    pub(super) fn arm_timeout_wake(&mut self) {
        let Some(after) = self.timeout_recheck() else {
            return;
        };
        let Some(t) = self.fd_timer.as_mut() else {
            return;
        };
        let at = clock::now_ns() + after.as_nanos() as u64;
        let at = match self.throttled.front() {
            Some(&(first, _)) => first.min(at),
            None => at,
        };
        if !t.is_armed() || at < t.armed_at() {
            t.arm(at);
        }
    }

    /// Make the completion fd readable if polling would make progress.
    #[inline]
    pub(super) fn kick_fd(&mut self, dev: &DeviceInner) {
        // A throttled bio's time is the fd's timer.
        if let (Some(t), Some(&(at, _))) = (self.fd_timer.as_mut(), self.throttled.front()) {
            t.arm(at);
        }
        let Some(fd) = &self.efd else { return };
        // Readable already (this context signalled it and nobody polled
        // since): no second write. Disabled: the caller polls before it
        // waits.
        if self.fd_signalled || !self.fd_enabled {
            return;
        }
        if !self.ended.is_empty()
            || !self.plug.is_empty()
            || self.bio_plugged
            || !self.sw.is_empty()
            || self.flush.has_work()
            || (self.in_flight > 0
                && !dev.completes_async
                && (!self.irq_in_fd || self.fd_degraded()))
        {
            fd.signal();
            self.fd_signalled = true;
        }
    }
}
