//! One layer of job settings ([`JobOptions`]): the job file's `[global]`,
//! a job section, or the command line. Each setting is declared once, in
//! the list below, which makes its field and its part of
//! [`JobOptions::overlay`]; [`JobOptions::build`] turns the stacked layers
//! into a [`JobSpec`], checked as a whole.

use std::time::Duration;

use crate::content::ContentSpec;
use crate::job::{
    BlockSizes, ContinueOnError, Distribution, ExitWhat, JobSpec, RwMode, VerifyKind,
};
use crate::random_generator::RandomGenerator;
use crate::steadystate::SteadySpec;
use crate::verify_pattern::VerifyPattern;
use crate::zone::{ZoneMode, ZoneSpec};

use super::values::JOBS_MAX;

/// Declares [`JobOptions`]: each setting an `Option` (`None`: not set in
/// this layer), and the overlay that lets a higher layer's settings win.
macro_rules! job_options {
    ($( $(#[$doc:meta])* $field:ident: $ty:ty, )*) => {
        /// One layer of job settings; `None` means "not set here".
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct JobOptions {
            $( $(#[$doc])* pub $field: Option<$ty>, )*
        }

        impl JobOptions {
            /// Lay `top` over `self`: every setting `top` has wins.
            pub fn overlay(&mut self, top: &JobOptions) {
                $( if let Some(t) = &top.$field {
                    self.$field = Some(t.clone());
                } )*
            }
        }
    };
}

job_options! {
    /// `name=` (command line `--name`).
    name: String,
    /// `rw=`.
    rw: RwMode,
    /// `bs=`, bytes.
    bs: u64,
    /// `iodepth=`.
    iodepth: u32,
    /// `numjobs=`.
    numjobs: u32,
    /// `size=`, bytes.
    size: u64,
    /// `runtime=`; `Some(None)` is fio's `runtime=0` (no limit).
    runtime: Option<Duration>,
    /// `time_based`.
    time_based: bool,
    /// `ramp_time=`; `Some(None)` is `ramp_time=0`.
    ramp_time: Option<Duration>,
    /// `rwmixread=`.
    rwmixread: u32,
    /// `randseed=`.
    randseed: u64,
    /// `device=`: repeated keys within one layer add devices; a layer that
    /// names any device replaces the devices of the layers below it.
    devices: Vec<String>,
    /// `queue_mode=`, canonical name.
    queue_mode: String,
    /// `hw_queues=`.
    hw_queues: u16,
    /// `plug=`.
    plug: bool,
    /// `iostats=`.
    iostats: bool,
    /// `verify=`; `Some(None)` is `verify=none`.
    verify: Option<VerifyKind>,
    /// `do_verify=`.
    do_verify: bool,
    /// `verify_fatal=`.
    verify_fatal: bool,
    /// `continue_on_error=`.
    continue_on_error: ContinueOnError,
    /// `allow_degraded=` (mqblk's).
    allow_degraded: bool,
    /// `trim_percentage=`.
    trim_percentage: u8,
    /// `trim_verify_zero=`.
    trim_verify_zero: bool,
    /// `write_zeroes_percentage=` (mqblk's).
    write_zeroes_percentage: u8,
    /// `segments=`.
    segments: u32,
    /// `stats_dir=`.
    stats_dir: String,
    /// `trace=`.
    trace: String,
    /// fio's `direct=` (command line `--direct`): `direct=` of every file
    /// device that does not set it.
    file_direct: bool,
    /// fio's `ioengine=` (command line `--ioengine`), as a file device's
    /// `engine=` (`uring` or `psync`) for every file device that does not
    /// set it.
    file_engine: &'static str,
    /// `thinktime=`.
    thinktime: Duration,
    /// `offset=`.
    offset: u64,
    /// `offset_increment=`.
    offset_increment: u64,
    /// `io_size=`/`io_limit=`.
    io_size: u64,
    /// `number_ios=` (turned into bytes with `bs` when the job is built).
    number_ios: u64,
    /// `loops=`.
    loops: u32,
    /// The `:N` of `rw=TYPE:N`.
    seq_stride: i64,
    /// `random_distribution=`.
    distribution: Distribution,
    /// `randrepeat=`.
    randrepeat: bool,
    /// `norandommap=`.
    norandommap: bool,
    /// `random_sequence_stride=`.
    random_sequence_stride: bool,
    /// `random_generator=`.
    random_generator: RandomGenerator,
    /// `fsync=`/`fdatasync=`.
    fsync_every: u32,
    /// `end_fsync=`.
    end_fsync: bool,
    /// `rate_iops=`.
    rate_iops: u64,
    /// `cgroup=`: the device group the job's context joins.
    cgroup: String,
    /// `cgroup_weight=`.
    cgroup_weight: u32,
    /// `prioclass=`.
    prioclass: mqblk::IoPrioClass,
    /// `prio=`.
    prio: u8,
    /// `rate=`.
    rate_bps: u64,
    /// `startdelay=`.
    startdelay: Duration,
    /// `stonewall`/`wait_for=`.
    stonewall: bool,
    /// `bsrange=`/`bssplit=`.
    block_sizes: BlockSizes,
    /// `blockalign=`.
    blockalign: u64,
    /// `write_bw_log=`.
    write_bw_log: String,
    /// `write_iops_log=`.
    write_iops_log: String,
    /// `write_lat_log=`.
    write_lat_log: String,
    /// `log_avg_msec=`.
    log_avg_msec: u32,
    /// `write_hist_log=`.
    write_hist_log: String,
    /// `log_hist_msec=`.
    log_hist_msec: u32,
    /// `log_hist_coarseness=`.
    log_hist_coarseness: u8,
    /// `log_offset=`.
    log_offset: bool,
    /// `log_prio=`.
    log_prio: bool,
    /// `per_job_logs=`.
    per_job_logs: bool,
    /// `slat_percentiles=`.
    slat_percentiles: bool,
    /// `filename=` as written (jobs naming one file share a device).
    filename: String,
    /// `percentage_random=`.
    percentage_random: [u32; 3],
    /// `rw_sequencer=identical`.
    rw_sequencer_identical: bool,
    /// `zonemode=`.
    zonemode: ZoneMode,
    /// `zonesize=`.
    zonesize: u64,
    /// `zonerange=`.
    zonerange: u64,
    /// `zoneskip=`.
    zoneskip: u64,
    /// `max_open_zones=`/`job_max_open_zones=`.
    max_open_zones: u32,
    /// `read_beyond_wp=`.
    read_beyond_wp: bool,
    /// `flow=`.
    flow: u32,
    /// `flow_id=`.
    flow_id: u32,
    /// `flow_sleep=`.
    flow_sleep: Duration,
    /// `latency_target=`.
    latency_target: Duration,
    /// `latency_window=`.
    latency_window: Duration,
    /// `latency_percentile=`.
    latency_percentile: f64,
    /// `latency_run=`.
    latency_run: bool,
    /// `max_latency=`.
    max_latency: Duration,
    /// `rate_process=poisson`.
    rate_poisson: bool,
    /// `rate_min=`.
    rate_min_bps: u64,
    /// `rate_iops_min=`.
    rate_min_iops: u64,
    /// `rate_cycle=`.
    rate_cycle: Duration,
    /// `ss=`.
    steadystate: SteadySpec,
    /// `ss_dur=`.
    ss_dur: Duration,
    /// `ss_ramp=`.
    ss_ramp: Duration,
    /// `group_reporting`.
    group_reporting: bool,
    /// `verify_pattern=`.
    verify_pattern: VerifyPattern,
    /// `verify_interval=`.
    verify_interval: u64,
    /// `verify_backlog=`.
    verify_backlog: u64,
    /// `verify_backlog_batch=`.
    verify_backlog_batch: u64,
    /// `exitall`.
    exitall: bool,
    /// `exit_what=`.
    exit_what: ExitWhat,
    /// `new_group`.
    new_group: bool,
    /// `fill_device=`.
    fill_device: bool,
    /// `size=N%` (0: `size=` was given in bytes).
    size_percent: u32,
    /// `offset=N%` (0: in bytes).
    offset_percent: u32,
    /// `offset_increment=N%` (0: in bytes).
    offset_increment_percent: u32,
    /// fio's `ioengine=` for an engine mqblk has a driver for (nbd, rbd):
    /// with `uri=` or `pool=`/`rbdname=` it names the device.
    engine: String,
    /// `uri=` (fio's nbd engine).
    nbd_uri: String,
    /// `pool=` (fio's rbd engine).
    rbd_pool: String,
    /// `rbdname=`.
    rbd_name: String,
    /// `clientname=`.
    rbd_client: String,
    /// `dedupe_percentage=`.
    dedupe_percentage: u8,
    /// `dedupe_mode=working_set` (else repeat).
    dedupe_working_set: bool,
    /// `dedupe_working_set_percentage=`.
    dedupe_working_set_percentage: u8,
    /// `dedupe_global=`.
    dedupe_global: bool,
    /// `buffer_compress_percentage=`.
    buffer_compress_percentage: u8,
    /// `buffer_compress_chunk=`.
    buffer_compress_chunk: u32,
}

impl JobOptions {
    /// The job these settings describe, on top of the defaults, named
    /// `default_name` unless `name` is set; checked as a whole.
    pub fn build(&self, default_name: &str) -> Result<JobSpec, String> {
        let d = JobSpec::default();
        let job = JobSpec {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| default_name.to_string()),
            rw: self.rw.unwrap_or(d.rw),
            bs: self.bs.unwrap_or(d.bs),
            iodepth: self.iodepth.unwrap_or(d.iodepth),
            numjobs: self.numjobs.unwrap_or(d.numjobs),
            size: match self.size_percent {
                Some(p) if p > 0 => None,
                _ => self.size.or(d.size),
            },
            runtime: self.runtime.unwrap_or(d.runtime),
            time_based: self.time_based.unwrap_or(d.time_based),
            ramp_time: self.ramp_time.unwrap_or(d.ramp_time),
            rwmixread: self.rwmixread.unwrap_or(d.rwmixread),
            randseed: self.randseed.unwrap_or(d.randseed),
            devices: self
                .devices
                .clone()
                .or_else(|| self.engine_device().map(|d| vec![d]))
                .unwrap_or(d.devices)
                .iter()
                .map(|spec| {
                    let mut spec = spec.clone();
                    if let Some(b) = self.file_direct {
                        spec = with_file_option(&spec, "direct", if b { "1" } else { "0" });
                    }
                    if let Some(e) = self.file_engine {
                        spec = with_file_option(&spec, "engine", e);
                    }
                    spec
                })
                .collect(),
            queue_mode: self.queue_mode.clone().or(d.queue_mode),
            hw_queues: self.hw_queues.or(d.hw_queues),
            plug: self.plug.or(d.plug),
            iostats: self.iostats.unwrap_or(d.iostats),
            verify: self.verify.unwrap_or(d.verify),
            do_verify: self.do_verify.unwrap_or(d.do_verify),
            verify_fatal: self.verify_fatal.unwrap_or(d.verify_fatal),
            continue_on_error: self.continue_on_error.unwrap_or(d.continue_on_error),
            allow_degraded: self.allow_degraded.unwrap_or(d.allow_degraded),
            trim_percentage: self.trim_percentage.unwrap_or(d.trim_percentage),
            trim_verify_zero: self.trim_verify_zero.unwrap_or(d.trim_verify_zero),
            write_zeroes_percentage: self
                .write_zeroes_percentage
                .unwrap_or(d.write_zeroes_percentage),
            segments: self.segments.unwrap_or(d.segments),
            stats_dir: self.stats_dir.clone().or(d.stats_dir.clone()),
            trace: self.trace.clone().or(d.trace.clone()),
            thinktime: self.thinktime.unwrap_or(d.thinktime),
            offset: match self.offset_percent {
                Some(p) if p > 0 => 0,
                _ => self.offset.unwrap_or(d.offset),
            },
            offset_increment: match self.offset_increment_percent {
                Some(p) if p > 0 => 0,
                _ => self.offset_increment.unwrap_or(d.offset_increment),
            },
            io_size: match (self.number_ios, self.io_size) {
                (Some(n), _) => Some(n.saturating_mul(self.bs.unwrap_or(d.bs))),
                (None, io) => io.or(d.io_size),
            },
            loops: self.loops.unwrap_or(d.loops),
            seq_stride: self.seq_stride.unwrap_or(d.seq_stride),
            distribution: self.distribution.clone().unwrap_or(d.distribution),
            // fio: a seed given is a repeatable run, whatever randrepeat says.
            randrepeat: self.randrepeat.unwrap_or(d.randrepeat) || self.randseed.is_some(),
            norandommap: self.norandommap.unwrap_or(d.norandommap),
            random_sequence_stride: self
                .random_sequence_stride
                .unwrap_or(d.random_sequence_stride),
            random_generator: self.random_generator.unwrap_or(d.random_generator),
            fsync_every: self.fsync_every.unwrap_or(d.fsync_every),
            end_fsync: self.end_fsync.unwrap_or(d.end_fsync),
            rate_iops: self.rate_iops.or(d.rate_iops),
            cgroup: self.cgroup.clone().or(d.cgroup.clone()),
            cgroup_weight: self.cgroup_weight.or(d.cgroup_weight),
            ioprio: match (self.prioclass, self.prio) {
                (None, None) => d.ioprio,
                (class, level) => Some(mqblk::IoPrio {
                    class: class.unwrap_or_default(),
                    level: level.unwrap_or(4),
                }),
            },
            rate_bps: self.rate_bps.or(d.rate_bps),
            startdelay: self.startdelay.unwrap_or(d.startdelay),
            stonewall: self.stonewall.unwrap_or(d.stonewall),
            block_sizes: self.block_sizes.clone().unwrap_or(d.block_sizes),
            blockalign: self.blockalign.or(d.blockalign),
            write_bw_log: self.write_bw_log.clone().or(d.write_bw_log.clone()),
            write_iops_log: self.write_iops_log.clone().or(d.write_iops_log.clone()),
            write_lat_log: self.write_lat_log.clone().or(d.write_lat_log.clone()),
            log_avg_msec: self.log_avg_msec.unwrap_or(d.log_avg_msec),
            log_avg_msec_given: self.log_avg_msec.is_some() || d.log_avg_msec_given,
            write_hist_log: self.write_hist_log.clone().or(d.write_hist_log.clone()),
            log_hist_msec: self.log_hist_msec.unwrap_or(d.log_hist_msec),
            log_hist_coarseness: self.log_hist_coarseness.unwrap_or(d.log_hist_coarseness),
            log_offset: self.log_offset.unwrap_or(d.log_offset),
            log_prio: self.log_prio.unwrap_or(d.log_prio),
            per_job_logs: self.per_job_logs.unwrap_or(d.per_job_logs),
            slat_percentiles: self.slat_percentiles.unwrap_or(d.slat_percentiles),
            filename: self.filename.clone().or(d.filename),
            percentage_random: self.percentage_random.unwrap_or(d.percentage_random),
            rw_sequencer_identical: self
                .rw_sequencer_identical
                .unwrap_or(d.rw_sequencer_identical),
            zone: ZoneSpec {
                mode: self.zonemode.unwrap_or(d.zone.mode),
                size: self.zonesize.unwrap_or(d.zone.size),
                range: self.zonerange.unwrap_or(d.zone.range),
                skip: self.zoneskip.unwrap_or(d.zone.skip),
                max_open: self.max_open_zones.unwrap_or(d.zone.max_open),
                read_beyond_wp: self.read_beyond_wp.unwrap_or(d.zone.read_beyond_wp),
            },
            flow: self.flow.unwrap_or(d.flow),
            flow_id: self.flow_id.unwrap_or(d.flow_id),
            flow_sleep: self.flow_sleep.unwrap_or(d.flow_sleep),
            latency_target: self
                .latency_target
                .filter(|t| !t.is_zero())
                .or(d.latency_target),
            latency_window: self.latency_window.unwrap_or(d.latency_window),
            latency_percentile: self.latency_percentile.unwrap_or(d.latency_percentile),
            latency_run: self.latency_run.unwrap_or(d.latency_run),
            max_latency: self.max_latency.filter(|t| !t.is_zero()).or(d.max_latency),
            rate_poisson: self.rate_poisson.unwrap_or(d.rate_poisson),
            rate_min_bps: self.rate_min_bps.filter(|&r| r > 0).or(d.rate_min_bps),
            rate_min_iops: self.rate_min_iops.filter(|&r| r > 0).or(d.rate_min_iops),
            rate_cycle: self.rate_cycle.unwrap_or(d.rate_cycle),
            steadystate: self.steadystate.or(d.steadystate),
            ss_dur: self.ss_dur.unwrap_or(d.ss_dur),
            ss_ramp: self.ss_ramp.unwrap_or(d.ss_ramp),
            group_reporting: self.group_reporting.unwrap_or(d.group_reporting),
            verify_pattern: self.verify_pattern.clone().or(d.verify_pattern),
            verify_interval: self.verify_interval.or(d.verify_interval),
            verify_backlog: self.verify_backlog.unwrap_or(d.verify_backlog),
            verify_backlog_batch: self.verify_backlog_batch.or(d.verify_backlog_batch),
            exitall: self.exitall.unwrap_or(d.exitall),
            exit_what: self.exit_what.unwrap_or(d.exit_what),
            new_group: self.new_group.unwrap_or(d.new_group),
            fill_device: self.fill_device.unwrap_or(d.fill_device),
            size_percent: self.size_percent.filter(|&p| p > 0),
            offset_percent: self.offset_percent.filter(|&p| p > 0),
            offset_increment_percent: self.offset_increment_percent.filter(|&p| p > 0),
            content: ContentSpec {
                dedupe_pct: self.dedupe_percentage.unwrap_or(d.content.dedupe_pct),
                working_set: self.dedupe_working_set.unwrap_or(d.content.working_set),
                working_set_pct: self
                    .dedupe_working_set_percentage
                    .unwrap_or(d.content.working_set_pct),
                global: self.dedupe_global.unwrap_or(d.content.global),
                compress_pct: self
                    .buffer_compress_percentage
                    .unwrap_or(d.content.compress_pct),
                compress_chunk: self
                    .buffer_compress_chunk
                    .unwrap_or(d.content.compress_chunk),
            },
        };
        check(&job)?;
        Ok(job)
    }
}

impl JobOptions {
    /// The device fio's nbd or rbd engine names (`uri=`, or `pool=` and
    /// `rbdname=`), if this job uses one.
    fn engine_device(&self) -> Option<String> {
        match self.engine.as_deref()? {
            "nbd" => self.nbd_uri.clone(),
            "rbd" => {
                let (pool, name) = (self.rbd_pool.as_deref()?, self.rbd_name.as_deref()?);
                Some(match &self.rbd_client {
                    Some(id) => format!("rbd:{pool}/{name},id={id}"),
                    None => format!("rbd:{pool}/{name}"),
                })
            }
            _ => None,
        }
    }
}

/// `spec` with `key=value` added if it is a file device without `key=`.
fn with_file_option(spec: &str, key: &str, value: &str) -> String {
    if !spec.trim_start().starts_with("file:") {
        return spec.to_string();
    }
    match mqblk::spec::parse(spec) {
        Ok(p) if !p.options.contains(key) => format!("{spec},{key}={value}"),
        _ => spec.to_string(),
    }
}

/// Check a whole job: the rules that involve more than one key.
pub fn check(job: &JobSpec) -> Result<(), String> {
    if job.time_based && job.runtime.is_none() {
        return Err(format!(
            "job {}: time_based needs a runtime (such as runtime=10s), or the job would never end",
            job.name
        ));
    }
    if let Some(size) = job.size {
        if size < job.bs {
            return Err(format!(
                "job {}: size={size} is smaller than bs={}; no I/O would fit",
                job.name, job.bs
            ));
        }
    }
    if job.devices.is_empty() {
        return Err(format!(
            "job {}: no device; give one with device=SPEC",
            job.name
        ));
    }
    Ok(())
}

/// Check a whole run: the total of `numjobs` over every job is bounded.
pub fn check_run(jobs: &[JobSpec]) -> Result<(), String> {
    if jobs.is_empty() {
        return Err("no jobs to run".into());
    }
    let total: u64 = jobs.iter().map(|j| u64::from(j.numjobs)).sum();
    if total > u64::from(JOBS_MAX) {
        return Err(format!(
            "{total} jobs in total (numjobs summed over every job); at most {JOBS_MAX} may run at once"
        ));
    }
    Ok(())
}
