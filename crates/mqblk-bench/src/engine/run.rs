//! The supervisor: stonewall groups one after another, the phases of a
//! group (ramp, measure, stop), a signal's grace, and the figures the jobs
//! hand over.

use crate::alloc_count;
use crate::result::{DeviceAlignment, JobResult, LayerResult, RunResult};
use crate::sample::Recorded;
use crate::teardown::Teardown;
use crate::verify::{NoVerify, Verifier};
use anyhow::Result;
use crossbeam_utils::CachePadded;
use mqblk::Device;
use mqblk_fio::job::JobSpec;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::job::job_thread;
use super::prepare::{region_bytes, Prepared};
use super::shared::*;

/// Run all prepared jobs (numjobs expanded) concurrently and measure them.
/// Setting `stop` (a signal) ends the run as the runtime would: the jobs
/// stop issuing and hand over their figures, and the verify phase is
/// skipped. A job blocked in a device that does not answer is reported
/// without its figures after `STOP_GRACE`; it keeps its bios (and so the
/// memory its device may still write) until it ends or the process exits.
///
/// The devices stay open, and the job threads that are still draining
/// stay running, in the returned [`Teardown`]: the caller reports first,
/// then closes them with a bound.
pub fn run(
    prepared: Prepared,
    status: &crate::status::StatusOptions,
    stop: &AtomicBool,
) -> Result<(RunResult, Teardown)> {
    let alignment = prepared.alignment();
    let started = std::time::SystemTime::now();
    // Each device, and whether every job on it may end degraded.
    let mut watch: Vec<(Device, bool)> = Vec::new();
    for (job, dev) in &prepared.plan {
        match watch.iter_mut().find(|(d, _)| d.name() == dev.name()) {
            Some((_, allowed)) => *allowed &= job.allow_degraded,
            None => watch.push((dev.clone(), job.allow_degraded)),
        }
    }
    let Prepared {
        mut plan,
        mut verifiers,
        mut gates,
        report_groups,
        group_starts,
    } = prepared;
    // Stonewall groups, one after another; later groups first off the end.
    let mut groups = Vec::new();
    for &start in group_starts.iter().rev() {
        groups.push((
            start,
            plan.split_off(start),
            verifiers.split_off(start),
            gates.split_off(start),
        ));
    }
    let mut total: Option<RunResult> = None;
    let mut teardown = Teardown::default();
    let mut exit_all = false;
    for (base, plan, verifiers, gates) in groups.into_iter().rev() {
        // A signal or a job stopped at an I/O error ends the run after the
        // group it stopped; the first group always runs, so that there is
        // a report. exit_what=all ends the groups after its own.
        if (stop.load(Relaxed) || exit_all || total.as_ref().is_some_and(failed)) && total.is_some()
        {
            break;
        }
        let groups_here = &report_groups[base..base + plan.len()];
        let (mut r, all) = run_group(
            base,
            plan,
            verifiers,
            gates,
            groups_here,
            alignment.clone(),
            status,
            stop,
            &mut teardown,
        )?;
        exit_all |= all;
        for j in &mut r.jobs {
            j.group = report_groups[j.index];
        }
        total = Some(match total {
            None => r,
            Some(mut t) => {
                t.jobs.extend(r.jobs);
                let (a, b) = (&mut t.layer, r.layer);
                a.allocs += b.allocs;
                a.ios += b.ios;
                a.stats.add(&b.stats);
                a.cpu_ns += b.cpu_ns;
                a.interrupted |= b.interrupted;
                a.unfinished += b.unfinished;
                t
            }
        });
        // A later group waits for this one's devices to be quiet, as fio's
        // stonewall does (a healthy device's jobs are done already).
        if !stop.load(Relaxed) && !total.as_ref().is_some_and(failed) {
            teardown.join_jobs();
        }
    }
    let mut total = total.ok_or_else(|| anyhow::anyhow!("no jobs ran"))?;
    for (dev, allowed) in &watch {
        for leg in mqblk::degraded_legs(dev) {
            total.layer.degraded.push(crate::result::Degraded {
                device: dev.name().to_string(),
                run_ms: crate::degraded::ms_after(&leg, started),
                leg,
                allowed: *allowed,
            });
        }
    }
    Ok((total, teardown))
}

/// Whether a job of the run stopped at an I/O error: later stonewall
/// groups do not run, as fio's do not after a job's error.
fn failed(r: &RunResult) -> bool {
    r.jobs.iter().any(|j| j.stopped_at.is_some())
}

/// Run one stonewall group's jobs (numjobs expanded) at once; `base` is
/// the index of its first job in the run, `report_groups` their reporting
/// groups. Also says whether `exit_what=all` ended the run.
#[allow(clippy::too_many_arguments)]
fn run_group(
    base: usize,
    plan: Vec<(JobSpec, Device)>,
    mut verifiers: Vec<Option<Verifier>>,
    mut gates: Vec<Option<crate::flow::Gate>>,
    report_groups: &[usize],
    alignment: Vec<DeviceAlignment>,
    status: &crate::status::StatusOptions,
    stop: &AtomicBool,
    teardown: &mut Teardown,
) -> Result<(RunResult, bool)> {
    let n = plan.len();
    let shared = Arc::new(Shared {
        phase: AtomicU8::new(PHASE_RAMP),
        measuring: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        start: Barrier::new(n + 1),
        opened: Mutex::new(0),
        opened_cv: Condvar::new(),
        progress: crate::status::Live::for_jobs(n),
        counters: (0..n)
            .map(|_| CachePadded::new(crate::counts::Counters::default()))
            .collect(),
        stop_job: (0..n)
            .map(|_| CachePadded::new(AtomicBool::new(false)))
            .collect(),
        done: (0..n).map(|_| AtomicBool::new(false)).collect(),
        throttled: (0..n).map(|_| Arc::new(AtomicU32::new(0))).collect(),
    });
    let (tx, rx) = mpsc::channel::<JobMsg>();
    for (index, (job, dev)) in plan.iter().cloned().enumerate() {
        let verifier = verifiers[index].take();
        let gate = gates[index].take();
        let shared = shared.clone();
        let plain = if job.content.any() {
            let blocks = region_bytes(&job, &dev) / job.bs.max(1);
            let seed = job.randseed ^ (base + index) as u64;
            // Unique buffers are the job's own; with dedupe_global the
            // working set is every job's (Content keeps them apart).
            NoVerify::with_content(crate::content::Content::new(
                job.content,
                (base + index) as u64,
                blocks,
                seed,
            ))
        } else {
            NoVerify::default()
        };
        let tx = tx.clone();
        let h = std::thread::Builder::new()
            .name(format!("{}.{}", job.name, base + index))
            .spawn(move || match verifier {
                Some(v) => job_thread(base, index, job, dev, shared, v, gate, tx),
                None => job_thread(base, index, job, dev, shared, plain, gate, tx),
            })?;
        teardown.handles.push(h);
    }
    drop(tx);
    for (i, (_, dev)) in plan.iter().enumerate() {
        teardown.keep(dev);
        teardown.watch_throttled(dev.name(), shared.throttled[i].clone());
    }
    alloc_count::exclude_this_thread();

    // Supervisor: ramp, measure, stop. Only this thread reads the clock.
    // Without a ramp the jobs measure from their first I/O: the phase is
    // set before the barrier lets them go, so a job that runs before this
    // thread does issues nothing outside the measured phase (a sized job
    // does its size, no more).
    let first = &plan[0].0;
    if first.ramp_time.is_none_or(|r| r.is_zero()) {
        shared.phase.store(PHASE_MEASURE, Relaxed);
    }
    shared.start.wait();
    if let Some(ramp) = first.ramp_time {
        sleep_unless_done(&shared, n, ramp, stop);
    }
    shared.phase.store(PHASE_MEASURE, Relaxed);
    while shared.measuring.load(Relaxed) + shared.finished.load(Relaxed) < n {
        if stop.load(Relaxed) {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let stats_dir = match &plan[0].0.stats_dir {
        Some(dir) => {
            let mut devs: Vec<Device> = Vec::new();
            for (_, d) in &plan {
                // A stacked device's legs are devices of their own: a
                // line each, after the device.
                for d in std::iter::once(d.clone()).chain(mqblk::lower_devices(d)) {
                    if !devs.iter().any(|x| x.name() == d.name()) {
                        devs.push(d);
                    }
                }
            }
            Some(crate::stats_dir::StatsDir::new(dir, devs)?)
        }
        None => None,
    };
    let allocs_start = alloc_count::allocations();
    let t0 = Instant::now();
    let mut logger = {
        let jobs: Vec<&JobSpec> = plan.iter().map(|(j, _)| j).collect();
        crate::log::Logger::new(base, &jobs)
    };
    let runtime = plan
        .iter()
        .filter_map(|(j, _)| j.runtime.map(|r| r + j.startdelay))
        .max();
    let jobs = plan
        .iter()
        .map(|(j, _)| crate::status::JobInfo {
            name: j.name.clone(),
            bs: j.bs,
        })
        .collect();
    let mut status = crate::status::Status::start(status, jobs, runtime, t0, &shared.progress);
    let mut ends = crate::ending::Ending::new(&plan, report_groups);
    loop {
        if shared.finished.load(Relaxed) == n || stop.load(Relaxed) {
            break;
        }
        // Each job's runtime (after its startdelay), steady state and
        // exitall end it alone.
        for i in ends.due(
            t0.elapsed(),
            |i| shared.done[i].load(Relaxed),
            |i| {
                let c = &shared.counters[i];
                (0..crate::counts::DIRECTIONS)
                    .map(|d| (c.ios[d].load(Relaxed), c.bytes[d].load(Relaxed)))
                    .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
            },
        ) {
            shared.stop_job[i].store(true, Relaxed);
        }
        // Short steps so the stats directory is fresh for iostat.
        std::thread::sleep(Duration::from_millis(if stats_dir.is_some() {
            10
        } else {
            20
        }));
        if let Some(sd) = &stats_dir {
            sd.write(false)?;
        }
        if let Some(l) = &mut logger {
            let counters: Vec<&crate::counts::Counters> =
                shared.counters.iter().map(|c| &**c).collect();
            l.tick(t0.elapsed().as_millis() as u64, &counters);
        }
        status.tick(&shared.progress)?;
    }
    // The jobs that ended last may have exitall=1 with exit_what=all.
    let _ = ends.due(t0.elapsed(), |i| shared.done[i].load(Relaxed), |_| (0, 0));
    // The first place the supervisor sees a signal announces the stop
    // (and arms a second signal's exit): here, or while it waits below.
    let stopped_before = stop.load(Relaxed);
    if stopped_before {
        crate::stop::announce(STOP_GRACE);
    }
    shared.phase.store(
        if stop.load(Relaxed) {
            PHASE_ABORT
        } else {
            PHASE_STOP
        },
        Relaxed,
    );
    // A signal (now, or while waiting) gives the jobs STOP_GRACE.
    let mut deadline = None;
    let abort_on_signal = |deadline: &mut Option<Instant>| {
        if deadline.is_none() && stop.load(Relaxed) {
            if !stopped_before {
                crate::stop::announce(STOP_GRACE);
            }
            shared.phase.store(PHASE_ABORT, Relaxed);
            *deadline = Some(Instant::now() + STOP_GRACE);
        }
    };
    // The measured phase ends when every job has left its loop: count the
    // allocations then, before the jobs build their figures.
    while shared.finished.load(Relaxed) < n {
        abort_on_signal(&mut deadline);
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let allocs_end = alloc_count::allocations();
    // Each job hands over its figures once: a job stopped by a signal or
    // by an error before it drains, any other after its verify phase.
    let mut got: Vec<Option<_>> = (0..n).map(|_| None).collect();
    let mut left = n;
    while left > 0 {
        abort_on_signal(&mut deadline);
        let wait = deadline.map_or(Duration::from_millis(50), |d| {
            d.saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50))
        });
        match rx.recv_timeout(wait) {
            Ok((i, r)) => {
                got[i] = Some(r);
                left -= 1;
            }
            Err(RecvTimeoutError::Timeout) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break;
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    status.finish();

    let mut results = Vec::with_capacity(n);
    let mut layer = LayerResult {
        queue_mode: plan[0].1.queue_mode().name().to_string(),
        allocs: allocs_end - allocs_start,
        descriptor_bytes: mqblk::descriptor_bytes(),
        alignment,
        interrupted: stop.load(Relaxed),
        ..LayerResult::default()
    };
    let mut recorded = Vec::with_capacity(n);
    for (index, r) in got.into_iter().enumerate() {
        let (mut r, stats, rec) = match r {
            Some(r) => r?,
            None => {
                // Blocked past the grace (in its device, or on its
                // throttle): reported without its figures; its thread
                // keeps its bios.
                layer.unfinished += 1;
                let (job, dev) = &plan[index];
                let throttled = shared.throttled[index].load(Relaxed);
                (
                    JobResult::unfinished(
                        &job.name,
                        base + index,
                        dev.name(),
                        STOP_GRACE,
                        throttled,
                    ),
                    mqblk::DiskStats::default(),
                    Recorded::default(),
                )
            }
        };
        r.steadystate = ends.steadystate(index);
        recorded.push(rec);
        layer.ios += r.read.ios + r.write.ios + r.trim.ios;
        layer.stats.add(&stats);
        layer.cpu_ns += r.usr_ns + r.sys_ns;
        results.push(r);
    }
    // The logs are written once every job has handed over its samples.
    if let Some(l) = logger {
        l.finish(&recorded)?;
    }
    if let Some(sd) = &stats_dir {
        sd.write(true)?;
    }
    Ok((
        RunResult {
            jobs: results,
            layer,
        },
        ends.exit_all(),
    ))
}

fn sleep_unless_done(shared: &Shared, n: usize, d: Duration, stop: &AtomicBool) {
    let t = Instant::now();
    while t.elapsed() < d && shared.finished.load(Relaxed) < n && !stop.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
    }
}
