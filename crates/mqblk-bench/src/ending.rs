//! When the supervisor ends a job before its I/O is done: its `runtime`
//! is over (counted after its `startdelay`), its steady state is reached
//! ([`super::steadystate`]), or a job with `exitall` ended and takes
//! others with it (`exit_what=`: its reporting group, every running job,
//! or the whole run). The jobs themselves read no clock for any of it:
//! the supervisor raises a flag each job checks once per batch.

use std::time::Duration;

use mqblk::Device;

use super::steadystate::{SteadyResult, Tracker};
use mqblk_fio::job::{ExitWhat, JobSpec};

/// The ending rules of one stonewall group's jobs.
pub struct Ending {
    /// Per job: when its runtime is over, from the group's start.
    deadlines: Vec<Option<Duration>>,
    /// Per job: `exit_what=` if it has `exitall`.
    exitall: Vec<Option<ExitWhat>>,
    report_groups: Vec<usize>,
    /// Jobs seen done, and jobs asked to stop.
    seen_done: Vec<bool>,
    stopped: Vec<bool>,
    tracker: Option<Tracker>,
    exit_all: bool,
}

impl Ending {
    /// The rules of `plan`'s jobs, in `report_groups`.
    pub fn new(plan: &[(JobSpec, Device)], report_groups: &[usize]) -> Ending {
        let n = plan.len();
        // With group_reporting a section's copies (adjacent, same name)
        // are judged together.
        let unit = |i: usize| {
            let (job, _) = &plan[i];
            if !job.group_reporting {
                return i;
            }
            let mut j = i;
            while j > 0 && plan[j - 1].0.name == job.name {
                j -= 1;
            }
            j
        };
        let ss: Vec<_> = (0..n)
            .map(|i| {
                let j = &plan[i].0;
                (j.steadystate, j.ss_dur, j.ss_ramp, unit(i))
            })
            .collect();
        Ending {
            deadlines: plan
                .iter()
                .map(|(j, _)| j.runtime.map(|r| r + j.startdelay))
                .collect(),
            exitall: plan
                .iter()
                .map(|(j, _)| j.exitall.then_some(j.exit_what))
                .collect(),
            report_groups: report_groups.to_vec(),
            seen_done: vec![false; n],
            stopped: vec![false; n],
            tracker: Tracker::new(&ss),
            exit_all: false,
        }
    }

    /// At `elapsed` since the group started, with `done(i)` telling
    /// whether job i has stopped issuing and `counts(i)` its (I/Os, bytes)
    /// so far: the jobs to stop now.
    pub fn due(
        &mut self,
        elapsed: Duration,
        done: impl Fn(usize) -> bool,
        counts: impl Fn(usize) -> (u64, u64),
    ) -> Vec<usize> {
        let n = self.deadlines.len();
        let mut stop = Vec::new();
        for i in 0..n {
            if self.deadlines[i].is_some_and(|d| elapsed >= d) {
                stop.push(i);
            }
        }
        if let Some(t) = &mut self.tracker {
            stop.extend(t.tick(elapsed.as_millis() as u64, &counts));
        }
        for i in 0..n {
            if self.seen_done[i] || !done(i) {
                continue;
            }
            self.seen_done[i] = true;
            match self.exitall[i] {
                None => {}
                Some(ExitWhat::Group) => {
                    let g = self.report_groups[i];
                    stop.extend((0..n).filter(|&j| self.report_groups[j] == g));
                }
                Some(ExitWhat::Stonewall) => stop.extend(0..n),
                Some(ExitWhat::All) => {
                    stop.extend(0..n);
                    self.exit_all = true;
                }
            }
        }
        stop.retain(|&i| !std::mem::replace(&mut self.stopped[i], true));
        stop
    }

    /// Job i's steady state, if it judged one.
    pub fn steadystate(&self, i: usize) -> Option<SteadyResult> {
        self.tracker.as_ref()?.result(i)
    }

    /// Whether `exit_what=all` ended the run.
    pub fn exit_all(&self) -> bool {
        self.exit_all
    }
}
