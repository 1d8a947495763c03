//! The interrupt line of one connection ([`mqblk_core::driver::Driver::irq_fd`]):
//! an epoll set that is readable when the connection's socket is, or when
//! the reconnect thread has news. Its fd stays the same for the hardware
//! queue's life while the socket in it changes on a reconnect, so the core
//! can put it in contexts' completion fds once.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::event::{epoll, eventfd, EventfdFlags};

const SOCKET: u64 = 1;
const KICK: u64 = 2;

#[derive(Debug)]
pub(super) struct Irq {
    epoll: OwnedFd,
    kick: OwnedFd,
}

impl Irq {
    pub(super) fn new() -> io::Result<Irq> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let kick = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(
            &epoll,
            &kick,
            epoll::EventData::new_u64(KICK),
            epoll::EventFlags::IN,
        )?;
        Ok(Irq { epoll, kick })
    }

    /// The line's fd.
    pub(super) fn raw(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Listen to `sock` (the connection's socket).
    pub(super) fn watch(&self, sock: BorrowedFd<'_>) -> io::Result<()> {
        epoll::add(
            &self.epoll,
            sock,
            epoll::EventData::new_u64(SOCKET),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        )?;
        Ok(())
    }

    /// Stop listening to `sock` (a lost connection's socket, which would
    /// otherwise stay readable at its end of file).
    pub(super) fn unwatch(&self, sock: BorrowedFd<'_>) {
        let _ = epoll::delete(&self.epoll, sock);
    }

    /// Sleep until the line fires or `timeout` passes.
    pub(super) fn wait(&self, timeout: Duration) {
        let mut pfd = [rustix::event::PollFd::new(
            &self.epoll,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        let _ = rustix::event::poll(&mut pfd, Some(&ts));
    }

    /// A handle for the reconnect thread to fire the line with.
    pub(super) fn kicker(&self) -> io::Result<OwnedFd> {
        self.kick.as_fd().try_clone_to_owned()
    }

    /// Quiet the kick (its news is being taken).
    pub(super) fn clear_kick(&self) {
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.kick, &mut b);
    }
}

/// Fire the line through a handle from [`Irq::kicker`].
pub(super) fn kick(fd: &OwnedFd) {
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}
