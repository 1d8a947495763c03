//! A context's completion fd, as an event loop sees it (libblkio's
//! `blkioq_get_completion_fd` and `blkioq_set_completion_fd_enabled`), and
//! the forwarding of its queue's notifications to a stacked queue above:
//! the `Context` calls over `wait.rs`'s fd machinery.

use super::Context;
use crate::error::{Error, Result};

impl Context {
    /// A file descriptor that is readable whenever [`Context::poll`] would
    /// make progress (libblkio's `blkioq_get_completion_fd`): a completion
    /// is ready, a driver thread or another context finished one of this
    /// context's requests, bios wait in the plug, or requests are in flight
    /// on a driver that completes only when polled. An event loop waits on
    /// it with its sockets (epoll, poll, select), then calls `poll`, which
    /// clears it. The fd lives as long as the context. Control plane: the
    /// first call makes the eventfd; with no fd asked for, the hot path pays
    /// one branch.
    pub fn completion_fd(&mut self) -> Result<std::os::fd::RawFd> {
        self.st.completion_fd(&self.dev).map_err(|e| Error::Setup {
            device: self.dev.info.name.clone(),
            reason: format!("cannot make a completion fd: {e}"),
        })
    }

    /// Stop (`false`) or restart (`true`) the signals this context's own
    /// calls give its completion fd (libblkio's
    /// `blkioq_set_completion_fd_enabled`). An event loop that submits a
    /// batch and then polls before it waits again turns them off for the
    /// batch: a bio that completes inside `submit` then costs no eventfd
    /// write, and the `poll` after it no read. Completions from driver
    /// threads and other contexts still make the fd readable. Turning the
    /// signals back on makes the fd readable if a `poll` would make
    /// progress, so nothing waits unseen.
    pub fn set_completion_fd_enabled(&mut self, enabled: bool) {
        self.st.fd_enabled = enabled;
        if enabled {
            self.st.kick_fd(&self.dev);
        }
    }

    /// Tell `up` (a stacked device's hardware queue, from its driver's
    /// [`crate::driver::HwQueueSetup::notifier`]) whenever this context's
    /// hardware queue is notified: a lower driver's thread finished a
    /// request, so the stacked driver's `poll` will find its child done.
    /// Control plane; lasts as long as this context.
    pub fn forward_completions(&mut self, up: &crate::driver::HwNotifier) {
        let hq = &self.dev.hw_queues[self.st.hwq as usize];
        hq.notify.forward_to(up.0.clone());
        self.st.forwards.push(up.0.clone());
    }
}
