//! Completion: the last stage of the pipeline.
//!
//! A driver hands finished requests to a [`Completions`] batch. The context
//! that reaped them routes each one to the context that submitted it (its
//! own list, or that context's [`RemoteQueue`]: Linux's IPI to the
//! submitting CPU), and the owner then ends the bios and runs the callbacks
//! only after the whole batch is reaped, so a callback that resubmits can
//! never recurse into the reap path. Sleeping contexts wait on a futex
//! ([`Notify`]) that the driver's completion side bumps.

use std::time::Duration;

use crate::bio::Bio;
use crate::error::{Error, Status};
use crate::queue::QueueInfo;
use crate::request::{RqRef, RqState};
use crate::sync::{lock, AtomicBool, AtomicU32, Mutex, Ordering};

/// A batch of completed requests, filled by a driver.
pub struct Completions<'a> {
    list: &'a mut Vec<RqRef>,
}

impl<'a> Completions<'a> {
    pub(crate) fn new(list: &'a mut Vec<RqRef>) -> Self {
        Completions { list }
    }

    /// Complete `rq` with `status`. The request goes back to the core.
    #[inline]
    pub fn complete(&mut self, mut rq: RqRef, status: Status) {
        rq.transition(RqState::InFlight, RqState::Complete);
        rq.status = status;
        debug_assert!(
            self.list.len() < self.list.capacity(),
            "completion batch must never grow: it is sized to the tag depth"
        );
        self.list.push(rq);
    }

    /// Requests completed so far in this batch.
    #[inline]
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True if none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// One finished bio, as the caller sees it. The bio stays in its context
/// slot while the callback runs: take it with [`Completion::into_bio`], or
/// send it again with [`Completion::resubmit`] (no copy, and the submission
/// happens after the reap, so a callback never recurses into the layer).
pub struct Completion<'a> {
    pub(crate) slot: &'a mut Option<Bio>,
    pub(crate) resubmit: &'a mut bool,
    pub(crate) info: &'a QueueInfo,
}

impl Completion<'_> {
    #[inline]
    fn bio_ref(&self) -> &Bio {
        self.slot
            .as_ref()
            .expect("a completion always holds its bio")
    }

    /// The outcome, as a typed error naming device, offset and limit.
    pub fn result(&self) -> Result<(), Error> {
        let bio = self.bio_ref();
        match bio.status() {
            Status::Ok => Ok(()),
            s => Err(self.info.error_for(bio, s)),
        }
    }

    /// The one-byte status.
    #[inline]
    pub fn status(&self) -> Status {
        self.bio_ref().status()
    }

    /// The finished bio.
    #[inline]
    pub fn bio(&self) -> &Bio {
        self.bio_ref()
    }

    /// The finished bio, mutably (to aim it elsewhere before resubmitting).
    #[inline]
    pub fn bio_mut(&mut self) -> &mut Bio {
        self.slot
            .as_mut()
            .expect("a completion always holds its bio")
    }

    /// Take the bio back (with its buffers).
    #[inline]
    pub fn into_bio(self) -> Bio {
        self.slot.take().expect("a completion always holds its bio")
    }

    /// Submit the bio again, as it is now, once the current reap is over.
    #[inline]
    pub fn resubmit(self) {
        *self.resubmit = true;
    }

    /// The caller's cookie.
    #[inline]
    pub fn private(&self) -> u64 {
        self.bio_ref().private
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
/// "interrupt line").
#[derive(Debug, Default)]
pub struct Notify {
    seq: AtomicU32,
    sleepers: AtomicU32,
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

    /// Wake every sleeper.
    #[inline]
    pub fn notify(&self) {
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            futex_wake(&self.seq);
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

/// The handle a driver uses to wake contexts waiting on its hardware queue.
#[derive(Clone, Debug)]
pub struct HwNotifier(pub(crate) crate::sync::Arc<Notify>);

impl HwNotifier {
    /// Wake contexts waiting on this hardware queue.
    #[inline]
    pub fn notify(&self) {
        self.0.notify();
    }
}

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
