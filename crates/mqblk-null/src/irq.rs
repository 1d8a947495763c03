//! The interrupt line of the timer completion mode (null_blk's per-request
//! hrtimer with `irqmode=2`, made one timer per hardware queue).
//!
//! A timerfd armed for the earliest pending deadline. The pending list is
//! in deadline order, so its head is that deadline: the timer is set when
//! the list turns non-empty and again whenever a poll takes its head away
//! (to the new head, or disarmed when the list is empty). Setting a timerfd
//! clears what it had signalled, so the fd is readable exactly while the
//! head is due, which is what the core's completion fd needs
//! ([`mqblk_core::driver::Driver::irq_fd`]). One `timerfd_settime` per poll
//! that completes something, none per request while the list is non-empty.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};

/// One hardware queue's timer.
#[derive(Debug)]
pub(crate) struct IrqTimer {
    fd: OwnedFd,
    /// The deadline it is set for (monotonic ns); 0 when disarmed.
    armed_ns: u64,
}

impl IrqTimer {
    /// A disarmed timer on CLOCK_MONOTONIC, the clock of
    /// [`mqblk_core::clock::now_ns`].
    pub(crate) fn new() -> std::io::Result<IrqTimer> {
        let fd = rustix::time::timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        Ok(IrqTimer { fd, armed_ns: 0 })
    }

    /// The fd the core watches.
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Fire at `at_ns` (monotonic), or disarm if `at_ns` is 0. Nothing to
    /// do if it is set for that already.
    pub(crate) fn set(&mut self, at_ns: u64) {
        if self.armed_ns == at_ns {
            return;
        }
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: (at_ns / 1_000_000_000) as i64,
                tv_nsec: (at_ns % 1_000_000_000) as _,
            },
        };
        // A monotonic clock in the past fires at once; the only errors are
        // a bad fd or a bad value, neither of which this can pass.
        if rustix::time::timerfd_settime(&self.fd, TimerfdTimerFlags::ABSTIME, &spec).is_ok() {
            self.armed_ns = at_ns;
        }
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    fn readable(t: &IrqTimer) -> bool {
        // A read would clear it: look with poll instead.
        let mut fds = [rustix::event::PollFd::new(
            &t.fd,
            rustix::event::PollFlags::IN,
        )];
        rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).unwrap() == 1
    }

    #[test]
    fn readable_once_due_and_quiet_after_being_set_again() {
        let mut t = IrqTimer::new().unwrap();
        assert!(!readable(&t), "a new timer is disarmed");
        let now = mqblk_core::clock::now_ns();
        t.set(now + 3_600_000_000_000);
        assert!(!readable(&t), "an hour away");
        t.set(now);
        assert!(readable(&t), "a deadline in the past fires at once");
        t.set(now + 3_600_000_000_000);
        assert!(!readable(&t), "setting it again clears the expiry");
        t.set(0);
        assert!(!readable(&t));
    }
}
