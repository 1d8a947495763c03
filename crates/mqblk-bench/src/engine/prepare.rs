//! Before the run: every device opened and every job checked against it,
//! so any error comes before the banner and before any I/O.

use crate::open::open_error;
use crate::result::DeviceAlignment;
use crate::stop::Stop;
use crate::verify::Verifier;
use anyhow::{bail, Result};
use mqblk::Device;
use mqblk_fio::job::JobSpec;

use super::shared::*;

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
fn open_devices(jobs: &[JobSpec], stop: Option<&Stop>) -> Result<Vec<Vec<Device>>> {
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
            // A signal from here until it is open says which device was
            // still opening.
            let _opening = stop.map(|s| s.opening(spec));
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
    pub(super) plan: Vec<(JobSpec, Device)>,
    pub(super) verifiers: Vec<Option<Verifier>>,
    /// Each job's place in its flow (`flow=`).
    pub(super) gates: Vec<Option<crate::flow::Gate>>,
    /// Each job's reporting group (fio's groupid: a new one at each
    /// `stonewall` or `new_group`).
    pub(super) report_groups: Vec<usize>,
    /// Where each stonewall group starts in `plan`: groups run one after
    /// another, the jobs of a group at once.
    pub(super) group_starts: Vec<usize>,
}

/// Check what the jobs will pin against the memory there is (unless
/// `allow_overcommit`), open every device (a signal while one opens is
/// answered by `stop`, when the caller has one) and check every job against it:
/// direction, size, block size, verify slices. Nothing runs yet, so any
/// error comes before the banner and before any I/O.
pub fn prepare(jobs: &[JobSpec], allow_overcommit: bool, stop: Option<&Stop>) -> Result<Prepared> {
    crate::verify::check_jobs(jobs)?;
    if !allow_overcommit {
        crate::memory::check(jobs)?;
    }
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
    let devs = open_devices(jobs, stop)?;
    // Expand numjobs; job i of the run uses device i mod n of its section.
    let mut plan: Vec<(JobSpec, Device)> = Vec::new();
    let mut specs: Vec<String> = Vec::new();
    let mut group_starts = vec![0];
    let mut report_groups = Vec::new();
    let section_groups = crate::report::group::section_groups(jobs);
    for ((job, devs), &report_group) in jobs.iter().zip(&devs).zip(&section_groups) {
        if job.stonewall && !plan.is_empty() && group_starts.last() != Some(&plan.len()) {
            group_starts.push(plan.len());
        }
        for k in 0..job.numjobs {
            let i = plan.len();
            let dev = devs[i % devs.len()].clone();
            let copy = crate::clamp::place(job, k, dev.capacity_bytes());
            plan.push((copy, dev));
            specs.push(job.devices[i % devs.len()].clone());
            report_groups.push(report_group);
        }
    }
    crate::clamp::fit_to_devices(&mut plan);
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
            crate::verify::for_job(&plan, &stonewall_groups, i, region)
        })
        .collect::<Result<Vec<_>>>()?;
    let mut flows = crate::flow::Flows::default();
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

/// Bytes of the device a job works over: from `offset=`, `size=` bytes
/// (or to the end).
pub(super) fn region_bytes(job: &JobSpec, dev: &Device) -> u64 {
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
    let variable = job.block_sizes != mqblk_fio::job::BlockSizes::Fixed;
    if variable && (job.verify.is_some() || job.segments > 1) {
        bail!(
            "job {}: bsrange=/bssplit= cannot be combined with verify= or segments= in mqblk \
             bench; {}",
            job.name,
            mqblk_fio::options::FIO_ENGINE_HINT
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
    let unit = crate::pattern::unit_bytes(job);
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
    if job.zone.effective() == crate::zone::ZoneMode::Zbd {
        let zones = crate::zone::Zbd::zones(region_bytes(job, dev), job.zone.size);
        if zones > crate::zone::ZBD_ZONES_MAX || !job.zone.size.is_multiple_of(lbs) {
            bail!(
                "job {}: zonesize={} makes {zones} zones on {} ({spec}); zonemode=zbd takes a \
                 multiple of {lbs} bytes and at most {} zones",
                job.name,
                job.zone.size,
                dev.name(),
                crate::zone::ZBD_ZONES_MAX
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
    if let mqblk_fio::job::Distribution::Sequence(order) = &job.distribution {
        // fio refuses a base block past the file; a stride past it ends
        // the job's I/O.
        let blocks = region / unit;
        if let Some(&b) = order.iter().find(|&&b| u64::from(b) >= blocks) {
            bail!(
                "job {}: random_distribution=sequence: block {b} is past the region's last \
                 block {} ({region} bytes from offset {} of {} ({spec}), in blocks of {unit} \
                 bytes)",
                job.name,
                blocks.saturating_sub(1),
                job.offset,
                dev.name()
            );
        }
    }
    Ok(())
}
