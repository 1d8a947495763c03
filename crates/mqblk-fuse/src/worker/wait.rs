//! Where a thread sleeps: an epoll set of its `/dev/fuse` descriptor and
//! its context's completion fd. The descriptor is watched with
//! `EPOLLEXCLUSIVE`: every clone of a connection waits on the kernel's one
//! input queue, and a new request wakes one idle thread, not all of them
//! (a thread that was busy finds it on its next look, as epoll is level
//! triggered). A device that completes only when polled (null, ram) has no
//! completion fd: while it holds requests, the thread yields and polls.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// How long a sleep lasts at most, so that a quit is seen.
pub(super) const SLEEP_MAX: Duration = Duration::from_millis(100);

/// The epoll set and the fds in it.
pub(super) struct Waiter {
    epoll: OwnedFd,
    completion_fd: Option<RawFd>,
}

const TOKEN_FUSE: u64 = 0;
const TOKEN_COMPLETION: u64 = 1;

fn add(epoll: &OwnedFd, fd: RawFd, events: u32, token: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: token };
    // SAFETY: both descriptors are open; `ev` outlives the call.
    if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Waiter {
    /// Watch `fuse` (exclusively) and `completion_fd`, if any.
    pub(super) fn new(fuse: RawFd, completion_fd: Option<RawFd>) -> std::io::Result<Waiter> {
        // SAFETY: epoll_create1 returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and is owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(fd) };
        add(
            &epoll,
            fuse,
            (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            TOKEN_FUSE,
        )?;
        if let Some(c) = completion_fd {
            add(&epoll, c, libc::EPOLLIN as u32, TOKEN_COMPLETION)?;
        }
        Ok(Waiter {
            epoll,
            completion_fd,
        })
    }

    /// Sleep until a request (if `listen`: a slot is free) or a
    /// completion (if `in_flight`) may be there, [`SLEEP_MAX`] at most.
    pub(super) fn wait(&self, listen: bool, in_flight: bool) {
        let ms = SLEEP_MAX.as_millis() as i32;
        match (listen, in_flight, self.completion_fd) {
            // Completions come only when polled: look again at once.
            (_, true, None) => std::thread::yield_now(),
            (true, _, _) => {
                let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 2];
                // SAFETY: `evs` holds 2 events and outlives the call.
                unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), evs.as_mut_ptr(), 2, ms) };
            }
            (false, _, Some(c)) => {
                let mut p = libc::pollfd {
                    fd: c,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd that outlives the call.
                unsafe { libc::poll(&mut p, 1, ms) };
            }
            (false, false, None) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}
