//! A bench job as fio describes one: the option subset mqblk understands,
//! typed. Command-line options and job files both end up here.

use std::time::Duration;

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
        }
    }

    /// True for random offsets.
    pub fn is_random(self) -> bool {
        matches!(self, RwMode::RandRead | RwMode::RandWrite | RwMode::RandRw)
    }

    /// Percentage of reads for this mode given `rwmixread`.
    pub fn read_percent(self, rwmixread: u32) -> u32 {
        match self {
            RwMode::Read | RwMode::RandRead => 100,
            RwMode::Write | RwMode::RandWrite => 0,
            RwMode::Rw | RwMode::RandRw => rwmixread.min(100),
        }
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
    pub verify: Option<super::verify::VerifyKind>,
    /// `do_verify=` (default 1): read back what was written after the run.
    pub do_verify: bool,
    /// `verify_fatal=` (default 0): stop the job at the first mismatch.
    pub verify_fatal: bool,
    /// `segments=`: each I/O's buffer is cut into this many non-contiguous
    /// pieces (a vectored bio).
    pub segments: u32,
    /// `--stats-dir`: keep `DIR/diskstats` (for `iostat -f DIR`) and
    /// `DIR/mqblk.json` (for `mqblk stat`) up to date while running.
    pub stats_dir: Option<String>,
    /// `thinktime=` (fio's): pause this long after each completion before
    /// the next I/O, as an application that works on its data would.
    pub thinktime: std::time::Duration,
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
            segments: 1,
            stats_dir: None,
            thinktime: std::time::Duration::ZERO,
        }
    }
}
