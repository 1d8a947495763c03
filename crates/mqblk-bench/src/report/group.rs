//! fio's reporting groups: which group each job is in (a new one at each
//! `stonewall` or `new_group`, as fio's `add_job` counts them), and, with
//! `group_reporting`, the jobs of a group folded into one report entry by
//! fio's rules (`sum_thread_stats` and `__show_run_stats` in its stat.c):
//!
//! - I/O counts, bytes and errors are summed;
//! - the latency histograms are merged, so min is the least of the
//!   minimums, max the greatest of the maximums, and the mean, the
//!   percentiles and N are those of every I/O of the group;
//! - the runtime is the longest member's, so bandwidth and IOPS are the
//!   summed bytes and I/Os over it;
//! - CPU time is summed, as is the runtime it is a share of.
//!
//! A job without `group_reporting` is an entry of its own, as in fio,
//! where consecutive jobs of one group fold only while each says
//! `group_reporting`.

use crate::result::{DirResult, JobResult, RunResult};
use mqblk_fio::job::JobSpec;

use super::figures::spec_of;

/// Each job section's group id (fio's `groupid`), in order: a section
/// with `stonewall` or `new_group` after any other starts a new group.
pub fn section_groups(specs: &[JobSpec]) -> Vec<usize> {
    let mut group = 0usize;
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            if i > 0 && (s.stonewall || s.new_group) {
                group += 1;
            }
            group
        })
        .collect()
}

/// One entry of the report: a job, or the jobs of a group folded.
#[derive(Clone, Debug)]
pub struct Reported {
    /// The figures (named after the group's first job, with its index).
    pub job: JobResult,
    /// How many jobs it holds (fio's `jobs=`).
    pub members: usize,
    /// The members' runtimes summed: what their CPU time is a share of.
    pub cpu_runtime_ns: u64,
}

/// The run's report entries, in job order.
pub fn reported(specs: &[JobSpec], run: &RunResult) -> Vec<Reported> {
    let mut out: Vec<Reported> = Vec::new();
    for job in &run.jobs {
        let folds = spec_of(specs, job).is_some_and(|s| s.group_reporting);
        match out.last_mut() {
            Some(last) if folds && last.job.group == job.group => last.fold(job),
            _ => out.push(Reported {
                job: job.clone(),
                members: 1,
                cpu_runtime_ns: job.runtime_ns,
            }),
        }
    }
    out
}

fn add(a: &mut DirResult, b: &DirResult) {
    a.ios += b.ios;
    a.bytes += b.bytes;
    a.errors += b.errors;
}

impl Reported {
    /// Fold `job` in, by fio's rules.
    fn fold(&mut self, job: &JobResult) {
        let g = &mut self.job;
        add(&mut g.read, &job.read);
        add(&mut g.write, &job.write);
        add(&mut g.trim, &job.trim);
        if job.clat_valid {
            if g.clat_valid {
                g.clat.merge(&job.clat);
            } else {
                g.clat = job.clat.clone();
                g.clat_valid = true;
            }
        }
        for (mine, theirs) in [(&mut g.slat, &job.slat), (&mut g.lat, &job.lat)] {
            match (mine.as_mut(), theirs) {
                (Some(m), Some(t)) => m.merge(t),
                (None, Some(t)) => *mine = Some(t.clone()),
                _ => {}
            }
        }
        g.runtime_ns = g.runtime_ns.max(job.runtime_ns);
        g.usr_ns += job.usr_ns;
        g.sys_ns += job.sys_ns;
        if g.first_error.is_none() {
            g.first_error.clone_from(&job.first_error);
        }
        if g.stopped_at.is_none() {
            g.stopped_at.clone_from(&job.stopped_at);
        }
        g.unfinished |= job.unfinished;
        if job.latency_depth.is_some() {
            g.latency_depth = job.latency_depth;
        }
        if g.steadystate.is_none() {
            g.steadystate.clone_from(&job.steadystate);
        }
        match (&mut g.verify, &job.verify) {
            (Some(m), Some(t)) => m.fold(t),
            (None, Some(t)) => g.verify = Some(t.clone()),
            _ => {}
        }
        self.members += 1;
        self.cpu_runtime_ns += job.runtime_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, numjobs: u32, group_reporting: bool) -> JobSpec {
        JobSpec {
            name: name.into(),
            numjobs,
            group_reporting,
            ..JobSpec::default()
        }
    }

    fn result(index: usize, group: usize, lats: &[u64], runtime_ns: u64) -> JobResult {
        let mut r = JobResult::unfinished("j", index, "ram0", Default::default(), 0);
        r.unfinished = false;
        r.first_error = None;
        r.group = group;
        r.read = DirResult {
            ios: lats.len() as u64,
            bytes: lats.len() as u64 * 4096,
            errors: 0,
        };
        for &ns in lats {
            r.clat.record(mqblk::stats::StatGroup::Read, ns);
        }
        r.clat_valid = true;
        r.runtime_ns = runtime_ns;
        r.usr_ns = runtime_ns / 2;
        r
    }

    #[test]
    fn a_group_sums_io_merges_latencies_and_runs_as_long_as_its_longest_job() {
        let specs = [spec("j", 3, true), spec("k", 1, true)];
        let run = RunResult {
            jobs: vec![
                result(0, 0, &[1000, 2000], 1_000_000_000),
                result(1, 0, &[500, 3000, 4000], 2_000_000_000),
                result(2, 0, &[1500], 1_500_000_000),
                // Another group: its own entry.
                result(3, 1, &[7000], 1_000_000_000),
            ],
            layer: Default::default(),
        };
        let e = reported(&specs, &run);
        assert_eq!(e.len(), 2);
        let g = &e[0];
        assert_eq!(g.members, 3);
        assert_eq!(g.job.read.ios, 6);
        assert_eq!(g.job.read.bytes, 6 * 4096);
        assert_eq!(g.job.runtime_ns, 2_000_000_000, "the longest runtime");
        assert_eq!(g.cpu_runtime_ns, 4_500_000_000, "the runtimes summed");
        assert_eq!(g.job.usr_ns, 2_250_000_000);
        // The merged latencies are those of every I/O in one histogram:
        // min of the minimums, max of the maximums, the mean of all.
        let h = g.job.clat.group(mqblk::stats::StatGroup::Read);
        let mut all = mqblk::stats::Histograms::new();
        for ns in [1000, 2000, 500, 3000, 4000, 1500] {
            all.record(mqblk::stats::StatGroup::Read, ns);
        }
        let all = all.group(mqblk::stats::StatGroup::Read);
        assert_eq!(h.len(), 6);
        assert_eq!(h.min(), all.min());
        assert_eq!(h.max(), all.max());
        assert_eq!(h.mean(), all.mean());
        assert_eq!(h.value_at_quantile(0.5), all.value_at_quantile(0.5));
        assert_eq!(e[1].members, 1);
        assert_eq!(e[1].job.group, 1);
        // Without group_reporting every job is its own entry.
        let specs = [spec("j", 3, false), spec("k", 1, false)];
        assert_eq!(reported(&specs, &run).len(), 4);
    }

    #[test]
    fn stonewall_and_new_group_start_groups_after_the_first_section() {
        let mut a = spec("a", 1, false);
        a.stonewall = true;
        let b = spec("b", 1, false);
        let mut c = spec("c", 1, false);
        c.new_group = true;
        let mut d = spec("d", 1, false);
        d.stonewall = true;
        assert_eq!(section_groups(&[a, b, c, d]), [0, 0, 1, 2]);
    }
}
