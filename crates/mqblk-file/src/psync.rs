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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk_core::driver::RqRef;
use mqblk_core::driver::{Completions, HwNotifier, Notify};
use mqblk_core::error::Status;

use crate::target::Target;

/// Stack size of a worker: it only runs system calls and one iovec array.
const WORKER_STACK_BYTES: usize = 256 << 10;
/// Longest a worker sleeps before it looks for work (or a stop) again.
const WORKER_IDLE: Duration = Duration::from_millis(100);

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
}

impl std::fmt::Debug for PsyncQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PsyncQueue")
            .field("workers", &self.workers.len())
            .field("in_flight", &self.in_flight)
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
        });
        let mut q = PsyncQueue {
            shared: shared.clone(),
            workers: Vec::with_capacity(workers as usize),
            drained: Vec::with_capacity(capacity),
            unwoken: 0,
            in_flight: 0,
        };
        for w in 0..workers {
            let shared = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("mqblk-psync{index}.{w}"))
                .stack_size(WORKER_STACK_BYTES)
                .spawn(move || worker(&shared))?;
            q.workers.push(h);
        }
        Ok(q)
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

fn worker(shared: &Shared) {
    loop {
        let seen = shared.work.seq();
        let next = lock(&shared.submitted).pop_front();
        match next {
            Some(mut rq) => {
                let status = shared.target.execute(&mut rq);
                lock(&shared.completed).push((rq, status));
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
