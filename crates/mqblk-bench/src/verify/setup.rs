//! Setting a run up: which jobs get a verifier, on which slice of their
//! device, and which devices cannot be verified.

use mqblk::Device;

use mqblk_fio::job::{JobSpec, VerifyKind};

use super::header::KindLayout;
use super::record::RECORD_ENTRIES_MAX;
use super::verifier::{Verifier, VerifySpec};

/// Refuse a run whose verify cannot work: a device that keeps no data.
pub fn check_jobs(jobs: &[JobSpec]) -> anyhow::Result<()> {
    for job in jobs.iter().filter(|j| j.verify.is_some()) {
        for spec in &job.devices {
            if let Some(why) = refuse_device(spec) {
                anyhow::bail!("job {}: {why}", job.name);
            }
        }
    }
    Ok(())
}

/// The verifier of job `index` of the run, if its job verifies. Writing
/// jobs of one stonewall group (`groups[i]`) on the same device verify
/// disjoint slices of their region.
pub fn for_job(
    plan: &[(JobSpec, Device)],
    groups: &[usize],
    index: usize,
    region_bytes: u64,
) -> anyhow::Result<Option<Verifier>> {
    let (job, dev) = &plan[index];
    let Some(kind) = job.verify else {
        return Ok(None);
    };
    if u32::from(job.trim_percentage) + u32::from(job.write_zeroes_percentage) > 100 {
        anyhow::bail!(
            "job {}: trim_percentage={} and write_zeroes_percentage={} add up to more than 100",
            job.name,
            job.trim_percentage,
            job.write_zeroes_percentage
        );
    }
    if job.trim_percentage > 0 && !dev.info().features.discard {
        anyhow::bail!(
            "job {}: trim_percentage={} discards, and device {} does not support discard",
            job.name,
            job.trim_percentage,
            dev.name()
        );
    }
    let interval = job.verify_interval.unwrap_or(job.bs);
    if kind == VerifyKind::Pattern && job.verify_pattern.is_none() {
        anyhow::bail!(
            "job {}: verify=pattern checks verify_pattern=, and there is none",
            job.name
        );
    }
    let header_min = (2 * kind.data_start()).max(1) as u64;
    if interval == 0
        || !job.bs.is_multiple_of(interval)
        || (kind.has_header() && interval < header_min)
    {
        anyhow::bail!(
            "job {}: verify_interval={interval} must divide bs={} and hold twice the header ({header_min} bytes)",
            job.name,
            job.bs
        );
    }
    let region_blocks = region_bytes / job.bs;
    let read_only = job.rw.read_percent(job.rwmixread) == 100;
    let writes = |j: &JobSpec| j.verify.is_some() && j.rw.read_percent(j.rwmixread) < 100;
    let same = |i: usize| {
        plan[i].1.name() == dev.name() && groups[i] == groups[index] && writes(&plan[i].0)
    };
    let (slices, slice) = if read_only {
        (1, 0)
    } else {
        (
            (0..plan.len()).filter(|&i| same(i)).count() as u64,
            (0..index).filter(|&i| same(i)).count() as u64,
        )
    };
    // A slice starts a whole number of the job's steps (bs plus a hole of
    // rw=write:N) from its region's start, so that where the job's I/O
    // falls against the device's boundaries is as the job file says.
    let step_blocks = if !job.rw.is_random() && job.seq_stride > 0 {
        (job.bs + job.seq_stride as u64).div_ceil(job.bs)
    } else {
        1
    };
    let per = region_blocks / slices.max(1) / step_blocks * step_blocks;
    if per == 0 {
        anyhow::bail!(
            "job {}: verify gives each of the {slices} jobs on {} its own slice, and {} blocks \
             of {} bytes do not go round",
            job.name,
            dev.name(),
            region_blocks,
            job.bs
        );
    }
    let seed = job.randseed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let backlog_batch = job.verify_backlog_batch.unwrap_or(job.verify_backlog);
    let writers = groups
        .iter()
        .filter(|&&g| g == groups[index])
        .count()
        .max(1);
    let v = Verifier::new(VerifySpec {
        kind,
        bs: job.bs,
        interval,
        pattern: job.verify_pattern.clone(),
        draw_base: job.offset,
        slice_base: job.offset + slice * per * job.bs,
        blocks: per,
        job: index as u16,
        job_seed: seed,
        do_verify: job.do_verify,
        // continue_on_error=verify (or all) goes on past a mismatch, as
        // fio's does even with verify_fatal=1.
        fatal: job.verify_fatal && !job.continue_on_error.verify,
        read_only,
        backlog: job.verify_backlog,
        backlog_batch,
        record_entries_max: (RECORD_ENTRIES_MAX / writers).max(1 << 12),
    });
    Ok(Some(v.with_mix(
        job.trim_percentage,
        job.write_zeroes_percentage,
        job.trim_verify_zero,
    )))
}

/// Why a device spec cannot be verified, if it cannot: the null device
/// keeps no data unless `memory_backed=1`.
pub fn refuse_device(spec: &str) -> Option<String> {
    let parsed = mqblk::spec::parse(spec).ok()?;
    if !matches!(parsed.kind.as_str(), "null" | "nullb") {
        return None;
    }
    let mut o = parsed.options;
    match o.take_bool("memory_backed") {
        Ok(Some(true)) => None,
        _ => Some(format!(
            "--verify needs a device that keeps its data; {spec:?} discards writes \
             (use null,memory_backed=1, ram, or file:)"
        )),
    }
}
