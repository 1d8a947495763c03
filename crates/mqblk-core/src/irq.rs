//! Interrupt lines: the leaf fds that tell a hardware queue's completions
//! (a ring's eventfd, a timerfd, a connection's line), kept flat. Below
//! completion, beside [`crate::sync`]; Linux's chained interrupt handlers,
//! where a cascaded controller's lines end up at the CPU's one vector.
//!
//! Every hardware queue has an [`IrqLines`]: the driver's
//! [`crate::driver::Driver::irq_fd`] is put in it, and a stacked driver
//! puts in it the lines of its contexts on the legs
//! ([`crate::Context::forward_irq_lines`]): each context's eventfd and
//! timer, and, forwarded through it, every fd of the leg's own queue, as
//! the leg's lines change. A context's completion fd is then one epoll set
//! that holds every leaf directly, however deep the stack. Epoll sets held
//! inside epoll sets would pass the kernel's nesting limit
//! (`EPOLL_MAX_NESTS`, 4: `epoll_ctl` fails with ELOOP), and a completion
//! fd that cannot hear its leaves leaves its caller waiting.
//!
//! A leaf that still cannot be added to a set marks the set degraded: its
//! owner then keeps the fd readable while requests are in flight (polling)
//! instead of sleeping on it. Control plane only: lines change when a
//! queue or a context is set up or a stacked device's legs change.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sync::EventFd;

/// The interrupt lines of one hardware queue: a set of leaf fds, each
/// readable while a poll of the queue would find a completion, and who
/// hears of every one (contexts' completion fds, stacked queues above).
#[derive(Clone, Debug, Default)]
pub struct IrqLines(Arc<Mutex<Lines>>);

#[derive(Debug, Default)]
struct Lines {
    /// Each fd, with how many holders put it here.
    fds: Vec<(RawFd, u32)>,
    /// Completion fds watching every fd.
    sets: Vec<Arc<EpollSet>>,
    /// Lines of stacked queues above, which get every fd too.
    up: Vec<IrqLines>,
}

impl IrqLines {
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True if no fd is here.
    pub fn is_empty(&self) -> bool {
        self.lock().fds.is_empty()
    }

    /// Make `fd` one of the lines. It must stay open until
    /// [`IrqLines::remove`]d (or until the lines are dropped). Adding an
    /// fd that is here already counts it once more.
    pub fn add(&self, fd: RawFd) {
        // Lines are locked below to above (a leg's, then its stacked
        // queue's), never the other way, so holding ours while the ones
        // above change cannot deadlock; and no change above can interleave
        // with a `forward_to` or `unforward` of ours.
        let mut l = self.lock();
        if let Some(e) = l.fds.iter_mut().find(|e| e.0 == fd) {
            e.1 += 1;
            return;
        }
        l.fds.push((fd, 1));
        for s in &l.sets {
            s.add(fd);
        }
        for u in &l.up {
            u.add(fd);
        }
    }

    /// Undo one [`IrqLines::add`] of `fd`.
    pub fn remove(&self, fd: RawFd) {
        let mut l = self.lock();
        let Some(i) = l.fds.iter().position(|e| e.0 == fd) else {
            return;
        };
        l.fds[i].1 -= 1;
        if l.fds[i].1 > 0 {
            return;
        }
        l.fds.swap_remove(i);
        for s in &l.sets {
            s.delete(fd);
        }
        for u in &l.up {
            u.remove(fd);
        }
    }

    /// Put every line, now and later, into `up` too (the lines of a
    /// stacked queue above), until [`IrqLines::unforward`].
    pub(crate) fn forward_to(&self, up: &IrqLines) {
        let mut l = self.lock();
        for &(fd, _) in &l.fds {
            up.add(fd);
        }
        l.up.push(up.clone());
    }

    /// Take every line back out of `up`.
    pub(crate) fn unforward(&self, up: &IrqLines) {
        let mut l = self.lock();
        let Some(i) = l.up.iter().position(|u| Arc::ptr_eq(&u.0, &up.0)) else {
            return;
        };
        l.up.swap_remove(i);
        for &(fd, _) in &l.fds {
            up.remove(fd);
        }
    }

    /// Watch every line, now and later, from `set` (a context's completion
    /// fd), until [`IrqLines::unwatch`].
    pub(crate) fn watch(&self, set: &Arc<EpollSet>) {
        let mut l = self.lock();
        for &(fd, _) in &l.fds {
            set.add(fd);
        }
        l.sets.push(set.clone());
    }

    /// Stop watching the lines from `set`.
    pub(crate) fn unwatch(&self, set: &Arc<EpollSet>) {
        let mut l = self.lock();
        let Some(i) = l.sets.iter().position(|s| Arc::ptr_eq(s, set)) else {
            return;
        };
        l.sets.swap_remove(i);
        for &(fd, _) in &l.fds {
            set.delete(fd);
        }
    }
}

/// The epoll set behind a context's completion fd, with every leaf in it.
#[derive(Debug)]
pub(crate) struct EpollSet {
    fd: OwnedFd,
    /// The context's eventfd: signalled when the set degrades, so that a
    /// caller asleep on the set wakes and polls.
    event: Arc<EventFd>,
    /// A line could not be added: the set does not hear every leaf, and
    /// its owner must poll rather than sleep on it.
    degraded: AtomicBool,
}

impl EpollSet {
    /// A new set holding `event`.
    pub(crate) fn new(event: Arc<EventFd>) -> std::io::Result<EpollSet> {
        use std::os::fd::FromRawFd;
        // SAFETY: epoll_create1 takes no pointers.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let set = EpollSet {
            fd,
            event,
            degraded: AtomicBool::new(false),
        };
        set.ctl(libc::EPOLL_CTL_ADD, set.event.raw())?;
        Ok(set)
    }

    /// The fd handed to the caller.
    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// True once a line could not be added.
    #[inline]
    pub(crate) fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed)
    }

    /// Watch `fd` too (a timer of the context's own).
    pub(crate) fn add_own(&self, fd: RawFd) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd)
    }

    /// Watch line `fd`; if the kernel refuses, say so once and degrade.
    /// (Not `EPOLLEXCLUSIVE`: tried, it cut 4 bench jobs on a
    /// 2-connection NBD device from 1.1M to 0.3M IOPS.)
    fn add(&self, fd: RawFd) {
        match self.ctl(libc::EPOLL_CTL_ADD, fd) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => {
                if !self.degraded.swap(true, Ordering::SeqCst) {
                    eprintln!(
                        "mqblk: completion fd {}: cannot watch interrupt line fd {fd} ({e}); its context polls instead",
                        self.raw()
                    );
                }
                self.event.signal();
            }
        }
    }

    fn delete(&self, fd: RawFd) {
        // ENOENT (never added: the set degraded) and EBADF (closed, which
        // took it out already) leave nothing to undo.
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd);
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd) -> std::io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: ev is a live epoll_event for the call; the set is ours.
        // `fd` is a number the kernel checks: a closed one is EBADF.
        let rc = unsafe { libc::epoll_ctl(self.raw(), op, fd, &mut ev) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(all(test, not(miri), not(loom)))]
mod tests {
    use std::os::fd::AsRawFd;
    use std::sync::Arc;

    use super::{EpollSet, IrqLines};
    use crate::sync::EventFd;

    fn readable(set: &EpollSet) -> bool {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event, live for the call.
        unsafe { libc::epoll_wait(set.raw(), &mut ev, 1, 0) == 1 }
    }

    #[test]
    fn a_leaf_two_stacks_down_reaches_the_top_set_and_leaves_with_its_holder() {
        let leaf = EventFd::new().unwrap();
        let (bottom, middle, top) = (
            IrqLines::default(),
            IrqLines::default(),
            IrqLines::default(),
        );
        let set = Arc::new(EpollSet::new(Arc::new(EventFd::new().unwrap())).unwrap());
        top.watch(&set);
        middle.forward_to(&top);
        bottom.forward_to(&middle);
        bottom.add(leaf.raw());
        assert!(!readable(&set));
        leaf.signal();
        assert!(readable(&set), "the leaf wakes the top set");
        assert!(!set.is_degraded());
        bottom.unforward(&middle);
        assert!(middle.is_empty(), "the leaf left the middle");
        assert!(top.is_empty(), "and the top");
        assert!(!readable(&set), "the set no longer hears it");
    }

    #[test]
    fn a_line_the_kernel_refuses_degrades_the_set_and_wakes_it() {
        // Four epoll sets nested in each other: the kernel refuses a fifth
        // level (ELOOP), the case flattening avoids.
        let mut chain: Vec<std::os::fd::OwnedFd> = Vec::new();
        for _ in 0..5 {
            let ep = EpollSet::new(Arc::new(EventFd::new().unwrap())).unwrap();
            if let Some(inner) = chain.last() {
                if ep.add_own(inner.as_raw_fd()).is_err() {
                    break;
                }
            }
            chain.push(ep.fd);
        }
        let lines = IrqLines::default();
        let set = Arc::new(EpollSet::new(Arc::new(EventFd::new().unwrap())).unwrap());
        lines.watch(&set);
        lines.add(chain.last().unwrap().as_raw_fd());
        assert!(set.is_degraded(), "a refused line marks the set");
        assert!(readable(&set), "and wakes whoever sleeps on it");
    }
}
