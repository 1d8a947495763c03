//! What a bench run measured, before it is printed.

use mqblk::stats::Histograms;

/// One direction (read or write) of one job.
#[derive(Clone, Debug, Default)]
pub struct DirResult {
    /// Completed I/Os.
    pub ios: u64,
    /// Bytes transferred.
    pub bytes: u64,
    /// Errors.
    pub errors: u64,
}

/// One job (one thread, one context).
#[derive(Clone, Debug)]
pub struct JobResult {
    /// Job name (`job0`, or the section name; numjobs copies share it).
    pub name: String,
    /// Index among all jobs of the run.
    pub index: usize,
    /// Its stonewall group (fio's groupid), counting from 0.
    pub group: usize,
    /// The device the job ran on.
    pub device: String,
    /// Reads.
    pub read: DirResult,
    /// Writes.
    pub write: DirResult,
    /// Trims (discards: fio's `rw=trim`/`randtrim`).
    pub trim: DirResult,
    /// Completion latency histograms (clat, ns) per stat group: the job's
    /// own stamps when it took them, else the layer's.
    pub clat: Histograms,
    /// Whether clat was recorded (iostats on).
    pub clat_valid: bool,
    /// Submission latency histograms (ns) from the job's own stamps, when a
    /// latency log or `slat_percentiles` asked for them.
    pub slat: Option<Histograms>,
    /// Total latency histograms (ns, fio's `lat`: from the start of
    /// `submit` to the completion), from the same stamps, when slat is
    /// measured. A submission that waits for a tag counts here and in slat,
    /// not in clat (which starts when `submit` returns).
    pub lat: Option<Histograms>,
    /// Measured wall time in ns.
    pub runtime_ns: u64,
    /// User CPU time of the job thread in the measured phase, ns.
    pub usr_ns: u64,
    /// System CPU time of the job thread in the measured phase, ns.
    pub sys_ns: u64,
    /// First error message, if any (for an unfinished job, why it is).
    pub first_error: Option<String>,
    /// It did not hand over its figures within the grace of a signal: not
    /// an I/O error, and no figures.
    pub unfinished: bool,
    /// The failed I/O that stopped the job (`continue_on_error=` did not
    /// name it): the job issued nothing after it.
    pub stopped_at: Option<String>,
    /// What `verify=` found, if it was on.
    pub verify: Option<super::verify::VerifyResult>,
    /// The queue depth `latency_target=`'s search settled on.
    pub latency_depth: Option<u32>,
    /// Its steady state (`ss=`), if it judged one.
    pub steadystate: Option<super::steadystate::SteadyResult>,
}

impl JobResult {
    /// A job that did not hand over its figures within `grace` of a
    /// signal: its device held it, or (`throttled` bios) its own `io.max`
    /// limits did.
    pub fn unfinished(
        name: &str,
        index: usize,
        device: &str,
        grace: std::time::Duration,
        throttled: u32,
    ) -> Self {
        let why = if throttled > 0 {
            format!(
                "{throttled} I/Os still held by the io.max throttle of {device} {grace:?} after \
                 the signal (waiting on the limit, not on the device): reported without its \
                 figures"
            )
        } else {
            format!(
                "still waiting for {device} {grace:?} after the signal: reported without its \
                 figures"
            )
        };
        JobResult {
            name: name.to_string(),
            index,
            group: 0,
            device: device.to_string(),
            read: DirResult::default(),
            write: DirResult::default(),
            trim: DirResult::default(),
            clat: Histograms::default(),
            clat_valid: false,
            slat: None,
            lat: None,
            runtime_ns: 0,
            usr_ns: 0,
            sys_ns: 0,
            first_error: Some(why),
            unfinished: true,
            stopped_at: None,
            verify: None,
            latency_depth: None,
            steadystate: None,
        }
    }
}

/// The layer's own figures for the whole run (the `mqblk` JSON object).
#[derive(Clone, Debug, Default)]
pub struct LayerResult {
    /// Queue mode of the devices.
    pub queue_mode: String,
    /// Heap allocations counted during the measured phase.
    pub allocs: u64,
    /// I/Os in the measured phase (all jobs).
    pub ios: u64,
    /// The layer's counters (requests, bios, merges, splits, bounce-copied
    /// bytes...), summed over every job's context for the measured phase.
    pub stats: mqblk::DiskStats,
    /// CPU time of all job threads, ns.
    pub cpu_ns: u64,
    /// Bytes of a request plus its bio, for one I/O in flight.
    pub descriptor_bytes: usize,
    /// Each device's alignment: buffers that break it are bounce-copied.
    pub alignment: Vec<DeviceAlignment>,
    /// A signal stopped the run before its end: the figures are partial.
    pub interrupted: bool,
    /// Jobs still blocked in their device when the run was reported (after
    /// a signal): reported without figures.
    pub unfinished: usize,
    /// Mirror legs out of service when the run ended.
    pub degraded: Vec<Degraded>,
}

/// A mirror leg out of service under a device of the run, at its end.
#[derive(Clone, Debug)]
pub struct Degraded {
    /// The device of the run (a job's `device`) the mirror is in or under.
    pub device: String,
    /// Which leg, of which mirror, why and when.
    pub leg: mqblk::DegradedLeg,
    /// Milliseconds into the run it failed (`None`: before the run began).
    pub run_ms: Option<u64>,
    /// Every job on the device said `allow_degraded=1`.
    pub allowed: bool,
}

/// What a device asks of offsets, lengths and buffer addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAlignment {
    /// Device name (`file0`).
    pub device: String,
    /// Offsets and lengths are multiples of this.
    pub logical_block_size: u32,
    /// Buffer addresses and segment lengths are multiples of this, or the
    /// segment is copied through a bounce buffer (`bytes_copied`).
    pub dma_alignment_bytes: u32,
}

impl LayerResult {
    /// Merges, all groups.
    pub fn merges(&self) -> u64 {
        self.stats.merges.iter().sum()
    }

    /// Heap allocations per I/O.
    pub fn allocs_per_io(&self) -> f64 {
        if self.ios == 0 {
            0.0
        } else {
            self.allocs as f64 / self.ios as f64
        }
    }

    /// CPU nanoseconds per I/O.
    pub fn ns_per_io_cpu(&self) -> f64 {
        if self.ios == 0 {
            0.0
        } else {
            self.cpu_ns as f64 / self.ios as f64
        }
    }
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Every job, in index order.
    pub jobs: Vec<JobResult>,
    /// The layer's figures.
    pub layer: LayerResult,
}
