//! The bench's option keys: the one place that knows each key's name, how
//! its value is parsed and what it accepts. The command line and job files
//! both go through [`JobOptions::set`], so `--bs=0` and a job file's `bs=0`
//! fail with the same words.
//!
//! A [`JobOptions`] is one layer of settings (the job file's `[global]`, a
//! job section, or the command line). Layers are stacked with
//! [`JobOptions::overlay`] and turned into a [`JobSpec`] with
//! [`JobOptions::build`]; the command line is the top layer, so it
//! overrides the job file.

use std::fmt;
use std::time::Duration;

use mqblk::queue::QueueMode;
use mqblk::spec::{parse_bool, parse_size};

use super::hist::COARSENESS_MAX;
use super::job::{BlockSizes, Distribution, JobSpec, RwMode, VerifyKind};

/// Every key, in job-file spelling (the command line writes `queue_mode` as
/// `--queue-mode` and `hw_queues` as `--hw-queues`).
pub const KEYS: &[&str] = &[
    "name",
    "rw",
    "bs",
    "iodepth",
    "numjobs",
    "size",
    "runtime",
    "time_based",
    "ramp_time",
    "rwmixread",
    "randseed",
    "device",
    "queue_mode",
    "hw_queues",
    "plug",
    "iostats",
    "verify",
    "do_verify",
    "verify_fatal",
    "trim_percentage",
    "trim_verify_zero",
    "write_zeroes_percentage",
    "segments",
    "stats_dir",
    "thinktime",
    "blocksize",
    "filesize",
    "offset",
    "io_size",
    "io_limit",
    "number_ios",
    "loops",
    "rwmixwrite",
    "readwrite",
    "norandommap",
    "randrepeat",
    "random_distribution",
    "fsync",
    "fdatasync",
    "end_fsync",
    "rate",
    "rate_iops",
    "cgroup",
    "cgroup_weight",
    "prioclass",
    "prio",
    "startdelay",
    "stonewall",
    "wait_for",
    "timeout",
    "offset_increment",
    "bsrange",
    "bssplit",
    "blockalign",
    "write_bw_log",
    "write_iops_log",
    "write_lat_log",
    "log_avg_msec",
    "log_offset",
    "log_prio",
    "write_hist_log",
    "log_hist_msec",
    "log_hist_coarseness",
    "per_job_logs",
    "slat_percentiles",
];

/// fio keys that are accepted and do not change what mqblk runs, each with
/// the note printed when a job file uses it: reporting choices, other
/// engines' options, process placement, and file-set options (mqblk runs
/// each job on its device).
pub const NOTED_KEYS: &[(&str, &str)] = &[
    ("group_reporting", "every job is reported"),
    ("new_group", "every job is reported"),
    ("description", "a comment"),
    (
        "gtod_reduce",
        "mqblk reads no clock per I/O unless a latency log or slat_percentiles asks",
    ),
    (
        "clat_percentiles",
        "mqblk always reports fio's default percentiles",
    ),
    (
        "lat_percentiles",
        "mqblk always reports fio's default percentiles",
    ),
    ("percentile_list", "mqblk reports fio's default percentiles"),
    ("disable_lat", "latency comes from the layer's histograms"),
    ("disable_clat", "latency comes from the layer's histograms"),
    (
        "disable_slat",
        "slat is measured only when write_lat_log or slat_percentiles asks",
    ),
    ("disable_bw_measurement", "bandwidth is always reported"),
    ("kb_base", "reports use fio's default units"),
    ("unit_base", "reports use fio's default units"),
    ("thread", "jobs are always threads"),
    ("threads", "jobs are always threads"),
    ("exitall", "jobs end on their own"),
    ("exit_what", "jobs end on their own"),
    ("cpus_allowed", "no CPU pinning"),
    ("cpus_allowed_policy", "no CPU pinning"),
    ("cpumask", "no CPU pinning"),
    ("numa_cpu_nodes", "no NUMA placement"),
    ("numa_mem_policy", "no NUMA placement"),
    ("nice", "no scheduling priority"),
    ("cmdprio", "another engine's option"),
    ("cmdprio_class", "another engine's option"),
    ("cmdprio_percentage", "another engine's option"),
    ("cmdprio_bssplit", "another engine's option"),
    (
        "sqthread_poll",
        "another engine's option (file: devices take sqpoll= in their spec)",
    ),
    ("sqthread_poll_cpu", "another engine's option"),
    (
        "registerfiles",
        "another engine's option (file: devices register their files)",
    ),
    (
        "fixedbufs",
        "another engine's option (file: devices register their buffers)",
    ),
    (
        "hipri",
        "another engine's option (file: devices take iopoll= in their spec)",
    ),
    ("nonvectored", "another engine's option"),
    ("userspace_reap", "another engine's option"),
    (
        "iodepth_batch",
        "mqblk batches submissions through its plug",
    ),
    (
        "iodepth_batch_submit",
        "mqblk batches submissions through its plug",
    ),
    (
        "iodepth_batch_complete",
        "mqblk reaps every completion ready",
    ),
    (
        "iodepth_batch_complete_min",
        "mqblk reaps every completion ready",
    ),
    (
        "iodepth_batch_complete_max",
        "mqblk reaps every completion ready",
    ),
    ("iodepth_low", "mqblk keeps the queue full"),
    (
        "io_submit_mode",
        "mqblk submits inline, batched by its plug",
    ),
    ("random_generator", "mqblk draws offsets with xorshift64*"),
    ("mem", "buffers come from the device's aligned pool"),
    ("iomem", "buffers come from the device's aligned pool"),
    ("mem_align", "buffers come from the device's aligned pool"),
    ("iomem_align", "buffers come from the device's aligned pool"),
    ("invalidate", "mqblk has no page cache of its own to drop"),
    ("create_serialize", "mqblk opens one device per job section"),
    ("create_on_open", "mqblk opens one device per job section"),
    ("create_fsync", "mqblk opens one device per job section"),
    (
        "allow_file_create",
        "mqblk opens one device per job section",
    ),
    ("fallocate", "mqblk opens one device per job section"),
    ("unlink", "mqblk deletes no files"),
    (
        "directory",
        "mqblk runs on the device of --device (or filename=), not on files in a directory",
    ),
    ("nrfiles", "mqblk runs on one device per job"),
    ("nr_files", "mqblk runs on one device per job"),
    ("openfiles", "mqblk runs on one device per job"),
    ("filename_format", "mqblk runs on one device per job"),
    ("file_service_type", "mqblk runs on one device per job"),
    ("scramble_buffers", "write data is random already"),
    ("refill_buffers", "write data is random already"),
    ("buffer_pattern", "write data is mqblk's own"),
    ("buffer_compress_percentage", "write data is mqblk's own"),
    (
        "continue_on_error",
        "errors are counted and the job goes on",
    ),
    ("ignore_error", "errors are counted and the job goes on"),
    ("error_dump", "the first error is reported"),
    ("verify_dump", "mismatches are reported"),
    ("verify_async", "verification runs in the job thread"),
    (
        "verify_backlog",
        "mqblk verifies in one pass after the writes, not interleaved",
    ),
];

/// The note for a fio key that is accepted without effect, if it is one.
pub fn noted(key: &str) -> Option<&'static str> {
    NOTED_KEYS.iter().find(|(k, _)| *k == key).map(|(_, n)| *n)
}

/// What a refused fio key is told: mqblk bench does not model it, and
/// fio with mqblk's fio engine runs it.
pub const FIO_ENGINE_HINT: &str = "if it is a fio option, it changes the workload in a way \
     mqblk bench does not model: run the job file with fio through mqblk's fio engine \
     (contrib/fio-engine: fio --ioengine=external:libmqblk-fio.so --mqblk_spec=SPEC JOBFILE)";

/// Smallest and largest `bs=` (a 512-byte sector up to 64 MiB).
pub const BS_MIN: u64 = 512;
/// Largest `bs=`.
pub const BS_MAX: u64 = 64 << 20;
/// Largest `iodepth=` (the largest tag depth a device takes).
pub const IODEPTH_MAX: u32 = 65536;
/// Largest `numjobs=`, and the most jobs one run may start in total.
pub const JOBS_MAX: u32 = 1024;
/// Largest `hw_queues=` (as the device specs accept).
pub const HW_QUEUES_MAX: u16 = 1024;
/// Longest `name=` or section name.
pub const NAME_LEN_MAX: usize = 256;

/// Why a key or its value was refused. The caller adds where it came from
/// (`--bs=0` or `job.fio:3: bs=0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OptionError {
    /// No such key.
    UnknownKey,
    /// The key needs a value and was given none.
    MissingValue {
        /// What it accepts.
        expected: String,
    },
    /// The value does not parse or is out of range.
    BadValue {
        /// The value as given.
        value: String,
        /// What the key accepts.
        expected: String,
    },
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::UnknownKey => write!(f, "unknown option; known: {}", KEYS.join(", ")),
            OptionError::MissingValue { expected } => {
                write!(f, "needs a value: expected {expected}")
            }
            OptionError::BadValue { value, expected } => {
                write!(f, "invalid value {value:?}: expected {expected}")
            }
        }
    }
}

impl std::error::Error for OptionError {}

/// One layer of job settings; `None` means "not set here".
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobOptions {
    /// `name=` (command line `--name`).
    pub name: Option<String>,
    /// `rw=`.
    pub rw: Option<RwMode>,
    /// `bs=`, bytes.
    pub bs: Option<u64>,
    /// `iodepth=`.
    pub iodepth: Option<u32>,
    /// `numjobs=`.
    pub numjobs: Option<u32>,
    /// `size=`, bytes.
    pub size: Option<u64>,
    /// `runtime=`; `Some(None)` is fio's `runtime=0` (no limit).
    pub runtime: Option<Option<Duration>>,
    /// `time_based`.
    pub time_based: Option<bool>,
    /// `ramp_time=`; `Some(None)` is `ramp_time=0`.
    pub ramp_time: Option<Option<Duration>>,
    /// `rwmixread=`.
    pub rwmixread: Option<u32>,
    /// `randseed=`.
    pub randseed: Option<u64>,
    /// `device=`: repeated keys within one layer add devices; a layer that
    /// names any device replaces the devices of the layers below it.
    pub devices: Option<Vec<String>>,
    /// `queue_mode=`, canonical name.
    pub queue_mode: Option<String>,
    /// `hw_queues=`.
    pub hw_queues: Option<u16>,
    /// `plug=`.
    pub plug: Option<bool>,
    /// `iostats=`.
    pub iostats: Option<bool>,
    /// `verify=`; `Some(None)` is `verify=none`.
    pub verify: Option<Option<VerifyKind>>,
    /// `do_verify=`.
    pub do_verify: Option<bool>,
    /// `verify_fatal=`.
    pub verify_fatal: Option<bool>,
    /// `trim_percentage=`.
    pub trim_percentage: Option<u8>,
    /// `trim_verify_zero=`.
    pub trim_verify_zero: Option<bool>,
    /// `write_zeroes_percentage=` (mqblk's).
    pub write_zeroes_percentage: Option<u8>,
    /// `segments=`.
    pub segments: Option<u32>,
    /// `stats_dir=`.
    pub stats_dir: Option<String>,
    /// fio's `direct=` (command line `--direct`): `direct=` of every file
    /// device that does not set it.
    pub file_direct: Option<bool>,
    /// fio's `ioengine=` (command line `--ioengine`), as a file device's
    /// `engine=` (`uring` or `psync`) for every file device that does not
    /// set it.
    pub file_engine: Option<&'static str>,
    /// `thinktime=`.
    pub thinktime: Option<Duration>,
    /// `offset=`.
    pub offset: Option<u64>,
    /// `offset_increment=`.
    pub offset_increment: Option<u64>,
    /// `io_size=`/`io_limit=`.
    pub io_size: Option<u64>,
    /// `number_ios=` (turned into bytes with `bs` when the job is built).
    pub number_ios: Option<u64>,
    /// `loops=`.
    pub loops: Option<u32>,
    /// The `:N` of `rw=TYPE:N`.
    pub seq_stride: Option<i64>,
    /// `random_distribution=`.
    pub distribution: Option<Distribution>,
    /// `randrepeat=`.
    pub randrepeat: Option<bool>,
    /// `fsync=`/`fdatasync=`.
    pub fsync_every: Option<u32>,
    /// `end_fsync=`.
    pub end_fsync: Option<bool>,
    /// `rate_iops=`.
    pub rate_iops: Option<u64>,
    /// `cgroup=`: the device group the job's context joins.
    pub cgroup: Option<String>,
    /// `cgroup_weight=`.
    pub cgroup_weight: Option<u32>,
    /// `prioclass=`.
    pub prioclass: Option<mqblk::IoPrioClass>,
    /// `prio=`.
    pub prio: Option<u8>,
    /// `rate=`.
    pub rate_bps: Option<u64>,
    /// `startdelay=`.
    pub startdelay: Option<Duration>,
    /// `stonewall`/`wait_for=`.
    pub stonewall: Option<bool>,
    /// `bsrange=`/`bssplit=`.
    pub block_sizes: Option<BlockSizes>,
    /// `blockalign=`.
    pub blockalign: Option<u64>,
    /// `write_bw_log=`.
    pub write_bw_log: Option<String>,
    /// `write_iops_log=`.
    pub write_iops_log: Option<String>,
    /// `write_lat_log=`.
    pub write_lat_log: Option<String>,
    /// `log_avg_msec=`.
    pub log_avg_msec: Option<u32>,
    /// `write_hist_log=`.
    pub write_hist_log: Option<String>,
    /// `log_hist_msec=`.
    pub log_hist_msec: Option<u32>,
    /// `log_hist_coarseness=`.
    pub log_hist_coarseness: Option<u8>,
    /// `log_offset=`.
    pub log_offset: Option<bool>,
    /// `log_prio=`.
    pub log_prio: Option<bool>,
    /// `per_job_logs=`.
    pub per_job_logs: Option<bool>,
    /// `slat_percentiles=`.
    pub slat_percentiles: Option<bool>,
}

/// A file device's `engine=` for fio's `ioengine=NAME`: `Ok(Some)` for
/// io_uring and the pread/pwrite family, `Ok(None)` for fio's other async
/// engines (libaio, posixaio: the file device's default engine, io_uring,
/// takes their place), and an explanation for the rest.
pub fn file_engine(name: &str) -> Result<Option<&'static str>, String> {
    match name.trim() {
        "io_uring" | "uring" => Ok(Some("uring")),
        "psync" | "sync" | "pvsync" | "pvsync2" => Ok(Some("psync")),
        "libaio" | "posixaio" => Ok(None),
        "null" => Err(
            "fio's null engine is mqblk's null device: --device null (device=null in a job file)"
                .into(),
        ),
        _ => Err(
            "mqblk is itself the I/O engine; file devices take io_uring or psync \
                  (engine=uring|psync in a file: spec), and the device is chosen with \
                  --device SPEC (device= in a job file)"
                .into(),
        ),
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

fn bad(value: &str, expected: impl Into<String>) -> OptionError {
    OptionError::BadValue {
        value: value.to_string(),
        expected: expected.into(),
    }
}

fn parse_u64_in(value: &str, min: u64, max: u64, expected: &str) -> Result<u64, OptionError> {
    match value.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(value, expected)),
    }
}

/// Parse a time as fio does for `runtime=` and `ramp_time=`: a plain
/// number is seconds; the suffixes `us`, `ms`, `s`, `m`, `h` and `d` (and
/// their long forms `usec`, `msec`, `sec`, `min`) are accepted, in any case.
pub fn parse_duration(value: &str) -> Result<Duration, String> {
    let s = value.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if digits_end == 0 {
        return Err("must start with a number".into());
    }
    let n: u64 = s[..digits_end]
        .parse()
        .map_err(|_| "number too large".to_string())?;
    let suffix = s[digits_end..].trim().to_ascii_lowercase();
    let nanos_per_unit: u64 = match suffix.as_str() {
        "us" | "usec" => 1_000,
        "ms" | "msec" => 1_000_000,
        "" | "s" | "sec" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "d" => 86_400_000_000_000,
        _ => return Err(format!("unknown suffix `{suffix}`")),
    };
    n.checked_mul(nanos_per_unit)
        .map(Duration::from_nanos)
        .ok_or_else(|| "too long".to_string())
}

const DURATION_EXPECTED: &str =
    "a time such as 10 (seconds), 500ms, 30s, 2m or 1h (suffixes us, ms, s, m, h, d); 0 means no limit";

/// What a key written alone means, as in fio: an on/off key is on, and a
/// log key logs under the default prefix. Other keys need a value.
fn bare_value(key: &str) -> Option<&'static str> {
    match key {
        "per_job_logs" | "log_offset" | "log_prio" | "slat_percentiles" | "plug" | "iostats"
        | "do_verify" | "verify_fatal" | "trim_verify_zero" => Some("1"),
        "write_bw_log" | "write_iops_log" | "write_lat_log" | "write_hist_log" => Some(""),
        _ => None,
    }
}

impl JobOptions {
    /// Set `key` from `value` (`None` for a bare key, as `time_based` is
    /// written). Validates the value; on error nothing is changed.
    pub fn set(&mut self, key: &str, value: Option<&str>) -> Result<(), OptionError> {
        if matches!(
            key,
            "time_based" | "norandommap" | "stonewall" | "end_fsync" | "randrepeat"
        ) {
            let on = match value {
                None => true,
                Some(v) => parse_bool(v.trim()).ok_or_else(|| bad(v, "no value, 1 or 0"))?,
            };
            match key {
                "time_based" => self.time_based = Some(on),
                "stonewall" => self.stonewall = Some(on),
                "end_fsync" => self.end_fsync = Some(on),
                "randrepeat" => self.randrepeat = Some(on),
                // mqblk keeps no random map: every job is norandommap.
                _ => {}
            }
            return Ok(());
        }
        let expected = match expected(key) {
            Some(e) => e,
            None => return Err(OptionError::UnknownKey),
        };
        let raw = value
            .or_else(|| bare_value(key))
            .ok_or_else(|| OptionError::MissingValue {
                expected: expected.to_string(),
            })?;
        let v = raw.trim();
        match key {
            "name" => {
                if v.is_empty() || v.len() > NAME_LEN_MAX || v.chars().any(char::is_control) {
                    return Err(bad(raw, expected));
                }
                self.name = Some(v.to_string());
            }
            "rw" | "readwrite" => {
                // fio's rw=TYPE:N: a hole of N bytes after each sequential I/O.
                let (mode, stride) = match v.split_once(':') {
                    Some((m, n)) => {
                        let n = n.trim();
                        let (neg, digits) = match n.strip_prefix('-') {
                            Some(d) => (true, d),
                            None => (false, n),
                        };
                        let b = parse_size(digits)
                            .map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                        let b = i64::try_from(b).map_err(|_| bad(raw, expected))?;
                        (m.trim(), if neg { -b } else { b })
                    }
                    None => (v, 0),
                };
                self.rw = Some(RwMode::parse(mode).ok_or_else(|| bad(raw, expected))?);
                self.seq_stride = Some(stride);
            }
            "bs" | "blocksize" => {
                let bs = parse_size(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if !(BS_MIN..=BS_MAX).contains(&bs) || bs % 512 != 0 {
                    return Err(bad(raw, expected));
                }
                self.bs = Some(bs);
            }
            "iodepth" => {
                self.iodepth = Some(parse_u64_in(v, 1, IODEPTH_MAX.into(), expected)? as u32);
            }
            "numjobs" => {
                self.numjobs = Some(parse_u64_in(v, 1, JOBS_MAX.into(), expected)? as u32);
            }
            "size" | "filesize" => {
                let size = parse_size(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if size == 0 {
                    return Err(bad(raw, expected));
                }
                self.size = Some(size);
            }
            "offset" | "offset_increment" => {
                let n = parse_size(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if key == "offset" {
                    self.offset = Some(n);
                } else {
                    self.offset_increment = Some(n);
                }
            }
            "io_size" | "io_limit" => {
                let n = parse_size(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if n == 0 {
                    return Err(bad(raw, expected));
                }
                self.io_size = Some(n);
            }
            "number_ios" => self.number_ios = Some(parse_u64_in(v, 1, u64::MAX >> 32, expected)?),
            "loops" => self.loops = Some(parse_u64_in(v, 1, 1_000_000, expected)? as u32),
            "rwmixwrite" => self.rwmixread = Some(100 - parse_u64_in(v, 0, 100, expected)? as u32),
            "random_distribution" => {
                self.distribution = Some(Distribution::parse(v).ok_or_else(|| bad(raw, expected))?)
            }
            "fsync" | "fdatasync" => {
                self.fsync_every = Some(parse_u64_in(v, 0, u32::MAX.into(), expected)? as u32)
            }
            "rate" | "rate_iops" => {
                // fio's READ,WRITE form: mqblk paces the sum.
                let mut total = 0u64;
                for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    let n = if key == "rate" {
                        parse_size(part).map_err(|why| bad(raw, format!("{expected} ({why})")))?
                    } else {
                        parse_u64_in(part, 0, u64::MAX >> 8, expected)?
                    };
                    total = total.saturating_add(n);
                }
                let total = (total > 0).then_some(total);
                if key == "rate" {
                    self.rate_bps = total;
                } else {
                    self.rate_iops = total;
                }
            }
            "cgroup" => {
                let ok = !v.is_empty()
                    && v.len() <= 64
                    && v.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
                if !ok {
                    return Err(bad(raw, expected));
                }
                self.cgroup = Some(v.to_string());
            }
            "cgroup_weight" => {
                self.cgroup_weight = Some(parse_u64_in(v, 1, 1000, expected)? as u32)
            }
            "prioclass" => {
                self.prioclass =
                    Some(mqblk::IoPrioClass::parse(v).ok_or_else(|| bad(raw, expected))?)
            }
            "prio" => self.prio = Some(parse_u64_in(v, 0, 7, expected)? as u8),
            "startdelay" => {
                let d = parse_duration(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if d > Duration::from_secs(3600) {
                    return Err(bad(raw, expected));
                }
                self.startdelay = Some(d);
            }
            "bsrange" => {
                let (a, b) = v.split_once('-').ok_or_else(|| bad(raw, expected))?;
                let size = |x: &str| {
                    let n = parse_size(x.trim())
                        .map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                    if (BS_MIN..=BS_MAX).contains(&n) && n % 512 == 0 {
                        Ok(n)
                    } else {
                        Err(bad(raw, expected))
                    }
                };
                let (min, max) = (size(a)?, size(b)?);
                if min > max {
                    return Err(bad(raw, expected));
                }
                self.block_sizes = Some(if min == max {
                    self.bs = Some(min);
                    BlockSizes::Fixed
                } else {
                    BlockSizes::Range(min, max)
                });
            }
            "bssplit" => {
                let mut groups = v.split(',');
                let reads = groups.next().unwrap_or_default();
                let r = BlockSizes::parse_split(reads)
                    .map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                let w = match groups.next().filter(|g| !g.trim().is_empty()) {
                    Some(g) => BlockSizes::parse_split(g)
                        .map_err(|why| bad(raw, format!("{expected} ({why})")))?,
                    None => r.clone(),
                };
                for &(size, _) in r.iter().chain(&w) {
                    if !(BS_MIN..=BS_MAX).contains(&size) || size % 512 != 0 {
                        return Err(bad(raw, expected));
                    }
                }
                self.block_sizes = Some(BlockSizes::Split(r, w));
            }
            "blockalign" => {
                let n = parse_size(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if !(BS_MIN..=BS_MAX).contains(&n) || n % 512 != 0 {
                    return Err(bad(raw, expected));
                }
                self.blockalign = Some(n);
            }
            "write_bw_log" | "write_iops_log" | "write_lat_log" | "write_hist_log" => {
                // fio's bare key (or an empty value) logs as the job name;
                // mqblk takes the prefix `mqblk`.
                let prefix = if v.is_empty() {
                    "mqblk".to_string()
                } else {
                    v.to_string()
                };
                if prefix.chars().any(char::is_control) {
                    return Err(bad(raw, expected));
                }
                match key {
                    "write_bw_log" => self.write_bw_log = Some(prefix),
                    "write_iops_log" => self.write_iops_log = Some(prefix),
                    "write_hist_log" => self.write_hist_log = Some(prefix),
                    _ => self.write_lat_log = Some(prefix),
                }
            }
            "log_avg_msec" => {
                self.log_avg_msec = Some(parse_u64_in(v, 0, 3_600_000, expected)? as u32)
            }
            "per_job_logs" => {
                self.per_job_logs = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?)
            }
            "log_hist_msec" => {
                self.log_hist_msec = Some(parse_u64_in(v, 0, 3_600_000, expected)? as u32)
            }
            "log_hist_coarseness" => {
                self.log_hist_coarseness =
                    Some(parse_u64_in(v, 0, COARSENESS_MAX.into(), expected)? as u8)
            }
            "log_offset" => {
                self.log_offset = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?)
            }
            "log_prio" => self.log_prio = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?),
            "slat_percentiles" => {
                self.slat_percentiles = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?)
            }
            "wait_for" => {
                // Every job before this one finishes first (a stonewall),
                // which includes the one named.
                if v.is_empty() {
                    return Err(bad(raw, expected));
                }
                self.stonewall = Some(true);
            }
            "runtime" | "ramp_time" | "timeout" => {
                let d = parse_duration(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                let d = if d.is_zero() { None } else { Some(d) };
                if key != "ramp_time" {
                    self.runtime = Some(d);
                } else {
                    self.ramp_time = Some(d);
                }
            }
            "rwmixread" => self.rwmixread = Some(parse_u64_in(v, 0, 100, expected)? as u32),
            "randseed" => self.randseed = Some(v.parse().map_err(|_| bad(raw, expected))?),
            "device" => {
                // Syntax only here; the device kind checks its own options
                // when the device is opened.
                mqblk::spec::parse(v).map_err(|e| bad(raw, format!("{expected} ({e})")))?;
                self.devices
                    .get_or_insert_with(Vec::new)
                    .push(v.to_string());
            }
            "queue_mode" => {
                let mode = QueueMode::parse(v).ok_or_else(|| bad(raw, expected))?;
                self.queue_mode = Some(mode.name().to_string());
            }
            "hw_queues" => {
                self.hw_queues = Some(parse_u64_in(v, 1, HW_QUEUES_MAX.into(), expected)? as u16);
            }
            "plug" => self.plug = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?),
            "iostats" => self.iostats = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?),
            "verify" => {
                // fio's meta checks each block's header (offset, length,
                // sequence); mqblk's header carries those and a crc32c of
                // the block, so meta is checked as crc32c, a superset.
                let v = if v == "meta" { "crc32c" } else { v };
                let kind = VerifyKind::parse(v).map_err(|()| {
                    bad(
                        raw,
                        format!("{expected}; other checksums: {FIO_ENGINE_HINT}"),
                    )
                })?;
                self.verify = Some(kind);
            }
            "do_verify" => self.do_verify = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?),
            "verify_fatal" => {
                self.verify_fatal = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?)
            }
            "trim_percentage" => {
                self.trim_percentage = Some(parse_u64_in(v, 0, 100, expected)? as u8)
            }
            "trim_verify_zero" => {
                self.trim_verify_zero = Some(parse_bool(v).ok_or_else(|| bad(raw, expected))?)
            }
            "write_zeroes_percentage" => {
                self.write_zeroes_percentage = Some(parse_u64_in(v, 0, 100, expected)? as u8)
            }
            "segments" => self.segments = Some(parse_u64_in(v, 1, 256, expected)? as u32),
            "thinktime" => {
                // fio's unit for a bare number is the microsecond.
                let us;
                let v = if v.trim().bytes().all(|b| b.is_ascii_digit()) {
                    us = format!("{}us", v.trim());
                    us.as_str()
                } else {
                    v
                };
                let d = parse_duration(v).map_err(|why| bad(raw, format!("{expected} ({why})")))?;
                if d > Duration::from_secs(10) {
                    return Err(bad(raw, expected));
                }
                self.thinktime = Some(d);
            }
            "stats_dir" => {
                if v.is_empty() {
                    return Err(bad(raw, expected));
                }
                self.stats_dir = Some(v.to_string());
            }
            _ => return Err(OptionError::UnknownKey),
        }
        Ok(())
    }

    /// Lay `top` over `self`: every setting `top` has wins.
    pub fn overlay(&mut self, top: &JobOptions) {
        fn over<T: Clone>(below: &mut Option<T>, top: &Option<T>) {
            if let Some(t) = top {
                *below = Some(t.clone());
            }
        }
        over(&mut self.name, &top.name);
        over(&mut self.rw, &top.rw);
        over(&mut self.bs, &top.bs);
        over(&mut self.iodepth, &top.iodepth);
        over(&mut self.numjobs, &top.numjobs);
        over(&mut self.size, &top.size);
        over(&mut self.runtime, &top.runtime);
        over(&mut self.time_based, &top.time_based);
        over(&mut self.ramp_time, &top.ramp_time);
        over(&mut self.rwmixread, &top.rwmixread);
        over(&mut self.randseed, &top.randseed);
        over(&mut self.devices, &top.devices);
        over(&mut self.queue_mode, &top.queue_mode);
        over(&mut self.hw_queues, &top.hw_queues);
        over(&mut self.plug, &top.plug);
        over(&mut self.iostats, &top.iostats);
        over(&mut self.verify, &top.verify);
        over(&mut self.do_verify, &top.do_verify);
        over(&mut self.verify_fatal, &top.verify_fatal);
        over(&mut self.trim_percentage, &top.trim_percentage);
        over(&mut self.trim_verify_zero, &top.trim_verify_zero);
        over(
            &mut self.write_zeroes_percentage,
            &top.write_zeroes_percentage,
        );
        over(&mut self.segments, &top.segments);
        over(&mut self.stats_dir, &top.stats_dir);
        over(&mut self.file_direct, &top.file_direct);
        over(&mut self.file_engine, &top.file_engine);
        over(&mut self.thinktime, &top.thinktime);
        over(&mut self.offset, &top.offset);
        over(&mut self.offset_increment, &top.offset_increment);
        over(&mut self.io_size, &top.io_size);
        over(&mut self.number_ios, &top.number_ios);
        over(&mut self.loops, &top.loops);
        over(&mut self.seq_stride, &top.seq_stride);
        over(&mut self.distribution, &top.distribution);
        over(&mut self.randrepeat, &top.randrepeat);
        over(&mut self.fsync_every, &top.fsync_every);
        over(&mut self.end_fsync, &top.end_fsync);
        over(&mut self.rate_iops, &top.rate_iops);
        over(&mut self.cgroup, &top.cgroup);
        over(&mut self.cgroup_weight, &top.cgroup_weight);
        over(&mut self.prioclass, &top.prioclass);
        over(&mut self.prio, &top.prio);
        over(&mut self.rate_bps, &top.rate_bps);
        over(&mut self.startdelay, &top.startdelay);
        over(&mut self.stonewall, &top.stonewall);
        over(&mut self.block_sizes, &top.block_sizes);
        over(&mut self.blockalign, &top.blockalign);
        over(&mut self.write_bw_log, &top.write_bw_log);
        over(&mut self.write_iops_log, &top.write_iops_log);
        over(&mut self.write_lat_log, &top.write_lat_log);
        over(&mut self.log_avg_msec, &top.log_avg_msec);
        over(&mut self.write_hist_log, &top.write_hist_log);
        over(&mut self.log_hist_msec, &top.log_hist_msec);
        over(&mut self.log_hist_coarseness, &top.log_hist_coarseness);
        over(&mut self.log_offset, &top.log_offset);
        over(&mut self.log_prio, &top.log_prio);
        over(&mut self.per_job_logs, &top.per_job_logs);
        over(&mut self.slat_percentiles, &top.slat_percentiles);
    }

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
            size: self.size.or(d.size),
            runtime: self.runtime.unwrap_or(d.runtime),
            time_based: self.time_based.unwrap_or(d.time_based),
            ramp_time: self.ramp_time.unwrap_or(d.ramp_time),
            rwmixread: self.rwmixread.unwrap_or(d.rwmixread),
            randseed: self.randseed.unwrap_or(d.randseed),
            devices: self
                .devices
                .clone()
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
            trim_percentage: self.trim_percentage.unwrap_or(d.trim_percentage),
            trim_verify_zero: self.trim_verify_zero.unwrap_or(d.trim_verify_zero),
            write_zeroes_percentage: self
                .write_zeroes_percentage
                .unwrap_or(d.write_zeroes_percentage),
            segments: self.segments.unwrap_or(d.segments),
            stats_dir: self.stats_dir.clone().or(d.stats_dir.clone()),
            thinktime: self.thinktime.unwrap_or(d.thinktime),
            offset: self.offset.unwrap_or(d.offset),
            offset_increment: self.offset_increment.unwrap_or(d.offset_increment),
            io_size: match (self.number_ios, self.io_size) {
                (Some(n), _) => Some(n.saturating_mul(self.bs.unwrap_or(d.bs))),
                (None, io) => io.or(d.io_size),
            },
            loops: self.loops.unwrap_or(d.loops),
            seq_stride: self.seq_stride.unwrap_or(d.seq_stride),
            distribution: self.distribution.unwrap_or(d.distribution),
            randrepeat: self.randrepeat.unwrap_or(d.randrepeat),
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
        };
        check(&job)?;
        Ok(job)
    }
}

/// What `key` accepts, or `None` for an unknown key.
pub fn expected(key: &str) -> Option<&'static str> {
    Some(match key {
        "name" => "a job name of 1 to 256 printable characters",
        "rw" | "readwrite" => {
            "one of read, write, randread, randwrite, rw (readwrite), randrw, trim, randtrim, optionally with \
             :N for a hole of N bytes after each sequential I/O (negative: backwards)"
        }
        "bs" | "blocksize" => "a block size from 512 to 64M that is a multiple of 512, such as 4k",
        "iodepth" => "an integer from 1 to 65536",
        "numjobs" => "an integer from 1 to 1024",
        "size" | "filesize" => {
            "a size above zero such as 1G or 512m (binary suffixes k, m, g, t, p)"
        }
        "runtime" | "ramp_time" | "timeout" => DURATION_EXPECTED,
        "offset" => "a byte offset such as 0 or 1G: where the job's region starts",
        "offset_increment" => "bytes such as 1G: each numjobs copy starts this much further",
        "io_size" | "io_limit" => "bytes to transfer, above zero, such as 4G",
        "number_ios" => "a number of I/Os to issue, at least 1",
        "loops" => "an integer from 1 to 1000000: times to run the job's I/O",
        "rwmixwrite" => "a percentage from 0 to 100",
        "norandommap" | "stonewall" | "end_fsync" | "randrepeat" => "no value, 1 or 0",
        "random_distribution" => {
            "random, zipf:THETA (THETA > 0, not 1), pareto:H (0 < H < 1) or normal:DEV (percent)"
        }
        "fsync" | "fdatasync" => "a number of writes after which to flush (0: never)",
        "rate" => "bytes per second such as 500m, or READ,WRITE (mqblk paces their sum)",
        "rate_iops" => "I/Os per second, or READ,WRITE (mqblk paces their sum)",
        "startdelay" => "a delay of up to 1h, seconds unless suffixed (us, ms, s, m)",
        "wait_for" => "the name of an earlier job",
        "bsrange" => "MIN-MAX block sizes such as 4k-64k (multiples of 512, up to 64M)",
        "bssplit" => {
            "SIZE/PERCENT:SIZE/PERCENT... such as 4k/10:64k/90, optionally ,WRITES the same way"
        }
        "blockalign" => "an offset alignment such as 4k (a multiple of 512)",
        "write_bw_log" | "write_iops_log" | "write_lat_log" => {
            "a file name prefix (PREFIX_bw.N.log, PREFIX_iops.N.log; PREFIX_lat.N.log, \
             PREFIX_slat.N.log and PREFIX_clat.N.log)"
        }
        "log_avg_msec" => {
            "the logs' window in milliseconds up to 3600000 (default 500), or 0 for a line per I/O"
        }
        "write_hist_log" => "a file name prefix (PREFIX_clat_hist.N.log)",
        "log_hist_msec" => {
            "the histogram log's window in milliseconds up to 3600000 (default 0, as fio: no \
             lines)"
        }
        "log_hist_coarseness" => {
            "0 to 6: each column of the histogram log sums 2^N of fio's 1856 latency bins"
        }
        "log_offset" => "1 (per-I/O log lines carry the I/O's offset) or 0",
        "log_prio" => "1 (log lines carry the I/O priority value) or 0 (1 only for real time)",
        "per_job_logs" => "1 (a log file per job) or 0 (one file for all)",
        "slat_percentiles" => "1 (report submission latency percentiles) or 0",
        "time_based" => "no value, 1 or 0",
        "rwmixread" => "a percentage from 0 to 100",
        "randseed" => "an unsigned 64-bit integer",
        "device" => "a device spec such as null, null,size=1G or ram,size=1G",
        "queue_mode" => "mq, device-lock or global-lock",
        "hw_queues" => "an integer from 1 to 1024",
        "plug" => "on or off (or 1/0)",
        "iostats" => "1 or 0 (or on/off)",
        "verify" => "crc32c (or crc32c-intel), md5, sha256, meta (checked as crc32c), or none",
        "do_verify" => "1 or 0 (default 1: read back and check what was written)",
        "verify_fatal" => "1 or 0 (default 0: 1 stops the job at the first mismatch)",
        "trim_percentage" => {
            "a percentage from 0 to 100: the share of a verify job's writes that are discards"
        }
        "trim_verify_zero" => {
            "1 or 0 (default 0: a discarded block may read as zeros or as what it held; 1: zeros)"
        }
        "write_zeroes_percentage" => {
            "a percentage from 0 to 100: the share of a verify job's writes that are write-zeroes"
        }
        "segments" => "1 to 256: buffer pieces per I/O (vectored bios)",
        "thinktime" => {
            "a pause after each completion, up to 10s: microseconds, or with a suffix (us, ms, s)"
        }
        "stats_dir" => "a directory to write diskstats and mqblk.json into",
        "cgroup" => {
            "a group name of 1 to 64 letters, digits, '-', '_' or '.' (jobs naming one \
             group share its weight and limits)"
        }
        "cgroup_weight" => "a weight from 1 to 1000 (default 100)",
        "prioclass" => "rt, be or idle (or fio's 1, 2, 3)",
        "prio" => "a level from 0 (highest) to 7 within the class",
        _ => return None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn set(key: &str, value: &str) -> Result<JobOptions, OptionError> {
        let mut o = JobOptions::default();
        o.set(key, Some(value))?;
        Ok(o)
    }

    #[test]
    fn thinktime_is_in_microseconds_unless_it_has_a_suffix() {
        let t = |v: &str| set("thinktime", v).map(|o| o.thinktime);
        assert_eq!(t("2000").unwrap(), Some(Duration::from_millis(2)));
        assert_eq!(t("2ms").unwrap(), Some(Duration::from_millis(2)));
        assert_eq!(t("0").unwrap(), Some(Duration::ZERO));
        assert!(t("11s").is_err(), "more than 10 s");
        assert!(t("x").is_err());
    }

    #[test]
    fn values_parse() {
        assert_eq!(set("bs", "4k").unwrap().bs, Some(4096));
        assert_eq!(set("rw", "randrw").unwrap().rw, Some(RwMode::RandRw));
        assert_eq!(set("iodepth", " 32 ").unwrap().iodepth, Some(32));
        assert_eq!(set("size", "1G").unwrap().size, Some(1 << 30));
        assert_eq!(
            set("runtime", "10").unwrap().runtime,
            Some(Some(Duration::from_secs(10)))
        );
        assert_eq!(set("runtime", "0").unwrap().runtime, Some(None));
        assert_eq!(
            set("ramp_time", "500ms").unwrap().ramp_time,
            Some(Some(Duration::from_millis(500)))
        );
        assert_eq!(
            set("queue_mode", "device_lock")
                .unwrap()
                .queue_mode
                .as_deref(),
            Some("device-lock")
        );
        assert_eq!(set("plug", "off").unwrap().plug, Some(false));
        assert_eq!(set("iostats", "0").unwrap().iostats, Some(false));
        let mut o = JobOptions::default();
        o.set("time_based", None).unwrap();
        assert_eq!(o.time_based, Some(true));
    }

    #[test]
    fn durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("3"), Duration::from_secs(3));
        assert_eq!(ok("3s"), Duration::from_secs(3));
        assert_eq!(ok("250ms"), Duration::from_millis(250));
        assert_eq!(ok("7us"), Duration::from_micros(7));
        assert_eq!(ok("2m"), Duration::from_secs(120));
        assert_eq!(ok("1H"), Duration::from_secs(3600));
        for bad in [
            "",
            "s",
            "-1",
            "1.5",
            "3x",
            "99999999999999999999",
            "18446744073709551615d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_values_name_what_is_accepted() {
        for (k, v) in [
            ("bs", "0"),
            ("bs", "1000"),
            ("bs", "1G"),
            ("bs", "4q"),
            ("iodepth", "0"),
            ("iodepth", "70000"),
            ("numjobs", "0"),
            ("rw", "foo"),
            ("rwmixread", "101"),
            ("size", "0"),
            ("size", "1x"),
            ("runtime", "5y"),
            ("hw_queues", "0"),
            ("plug", "maybe"),
            ("iostats", "2"),
            ("queue_mode", "lockless"),
            ("device", ""),
            ("device", "nu ll"),
            ("randseed", "-1"),
            ("name", ""),
            ("slat_percentiles", "2"),
            ("log_offset", "yes please"),
            ("log_prio", "-1"),
            ("log_avg_msec", "1h"),
            ("log_hist_msec", "-5"),
            ("log_hist_coarseness", "7"),
            ("write_hist_log", "a\u{7}b"),
        ] {
            let e = set(k, v).unwrap_err();
            assert!(matches!(e, OptionError::BadValue { .. }), "{k}={v}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("{v:?}")), "{k}={v}: {msg}");
            assert!(msg.contains("expected"), "{k}={v}: {msg}");
        }
        assert_eq!(
            set("ioengine", "null").unwrap_err(),
            OptionError::UnknownKey
        );
        let mut o = JobOptions::default();
        assert!(matches!(
            o.set("bs", None),
            Err(OptionError::MissingValue { .. })
        ));
        assert_eq!(o, JobOptions::default());
    }

    #[test]
    fn a_bare_on_off_or_log_key_is_taken_as_fio_takes_it() {
        let mut o = JobOptions::default();
        for k in [
            "slat_percentiles",
            "log_offset",
            "log_prio",
            "per_job_logs",
            "plug",
        ] {
            o.set(k, None).unwrap_or_else(|e| panic!("{k}: {e}"));
        }
        assert_eq!(o.slat_percentiles, Some(true));
        assert_eq!(o.log_offset, Some(true));
        assert_eq!(o.plug, Some(true));
        o.set("write_lat_log", None).unwrap();
        assert_eq!(o.write_lat_log.as_deref(), Some("mqblk"));
        // A key with a real value still needs one.
        assert!(matches!(
            o.set("log_avg_msec", None),
            Err(OptionError::MissingValue { .. })
        ));
    }

    #[test]
    fn every_key_has_an_expectation() {
        for k in KEYS {
            assert!(expected(k).is_some(), "{k}");
        }
    }

    #[test]
    fn top_layer_wins_and_devices_replace() {
        let mut global = JobOptions::default();
        global.set("bs", Some("8k")).unwrap();
        global.set("iodepth", Some("4")).unwrap();
        global.set("device", Some("null")).unwrap();
        global.set("device", Some("null,size=1G")).unwrap();
        let mut cli = JobOptions::default();
        cli.set("iodepth", Some("16")).unwrap();
        let mut merged = global.clone();
        merged.overlay(&cli);
        let job = merged.build("job0").unwrap();
        assert_eq!(job.bs, 8192);
        assert_eq!(job.iodepth, 16);
        assert_eq!(job.devices, vec!["null", "null,size=1G"]);
        cli.set("device", Some("null,size=2G")).unwrap();
        merged.overlay(&cli);
        assert_eq!(merged.build("job0").unwrap().devices, vec!["null,size=2G"]);
    }

    #[test]
    fn whole_job_rules() {
        let mut o = JobOptions::default();
        o.set("time_based", None).unwrap();
        assert!(o.build("j").unwrap_err().contains("runtime"));
        o.set("runtime", Some("1")).unwrap();
        o.build("j").unwrap();
        o.set("size", Some("1k")).unwrap();
        o.set("bs", Some("4k")).unwrap();
        assert!(o.build("j").unwrap_err().contains("smaller than bs"));
        let many = vec![
            JobSpec {
                numjobs: 600,
                ..JobSpec::default()
            };
            2
        ];
        assert!(check_run(&many).is_err());
        assert!(check_run(&[]).is_err());
    }
}
