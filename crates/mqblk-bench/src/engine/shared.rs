//! What the supervisor and the job threads share: the phases, the
//! bounds of a stop, and the state both sides read.

use crate::result::{DirResult, JobResult};
use crate::sample::Recorded;
use anyhow::Result;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::Duration;

pub(super) const PHASE_RAMP: u8 = 0;
pub(super) const PHASE_MEASURE: u8 = 1;
pub(super) const PHASE_STOP: u8 = 2;
/// How a file device's note about its buffer arena begins
/// (`mqblk_file::ARENA_NOTE_PREFIX`): said by `mqblk info`, not each run.
pub(super) const ARENA_NOTE_PREFIX: &str = "fixed_bufs=";

/// Stopped by a signal: drain, but skip the verify phase.
pub(super) const PHASE_ABORT: u8 = 3;

pub(super) use crate::stop::STOP_CHECK;
/// After a signal, how long the supervisor waits for the jobs' figures
/// before it reports without those still blocked in their device: with
/// the devices' 500 ms to close after the report, the run ends within 2 s
/// of the signal, report first.
pub(super) const STOP_GRACE: Duration = Duration::from_millis(1200);

/// What a job thread hands the supervisor, once: its figures, or why it
/// could not run.
pub(super) type JobMsg = (usize, Result<(JobResult, mqblk::DiskStats, Recorded)>);

/// State shared by the supervisor and the job threads.
pub(super) struct Shared {
    pub(super) phase: AtomicU8,
    pub(super) measuring: AtomicUsize,
    pub(super) finished: AtomicUsize,
    pub(super) start: Barrier,
    /// Jobs that have opened their context: each opens in job order, so
    /// the hardware queue a job lands on (contexts go round-robin over the
    /// queues) is the same from run to run, as is who shares it.
    pub(super) opened: Mutex<usize>,
    pub(super) opened_cv: Condvar,
    /// I/Os done per job, for the status line (written once per batch).
    pub(super) progress: Vec<CachePadded<crate::status::Live>>,
    /// Per job, per direction, for the averaged logs and steady state
    /// (written once per batch, only by jobs that log or judge it).
    pub(super) counters: Vec<CachePadded<crate::counts::Counters>>,
    /// Per job: the supervisor asks it to stop (its runtime is over, it
    /// is steady, or `exitall` ended it).
    pub(super) stop_job: Vec<CachePadded<AtomicBool>>,
    /// Per job: it has stopped issuing (for `exitall`).
    pub(super) done: Vec<AtomicBool>,
    /// Per job: bios its throttle held when it last looked (at its stop
    /// and while it drains), so a stop does not blame the device for
    /// them.
    pub(super) throttled: Vec<Arc<AtomicU32>>,
}

impl Shared {
    /// Run `open` once the jobs before job `index` have run theirs (opened
    /// their context, or failed to).
    pub(super) fn in_job_order<T>(&self, index: usize, open: impl FnOnce() -> T) -> T {
        let mut opened = self.opened.lock().unwrap_or_else(|e| e.into_inner());
        while *opened < index {
            opened = self
                .opened_cv
                .wait(opened)
                .unwrap_or_else(|e| e.into_inner());
        }
        let out = open();
        *opened += 1;
        self.opened_cv.notify_all();
        out
    }
}

/// What a job thread measured, before formatting.
pub(super) struct Measured {
    pub(super) read: DirResult,
    pub(super) write: DirResult,
    pub(super) trim: DirResult,
    pub(super) runtime_ns: u64,
    pub(super) usr_ns: u64,
    pub(super) sys_ns: u64,
    pub(super) stats: mqblk::DiskStats,
    pub(super) first_error: Option<String>,
    /// The I/O error that stopped the job (continue_on_error=).
    pub(super) stopped_at: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU8, AtomicUsize};
    use std::sync::{Arc, Barrier, Condvar, Mutex};
    use std::time::Duration;

    #[test]
    fn jobs_open_in_job_order_whatever_order_their_threads_start() {
        let n = 6;
        let shared = Arc::new(Shared {
            phase: AtomicU8::new(PHASE_RAMP),
            measuring: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
            start: Barrier::new(1),
            opened: Mutex::new(0),
            opened_cv: Condvar::new(),
            progress: crate::status::Live::for_jobs(n),
            counters: Vec::new(),
            stop_job: Vec::new(),
            done: Vec::new(),
            throttled: Vec::new(),
        });
        let order = Arc::new(Mutex::new(Vec::new()));
        // The last job's thread starts first.
        let threads: Vec<_> = (0..n)
            .rev()
            .map(|i| {
                let (shared, order) = (shared.clone(), order.clone());
                let t = std::thread::spawn(move || {
                    shared.in_job_order(i, || order.lock().unwrap().push(i))
                });
                std::thread::sleep(Duration::from_millis(2));
                t
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..n).collect::<Vec<_>>());
    }
}
