//! A driver's deadline timer for its interrupt line (Linux's hrtimer, as
//! null_blk's `irqmode=2` and dm-delay's `delay_timer` use it): a timerfd
//! on CLOCK_MONOTONIC, the clock of [`crate::clock::now_ns`], armed for
//! the earliest deadline a driver waits for.
//!
//! Setting a timerfd clears what it had signalled, so a driver that sets
//! it to its new earliest deadline whenever that changes (or to 0 when
//! nothing waits) has an fd readable exactly while something is due,
//! which is what [`crate::driver::Driver::irq_fd`] asks. Setting it to
//! the deadline it already has is free.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One hardware queue's deadline timer.
#[derive(Debug)]
pub struct IrqTimer {
    fd: OwnedFd,
    /// The deadline it is set for (monotonic ns); 0 when disarmed.
    armed_ns: u64,
}

impl IrqTimer {
    /// A disarmed timer.
    pub fn new() -> std::io::Result<IrqTimer> {
        // SAFETY: timerfd_create takes no pointers.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd was just made and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(IrqTimer { fd, armed_ns: 0 })
    }

    /// The fd to watch: readable while the deadline it is set for has
    /// passed.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Fire at `at_ns` (monotonic), or disarm if `at_ns` is 0. Nothing to
    /// do if it is set for that already.
    pub fn set(&mut self, at_ns: u64) {
        if self.armed_ns == at_ns {
            return;
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: the fd is our timerfd; spec is a live itimerspec and the
        // old value is not asked for (null). A monotonic time in the past
        // fires at once; the only errors are a bad fd or a bad value,
        // neither of which this can pass.
        let r = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if r == 0 {
            self.armed_ns = at_ns;
        }
    }
}

#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;

    fn readable(t: &IrqTimer) -> bool {
        // A read would clear it: look with poll instead.
        let mut p = libc::pollfd {
            fd: t.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn readable_once_due_and_quiet_after_being_set_again() {
        let mut t = IrqTimer::new().unwrap();
        assert!(!readable(&t), "a new timer is disarmed");
        let now = crate::clock::now_ns();
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
