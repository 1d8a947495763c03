//! Arming the contexts' completion fds in the loop's epoll set, and the
//! fallback when one cannot be: the loop then polls that context at least
//! every [`POLL_FALLBACK`] while it has requests in flight, so no reply
//! waits for a wake-up that cannot come.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::event::epoll;

use super::state::{Loop, CTX_BASE};

/// Longest sleep while a context with requests in flight has no
/// completion fd in the epoll set (see `Ctx::fd_failed`).
pub(super) const POLL_FALLBACK: Duration = Duration::from_millis(1);

impl Loop<'_> {
    /// Before sleeping: every context with requests in flight has its
    /// completion fd in the epoll set. Returns true if one was just added:
    /// then the contexts must be polled once more before sleeping, for a
    /// completion that came before the fd existed.
    #[allow(unsafe_code)]
    pub(super) fn arm_completion_fds(&mut self) -> bool {
        let mut armed = false;
        for (export, slot) in self.ctxs.iter_mut().enumerate() {
            let Some(c) = slot.as_mut() else { continue };
            if c.fd_armed || c.fd_failed || c.ctx.in_flight() == 0 {
                continue;
            }
            let fd = match c.ctx.completion_fd() {
                Ok(fd) => fd,
                Err(e) => {
                    eprintln!("mqblk serve: no completion fd, polling instead: {e}");
                    c.fd_failed = true;
                    continue;
                }
            };
            // SAFETY: the fd belongs to `c.ctx`, which this loop keeps (in
            // `self.ctxs`) for as long as the epoll set exists; the borrow
            // only lives for the epoll_ctl call.
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            match epoll::add(
                &self.epoll,
                bfd,
                epoll::EventData::new_u64(CTX_BASE + export as u64),
                epoll::EventFlags::IN,
            ) {
                Ok(()) => {
                    c.fd_armed = true;
                    armed = true;
                }
                Err(e) => {
                    eprintln!(
                        "mqblk serve: cannot watch the completion fd of export {export}, polling it instead: epoll_ctl: {e}"
                    );
                    c.fd_failed = true;
                }
            }
        }
        armed
    }

    /// True while a context whose completion fd is not in the epoll set
    /// has requests in flight: the loop must not sleep past
    /// [`POLL_FALLBACK`], or their replies would wait for nothing.
    pub(super) fn polls_without_fd(&self) -> bool {
        self.ctxs
            .iter()
            .flatten()
            .any(|c| c.fd_failed && c.ctx.in_flight() > 0)
    }

    /// `timeout`, cut to [`POLL_FALLBACK`] while a context must be polled
    /// for want of a completion fd.
    pub(super) fn cap_for_polling(
        &self,
        timeout: Option<rustix::event::Timespec>,
    ) -> Option<rustix::event::Timespec> {
        if !self.polls_without_fd() {
            return timeout;
        }
        let cap = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: POLL_FALLBACK.as_nanos() as i64,
        };
        Some(match timeout {
            Some(t) if (t.tv_sec, t.tv_nsec) < (cap.tv_sec, cap.tv_nsec) => t,
            _ => cap,
        })
    }
}
