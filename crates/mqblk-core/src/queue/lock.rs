//! The locks of the legacy queue modes (Linux 2.4's `io_request_lock` and
//! the per-queue `queue_lock`), kept so the difference can be measured. In
//! `mq` mode nothing here is taken.

/// The lock of the legacy queue modes, a spinlock like Linux's
/// `q->queue_lock` and `io_request_lock`: one atomic exchange to take it, a
/// plain release store to drop it. Waiters spin, then yield, so a holder
/// that was preempted is not starved of the CPU.
pub(crate) struct SpinLock {
    locked: std::sync::atomic::AtomicBool,
}

pub(crate) struct SpinGuard<'a>(&'a SpinLock);

impl SpinLock {
    pub(crate) const fn new() -> SpinLock {
        SpinLock {
            locked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        let mut spins = 0u32;
        while self.locked.swap(true, Acquire) {
            // Test before test-and-set: spin on a shared line, not an owned one.
            while self.locked.load(Relaxed) {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard(self)
    }
}

impl Drop for SpinGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0
            .locked
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The lock of the legacy queue modes. `None` in `mq` mode.
pub(crate) enum QueueLock {
    None,
    Device(SpinLock),
    Global,
}

/// Linux 2.4's `io_request_lock`: one lock for every queue in the process.
static IO_REQUEST_LOCK: SpinLock = SpinLock::new();

impl QueueLock {
    /// Take the legacy lock, if this mode has one.
    #[inline]
    pub(crate) fn hold(&self) -> Option<SpinGuard<'_>> {
        match self {
            QueueLock::None => None,
            QueueLock::Device(l) => Some(l.lock()),
            QueueLock::Global => Some(IO_REQUEST_LOCK.lock()),
        }
    }
}
