//! Building a ring: its size for a queue depth, and the setup flags tried
//! from the best the kernel offers down to the plainest.

use std::io;

use io_uring::IoUring;

use crate::config::{TaskRun, WaitMode};

/// Largest ring (the kernel's IORING_MAX_ENTRIES).
const MAX_RING_ENTRIES: u32 = 32768;

/// How the ring's completion work is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// SINGLE_ISSUER | DEFER_TASKRUN | TASKRUN_FLAG.
    Defer,
    /// COOP_TASKRUN | TASKRUN_FLAG.
    Coop,
    /// Neither: completion work interrupts the submitting task.
    Plain,
}

impl Flavor {
    /// The setup flags, as io_uring_setup(2) names them.
    pub fn describe(self) -> &'static str {
        match self {
            Flavor::Defer => "SINGLE_ISSUER|DEFER_TASKRUN|TASKRUN_FLAG",
            Flavor::Coop => "COOP_TASKRUN|TASKRUN_FLAG",
            Flavor::Plain => "no task-run flags",
        }
    }
}

/// What every ring of a device is set up with.
#[derive(Clone, Debug)]
pub struct RingConfig {
    /// Submission queue entries (a power of two; at least the tag depth
    /// when the kernel allows).
    pub entries: u32,
    /// IORING_SETUP_IOPOLL.
    pub iopoll: bool,
    /// IORING_SETUP_SQPOLL with this idle time.
    pub sqpoll_idle_ms: Option<u32>,
    /// The task-run mode asked for.
    pub taskrun: TaskRun,
    /// Completion style.
    pub wait: WaitMode,
}

impl RingConfig {
    /// Entries for `depth` requests in flight at once.
    pub fn entries_for(depth: u32) -> u32 {
        depth.max(8).next_power_of_two().min(MAX_RING_ENTRIES)
    }

    /// Does a `wait=poll` ring get an interrupt line (see the module's
    /// doc)? Not with IOPOLL, whose completions no interrupt announces,
    /// nor with `taskrun=coop`, whose eventfd a sleeper cannot count on.
    pub fn irq_line(&self) -> bool {
        self.wait == WaitMode::Poll && !self.iopoll && self.taskrun != TaskRun::Coop
    }
}

pub(super) fn try_build(cfg: &RingConfig, flavor: Flavor, submit_all: bool) -> io::Result<IoUring> {
    let mut b = IoUring::builder();
    b.setup_clamp();
    b.setup_cqsize(cfg.entries * 2);
    if submit_all {
        b.setup_submit_all();
    }
    if cfg.iopoll {
        b.setup_iopoll();
    }
    if let Some(idle) = cfg.sqpoll_idle_ms {
        b.setup_sqpoll(idle);
    }
    match flavor {
        Flavor::Defer => {
            b.setup_single_issuer()
                .setup_defer_taskrun()
                .setup_taskrun_flag()
                .setup_r_disabled();
        }
        Flavor::Coop => {
            b.setup_coop_taskrun().setup_taskrun_flag();
        }
        Flavor::Plain => {}
    }
    b.build(cfg.entries)
}

/// Build a ring with the best flavor `cfg` allows; EINVAL from the kernel
/// means a flag it does not know, so the next flavor is tried.
pub fn build_ring(cfg: &RingConfig, allow_defer: bool) -> io::Result<(IoUring, Flavor)> {
    let flavors: &[Flavor] = match (cfg.taskrun, cfg.wait) {
        (TaskRun::Defer, _) => &[Flavor::Defer],
        (TaskRun::Coop, _) => &[Flavor::Coop],
        (TaskRun::Off, _) => &[Flavor::Plain],
        // A sleeping waiter is woken through the eventfd, which a
        // COOP_TASKRUN ring only signals once the sleeper itself runs the
        // completion work: never use it for sleeping, nor for the
        // interrupt line of `wait=poll`.
        (TaskRun::Auto, WaitMode::Sleep) => &[Flavor::Defer, Flavor::Plain],
        (TaskRun::Auto, WaitMode::Poll) if cfg.irq_line() => &[Flavor::Defer, Flavor::Plain],
        (TaskRun::Auto, WaitMode::Poll) => &[Flavor::Defer, Flavor::Coop, Flavor::Plain],
    };
    let mut last = io::Error::from_raw_os_error(libc::EINVAL);
    for &f in flavors {
        if f == Flavor::Defer && (!allow_defer || cfg.sqpoll_idle_ms.is_some()) {
            continue;
        }
        for submit_all in [true, false] {
            match try_build(cfg, f, submit_all) {
                Ok(r) => return Ok((r, f)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = e,
                Err(e) => return Err(e),
            }
        }
    }
    Err(last)
}
