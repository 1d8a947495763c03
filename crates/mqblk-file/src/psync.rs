//! The psync engine: pread/pwrite(v) on worker threads, one worker set per
//! hardware queue (what fio's `psync` does with threads, and what glibc's
//! POSIX AIO does underneath). Used with `engine=psync`, or automatically
//! when the kernel refuses io_uring; the io_uring engine also keeps a
//! one-worker set for the operations a ring cannot carry (BLKDISCARD).
//!
//! `queue_rq` puts the request on the queue's submission list and, at the
//! end of a batch, wakes the workers; a worker carries it out with
//! blocking system calls, puts it on the completion list and rings the
//! hardware queue's notifier (the "interrupt"), so waiting contexts sleep
//! instead of polling. `poll` swaps the completion list out in one short
//! critical section. Both lists are sized to the tag depth when the queue
//! is created and never grow.
//!
//! Timeouts (Linux `->timeout` of a driver whose I/O runs in a thread, as
//! loop's worker does): a timed-out request still on the submission list
//! has touched nothing and is completed with [`Status::Timeout`] at once.
//! One a worker is carrying out is marked cancelled, and the worker is
//! interrupted with [`interrupt_signal`], whose handler is installed
//! without `SA_RESTART`, so a pread/pwrite blocked in an interruptible wait
//! returns EINTR; the worker does not retry a cancelled request and
//! completes it with `Timeout` once its system call has returned. Only
//! then does the request (and its buffers) go back to the caller: a system
//! call the kernel will not interrupt (an uninterruptible wait, a FUSE
//! request the daemon has taken and never answers) keeps the request until
//! it returns, and the timeout is asked again every period, resending the
//! signal.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk_core::driver::{Completions, HwNotifier, Notify, RqRef, TimeoutAction};
use mqblk_core::error::Status;

use crate::target::{Cancel, Target};

/// Stack size of a worker: it only runs system calls and one iovec array.
const WORKER_STACK_BYTES: usize = 256 << 10;
/// Longest a worker sleeps before it looks for work (or a stop) again.
const WORKER_IDLE: Duration = Duration::from_millis(100);
/// Signals sent per timeout call: a signal that lands just before the
/// worker enters its system call is spent on nothing, so a few more follow.
const INTERRUPT_TRIES: u32 = 3;
/// Pause between two of those signals.
const INTERRUPT_GAP: Duration = Duration::from_micros(200);
/// `busy`/`cancel` value of a worker that runs nothing.
const IDLE: u32 = 0;

/// The signal that interrupts a psync worker blocked in a system call for a
/// timed-out request: SIGRTMAX-2 (the real-time signals are not used by the
/// C library above SIGRTMIN). Its handler does nothing and is installed
/// without `SA_RESTART`.
pub fn interrupt_signal() -> libc::c_int {
    libc::SIGRTMAX() - 2
}

extern "C" fn on_interrupt(_sig: libc::c_int) {}

/// The handler's address, as `sigaction` stores it.
fn handler_addr() -> libc::sighandler_t {
    on_interrupt as extern "C" fn(libc::c_int) as *const () as libc::sighandler_t
}

/// Install the handler of [`interrupt_signal`] once per process. Err (why)
/// if another handler is there already: that one is left alone, and
/// timeouts of requests in a worker's system call can only wait for it.
fn install_interrupt() -> Result<(), String> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            let sig = interrupt_signal();
            // SAFETY: sigaction with a null new action only reads the old
            // one into `old`, a zeroed local of the right type.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
                return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != handler_addr() {
                return Err(format!(
                    "signal {sig} (SIGRTMAX-2) already has a handler in this process"
                ));
            }
            // SAFETY: a zeroed sigaction is a valid value: empty mask, no
            // flags (so no SA_RESTART: an interrupted system call returns
            // EINTR).
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = handler_addr();
            // SAFETY: `act` is a valid action whose handler is an
            // async-signal-safe function that does nothing.
            if unsafe { libc::sigaction(sig, &act, std::ptr::null_mut()) } != 0 {
                return Err(format!("sigaction: {}", std::io::Error::last_os_error()));
            }
            Ok(())
        })
        .clone()
}

/// What a worker publishes about itself, for the timeout path.
struct WorkerSlot {
    /// Its pthread id (0 until it has started).
    thread: AtomicU64,
    /// The tag it is carrying out, plus one ([`IDLE`]: none). Written
    /// under the submission list's lock when a request is taken.
    busy: AtomicU32,
    /// Equal to `busy` when that request has timed out and must stop.
    cancel: AtomicU32,
}

impl Cancel for WorkerSlot {
    #[inline]
    fn cancelled(&self) -> bool {
        let c = self.cancel.load(Ordering::Acquire);
        c != IDLE && c == self.busy.load(Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Shared {
    target: Target,
    submitted: Mutex<VecDeque<RqRef>>,
    completed: Mutex<Vec<(RqRef, Status)>>,
    /// Workers sleep on it; `queue_rq`/`commit_rqs` wake them.
    work: Notify,
    hw: HwNotifier,
    stop: AtomicBool,
    workers: Box<[WorkerSlot]>,
}

/// One hardware queue's worker set.
pub struct PsyncQueue {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Where `poll` drains completions to (swapped with the shared list).
    drained: Vec<(RqRef, Status)>,
    /// Requests queued since the workers were last woken.
    unwoken: u32,
    in_flight: u32,
    /// Why workers cannot be interrupted, if they cannot.
    no_interrupt: Option<String>,
}

impl std::fmt::Debug for PsyncQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PsyncQueue")
            .field("workers", &self.workers.len())
            .field("in_flight", &self.in_flight)
            .field("no_interrupt", &self.no_interrupt)
            .finish()
    }
}

impl PsyncQueue {
    /// Start `workers` threads for hardware queue `index`, able to hold
    /// `capacity` requests.
    pub fn new(
        target: Target,
        index: u16,
        workers: u32,
        capacity: usize,
        hw: HwNotifier,
    ) -> std::io::Result<PsyncQueue> {
        let shared = Arc::new(Shared {
            target,
            submitted: Mutex::new(VecDeque::with_capacity(capacity)),
            completed: Mutex::new(Vec::with_capacity(capacity)),
            work: Notify::default(),
            hw,
            stop: AtomicBool::new(false),
            workers: (0..workers)
                .map(|_| WorkerSlot {
                    thread: AtomicU64::new(0),
                    busy: AtomicU32::new(IDLE),
                    cancel: AtomicU32::new(IDLE),
                })
                .collect(),
        });
        let mut q = PsyncQueue {
            shared: shared.clone(),
            workers: Vec::with_capacity(workers as usize),
            drained: Vec::with_capacity(capacity),
            unwoken: 0,
            in_flight: 0,
            no_interrupt: install_interrupt().err(),
        };
        for w in 0..workers as usize {
            let shared = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("mqblk-psync{index}.{w}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || worker(&shared, w))?;
            q.workers.push(h);
        }
        Ok(q)
    }

    /// Why a worker blocked in a system call cannot be interrupted on a
    /// timeout, if it cannot (another handler owns [`interrupt_signal`]).
    pub fn interrupt_unavailable(&self) -> Option<&str> {
        self.no_interrupt.as_deref()
    }

    /// Request `tag` has timed out (see the module's doc). `Done` when it
    /// was completed here, with [`Status::Timeout`]; `ResetTimer` while a
    /// worker still carries it out (it completes with `Timeout` when its
    /// system call returns) or when it has finished and waits for `poll`.
    pub fn timeout(&mut self, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        let busy = tag.wrapping_add(1);
        let target = {
            let mut l = lock(&self.shared.submitted);
            // Not started: no system call has seen its buffers.
            if let Some(pos) = l.iter().position(|rq| rq.tag() == tag) {
                let rq = l.remove(pos).expect("position is in range");
                drop(l);
                debug_assert!(self.in_flight > 0);
                self.in_flight -= 1;
                done.complete(rq, Status::Timeout);
                return TimeoutAction::Done;
            }
            // A worker takes a request and publishes it under this lock,
            // so the request is on a worker now, or finished.
            let w = self
                .shared
                .workers
                .iter()
                .find(|w| w.busy.load(Ordering::Acquire) == busy);
            match w {
                Some(w) => {
                    w.cancel.store(busy, Ordering::Release);
                    w.thread.load(Ordering::Acquire)
                }
                None => return TimeoutAction::ResetTimer,
            }
        };
        if self.no_interrupt.is_none() && target != 0 {
            for i in 0..INTERRUPT_TRIES {
                if i > 0 {
                    std::thread::sleep(INTERRUPT_GAP);
                }
                let still = self
                    .shared
                    .workers
                    .iter()
                    .any(|w| w.busy.load(Ordering::Acquire) == busy);
                if !still {
                    break;
                }
                // SAFETY: `target` is the pthread id of one of this queue's
                // workers, which are joined only when the queue drops (not
                // while `&mut self` is borrowed here), so the id is live.
                unsafe { libc::pthread_kill(target as libc::pthread_t, interrupt_signal()) };
            }
        }
        TimeoutAction::ResetTimer
    }

    /// Requests taken and not yet given back.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Take `rq`; wake the workers at the end of the batch (`last`).
    #[inline]
    pub fn queue(&mut self, rq: RqRef, last: bool) {
        {
            let mut l = lock(&self.shared.submitted);
            debug_assert!(
                l.len() < l.capacity(),
                "submission list is sized to the tags"
            );
            l.push_back(rq);
        }
        self.in_flight += 1;
        self.unwoken += 1;
        if last {
            self.commit();
        }
    }

    /// Wake the workers for everything queued so far.
    #[inline]
    pub fn commit(&mut self) {
        if self.unwoken > 0 {
            self.unwoken = 0;
            self.shared.work.notify();
        }
    }

    /// Move finished requests into `done`.
    #[inline]
    pub fn poll(&mut self, done: &mut Completions<'_>) -> usize {
        if self.in_flight == 0 {
            return 0;
        }
        {
            let mut l = lock(&self.shared.completed);
            if l.is_empty() {
                return 0;
            }
            std::mem::swap(&mut *l, &mut self.drained);
        }
        let n = self.drained.len();
        for (rq, status) in self.drained.drain(..) {
            done.complete(rq, status);
        }
        debug_assert!(self.in_flight as usize >= n);
        self.in_flight -= n as u32;
        n
    }
}

fn worker(shared: &Shared, index: usize) {
    let me = &shared.workers[index];
    // SAFETY: pthread_self has no preconditions.
    let id = unsafe { libc::pthread_self() };
    me.thread.store(id as u64, Ordering::Release);
    loop {
        let seen = shared.work.seq();
        let next = {
            let mut l = lock(&shared.submitted);
            let rq = l.pop_front();
            if let Some(rq) = &rq {
                // Published under the lock: the timeout path finds a
                // request either on the list or on a worker.
                me.cancel.store(IDLE, Ordering::Relaxed);
                me.busy.store(rq.tag().wrapping_add(1), Ordering::Release);
            }
            rq
        };
        match next {
            Some(mut rq) => {
                let mut status = shared.target.execute(&mut rq, me);
                if me.cancelled() {
                    // Timed out: whatever the call did, the core has
                    // given up on it.
                    status = Status::Timeout;
                }
                lock(&shared.completed).push((rq, status));
                me.busy.store(IDLE, Ordering::Release);
                shared.hw.notify();
            }
            None if shared.stop.load(Ordering::Acquire) => return,
            None => shared.work.wait(seen, WORKER_IDLE),
        }
    }
}

impl Drop for PsyncQueue {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.work.notify();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore)]
    fn the_interrupt_handler_has_no_sa_restart() {
        install_interrupt().unwrap();
        // SAFETY: a null new action only reads the current one into `old`.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { libc::sigaction(interrupt_signal(), std::ptr::null(), &mut old) };
        assert_eq!(r, 0);
        assert_eq!(old.sa_sigaction, handler_addr());
        assert_eq!(old.sa_flags & libc::SA_RESTART, 0);
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn the_interrupt_signal_ends_a_blocked_system_call_with_eintr() {
        install_interrupt().unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe writes two descriptors into `fds`.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() } as u64).unwrap();
            let mut b = [0u8; 1];
            // SAFETY: read writes at most one byte into `b`. Nothing is
            // ever written to the pipe: only a signal ends this read.
            let r = unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) };
            (r, crate::target::errno())
        });
        let id = rx.recv().unwrap();
        // The signal may land before the read starts: send until it ends.
        for _ in 0..1000 {
            if reader.is_finished() {
                break;
            }
            // SAFETY: the thread is not joined yet, so its id is live.
            unsafe { libc::pthread_kill(id as libc::pthread_t, interrupt_signal()) };
            std::thread::sleep(Duration::from_millis(5));
        }
        if !reader.is_finished() {
            // Never interrupted: end the read with a byte, and fail below.
            // SAFETY: write reads one byte from a live local.
            unsafe { libc::write(fds[1], [0u8].as_ptr().cast(), 1) };
        }
        let (r, e) = reader.join().unwrap();
        assert_eq!(r, -1, "the read was not interrupted");
        assert_eq!(e, libc::EINTR);
        for fd in fds {
            // SAFETY: both descriptors are ours and closed once.
            unsafe { libc::close(fd) };
        }
    }
}
