//! Synchronisation and wakeup primitives, below the pipeline: std's or
//! loom's atomics (loom's under `--cfg loom`, so the tag allocator and the
//! queue handoffs can be model-checked unchanged), the futex word a
//! hardware queue's waiters sleep on ([`Notify`], the "interrupt line"),
//! the eventfd of a completion fd, and the multi-producer queue through
//! which completions reach the context that submitted them
//! ([`RemoteQueue`], Linux's completion IPI).

use std::time::Duration;

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Lock a mutex, treating poisoning as recoverable: a panicking completion
/// callback must not wedge the queue for every other context.
#[inline]
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(|e| e.into_inner())
    }
    #[cfg(loom)]
    {
        m.lock().unwrap()
    }
}

/// Completions reaped by another context for this one (multi-producer,
/// single consumer). Only used when contexts share a hardware queue.
pub(crate) struct RemoteQueue<T> {
    pending: AtomicBool,
    list: Mutex<Vec<T>>,
}

impl<T> RemoteQueue<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        RemoteQueue {
            pending: AtomicBool::new(false),
            list: Mutex::new(Vec::with_capacity(capacity)),
        }
    }

    /// Hand `item` to the owner. The caller then notifies the owner.
    pub(crate) fn push(&self, item: T) {
        let mut l = lock(&self.list);
        l.push(item);
        self.pending.store(true, Ordering::Release);
    }

    /// Move everything into `out`. Cheap when empty: one load, no lock.
    #[inline]
    pub(crate) fn drain_into(&self, out: &mut Vec<T>) -> usize {
        if !self.pending.load(Ordering::Acquire) {
            return 0;
        }
        let mut l = lock(&self.list);
        self.pending.store(false, Ordering::Relaxed);
        let n = l.len();
        out.extend(l.drain(..));
        n
    }
}

/// A futex word that sleeping contexts wait on (a hardware queue's
/// "interrupt line"), plus the completion fds and futures' wakers that
/// want to hear of it.
#[derive(Debug, Default)]
pub struct Notify {
    seq: AtomicU32,
    sleepers: AtomicU32,
    /// Set while anyone is subscribed: notify checks it with one load.
    has_subs: std::sync::atomic::AtomicBool,
    subs: std::sync::Mutex<Subscribers>,
}

/// Who hears of a notify besides the futex sleepers.
#[derive(Debug, Default)]
struct Subscribers {
    /// Completion fds of contexts mapped to this queue (signalled at every
    /// notify).
    fds: Vec<std::sync::Arc<EventFd>>,
    /// Wakers of pending futures (woken once, then dropped).
    wakers: Vec<std::task::Waker>,
    /// Hardware queues of stacked devices above (notified at every notify).
    forward: Vec<Arc<Notify>>,
}

impl Notify {
    fn subs(&self) -> std::sync::MutexGuard<'_, Subscribers> {
        self.subs.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn update_has_subs(&self, subs: &Subscribers) {
        let any = !subs.fds.is_empty() || !subs.wakers.is_empty() || !subs.forward.is_empty();
        self.has_subs
            .store(any, std::sync::atomic::Ordering::SeqCst);
    }

    /// Signal `fd` at every notify, until unsubscribed.
    pub(crate) fn subscribe_fd(&self, fd: std::sync::Arc<EventFd>) {
        let mut subs = self.subs();
        subs.fds.push(fd);
        self.update_has_subs(&subs);
    }

    pub(crate) fn unsubscribe_fd(&self, fd: &std::sync::Arc<EventFd>) {
        let mut subs = self.subs();
        subs.fds.retain(|f| !std::sync::Arc::ptr_eq(f, fd));
        self.update_has_subs(&subs);
    }

    /// Notify `up` at every notify, until unforwarded: the hardware queue
    /// of a stacked device whose driver polls a context of this queue.
    pub(crate) fn forward_to(&self, up: Arc<Notify>) {
        let mut subs = self.subs();
        subs.forward.push(up);
        self.update_has_subs(&subs);
    }

    pub(crate) fn unforward(&self, up: &Arc<Notify>) {
        let mut subs = self.subs();
        subs.forward.retain(|f| !Arc::ptr_eq(f, up));
        self.update_has_subs(&subs);
    }

    /// Wake `waker` at the next notify (a future waiting for a completion
    /// that a driver thread or another context will make).
    pub(crate) fn subscribe_waker(&self, waker: &std::task::Waker) {
        let mut subs = self.subs();
        if !subs.wakers.iter().any(|w| w.will_wake(waker)) {
            subs.wakers.push(waker.clone());
        }
        self.update_has_subs(&subs);
    }

    #[cold]
    fn tell_subscribers(&self) {
        let mut subs = self.subs();
        for fd in &subs.fds {
            fd.signal();
        }
        let wakers = std::mem::take(&mut subs.wakers);
        self.update_has_subs(&subs);
        // Forwarded queues are notified outside this lock: theirs is another.
        let up: smallvec::SmallVec<[Arc<Notify>; 4]> = subs.forward.iter().cloned().collect();
        drop(subs);
        for w in wakers {
            w.wake();
        }
        for u in up {
            u.notify();
        }
    }
}

/// Sleep until the epoll set `epfd` (a context's completion fd) has an
/// event or `timeout` passes.
#[cfg(not(loom))]
pub(crate) fn wait_readable(epfd: std::os::fd::RawFd, timeout: Duration) {
    let mut ev = libc::epoll_event { events: 0, u64: 0 };
    let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    // SAFETY: room for one event, live for the length of the call.
    unsafe { libc::epoll_wait(epfd, &mut ev, 1, ms) };
}

#[cfg(loom)]
pub(crate) fn wait_readable(_fd: std::os::fd::RawFd, _timeout: Duration) {
    loom::thread::yield_now();
}

/// An eventfd: a context's completion fd (libblkio's
/// `blkioq_get_completion_fd`). Readable while calling `poll` on the
/// context would make progress.
#[derive(Debug)]
pub(crate) struct EventFd {
    fd: std::os::fd::OwnedFd,
    /// Set after each write, cleared by the read that follows: a drain
    /// with nothing written costs one atomic swap, not a system call.
    written: AtomicBool,
}

impl EventFd {
    pub(crate) fn new() -> std::io::Result<EventFd> {
        use std::os::fd::FromRawFd;
        // SAFETY: eventfd takes no pointers; a non-negative return is a new
        // fd that we own from here on.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor owned by nobody else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        Ok(EventFd {
            fd,
            written: AtomicBool::new(false),
        })
    }

    pub(crate) fn raw(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.fd.as_raw_fd()
    }

    /// Make the fd readable.
    pub(crate) fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A full
        // counter (EAGAIN) still leaves the fd readable, which is all we want.
        unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
        // After the write: a drain that misses this flag leaves the fd
        // readable, so its owner wakes once more and drains then; a flag
        // set before the write could be cleared by a drain that ran
        // between the two, leaving the fd readable with no drain to come.
        self.written.store(true, Ordering::Release);
    }

    /// Make the fd unreadable again (the owner is about to poll).
    pub(crate) fn drain(&self) {
        if !self.written.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (already empty) is
        // fine on a non-blocking eventfd.
        unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
    }
}

impl Notify {
    /// Current sequence: read it before checking for work, then pass it to
    /// [`Notify::wait`], so a notify in between is never lost.
    #[inline]
    pub fn seq(&self) -> u32 {
        self.seq.load(Ordering::SeqCst)
    }

    /// Sleep until the sequence moves past `seen` or `timeout` passes.
    pub fn wait(&self, seen: u32, timeout: Duration) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        if self.seq.load(Ordering::SeqCst) == seen {
            futex_wait(&self.seq, seen, timeout);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wake every sleeper, completion fd and waiting future.
    #[inline]
    pub fn notify(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.seq);
        }
        if self.has_subs.load(std::sync::atomic::Ordering::SeqCst) {
            self.tell_subscribers();
        }
    }
}

#[cfg(not(loom))]
fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT reads the u32 behind `word` (a live AtomicU32 with
    // the layout of u32) and the timespec on our stack; neither outlives the
    // call. Spurious and early returns are fine: callers re-check.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            &ts as *const libc::timespec,
        );
    }
}

#[cfg(not(loom))]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}

#[cfg(loom)]
fn futex_wait(_word: &AtomicU32, _seen: u32, _timeout: Duration) {
    loom::thread::yield_now();
}

#[cfg(loom)]
fn futex_wake(_word: &AtomicU32) {}

/// Model check of the handoff between contexts that share a hardware queue:
/// the owner puts requests on the hardware queue's dispatch list, another
/// context dispatches and completes them and routes the completions back
/// through the owner's remote queue, notifying its futex. Every request must
/// come back exactly once, and the owner's wait must not miss the notify.
///
/// Run with `RUSTFLAGS="--cfg loom" cargo test -p mqblk-core --release --lib loom`.
#[cfg(all(test, loom))]
mod loom_model {
    use std::collections::VecDeque;

    use loom::sync::{Arc, Mutex};

    use super::{Notify, RemoteQueue};

    #[test]
    fn loom_sw_to_hw_to_remote_completion() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(|| {
            let hwq: Arc<Mutex<VecDeque<u32>>> = Arc::new(Mutex::new(VecDeque::with_capacity(2)));
            let remote: Arc<RemoteQueue<u32>> = Arc::new(RemoteQueue::new(2));
            let notify = Arc::new(Notify::default());

            let other = {
                let (hwq, remote, notify) = (hwq.clone(), remote.clone(), notify.clone());
                loom::thread::spawn(move || {
                    let mut handled = 0;
                    while handled < 2 {
                        let rq = hwq.lock().unwrap().pop_front();
                        match rq {
                            Some(rq) => {
                                // "Completed" by the driver; route to its owner.
                                remote.push(rq);
                                notify.notify();
                                handled += 1;
                            }
                            None => loom::thread::yield_now(),
                        }
                    }
                })
            };

            // Owner: software queue → hardware queue dispatch list.
            for rq in [1u32, 2] {
                hwq.lock().unwrap().push_back(rq);
            }
            let mut got = Vec::with_capacity(2);
            while got.len() < 2 {
                let seen = notify.seq();
                remote.drain_into(&mut got);
                if got.len() < 2 {
                    notify.wait(seen, std::time::Duration::from_millis(1));
                }
            }
            other.join().unwrap();
            got.sort_unstable();
            assert_eq!(got, vec![1, 2], "each request completes exactly once");
            let mut rest = Vec::new();
            assert_eq!(remote.drain_into(&mut rest), 0, "nothing completes twice");
        });
    }
}

/// The completion fd as the caller sees it: an epoll set of the context's
/// eventfd, a timer and its hardware queue's interrupt lines
/// ([`crate::irq::IrqLines`]), so that the fd also turns readable when a
/// bio the throttle holds comes due, with no thread to wake it. The timer
/// is armed only while bios wait in the throttle, and read only once it
/// has fired.
pub(crate) struct FdTimer {
    set: std::sync::Arc<crate::irq::EpollSet>,
    timer: std::os::fd::OwnedFd,
    /// When the timer fires (monotonic ns); 0 when disarmed.
    armed_ns: u64,
}

fn owned(fd: libc::c_int) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

impl FdTimer {
    pub(crate) fn new(event: &std::sync::Arc<EventFd>) -> std::io::Result<FdTimer> {
        use std::os::fd::AsRawFd;
        let set = crate::irq::EpollSet::new(event.clone())?;
        // SAFETY: timerfd_create takes no pointers.
        let timer = owned(unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        })?;
        set.add_own(timer.as_raw_fd())?;
        Ok(FdTimer {
            set: std::sync::Arc::new(set),
            timer,
            armed_ns: 0,
        })
    }

    /// The epoll set, for the interrupt lines to watch.
    pub(crate) fn set(&self) -> &std::sync::Arc<crate::irq::EpollSet> {
        &self.set
    }

    /// The fd handed to the caller.
    pub(crate) fn raw(&self) -> std::os::fd::RawFd {
        self.set.raw()
    }

    /// The timer's own fd, for the lines of a stacked queue above.
    pub(crate) fn timer_raw(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.timer.as_raw_fd()
    }

    /// Fire at `at_ns` (monotonic), unless already armed for then.
    pub(crate) fn arm(&mut self, at_ns: u64) {
        use std::os::fd::AsRawFd;
        if self.armed_ns == at_ns {
            return;
        }
        let at = at_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: (at / 1_000_000_000) as libc::time_t,
                tv_nsec: (at % 1_000_000_000) as libc::c_long,
            },
        };
        // SAFETY: spec is a live itimerspec; the old value is not asked for.
        unsafe {
            libc::timerfd_settime(
                self.timer.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        self.armed_ns = at;
    }

    /// If the timer has fired, read it so the fd is quiet again.
    pub(crate) fn clear_fired(&mut self, now_ns: u64) {
        use std::os::fd::AsRawFd;
        if self.armed_ns == 0 || now_ns < self.armed_ns {
            return;
        }
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN is fine.
        unsafe { libc::read(self.timer.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        self.armed_ns = 0;
    }

    /// True if armed.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed_ns != 0
    }

    /// When it fires (monotonic ns; 0 when disarmed).
    pub(crate) fn armed_at(&self) -> u64 {
        self.armed_ns
    }
}
