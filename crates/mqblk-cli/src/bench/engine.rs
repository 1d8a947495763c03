//! The bench engine: fio's job model driven through mqblk contexts.
//!
//! One thread per job, one context per thread, `iodepth` bios per job made
//! before the measured phase and reused for every I/O. The loop submits
//! every free bio, then reaps; offsets come from a xorshift generator; the
//! clock is never read per I/O (the supervisor thread flips phase flags),
//! so the engine costs a few nanoseconds per I/O beside the layer it
//! measures. Latency comes from the layer's own histograms; only a log or
//! `slat_percentiles=1` has the job read the clock per I/O, for its own
//! stamps ([`super::sample`]).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Barrier, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use crossbeam_utils::CachePadded;
use mqblk::{Bio, Device, Op};

use super::job::JobSpec;
use super::pattern::{Offsets, Rng};
use super::result::{DeviceAlignment, DirResult, JobResult, LayerResult, RunResult};
use super::sample::{Recorded, Recorder};
use super::teardown::Teardown;
use super::verify::{Hook, NoVerify, Verifier};
use crate::alloc_count;
use crate::open::open_error;

const PHASE_RAMP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;
/// How a file device's note about its buffer arena begins
/// (`mqblk_file::ARENA_NOTE_PREFIX`): said by `mqblk info`, not each run.
const ARENA_NOTE_PREFIX: &str = "fixed_bufs=";

/// Stopped by a signal: drain, but skip the verify phase.
const PHASE_ABORT: u8 = 3;

/// Longest a job waits for a completion before it looks at the phase
/// again: a job whose device does not answer still sees a stop in time.
const STOP_CHECK: Duration = Duration::from_millis(100);
/// After a signal, how long the supervisor waits for the jobs' figures
/// before it reports without those still blocked in their device: with
/// the devices' 500 ms to close after the report, the run ends within 2 s
/// of the signal, report first.
const STOP_GRACE: Duration = Duration::from_millis(1200);

/// What a job thread hands the supervisor, once: its figures, or why it
/// could not run.
type JobMsg = (usize, Result<(JobResult, mqblk::DiskStats, Recorded)>);

/// State shared by the supervisor and the job threads.
struct Shared {
    phase: AtomicU8,
    measuring: AtomicUsize,
    finished: AtomicUsize,
    start: Barrier,
    /// Jobs that have opened their context: each opens in job order, so
    /// the hardware queue a job lands on (contexts go round-robin over the
    /// queues) is the same from run to run, as is who shares it.
    opened: Mutex<usize>,
    opened_cv: Condvar,
    /// I/Os done per job, for the status line (written once per batch).
    progress: Vec<CachePadded<super::status::Live>>,
    /// Per job, per direction, for the averaged logs and steady state
    /// (written once per batch, only by jobs that log or judge it).
    counters: Vec<CachePadded<super::counts::Counters>>,
    /// Per job: the supervisor asks it to stop (its runtime is over, it
    /// is steady, or `exitall` ended it).
    stop_job: Vec<CachePadded<AtomicBool>>,
    /// Per job: it has stopped issuing (for `exitall`).
    done: Vec<AtomicBool>,
}

impl Shared {
    /// Run `open` once the jobs before job `index` have run theirs (opened
    /// their context, or failed to).
    fn in_job_order<T>(&self, index: usize, open: impl FnOnce() -> T) -> T {
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
struct Measured {
    read: DirResult,
    write: DirResult,
    trim: DirResult,
    runtime_ns: u64,
    usr_ns: u64,
    sys_ns: u64,
    stats: mqblk::DiskStats,
    first_error: Option<String>,
    /// The I/O error that stopped the job (continue_on_error=).
    stopped_at: Option<String>,
}

/// Jobs share a device when their specs (with the command line's
/// overrides) are the same and they name the same file (`filename=`).
fn share_key(job: &JobSpec, spec: &str) -> String {
    format!(
        "{spec}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{}\u{0}{:?}",
        job.queue_mode, job.hw_queues, job.plug, job.iostats, job.filename
    )
}

/// Open the devices of every job section, with the bench's overrides added.
/// Each `--device` is its own device, even when two specs read the same:
/// `--device null --device null` is two null devices. A job that only
/// reads opens its devices read-only (`ro=1`, unless its spec says `ro=`),
/// so a file this user may only read can be measured, as fio does.
fn open_devices(jobs: &[JobSpec]) -> Result<Vec<Vec<Device>>> {
    // As fio's jobs that name one file share it, jobs whose device specs
    // (with the command line's overrides) are the same share one device:
    // their contexts compete for its queues, its scheduler sees them all.
    let key = share_key;
    let mut opened: Vec<(String, Device)> = Vec::new();
    let mut all = Vec::with_capacity(jobs.len());
    for job in jobs {
        if job.devices.is_empty() {
            bail!("job {}: no --device given", job.name);
        }
        let mut devs = Vec::with_capacity(job.devices.len());
        for spec in &job.devices {
            let k = key(job, spec);
            if let Some((_, d)) = opened.iter().find(|(o, _)| *o == k) {
                devs.push(d.clone());
                continue;
            }
            let mut parsed = mqblk::spec::parse(spec).map_err(|e| open_error(e, spec))?;
            if let Some(m) = &job.queue_mode {
                parsed.options.set("queue_mode", m);
            }
            if let Some(n) = job.hw_queues {
                parsed.options.set("hw_queues", &n.to_string());
            }
            if let Some(p) = job.plug {
                parsed.options.set("plug", if p { "on" } else { "off" });
            }
            if !job.iostats {
                parsed.options.set("iostats", "0");
            }
            if let Some(dir) = &job.trace {
                parsed.options.set("trace", dir);
            }
            // Read-only unless a job sharing it writes.
            let writes = jobs
                .iter()
                .any(|j| job_writes(j) && j.devices.iter().any(|s| key(j, s) == k));
            if !writes && !parsed.options.contains("ro") {
                parsed.options.set("ro", "1");
            }
            // With a stats dir, a disk's partitions are counted and written
            // there as Linux counts them (its table read once, as Linux's
            // partition scan does). Without one the table is not read:
            // nothing would show the counts, and a device slow to answer
            // would hold the start. A fresh null or ram device is all zeros,
            // with no table to read (and reading would add to its counts).
            let whole_disk = job.stats_dir.is_some()
                && !parsed.options.contains("part")
                && !matches!(parsed.kind.as_str(), "null" | "nullb" | "ram");
            let dev = mqblk::open_parsed(parsed).map_err(|e| open_error(e, spec))?;
            // A table that cannot be read is said, and the disk is
            // measured all the same.
            if whole_disk {
                if let Err(e) = mqblk::register_partitions(&dev) {
                    eprintln!("mqblk: note: {e}");
                }
            }
            // Fallbacks a driver took (io_uring refused, no IOPOLL) are said;
            // the arena fitted to RLIMIT_MEMLOCK is left to `mqblk info`.
            for (k, v) in mqblk::driver_info(&dev) {
                if k == "note" && !v.starts_with(ARENA_NOTE_PREFIX) {
                    eprintln!("mqblk: {}: {v}", dev.name());
                }
            }
            opened.push((k, dev.clone()));
            devs.push(dev);
        }
        all.push(devs);
    }
    Ok(all)
}

/// Whether a job writes (its mix has writes).
fn job_writes(job: &JobSpec) -> bool {
    job.rw.read_percent(job.rwmixread) < 100
}

/// Every job with its device, opened and checked, ready to start.
pub struct Prepared {
    plan: Vec<(JobSpec, Device)>,
    verifiers: Vec<Option<Verifier>>,
    /// Each job's place in its flow (`flow=`).
    gates: Vec<Option<super::flow::Gate>>,
    /// Each job's reporting group (fio's groupid: a new one at each
    /// `stonewall` or `new_group`).
    report_groups: Vec<usize>,
    /// Where each stonewall group starts in `plan`: groups run one after
    /// another, the jobs of a group at once.
    group_starts: Vec<usize>,
}

/// Open every device and check every job against it: direction, size, block
/// size, verify slices. Nothing runs yet, so any error comes before the
/// banner and before any I/O.
pub fn prepare(jobs: &[JobSpec]) -> Result<Prepared> {
    super::verify::check_jobs(jobs)?;
    for job in jobs.iter().filter(|j| {
        (j.write_bw_log.is_some() || j.write_iops_log.is_some() || j.write_lat_log.is_some())
            && !j.log_avg_msec_given
    }) {
        eprintln!(
            "mqblk: note: job {}: without log_avg_msec its logs average {} ms windows (fio's \
             default, 0, writes a line per I/O: set log_avg_msec=0 for that)",
            job.name, job.log_avg_msec
        );
    }
    for job in jobs.iter().filter(|j| j.write_hist_log.is_some()) {
        if job.log_hist_msec == 0 {
            eprintln!(
                "mqblk: note: job {}: write_hist_log with log_hist_msec=0 (fio's default) writes \
                 an empty histogram log, as fio does; log_hist_msec=N writes a line every N ms",
                job.name
            );
        }
    }
    let devs = open_devices(jobs)?;
    // Expand numjobs; job i of the run uses device i mod n of its section.
    let mut plan: Vec<(JobSpec, Device)> = Vec::new();
    let mut specs: Vec<String> = Vec::new();
    let mut group_starts = vec![0];
    let mut report_groups = Vec::new();
    let mut report_group = 0usize;
    for (job, devs) in jobs.iter().zip(&devs) {
        if job.stonewall && !plan.is_empty() && group_starts.last() != Some(&plan.len()) {
            group_starts.push(plan.len());
        }
        if (job.stonewall || job.new_group) && !plan.is_empty() {
            report_group += 1;
        }
        for k in 0..job.numjobs {
            let i = plan.len();
            let dev = devs[i % devs.len()].clone();
            let copy = super::clamp::place(job, k, dev.capacity_bytes());
            plan.push((copy, dev));
            specs.push(job.devices[i % devs.len()].clone());
            report_groups.push(report_group);
        }
    }
    super::clamp::fit_to_devices(&mut plan);
    for ((job, dev), spec) in plan.iter().zip(&specs) {
        check_job(job, dev, spec)?;
    }
    make_groups(&plan)?;
    // The stonewall group of each job, for verify's slices.
    let stonewall_groups: Vec<usize> = (0..plan.len())
        .map(|i| group_starts.iter().filter(|&&s| s <= i).count() - 1)
        .collect();
    let verifiers = (0..plan.len())
        .map(|i| {
            let region = region_bytes(&plan[i].0, &plan[i].1);
            super::verify::for_job(&plan, &stonewall_groups, i, region)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut flows = super::flow::Flows::default();
    let gates = plan
        .iter()
        .map(|(j, _)| flows.join(j.flow_id, j.flow, j.flow_sleep))
        .collect();
    Ok(Prepared {
        plan,
        verifiers,
        gates,
        report_groups,
        group_starts,
    })
}

/// Create the groups the jobs name (`cgroup=`), with their weights. Jobs
/// that name one group on one device must agree on its weight.
fn make_groups(plan: &[(JobSpec, Device)]) -> Result<()> {
    for (job, dev) in plan {
        let Some(name) = &job.cgroup else { continue };
        let weight = job.cgroup_weight;
        match dev.group(name) {
            Ok(g) => {
                if let Some(w) = weight {
                    if g.weight() != w {
                        bail!(
                            "job {}: cgroup {name} on {} has cgroup_weight={} from another job;                              jobs in one group share its weight",
                            job.name,
                            dev.name(),
                            g.weight()
                        );
                    }
                }
            }
            Err(_) => {
                dev.create_group(
                    name,
                    mqblk::GroupConfig {
                        weight: weight.unwrap_or(mqblk::blkcg::DEFAULT_WEIGHT),
                        ..Default::default()
                    },
                )?;
            }
        }
    }
    Ok(())
}

impl Prepared {
    /// The distinct devices of the run.
    pub fn devices(&self) -> Vec<Device> {
        let mut out: Vec<Device> = Vec::new();
        for (_, dev) in &self.plan {
            if !out.iter().any(|d| d.name() == dev.name()) {
                out.push(dev.clone());
            }
        }
        out
    }

    /// The distinct devices of the run, with their alignment.
    pub fn alignment(&self) -> Vec<DeviceAlignment> {
        let mut out: Vec<DeviceAlignment> = Vec::new();
        for (_, dev) in &self.plan {
            if out.iter().any(|a| a.device == dev.name()) {
                continue;
            }
            let info = dev.info();
            out.push(DeviceAlignment {
                device: dev.name().to_string(),
                logical_block_size: dev.logical_block_size(),
                dma_alignment_bytes: info.limits.dma_alignment + 1,
            });
        }
        out
    }
}

/// Run all prepared jobs (numjobs expanded) concurrently and measure them.
/// Setting `stop` (a signal) ends the run as the runtime would: the jobs
/// stop issuing and hand over their figures, and the verify phase is
/// skipped. A job blocked in a device that does not answer is reported
/// without its figures after [`STOP_GRACE`]; it keeps its bios (and so the
/// memory its device may still write) until it ends or the process exits.
///
/// The devices stay open, and the job threads that are still draining
/// stay running, in the returned [`Teardown`]: the caller reports first,
/// then closes them with a bound.
pub fn run(
    prepared: Prepared,
    status: &super::status::StatusOptions,
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
            total.layer.degraded.push(super::result::Degraded {
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
    mut gates: Vec<Option<super::flow::Gate>>,
    report_groups: &[usize],
    alignment: Vec<DeviceAlignment>,
    status: &super::status::StatusOptions,
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
        progress: super::status::Live::for_jobs(n),
        counters: (0..n)
            .map(|_| CachePadded::new(super::counts::Counters::default()))
            .collect(),
        stop_job: (0..n)
            .map(|_| CachePadded::new(AtomicBool::new(false)))
            .collect(),
        done: (0..n).map(|_| AtomicBool::new(false)).collect(),
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
            NoVerify::with_content(super::content::Content::new(
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
    for (_, dev) in &plan {
        teardown.keep(dev);
    }
    alloc_count::exclude_this_thread();

    // Supervisor: ramp, measure, stop. Only this thread reads the clock.
    shared.start.wait();
    let first = &plan[0].0;
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
            Some(crate::stat::StatsDir::new(dir, devs)?)
        }
        None => None,
    };
    let allocs_start = alloc_count::allocations();
    let t0 = Instant::now();
    let mut logger = {
        let jobs: Vec<&JobSpec> = plan.iter().map(|(j, _)| j).collect();
        super::log::Logger::new(base, &jobs)
    };
    let runtime = plan
        .iter()
        .filter_map(|(j, _)| j.runtime.map(|r| r + j.startdelay))
        .max();
    let jobs = plan
        .iter()
        .map(|(j, _)| super::status::JobInfo {
            name: j.name.clone(),
            bs: j.bs,
        })
        .collect();
    let mut status = super::status::Status::start(status, jobs, runtime, t0, &shared.progress);
    let mut ends = super::ending::Ending::new(&plan, report_groups);
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
                (0..super::counts::DIRECTIONS)
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
            let counters: Vec<&super::counts::Counters> =
                shared.counters.iter().map(|c| &**c).collect();
            l.tick(t0.elapsed().as_millis() as u64, &counters);
        }
        status.tick(&shared.progress)?;
    }
    // The jobs that ended last may have exitall=1 with exit_what=all.
    let _ = ends.due(t0.elapsed(), |i| shared.done[i].load(Relaxed), |_| (0, 0));
    if stop.load(Relaxed) {
        eprintln!(
            "mqblk: stopping: reporting what ran; a device that does not answer gets {STOP_GRACE:?} \
             (a second signal exits at once)"
        );
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
                // Blocked in its device past the grace: reported without
                // its figures; its thread keeps its bios.
                layer.unfinished += 1;
                let (job, dev) = &plan[index];
                (
                    JobResult::unfinished(&job.name, base + index, dev.name(), STOP_GRACE),
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

/// Aim a slot's bio at its next I/O. A discard or write-zeroes carries no
/// data: it gets a bio of its own, and the slot's data bio waits in `spare`
/// until a data I/O takes it back (so a slot with a data-less bio always
/// has a data bio in `spare`). The common case, a data I/O of the job's one
/// size on a data bio, is two stores here; the rest is out of line.
#[inline(always)]
fn aim(
    bio: &mut Bio,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    variable: bool,
    spare: &mut Vec<Bio>,
) {
    if !variable && op.has_data() && bio.op().has_data() {
        bio.set_op(op);
        bio.set_offset_bytes(offset_bytes);
    } else {
        aim_other(bio, op, offset_bytes, len_bytes, variable, spare);
    }
}

/// [`aim`] for a data-less I/O, a data I/O on a data-less bio, or a job
/// of several block sizes.
#[inline(never)]
fn aim_other(
    bio: &mut Bio,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    variable: bool,
    spare: &mut Vec<Bio>,
) {
    if !op.has_data() {
        let dataless = match op {
            Op::WriteZeroes => Bio::write_zeroes_at(offset_bytes, len_bytes),
            _ => Bio::discard_at(offset_bytes, len_bytes),
        };
        let old = std::mem::replace(bio, dataless);
        if old.op().has_data() {
            spare.push(old);
        }
        return;
    }
    if !bio.op().has_data() {
        let Some(data) = spare.pop() else {
            debug_assert!(false, "a data-less slot without a spare data bio");
            // Fails at submit with a typed zero-length error, not silently.
            *bio = Bio::at(op, offset_bytes);
            return;
        };
        *bio = data;
    }
    if variable {
        let old = std::mem::replace(bio, Bio::at(Op::Read, 0));
        *bio = resized(old, op, offset_bytes, len_bytes);
    } else {
        bio.set_op(op);
        bio.set_offset_bytes(offset_bytes);
    }
}

fn resized(bio: Bio, op: Op, offset_bytes: u64, len_bytes: u64) -> Bio {
    let mut bufs = bio.into_buffers();
    let mut b = Bio::at(op, offset_bytes);
    if let Some(buf) = bufs.next() {
        let len = len_bytes.min(buf.len() as u64) as u32;
        b.push_segment(buf, 0, len);
    }
    b
}

/// Bytes of the device a job works over: from `offset=`, `size=` bytes
/// (or to the end).
fn region_bytes(job: &JobSpec, dev: &Device) -> u64 {
    let room = dev.capacity_bytes().saturating_sub(job.offset);
    job.size.unwrap_or(room).min(room)
}

fn check_job(job: &JobSpec, dev: &Device, spec: &str) -> Result<()> {
    let lbs = u64::from(dev.logical_block_size());
    if job_writes(job) && (dev.info().features.read_only || dev.config().read_only) {
        bail!(
            "job {}: rw={} writes, but device {} ({spec}) is read-only; use rw=read or \
             rw=randread, or open it writable (drop ro=1)",
            job.name,
            job.rw.name(),
            dev.name()
        );
    }
    let cap = dev.capacity_bytes();
    if !job.offset.is_multiple_of(lbs) {
        bail!(
            "job {}: offset={} must be a multiple of {}'s logical block size {lbs} ({spec})",
            job.name,
            job.offset,
            dev.name()
        );
    }
    if job.offset >= cap {
        // Past the end: the job does no I/O, as in fio (said once, by
        // clamp::fit_to_devices).
        return Ok(());
    }
    if job.seq_stride % 512 != 0 {
        bail!(
            "job {}: rw={}:{} : the hole must be a multiple of 512 bytes",
            job.name,
            job.rw.name(),
            job.seq_stride
        );
    }
    let variable = job.block_sizes != super::job::BlockSizes::Fixed;
    if variable && (job.verify.is_some() || job.segments > 1) {
        bail!(
            "job {}: bsrange=/bssplit= cannot be combined with verify= or segments= in mqblk \
             bench; {}",
            job.name,
            super::options::FIO_ENGINE_HINT
        );
    }
    if job.verify.is_none() && (job.trim_percentage > 0 || job.write_zeroes_percentage > 0) {
        bail!(
            "job {}: trim_percentage= and write_zeroes_percentage= mix data-less writes into a \
             verify job, and this job has no verify=",
            job.name
        );
    }
    if job.rw.is_trim() {
        if job.verify.is_some() {
            bail!(
                "job {}: rw={} with verify=: trims leave nothing to verify",
                job.name,
                job.rw.name()
            );
        }
        if !dev.info().features.discard {
            bail!(
                "job {}: rw={} discards, and device {} ({spec}) does not support discard",
                job.name,
                job.rw.name(),
                dev.name()
            );
        }
    }
    let unit = super::pattern::unit_bytes(job);
    // (A fixed bs= is checked below, with its own advice.)
    let sizes = if variable || job.blockalign.is_some() {
        vec![
            ("smallest block size or blockalign", unit),
            ("largest block size", job.block_sizes.max(job.bs)),
        ]
    } else {
        Vec::new()
    };
    for (what, n) in sizes {
        if !n.is_multiple_of(lbs) {
            bail!(
                "job {}: the {what}, {n}, is not a multiple of {}'s logical block size {lbs} ({spec})",
                job.name,
                dev.name()
            );
        }
    }
    if job.verify.is_some() && unit != job.bs {
        bail!("job {}: blockalign= with verify= must equal bs", job.name);
    }
    if job.zone.effective() == super::zone::ZoneMode::Zbd {
        let zones = super::zone::Zbd::zones(region_bytes(job, dev), job.zone.size);
        if zones > super::zone::ZBD_ZONES_MAX || !job.zone.size.is_multiple_of(lbs) {
            bail!(
                "job {}: zonesize={} makes {zones} zones on {} ({spec}); zonemode=zbd takes a \
                 multiple of {lbs} bytes and at most {} zones",
                job.name,
                job.zone.size,
                dev.name(),
                super::zone::ZBD_ZONES_MAX
            );
        }
    }
    let segs = u64::from(job.segments.max(1));
    if !job.bs.is_multiple_of(segs) || !(job.bs / segs).is_multiple_of(512) {
        bail!(
            "job {}: bs={} cannot be cut into {segs} segments of whole 512-byte sectors",
            job.name,
            job.bs
        );
    }
    if job.bs == 0 || !job.bs.is_multiple_of(lbs) {
        bail!(
            "job {}: bs={} is not a multiple of {}'s logical block size {lbs} ({spec}); use \
             bs={}",
            job.name,
            job.bs,
            dev.name(),
            job.bs.next_multiple_of(lbs).max(lbs)
        );
    }
    if job.bs > u64::from(u32::MAX) {
        bail!("job {}: bs={} is larger than 4 GiB", job.name, job.bs);
    }
    let region = region_bytes(job, dev);
    if region < job.bs {
        bail!(
            "job {}: size {} is smaller than bs={} (device {} has {} bytes)",
            job.name,
            region,
            job.bs,
            dev.name(),
            dev.capacity_bytes()
        );
    }
    if job.iodepth == 0 {
        bail!("job {}: iodepth must be at least 1", job.name);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn job_thread<V: Hook>(
    base: usize,
    index: usize,
    job: JobSpec,
    dev: Device,
    shared: Arc<Shared>,
    mut hook: V,
    mut gate: Option<super::flow::Gate>,
    tx: Sender<JobMsg>,
) {
    // Set up everything before the start barrier: the measured phase
    // allocates nothing.
    let setup = (|| -> Result<_> {
        let mut ctx = shared.in_job_order(index, || match &job.cgroup {
            Some(name) => dev.context_in(&dev.group(name)?),
            None => dev.context(),
        })?;
        if let Some(p) = job.ioprio {
            ctx.set_ioprio(p);
        }
        let region = region_bytes(&job, &dev);
        let mut seed =
            job.randseed ^ ((base + index) as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        if !job.randrepeat {
            seed ^= mqblk::clock::now_ns();
        }
        let unit = super::pattern::unit_bytes(&job);
        let offsets = Offsets::new(&job, hook.blocks(region / unit), seed);
        let mut free: Vec<Bio> = Vec::with_capacity(job.iodepth as usize);
        let mut fill = Rng(seed ^ 0x5555);
        // With --segments=N each bio gets N separately allocated (so
        // non-contiguous) pieces: a readv/writev-style bio.
        let piece = (job.block_sizes.max(job.bs) / u64::from(job.segments)) as usize;
        for _ in 0..job.iodepth {
            let mut bio = Bio::at(Op::Read, 0);
            for _ in 0..job.segments {
                let mut buf = dev.alloc_buf(piece);
                for chunk in buf.as_mut_slice().chunks_mut(8) {
                    let v = fill.next().to_le_bytes();
                    chunk.copy_from_slice(&v[..chunk.len()]);
                }
                bio.push_segment(buf, 0, piece as u32);
            }
            free.push(bio);
        }
        Ok((ctx, offsets, free))
    })();
    // Per-I/O measurements, if a log or the report asks for them; a sized
    // job's sample log is sized to its I/Os.
    let expected_ios = (!job.time_based).then(|| {
        let bytes = job
            .io_size
            .unwrap_or(region_bytes(&job, &dev))
            .saturating_mul(u64::from(job.loops.max(1)));
        bytes / job.block_sizes.min(job.bs).max(1)
    });
    let mut rec = Recorder::for_job(&job, expected_ios);
    shared.start.wait();
    let (mut ctx, mut offsets, mut free) = match setup {
        Ok(s) => s,
        Err(e) => {
            shared.measuring.fetch_add(1, Relaxed);
            shared.finished.fetch_add(1, Relaxed);
            let _ = tx.send((index, Err(e)));
            return;
        }
    };
    if !job.startdelay.is_zero() {
        let t = Instant::now();
        while t.elapsed() < job.startdelay && shared.phase.load(Relaxed) < PHASE_STOP {
            std::thread::sleep(Duration::from_millis(1).min(job.startdelay));
        }
    }
    let bytes_limit = if job.time_based {
        u64::MAX
    } else {
        job.io_size
            .unwrap_or(region_bytes(&job, &dev))
            .saturating_mul(u64::from(job.loops.max(1)))
    };
    // rate= and rate_iops=: the time one I/O may take, for a paced job
    // (which reads the clock once per loop; other jobs never do).
    let pace_ns = {
        let by_iops = job.rate_iops.map(|r| 1_000_000_000 / r.max(1));
        let by_bytes = job
            .rate_bps
            .map(|r| job.bs.saturating_mul(1_000_000_000) / r.max(1));
        by_iops.into_iter().chain(by_bytes).max()
    };
    let mut pacer = pace_ns.map(|p| super::rate::Pacer::new(p, job.rate_poisson, job.randseed));
    let mut min_rate =
        super::rate::MinRate::new(job.rate_min_bps, job.rate_min_iops, job.rate_cycle);
    // latency_target=: the depth the search allows (and max_latency=).
    let mut target = job.latency_target.map(|t| {
        super::latency_target::Target::new(super::latency_target::TargetSpec {
            target: t,
            window: job.latency_window,
            percentile: job.latency_percentile,
            run: job.latency_run,
            iodepth: job.iodepth,
        })
    });
    let max_latency_ns = job.max_latency.map(|d| d.as_nanos() as u64);
    // Wait for the I/O in flight before issuing again (the target's depth
    // went down); the job ends (the search is over, or a latency failed).
    let mut quiesce = false;
    let mut ended: Option<String> = None;
    let mut final_window_reset = false;
    // A job whose region is past its device's end does no I/O (fio's
    // I/O beyond the end is not issued).
    let empty = region_bytes(&job, &dev) < job.bs;
    let zoned = job.zone.effective() == super::zone::ZoneMode::Zbd;
    let stop_me = &shared.stop_job[index];
    let mut writes_since_flush = 0u32;
    let mut flushes_due = 0u32;
    let bs = job.bs;
    let thinktime = job.thinktime;
    let mut read = DirResult::default();
    let mut write = DirResult::default();
    let mut trim = DirResult::default();
    // Data bios set aside while their slot carries a discard or a
    // write-zeroes, to be taken back by the next data I/O.
    let mut spare: Vec<Bio> = Vec::new();
    let mut first_error: Option<FailedIo> = None;
    // continue_on_error=: an error it does not name stops the job.
    let keep_going = job.continue_on_error;
    let mut failed = false;
    let paced = pace_ns.is_some() || gate.is_some() || target.is_some() || zoned;
    let variable = job.block_sizes != super::job::BlockSizes::Fixed;
    let fsync_every = job.fsync_every;
    let mut issued_bytes = 0u64;
    let mut measuring = false;
    let mut t_start = 0u64;
    let mut cpu_start = (0, 0);
    let mut stats_start = mqblk::DiskStats::default();
    let progress = &shared.progress[index];
    let counters = &shared.counters[index];
    // Averaged bw and IOPS logs read these counts; per-I/O ones do not.
    let logs = (job.write_bw_log.is_some() || job.write_iops_log.is_some()) && job.log_avg_msec > 0
        || job.steadystate.is_some();

    loop {
        let phase = shared.phase.load(Relaxed);
        if phase >= PHASE_STOP || hook.stopped() || failed || stop_me.load(Relaxed) || empty {
            break;
        }
        if (ended.is_some() || offsets.exhausted()) && ctx.in_flight() == 0 {
            break;
        }
        if !measuring && phase == PHASE_MEASURE {
            // Start of the measured phase: forget the ramp.
            measuring = true;
            read = DirResult::default();
            write = DirResult::default();
            trim = DirResult::default();
            issued_bytes = 0;
            ctx.reset_histograms();
            stats_start = ctx.stats();
            cpu_start = mqblk::clock::thread_cpu_ns();
            t_start = mqblk::clock::now_ns();
            if let Some(r) = &mut rec {
                r.start_measuring(t_start);
            }
            shared.measuring.fetch_add(1, Relaxed);
        }
        if measuring && issued_bytes >= bytes_limit && ctx.in_flight() == 0 {
            break;
        }
        // fsync=N: the flushes the writes since the last one call for.
        while flushes_due > 0 {
            if ctx.submit(Bio::flush()).is_err() {
                break;
            }
            flushes_due -= 1;
        }
        let mut allowed = u64::MAX;
        if let Some(p) = &mut pacer {
            let now = mqblk::clock::now_ns();
            allowed = p.allowed(now, issued_bytes / bs);
            if allowed == 0 && ctx.in_flight() == 0 {
                std::thread::sleep(p.wait(now));
                continue;
            }
        }
        if let Some(m) = &mut min_rate {
            let done = read.bytes + write.bytes + trim.bytes;
            let ios = read.ios + write.ios + trim.ios;
            if let Some(why) = m.check(mqblk::clock::now_ns(), done, ios) {
                ended.get_or_insert(why);
            }
        }
        if let Some(t) = &target {
            if quiesce && ctx.in_flight() == 0 {
                quiesce = false;
            }
            let depth = if quiesce { 0 } else { u64::from(t.depth()) };
            allowed = allowed.min(depth.saturating_sub(ctx.in_flight() as u64));
        }
        if ended.is_some() {
            allowed = 0;
        }
        let mut held = false;
        while issued_bytes < bytes_limit || !measuring {
            if allowed == 0 {
                break;
            }
            allowed -= 1;
            let Some(mut bio) = free.pop() else { break };
            if let Some(g) = &mut gate {
                if !g.admit() {
                    free.push(bio);
                    held = true;
                    break;
                }
            }
            let (op, sector, len) = offsets.next();
            if len == 0 {
                // A zoned job with nothing left to read.
                free.push(bio);
                break;
            }
            let op = hook.retarget(op);
            aim(&mut bio, op, sector * 512, len * 512, variable, &mut spare);
            hook.prepare(&mut bio);
            let pending = rec.as_mut().and_then(|r| r.before_submit(&mut bio));
            let submitted = ctx.submit(bio);
            if let (Some(r), Some(p)) = (&mut rec, pending) {
                r.after_submit(p, submitted.is_ok());
            }
            if let Err(e) = submitted {
                let bio = e.into_bio();
                hook.cancel(&bio);
                free.push(bio);
                break;
            }
            issued_bytes += len * 512;
        }
        // A measured job resubmits through the loop above, where its
        // stamps are taken, not in place.
        let in_place = !paced && !rec.as_ref().is_some_and(Recorder::stamping);
        if let Some(r) = &mut rec {
            r.begin_reap();
        }
        // Reap; a finished bio is aimed at its next offset and resubmitted in
        // place (no copy), unless this job has issued all it should.
        if held && ctx.in_flight() == 0 {
            // Ahead of its share of the flow: wait, as fio's flow_sleep.
            match gate.as_ref().map(|g| g.sleep()) {
                Some(d) if !d.is_zero() => std::thread::sleep(d),
                _ => std::thread::yield_now(),
            }
            continue;
        }
        let mut verdict = super::latency_target::Verdict::Continue;
        ctx.poll_wait_for(1, STOP_CHECK, |mut c| {
            if c.bio().op() == Op::Flush {
                // fsync=N's flush: not an I/O of the mix.
                if !c.status().is_ok() && !keep_going.write {
                    failed = true;
                    first_error.get_or_insert(FailedIo::of(&c));
                }
                return;
            }
            if fsync_every > 0 && c.bio().op() == Op::Write {
                writes_since_flush += 1;
                if writes_since_flush >= fsync_every {
                    writes_since_flush = 0;
                    flushes_due += 1;
                }
            }
            let lat_ns = rec
                .as_mut()
                .and_then(|r| r.complete(c.bio(), c.status().is_ok()));
            if let Some(lat) = lat_ns {
                if let Some(t) = &mut target {
                    let v = t.complete(lat);
                    if v != super::latency_target::Verdict::Continue {
                        verdict = v;
                    }
                }
                if max_latency_ns.is_some_and(|m| lat > m) && ended.is_none() {
                    ended = Some(format!(
                        "latency of {lat} ns exceeds max_latency ({} ns): {} at offset {}",
                        max_latency_ns.unwrap_or_default(),
                        if c.bio().op() == Op::Read {
                            "read"
                        } else {
                            "write"
                        },
                        c.bio().offset_bytes()
                    ));
                }
            }
            let dir = match c.bio().op() {
                Op::Read => &mut read,
                Op::Discard => &mut trim,
                _ => &mut write,
            };
            dir.ios += 1;
            if c.status().is_ok() {
                dir.bytes += c.bio().len_bytes();
            } else {
                dir.errors += 1;
                first_error.get_or_insert(FailedIo::of(&c));
                if !keep_going.goes_on_after(c.bio().op()) {
                    failed = true;
                }
            }
            hook.complete(&c);
            if !thinktime.is_zero() {
                std::thread::sleep(thinktime);
            }
            if (issued_bytes < bytes_limit || !measuring) && !hook.stopped() && !failed && in_place
            {
                let (op, sector, len) = offsets.next();
                let op = hook.retarget(op);
                let bio = c.bio_mut();
                aim(bio, op, sector * 512, len * 512, variable, &mut spare);
                hook.prepare(bio);
                issued_bytes += len * 512;
                c.resubmit();
            } else {
                free.push(c.into_bio());
            }
        });
        if ctx.in_flight() > 0 {
            // Has the device held an I/O past its timeout (a backend that
            // died)? That is the job's error now, though the bio comes back
            // only when the driver lets go of its memory. (One load when
            // none is.)
            if let Some(o) = ctx.take_overdue() {
                match o.op {
                    Op::Read => read.errors += 1,
                    Op::Discard => trim.errors += 1,
                    _ => write.errors += 1,
                }
                first_error.get_or_insert(FailedIo {
                    op: o.op,
                    offset: o.offset_bytes,
                    len: o.len_bytes,
                    status: mqblk::Status::Timeout,
                });
                if !keep_going.goes_on_after(o.op) {
                    failed = true;
                }
            }
        }
        if let Some(t) = &mut target {
            if verdict == super::latency_target::Verdict::Continue && measuring {
                verdict = t.check(mqblk::clock::now_ns());
            }
            match verdict {
                super::latency_target::Verdict::Continue => {}
                super::latency_target::Verdict::Quiesce => quiesce = true,
                super::latency_target::Verdict::Done => {
                    ended.get_or_insert_with(String::new);
                }
                super::latency_target::Verdict::Failed => {
                    ended.get_or_insert_with(|| {
                        format!(
                            "latency_target={} us not met at queue depth 1",
                            job.latency_target.unwrap_or_default().as_micros()
                        )
                    });
                }
            }
            // The search is over: the last window's figures are the job's.
            if t.final_window() && !final_window_reset && measuring {
                final_window_reset = true;
                read = DirResult::default();
                write = DirResult::default();
                trim = DirResult::default();
                ctx.reset_histograms();
                stats_start = ctx.stats();
                cpu_start = mqblk::clock::thread_cpu_ns();
                t_start = mqblk::clock::now_ns();
                if let Some(r) = &mut rec {
                    r.start_measuring(t_start);
                }
            }
        }
        progress.publish(read.ios, write.ios, ctx.histograms());
        if logs {
            counters.publish(
                [read.ios, write.ios, trim.ios],
                [read.bytes, write.bytes, trim.bytes],
            );
        }
        if let Some(r) = &rec {
            r.publish(counters);
        }
    }
    if !measuring {
        // Stopped during the ramp (size reached first): measure nothing.
        t_start = mqblk::clock::now_ns();
        cpu_start = mqblk::clock::thread_cpu_ns();
        stats_start = ctx.stats();
        shared.measuring.fetch_add(1, Relaxed);
    }
    let t_end = mqblk::clock::now_ns();
    let cpu_end = mqblk::clock::thread_cpu_ns();
    let stats_end = ctx.stats();
    if failed {
        if let Some(e) = &first_error {
            eprintln!(
                "mqblk: job {}: {}; the job stops (continue_on_error=none: fio's default)",
                job.name,
                e.describe(dev.name())
            );
        }
    }
    // The measured phase is over for this job: what it allocates from here
    // (its figures, the drain, the verify phase) is not the I/O path's.
    alloc_count::exclude_this_thread();
    shared.done[index].store(true, Relaxed);
    shared.finished.fetch_add(1, Relaxed);
    // The job is done with its flow: the others run on without it.
    drop(gate);
    let latency_depth = target.as_ref().map(|t| t.depth());
    let mut m = Measured {
        read,
        write,
        trim,
        runtime_ns: t_end.saturating_sub(t_start),
        usr_ns: cpu_end.0.saturating_sub(cpu_start.0),
        sys_ns: cpu_end.1.saturating_sub(cpu_start.1),
        stats: stats_end.since(&stats_start),
        first_error: first_error
            .map(|e| e.describe(dev.name()))
            .or(ended.filter(|e| !e.is_empty())),
        stopped_at: None,
    };
    if failed {
        m.stopped_at = m.first_error.clone();
    }
    // Stopped by a signal or an error: the figures go to the supervisor
    // now, before the drain, which waits for a device that may not answer.
    // The bios stay in this thread until they come back.
    if failed || shared.phase.load(Relaxed) == PHASE_ABORT {
        let r = finish_job(
            base,
            index,
            &job,
            &dev,
            &ctx,
            &mut hook,
            m,
            rec,
            latency_depth,
        );
        let _ = tx.send((index, Ok(r)));
        drain(&mut ctx, &mut hook, &mut free);
        return;
    }
    drain(&mut ctx, &mut hook, &mut free);
    // Every slot holds a data bio again, for the verify phase.
    free.retain(|b| b.op().has_data());
    free.append(&mut spare);
    if job.end_fsync {
        if let Err(e) = ctx.flush() {
            eprintln!("mqblk: job {}: end_fsync: {e}", job.name);
        }
    }
    // fio's verify phase: read back what was written (not measured).
    hook.verify_phase(&mut ctx, &mut free);
    let r = finish_job(
        base,
        index,
        &job,
        &dev,
        &ctx,
        &mut hook,
        m,
        rec,
        latency_depth,
    );
    let _ = tx.send((index, Ok(r)));
}

/// Wait for every bio in flight, without counting it.
fn drain<V: Hook>(ctx: &mut mqblk::Context, hook: &mut V, free: &mut Vec<Bio>) {
    while ctx.in_flight() > 0 || ctx.ready() > 0 {
        ctx.poll_wait(1, |c| {
            if c.bio().op() == Op::Flush {
                return;
            }
            hook.complete(&c);
            free.push(c.into_bio())
        });
    }
}

/// The I/O a job saw fail first.
struct FailedIo {
    op: Op,
    offset: u64,
    len: u64,
    status: mqblk::Status,
}

impl FailedIo {
    fn of(c: &mqblk::Completion<'_>) -> FailedIo {
        FailedIo {
            op: c.bio().op(),
            offset: c.bio().offset_bytes(),
            len: c.bio().len_bytes(),
            status: c.status(),
        }
    }

    /// As fio says it: the direction, the length, the offset, the error.
    fn describe(&self, device: &str) -> String {
        let what = match self.op {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "trim",
            Op::WriteZeroes => "write-zeroes",
        };
        if self.op == Op::Flush {
            format!("{what} on {device} failed: {}", self.status)
        } else {
            format!(
                "{what} of {} bytes at offset {} on {device} failed: {}",
                self.len, self.offset, self.status
            )
        }
    }
}

/// A job's figures, as the report takes them.
#[allow(clippy::too_many_arguments)]
fn finish_job<V: Hook>(
    base: usize,
    index: usize,
    job: &JobSpec,
    dev: &Device,
    ctx: &mqblk::Context,
    hook: &mut V,
    m: Measured,
    rec: Option<Recorder>,
    latency_depth: Option<u32>,
) -> (JobResult, mqblk::DiskStats, Recorded) {
    let mut recorded = rec.map(Recorder::finish).unwrap_or_default();
    // The job's own stamps, when it took them (lat = slat + clat for each
    // I/O, as fio's); otherwise the layer's histograms, which start when a
    // request has a tag and read one clock a batch.
    let stamped = recorded.stamped.is_some();
    let (clat, slat, lat) = match recorded.stamped.take() {
        Some(s) => (s.clat, Some(s.slat), Some(s.lat)),
        None => (ctx.histograms().clone(), None, None),
    };
    (
        JobResult {
            name: job.name.clone(),
            index: base + index,
            group: 0,
            device: dev.name().to_string(),
            read: m.read,
            write: m.write,
            trim: m.trim,
            clat_valid: job.iostats || stamped,
            clat,
            slat,
            lat,
            runtime_ns: m.runtime_ns,
            usr_ns: m.usr_ns,
            sys_ns: m.sys_ns,
            first_error: m.first_error,
            stopped_at: m.stopped_at,
            verify: hook.result(),
            latency_depth,
            steadystate: None,
        },
        m.stats,
        recorded,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
            progress: super::super::status::Live::for_jobs(n),
            counters: Vec::new(),
            stop_job: Vec::new(),
            done: Vec::new(),
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
