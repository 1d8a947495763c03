//! A bench job as fio describes one: the option subset mqblk understands,
//! typed. Command-line options and job files both end up here.

use std::time::Duration;

use crate::content::ContentSpec;
use crate::steadystate::SteadySpec;
use crate::verify_pattern::VerifyPattern;
use crate::zone::ZoneSpec;

/// Largest `flow=` weight (fio's `FLOW_MAX_WEIGHT`).
pub const FLOW_WEIGHT_MAX: u32 = 1000;

/// Largest `log_hist_coarseness` (fio's documented range is 0 to 6).
pub const HIST_COARSENESS_MAX: u8 = 6;

/// fio's `rw=`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwMode {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Random reads.
    RandRead,
    /// Random writes.
    RandWrite,
    /// Sequential mixed reads and writes (`rw`/`readwrite`).
    Rw,
    /// Random mixed (`randrw`).
    RandRw,
    /// Sequential trims (discards, `trim`).
    Trim,
    /// Random trims (`randtrim`).
    RandTrim,
}

impl RwMode {
    /// Parse fio's names.
    pub fn parse(s: &str) -> Option<RwMode> {
        Some(match s {
            "read" => RwMode::Read,
            "write" => RwMode::Write,
            "randread" => RwMode::RandRead,
            "randwrite" => RwMode::RandWrite,
            "rw" | "readwrite" => RwMode::Rw,
            "randrw" => RwMode::RandRw,
            "trim" => RwMode::Trim,
            "randtrim" => RwMode::RandTrim,
            _ => return None,
        })
    }

    /// fio's name.
    pub fn name(self) -> &'static str {
        match self {
            RwMode::Read => "read",
            RwMode::Write => "write",
            RwMode::RandRead => "randread",
            RwMode::RandWrite => "randwrite",
            RwMode::Rw => "rw",
            RwMode::RandRw => "randrw",
            RwMode::Trim => "trim",
            RwMode::RandTrim => "randtrim",
        }
    }

    /// True for random offsets.
    pub fn is_random(self) -> bool {
        matches!(
            self,
            RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw | RwMode::RandTrim
        )
    }

    /// True for trims (discards).
    pub fn is_trim(self) -> bool {
        matches!(self, RwMode::Trim | RwMode::RandTrim)
    }

    /// Percentage of reads for this mode given `rwmixread`.
    pub fn read_percent(self, rwmixread: u32) -> u32 {
        match self {
            RwMode::Read | RwMode::RandRead => 100,
            RwMode::Write | RwMode::RandWrite | RwMode::Trim | RwMode::RandTrim => 0,
            RwMode::Rw | RwMode::RandRw => rwmixread.min(100),
        }
    }
}

/// The checksum of `verify=` (where it goes in a block is the verify
/// module's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyKind {
    /// CRC-32C (Castagnoli), fio's `crc32c` (and `crc32c-intel`).
    Crc32c,
    /// MD5, fio's `md5`.
    Md5,
    /// SHA-256, fio's `sha256`.
    Sha256,
    /// SHA-1, fio's `sha1`.
    Sha1,
    /// xxHash32, fio's `xxhash`.
    XxHash,
    /// fio's `crc64` (the Jones polynomial, reflected, from 0).
    Crc64,
    /// fio's `crc32` (CRC-32's polynomial, not reflected, from 0).
    Crc32,
    /// fio's `crc16` (CRC-16/ARC).
    Crc16,
    /// fio's `crc7` (CRC-7/MMC).
    Crc7,
    /// SHA3-224, fio's `sha3-224`.
    Sha3_224,
    /// SHA3-256, fio's `sha3-256`.
    Sha3_256,
    /// SHA3-384, fio's `sha3-384`.
    Sha3_384,
    /// SHA3-512, fio's `sha3-512`.
    Sha3_512,
    /// fio's `pattern`: no header, only `verify_pattern=` checked.
    Pattern,
}

impl VerifyKind {
    /// Parse fio's names; `None` for `verify=none`/`0`, `Err` for unknown.
    pub(crate) fn parse(s: &str) -> Result<Option<VerifyKind>, ()> {
        match s {
            "crc32c" | "crc32c-intel" => Ok(Some(VerifyKind::Crc32c)),
            "md5" => Ok(Some(VerifyKind::Md5)),
            "sha256" => Ok(Some(VerifyKind::Sha256)),
            "sha1" => Ok(Some(VerifyKind::Sha1)),
            "xxhash" => Ok(Some(VerifyKind::XxHash)),
            "crc64" => Ok(Some(VerifyKind::Crc64)),
            "crc32" => Ok(Some(VerifyKind::Crc32)),
            "crc16" => Ok(Some(VerifyKind::Crc16)),
            "crc7" => Ok(Some(VerifyKind::Crc7)),
            "sha3-224" => Ok(Some(VerifyKind::Sha3_224)),
            "sha3-256" => Ok(Some(VerifyKind::Sha3_256)),
            "sha3-384" => Ok(Some(VerifyKind::Sha3_384)),
            "sha3-512" => Ok(Some(VerifyKind::Sha3_512)),
            "pattern" => Ok(Some(VerifyKind::Pattern)),
            "none" | "0" => Ok(None),
            _ => Err(()),
        }
    }

    /// fio's name.
    pub fn name(self) -> &'static str {
        match self {
            VerifyKind::Crc32c => "crc32c",
            VerifyKind::Md5 => "md5",
            VerifyKind::Sha256 => "sha256",
            VerifyKind::Sha1 => "sha1",
            VerifyKind::XxHash => "xxhash",
            VerifyKind::Crc64 => "crc64",
            VerifyKind::Crc32 => "crc32",
            VerifyKind::Crc16 => "crc16",
            VerifyKind::Crc7 => "crc7",
            VerifyKind::Sha3_224 => "sha3-224",
            VerifyKind::Sha3_256 => "sha3-256",
            VerifyKind::Sha3_384 => "sha3-384",
            VerifyKind::Sha3_512 => "sha3-512",
            VerifyKind::Pattern => "pattern",
        }
    }
}

/// fio's `continue_on_error=`: which failed I/Os a job goes on past. By
/// default (`none`) a job stops at its first I/O error, as fio's does: it
/// issues nothing more, waits for what is in flight, and reports the I/O
/// that failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContinueOnError {
    /// Go on past a failed read.
    pub read: bool,
    /// Go on past a failed write, trim, write-zeroes or flush (fio counts
    /// them all as writes).
    pub write: bool,
    /// Go on past a verify mismatch, even with `verify_fatal=1`.
    pub verify: bool,
}

impl ContinueOnError {
    /// Parse fio's values: none, read, write, io, verify, all, and 0 and 1
    /// (fio's older boolean form: none and all).
    pub fn parse(s: &str) -> Option<ContinueOnError> {
        let (read, write, verify) = match s {
            "none" | "0" => (false, false, false),
            "read" => (true, false, false),
            "write" => (false, true, false),
            "io" => (true, true, false),
            "verify" => (false, false, true),
            "all" | "1" => (true, true, true),
            _ => return None,
        };
        Some(ContinueOnError {
            read,
            write,
            verify,
        })
    }

    /// Whether a job goes on after `op` failed.
    pub fn goes_on_after(self, op: mqblk::Op) -> bool {
        if op == mqblk::Op::Read {
            self.read
        } else {
            self.write
        }
    }
}

pub use crate::distribution::Distribution;

/// fio's `bsrange=` and `bssplit=`: the block size of each I/O, drawn per
/// I/O (for reads and for writes).
#[derive(Clone, Debug, PartialEq)]
pub enum BlockSizes {
    /// Every I/O is `bs=`.
    Fixed,
    /// Uniform in [min, max], in multiples of min (`bsrange=MIN-MAX`).
    Range(u64, u64),
    /// Sizes with their percentages, cumulative, for reads and writes
    /// (`bssplit=4k/10:64k/90,8k/100`).
    Split(Vec<(u64, u32)>, Vec<(u64, u32)>),
}

impl BlockSizes {
    /// The largest size an I/O may have.
    pub fn max(&self, bs: u64) -> u64 {
        match self {
            BlockSizes::Fixed => bs,
            BlockSizes::Range(_, max) => *max,
            BlockSizes::Split(r, w) => r.iter().chain(w).map(|c| c.0).max().unwrap_or(bs),
        }
    }

    /// The smallest size an I/O may have.
    pub fn min(&self, bs: u64) -> u64 {
        match self {
            BlockSizes::Fixed => bs,
            BlockSizes::Range(min, _) => *min,
            BlockSizes::Split(r, w) => r.iter().chain(w).map(|c| c.0).min().unwrap_or(bs),
        }
    }

    /// Parse one direction of `bssplit=`: `4k/10:64k/50:32k/` (blank
    /// percentages share what is left).
    pub fn parse_split(s: &str) -> Result<Vec<(u64, u32)>, String> {
        let mut out: Vec<(u64, Option<u32>)> = Vec::new();
        for part in s.split(':').filter(|p| !p.trim().is_empty()) {
            let (size, pct) = match part.split_once('/') {
                Some((a, b)) => (a.trim(), b.trim()),
                None => (part.trim(), ""),
            };
            let size = mqblk::spec::parse_size(size).map_err(|e| format!("{size}: {e}"))?;
            let pct = if pct.is_empty() {
                None
            } else {
                Some(
                    pct.parse::<u32>()
                        .ok()
                        .filter(|p| *p <= 100)
                        .ok_or(format!("{pct}: not a percentage"))?,
                )
            };
            out.push((size, pct));
        }
        if out.is_empty() || out.len() > 64 {
            return Err("1 to 64 SIZE/PERCENT entries".into());
        }
        let given: u32 = out.iter().filter_map(|e| e.1).sum();
        let blank = out.iter().filter(|e| e.1.is_none()).count() as u32;
        if given > 100 || (blank == 0 && given != 100) {
            return Err(format!("the percentages add up to {given}, not 100"));
        }
        let share = (100 - given).checked_div(blank).unwrap_or(0);
        let mut cum = 0;
        let mut split = Vec::new();
        for (i, (size, pct)) in out.iter().enumerate() {
            cum += pct.unwrap_or(share);
            // Rounding of blank shares: the last entry takes the rest.
            if i + 1 == out.len() {
                cum = 100;
            }
            split.push((*size, cum));
        }
        Ok(split)
    }
}

/// One job section (before `numjobs` expansion).
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    /// Section name (`job0` on the command line).
    pub name: String,
    /// `rw=`.
    pub rw: RwMode,
    /// `bs=` in bytes.
    pub bs: u64,
    /// `iodepth=`.
    pub iodepth: u32,
    /// `numjobs=`.
    pub numjobs: u32,
    /// `size=`: bytes of the device to cover (and, unless time based, the
    /// bytes each job transfers). None: the whole device.
    pub size: Option<u64>,
    /// `runtime=`.
    pub runtime: Option<Duration>,
    /// `time_based`.
    pub time_based: bool,
    /// `ramp_time=`: run this long before measuring.
    pub ramp_time: Option<Duration>,
    /// `rwmixread=` (default 50).
    pub rwmixread: u32,
    /// `--device SPEC` (repeatable): job i uses device i mod n.
    pub devices: Vec<String>,
    /// `--queue-mode`: added to every device spec.
    pub queue_mode: Option<String>,
    /// `--hw-queues`: added to every device spec.
    pub hw_queues: Option<u16>,
    /// `--plug`: added to every device spec.
    pub plug: Option<bool>,
    /// `--iostats` (default on): per-I/O accounting and clat.
    pub iostats: bool,
    /// `randseed=`.
    pub randseed: u64,
    /// `verify=` (None: `verify=none`).
    pub verify: Option<VerifyKind>,
    /// `do_verify=` (default 1): read back what was written after the run.
    pub do_verify: bool,
    /// `verify_fatal=` (default 0): stop the job at the first mismatch.
    pub verify_fatal: bool,
    /// `continue_on_error=` (default none: stop at the first I/O error).
    pub continue_on_error: ContinueOnError,
    /// `allow_degraded=1` (mqblk's): the run may end with a mirror leg of
    /// the job's device out of service (default 0: that fails the run).
    pub allow_degraded: bool,
    /// `trim_percentage=N`: N% of a verify job's writes are discards.
    pub trim_percentage: u8,
    /// `trim_verify_zero=1`: a discarded block must read as zeros (default
    /// 0: zeros or what it held, as a device may ignore a discard).
    pub trim_verify_zero: bool,
    /// `write_zeroes_percentage=N` (mqblk's): N% of a verify job's writes
    /// are write-zeroes.
    pub write_zeroes_percentage: u8,
    /// `segments=`: each I/O's buffer is cut into this many non-contiguous
    /// pieces (a vectored bio).
    pub segments: u32,
    /// `--stats-dir`: keep `DIR/diskstats` (for `iostat -f DIR`) and
    /// `DIR/mqblk.json` (for `mqblk stat`) up to date while running.
    pub stats_dir: Option<String>,
    /// `--trace`: write blktrace files of every device the job uses (and
    /// the devices below them) into this directory.
    pub trace: Option<String>,
    /// `thinktime=` (fio's): pause this long after each completion before
    /// the next I/O, as an application that works on its data would.
    pub thinktime: std::time::Duration,
    /// `offset=`: the job's region starts this many bytes into the device.
    pub offset: u64,
    /// `offset_increment=`: the k-th copy of a `numjobs` job starts k times
    /// this much further.
    pub offset_increment: u64,
    /// `io_size=` (`io_limit=`, or `number_ios=` times `bs`): bytes to
    /// transfer, when not time based (default: the region's size).
    pub io_size: Option<u64>,
    /// `loops=`: run the job's I/O this many times over.
    pub loops: u32,
    /// fio's `rw=TYPE:N`: bytes skipped after each sequential I/O (a hole);
    /// negative steps backwards.
    pub seq_stride: i64,
    /// `random_distribution=`.
    pub distribution: Distribution,
    /// `randrepeat=` (default 1): the same offsets every run; 0 draws a
    /// new seed from the clock.
    pub randrepeat: bool,
    /// `norandommap=` (default 0): a uniform random job may hit a block
    /// twice in a pass (no `random_map::RandomMap`).
    pub norandommap: bool,
    /// `random_sequence_stride=` (default 0): a `sequence` distribution's
    /// blocks are absolute (0), or relative to a group that moves on by the
    /// sequence's length after each cycle (1).
    pub random_sequence_stride: bool,
    /// `random_generator=` (fio's names; see
    /// `random_map::RandomGenerator`).
    pub random_generator: crate::random_generator::RandomGenerator,
    /// `fsync=N` / `fdatasync=N`: a flush after every N writes (0: never).
    pub fsync_every: u32,
    /// `end_fsync=1`: a flush when the job's I/O is done.
    pub end_fsync: bool,
    /// `rate_iops=`: at most this many I/Os per second (summed over
    /// reads and writes).
    pub rate_iops: Option<u64>,
    /// `cgroup=`: the device group the job's context joins (created if
    /// missing), with `cgroup_weight=`.
    pub cgroup: Option<String>,
    /// `cgroup_weight=`.
    pub cgroup_weight: Option<u32>,
    /// `prioclass=` and `prio=`.
    pub ioprio: Option<mqblk::IoPrio>,
    /// `rate=`: at most this many bytes per second (summed).
    pub rate_bps: Option<u64>,
    /// `startdelay=`: start this long after the run does.
    pub startdelay: Duration,
    /// `write_bw_log=PREFIX`: fio's bandwidth log.
    pub write_bw_log: Option<String>,
    /// `write_iops_log=PREFIX`: fio's IOPS log.
    pub write_iops_log: Option<String>,
    /// `write_lat_log=PREFIX`: fio's latency logs, lat, slat and clat
    /// (mean per window).
    pub write_lat_log: Option<String>,
    /// `log_avg_msec=`: the logs' window; 0 logs every I/O, as fio does
    /// (mqblk's default is 500, fio's 0).
    pub log_avg_msec: u32,
    /// `log_avg_msec` was given (else a job with logs is told that its
    /// windows are mqblk's default, not fio's per-I/O lines).
    pub log_avg_msec_given: bool,
    /// `write_hist_log=PREFIX`: fio's clat histogram log.
    pub write_hist_log: Option<String>,
    /// `log_hist_msec=`: the histogram log's window (default 0, as fio:
    /// no lines).
    pub log_hist_msec: u32,
    /// `log_hist_coarseness=` (0 to 6): 2^N bins summed per column.
    pub log_hist_coarseness: u8,
    /// `log_offset=1`: per-I/O log lines carry the I/O's offset.
    pub log_offset: bool,
    /// `log_prio=1`: log lines carry the I/O priority value (in hex), not
    /// only whether it is real time.
    pub log_prio: bool,
    /// `per_job_logs=` (default 1): one file per job.
    pub per_job_logs: bool,
    /// `slat_percentiles=1`: report submission latency percentiles.
    pub slat_percentiles: bool,
    /// `bsrange=`/`bssplit=` (`bs` is then the largest size).
    pub block_sizes: BlockSizes,
    /// `blockalign=`: offsets are multiples of this (default: the
    /// smallest block size).
    pub blockalign: Option<u64>,
    /// `stonewall` (or `wait_for=`): start only when every job before this
    /// one has finished; jobs from here on form the next group.
    pub stonewall: bool,
    /// `filename=` as the job file names it: jobs naming one file share
    /// its device, jobs naming different files do not, even when the
    /// command line's `--device` replaces what they name.
    pub filename: Option<String>,
    /// `percentage_random=` for reads, writes and trims.
    pub percentage_random: [u32; 3],
    /// `rw_sequencer=identical` (else sequential).
    pub rw_sequencer_identical: bool,
    /// `zonemode=`, `zonesize=`, `zonerange=`, `zoneskip=`,
    /// `max_open_zones=`, `read_beyond_wp=`.
    pub zone: ZoneSpec,
    /// `flow=`: the job's weight in its flow (0: none).
    pub flow: u32,
    /// `flow_id=`.
    pub flow_id: u32,
    /// `flow_sleep=`.
    pub flow_sleep: Duration,
    /// `latency_target=`.
    pub latency_target: Option<Duration>,
    /// `latency_window=`.
    pub latency_window: Duration,
    /// `latency_percentile=`.
    pub latency_percentile: f64,
    /// `latency_run=`.
    pub latency_run: bool,
    /// `max_latency=`: an I/O slower than this fails the job.
    pub max_latency: Option<Duration>,
    /// `rate_process=poisson` (else linear).
    pub rate_poisson: bool,
    /// `rate_min=` (`ratemin=`), bytes per second.
    pub rate_min_bps: Option<u64>,
    /// `rate_iops_min=`.
    pub rate_min_iops: Option<u64>,
    /// `rate_cycle=` (`ratecycle=`).
    pub rate_cycle: Duration,
    /// `ss=`/`steadystate=`.
    pub steadystate: Option<SteadySpec>,
    /// `ss_dur=`.
    pub ss_dur: Duration,
    /// `ss_ramp=`.
    pub ss_ramp: Duration,
    /// `group_reporting`: a group's jobs are reported as one (fio's rules,
    /// `report::group`), and steady state judges a
    /// section's jobs together.
    pub group_reporting: bool,
    /// `verify_pattern=`.
    pub verify_pattern: Option<VerifyPattern>,
    /// `verify_interval=`.
    pub verify_interval: Option<u64>,
    /// `verify_backlog=`.
    pub verify_backlog: u64,
    /// `verify_backlog_batch=`.
    pub verify_backlog_batch: Option<u64>,
    /// `exitall`: when this job ends, end the others (`exit_what=`).
    pub exitall: bool,
    /// `exit_what=`.
    pub exit_what: ExitWhat,
    /// `new_group`: this job starts a new reporting group.
    pub new_group: bool,
    /// `fill_device=`/`fill_fs=`: write to the end of the device.
    pub fill_device: bool,
    /// `size=N%`: a share of the device (resolved when it is opened).
    pub size_percent: Option<u32>,
    /// `offset=N%`.
    pub offset_percent: Option<u32>,
    /// `offset_increment=N%`.
    pub offset_increment_percent: Option<u32>,
    /// fio's dedupe and compress options: what write buffers hold.
    pub content: ContentSpec,
}

/// fio's `exit_what=`: whom `exitall` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ExitWhat {
    /// The jobs of the job's reporting group (the default).
    #[default]
    Group,
    /// Every running job; the next stonewall group runs.
    Stonewall,
    /// Every job; no later group runs.
    All,
}

impl ExitWhat {
    /// fio's names.
    pub fn parse(s: &str) -> Option<ExitWhat> {
        Some(match s {
            "group" => ExitWhat::Group,
            "stonewall" => ExitWhat::Stonewall,
            "all" => ExitWhat::All,
            _ => return None,
        })
    }
}

impl Default for JobSpec {
    fn default() -> Self {
        JobSpec {
            name: "job0".into(),
            rw: RwMode::Read,
            bs: 4096,
            iodepth: 1,
            numjobs: 1,
            size: None,
            runtime: None,
            time_based: false,
            ramp_time: None,
            rwmixread: 50,
            devices: vec!["null".into()],
            queue_mode: None,
            hw_queues: None,
            plug: None,
            iostats: true,
            randseed: 0x6d71_626c_6b00_0001,
            verify: None,
            do_verify: true,
            verify_fatal: false,
            continue_on_error: ContinueOnError::default(),
            allow_degraded: false,
            trim_percentage: 0,
            trim_verify_zero: false,
            write_zeroes_percentage: 0,
            segments: 1,
            stats_dir: None,
            trace: None,
            thinktime: std::time::Duration::ZERO,
            offset: 0,
            offset_increment: 0,
            io_size: None,
            loops: 1,
            seq_stride: 0,
            distribution: Distribution::Uniform,
            randrepeat: true,
            norandommap: false,
            random_sequence_stride: false,
            random_generator: crate::random_generator::RandomGenerator::Tausworthe,
            fsync_every: 0,
            end_fsync: false,
            rate_iops: None,
            cgroup: None,
            cgroup_weight: None,
            ioprio: None,
            rate_bps: None,
            startdelay: Duration::ZERO,
            stonewall: false,
            block_sizes: BlockSizes::Fixed,
            blockalign: None,
            write_bw_log: None,
            write_iops_log: None,
            write_lat_log: None,
            log_avg_msec: 500,
            log_avg_msec_given: false,
            write_hist_log: None,
            log_hist_msec: 0,
            log_hist_coarseness: 0,
            log_offset: false,
            log_prio: false,
            per_job_logs: true,
            slat_percentiles: false,
            filename: None,
            percentage_random: [100; 3],
            rw_sequencer_identical: false,
            zone: ZoneSpec::default(),
            flow: 0,
            flow_id: 0,
            flow_sleep: Duration::ZERO,
            latency_target: None,
            latency_window: Duration::ZERO,
            latency_percentile: 100.0,
            latency_run: false,
            max_latency: None,
            rate_poisson: false,
            rate_min_bps: None,
            rate_min_iops: None,
            rate_cycle: Duration::from_millis(1000),
            steadystate: None,
            ss_dur: Duration::ZERO,
            ss_ramp: Duration::ZERO,
            group_reporting: false,
            verify_pattern: None,
            verify_interval: None,
            verify_backlog: 0,
            verify_backlog_batch: None,
            exitall: false,
            exit_what: ExitWhat::Group,
            new_group: false,
            fill_device: false,
            size_percent: None,
            offset_percent: None,
            offset_increment_percent: None,
            content: ContentSpec {
                working_set_pct: 5,
                compress_chunk: 512,
                ..ContentSpec::default()
            },
        }
    }
}
