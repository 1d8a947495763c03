//! Whether a run went well, from its results: every failed I/O, every
//! job that ended early, every verify mismatch and every degraded mirror
//! that was not allowed, in one error. `mqblk bench` exits with it.

use anyhow::{bail, Result};

use crate::result::{JobResult, RunResult};

impl RunResult {
    /// The run's verdict: an error naming the failed I/Os or the
    /// mismatches, or what ended a job early (a latency bound, a minimum
    /// rate), or a mirror left degraded that its jobs did not allow.
    pub fn verdict(&self) -> Result<()> {
        verdict(self)
    }
}

/// The run's verdict: an error naming the failed I/Os or the mismatches,
/// or what ended a job early (a latency bound, a minimum rate). "N errors,
/// first: ..." is said only when there were errors; a job still waiting on
/// its device or its throttle when a signal's grace ended is not an I/O
/// error (the stop's own lines say it).
fn verdict(run: &RunResult) -> Result<()> {
    let job_errors = |j: &JobResult| j.read.errors + j.write.errors + j.trim.errors;
    let stopped_there = |j: &JobResult| {
        if j.stopped_at.is_some() {
            " (the job stopped there: continue_on_error=none)"
        } else {
            ""
        }
    };
    let failed: Vec<String> = run
        .jobs
        .iter()
        .filter(|j| !j.unfinished && job_errors(j) > 0)
        .map(|j| {
            format!(
                "{} (job {}): {} errors, first: {}{}",
                j.name,
                j.index,
                job_errors(j),
                j.first_error.as_deref().unwrap_or("not recorded"),
                stopped_there(j)
            )
        })
        .collect();
    if !failed.is_empty() {
        bail!(
            "I/O errors in {} job(s): {}",
            failed.len(),
            failed.join("; ")
        );
    }
    let ended: Vec<String> = run
        .jobs
        .iter()
        .filter(|j| !j.unfinished && job_errors(j) == 0)
        .filter_map(|j| {
            let why = j.first_error.as_deref()?;
            Some(format!(
                "{} (job {}): {why}{}",
                j.name,
                j.index,
                stopped_there(j)
            ))
        })
        .collect();
    if !ended.is_empty() {
        bail!("{} job(s) ended early: {}", ended.len(), ended.join("; "));
    }
    let mismatched: Vec<String> = run
        .jobs
        .iter()
        .filter_map(|j| {
            let v = j.verify.as_ref().filter(|v| v.errors > 0)?;
            let first = v.mismatches.first().map(|m| m.to_string());
            Some(format!(
                "{} (job {}): {} mismatches, first: {}",
                j.name,
                j.index,
                v.errors,
                first.as_deref().unwrap_or("unknown")
            ))
        })
        .collect();
    if !mismatched.is_empty() {
        bail!(
            "verify failed in {} job(s): {}",
            mismatched.len(),
            mismatched.join("; ")
        );
    }
    let degraded: Vec<String> = run
        .layer
        .degraded
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| crate::degraded::text(&d.leg, d.run_ms))
        .collect();
    if !degraded.is_empty() {
        bail!(
            "the run ended degraded: {} (the I/O went on, on the legs left; allow_degraded=1 \
             lets a run end degraded)",
            degraded.join("; ")
        );
    }
    Ok(())
}
