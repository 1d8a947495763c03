//! A device's configuration (Linux's module parameters and sysfs queue
//! attributes, gathered): what the spec sets before the device exists.
//! Control plane only.

use std::sync::Arc;

use crate::error::Result;
use crate::limits::{QueueLimits, QueueMode};
use crate::sched::ElevatorType;
use crate::spec::SpecOptions;
use crate::throttle::{IoMax, IoMaxLimits, ThrottleType};

/// Everything needed to create a device, besides the driver.
#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// Device name, as diskstats shows it (`nullb0`).
    pub name: String,
    /// Capacity in bytes (rounded down to the logical block size).
    pub capacity_bytes: u64,
    /// Hardware queues.
    pub nr_hw_queues: u16,
    /// Normal tags per hardware queue (or in the shared set).
    pub queue_depth: u32,
    /// Tags allocated per set: `queue_depth` can later be raised up to this
    /// while the device runs (default: `queue_depth`).
    pub queue_depth_max: u32,
    /// Reserved tags.
    pub reserved_tags: u32,
    /// One tag set shared by every hardware queue.
    pub shared_tags: bool,
    /// Queue mode.
    pub queue_mode: QueueMode,
    /// Plugging on (`plug=1`) or off.
    pub plug: bool,
    /// Requests in a plug before it is flushed (Linux `BLK_MAX_REQUEST_COUNT`).
    pub plug_max: u32,
    /// Per-I/O accounting and latency histograms (`iostats=0` turns them and
    /// their clock reads off).
    pub iostats: bool,
    /// Request timeout in milliseconds; 0 disables timeout handling.
    pub timeout_ms: u32,
    /// Partition accounting remembers each context's last partition hit
    /// (`part_cache=1`, seed 003's one-hit cache), or scans every time.
    pub part_cache: bool,
    /// Read-only device, whatever the driver says.
    pub read_only: bool,
    /// Merging: 0 all, 1 only with the most recent request, 2 none (Linux
    /// `nomerges`).
    pub nomerges: u8,
    /// Bounce misaligned segments (on) or refuse them with an error (off).
    pub bounce: bool,
    /// Lower the driver's limits (Linux's writable `max_sectors_kb` and
    /// friends): applied on top of `Driver::limits()`, never above it.
    pub limit_overrides: LimitOverrides,
    /// Bio slots per context (Linux's `bio_set` pool size); 0 sizes it from
    /// the tag depth and the plug. At least 2: a split parent and a piece.
    pub bioset_size: u32,
    /// The I/O scheduler of every hardware queue (`None`: Linux's `none`).
    pub elevator: Option<Arc<dyn ElevatorType>>,
    /// The bio throttle of every context (`None`: no throttling).
    pub throttle: Option<Arc<dyn ThrottleType>>,
    /// The device's `io.max` limits (spec keys `riops`, `wiops`, `rbps`,
    /// `wbps`, `throttle_burst_ms`), applied with `throttle` and the
    /// group's. They can be changed while the device runs, through
    /// [`Device::io_max`].
    pub io_max: Option<Arc<IoMax>>,
    /// Trace every I/O into this directory from the start, as
    /// [`crate::Device::start_trace`] does (`None`: not traced). The
    /// spec key `trace=DIR` of `mqblk::open` sets it for a device and
    /// every device below it.
    pub trace: Option<std::path::PathBuf>,
}

/// Limits a device may be configured below what its driver allows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LimitOverrides {
    /// `max_sectors`.
    pub max_sectors: Option<u32>,
    /// `max_segments`.
    pub max_segments: Option<u32>,
    /// `max_segment_size`.
    pub max_segment_size: Option<u32>,
    /// `chunk_sectors`.
    pub chunk_sectors: Option<u32>,
}

impl LimitOverrides {
    /// Apply to `lim`, keeping every value within what the driver allows.
    pub fn apply(&self, lim: &mut QueueLimits) {
        if let Some(v) = self.max_sectors {
            lim.max_sectors = lim.max_sectors.min(v);
        }
        if let Some(v) = self.max_segments {
            lim.max_segments = lim.max_segments.min(v);
        }
        if let Some(v) = self.max_segment_size {
            lim.max_segment_size = lim.max_segment_size.min(v);
        }
        if let Some(v) = self.chunk_sectors {
            lim.chunk_sectors = v;
        }
    }
}

impl DeviceConfig {
    /// Defaults for a device of `capacity_bytes`.
    pub fn new(name: impl Into<String>, capacity_bytes: u64) -> DeviceConfig {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        DeviceConfig {
            name: name.into(),
            capacity_bytes,
            nr_hw_queues: cpus.clamp(1, 1024) as u16,
            queue_depth: 64,
            queue_depth_max: 0,
            reserved_tags: 0,
            shared_tags: false,
            queue_mode: QueueMode::Mq,
            plug: true,
            plug_max: 32,
            iostats: true,
            timeout_ms: 30_000,
            part_cache: true,
            read_only: false,
            nomerges: 0,
            bounce: true,
            limit_overrides: LimitOverrides::default(),
            bioset_size: 0,
            elevator: None,
            throttle: None,
            io_max: None,
            trace: None,
        }
    }

    /// Take the options every device kind accepts: `hw_queues`,
    /// `queue_depth`, `reserved_tags`, `shared_tags`, `queue_mode`, `plug`,
    /// `iostats`, `io_timeout_ms`, `ro`, `part_cache`, `nomerges`, `bounce`, `bioset_size`,
    /// and the limit
    /// overrides `max_sectors`, `max_segments`, `max_segment_size`,
    /// `chunk_sectors`.
    pub fn take_common(&mut self, o: &mut SpecOptions) -> Result<()> {
        if let Some(n) = o.take_u64("hw_queues")? {
            if !(1..=1024).contains(&n) {
                return Err(o.error("hw_queues", &n.to_string(), "1 to 1024"));
            }
            self.nr_hw_queues = n as u16;
        }
        if let Some(n) = o.take_u64("queue_depth")? {
            if !(1..=65536).contains(&n) {
                return Err(o.error("queue_depth", &n.to_string(), "1 to 65536"));
            }
            self.queue_depth = n as u32;
        }
        if let Some(n) = o.take_u64("queue_depth_max")? {
            if !(1..=65536).contains(&n) {
                return Err(o.error("queue_depth_max", &n.to_string(), "1 to 65536"));
            }
            self.queue_depth_max = n as u32;
        }
        if let Some(n) = o.take_u64("reserved_tags")? {
            if n > 1024 {
                return Err(o.error("reserved_tags", &n.to_string(), "0 to 1024"));
            }
            self.reserved_tags = n as u32;
        }
        if let Some(b) = o.take_bool("shared_tags")? {
            self.shared_tags = b;
        }
        if let Some(m) = o.take_str("queue_mode") {
            self.queue_mode = QueueMode::parse(&m)
                .ok_or_else(|| o.error("queue_mode", &m, "mq, device-lock or global-lock"))?;
        }
        if let Some(p) = o.take_str("plug") {
            self.plug =
                crate::spec::parse_bool(&p).ok_or_else(|| o.error("plug", &p, "on or off"))?;
        }
        if let Some(b) = o.take_bool("iostats")? {
            self.iostats = b;
        }
        if let Some(ms) = o.take_u64("io_timeout_ms")? {
            self.timeout_ms = ms.min(u64::from(u32::MAX)) as u32;
        }
        if let Some(b) = o.take_bool("ro")? {
            self.read_only = b;
        }
        if let Some(b) = o.take_bool("part_cache")? {
            self.part_cache = b;
        }
        if let Some(n) = o.take_u64("nomerges")? {
            if n > 2 {
                return Err(o.error("nomerges", &n.to_string(), "0, 1 or 2"));
            }
            self.nomerges = n as u8;
        }
        if let Some(b) = o.take_bool("bounce")? {
            self.bounce = b;
        }
        if let Some(n) = o.take_u64("bioset_size")? {
            if !(2..=1 << 20).contains(&n) {
                return Err(o.error("bioset_size", &n.to_string(), "2 to 1048576"));
            }
            self.bioset_size = n as u32;
        }
        self.take_sched(o)?;
        self.take_io_max(o)?;
        let mut u32_opt = |key: &str, min: u64| -> Result<Option<u32>> {
            match o.take_u64(key)? {
                None => Ok(None),
                Some(v) if v >= min && v <= u64::from(u32::MAX) => Ok(Some(v as u32)),
                Some(v) => Err(o.error(key, &v.to_string(), &format!("{min} to {}", u32::MAX))),
            }
        };
        self.limit_overrides = LimitOverrides {
            max_sectors: u32_opt("max_sectors", 1)?,
            max_segments: u32_opt("max_segments", 1)?,
            max_segment_size: u32_opt("max_segment_size", 512)?,
            chunk_sectors: u32_opt("chunk_sectors", 0)?,
        };
        Ok(())
    }
}

impl DeviceConfig {
    /// `scheduler=none|mq-deadline|kyber|bfq` and the tunables:
    /// mq-deadline's `read_expire`, `write_expire` and `prio_aging_expire`
    /// (ms), `fifo_batch`, `writes_starved`, `async_depth`; kyber's
    /// `read_lat_nsec`, `write_lat_nsec`; bfq's `max_budget` (sectors),
    /// `idle_timeout` (ms).
    pub fn take_sched(&mut self, o: &mut SpecOptions) -> Result<()> {
        const TUNABLES: [&str; 10] = [
            "read_expire",
            "write_expire",
            "fifo_batch",
            "writes_starved",
            "async_depth",
            "prio_aging_expire",
            "read_lat_nsec",
            "write_lat_nsec",
            "max_budget",
            "idle_timeout",
        ];
        let name = o.take_str("scheduler");
        match name.as_deref() {
            None | Some("none") => {
                if let Some(k) = TUNABLES.iter().find(|k| o.contains(k)) {
                    return Err(o.error(
                        k,
                        "",
                        "a key of scheduler=mq-deadline, kyber or bfq; this device has no scheduler",
                    ));
                }
                if name.is_some() {
                    self.elevator = None;
                }
            }
            Some("mq-deadline") => {
                let mut p = crate::sched::DeadlineParams::default();
                if let Some(v) = o.take_u64("read_expire")? {
                    p.read_expire_ms = v;
                }
                if let Some(v) = o.take_u64("write_expire")? {
                    p.write_expire_ms = v;
                }
                if let Some(v) = o.take_u64("prio_aging_expire")? {
                    p.prio_aging_expire_ms = v;
                }
                if let Some(v) = o.take_u64("fifo_batch")? {
                    if !(1..=1 << 16).contains(&v) {
                        return Err(o.error("fifo_batch", &v.to_string(), "1 to 65536"));
                    }
                    p.fifo_batch = v as u32;
                }
                if let Some(v) = o.take_u64("writes_starved")? {
                    p.writes_starved = v.min(u64::from(u32::MAX)) as u32;
                }
                if let Some(v) = o.take_u64("async_depth")? {
                    if !(1..=1 << 16).contains(&v) {
                        return Err(o.error("async_depth", &v.to_string(), "1 to 65536"));
                    }
                    p.async_depth = v as u32;
                }
                self.elevator = Some(crate::sched::MqDeadlineType::new(p));
            }
            Some("kyber") => {
                let mut p = crate::sched::KyberParams::default();
                for (key, slot) in [
                    ("read_lat_nsec", &mut p.read_lat_nsec),
                    ("write_lat_nsec", &mut p.write_lat_nsec),
                ] {
                    if let Some(v) = o.take_u64(key)? {
                        if v == 0 {
                            return Err(o.error(key, "0", "a latency target above 0 ns"));
                        }
                        *slot = v;
                    }
                }
                self.elevator = Some(crate::sched::KyberType::new(p));
            }
            Some("bfq") => {
                let mut p = crate::sched::BfqParams::default();
                if let Some(v) = o.take_u64("max_budget")? {
                    if !(8..=1 << 20).contains(&v) {
                        return Err(o.error("max_budget", &v.to_string(), "8 to 1048576 sectors"));
                    }
                    p.max_budget = v as u32;
                }
                if let Some(v) = o.take_u64("idle_timeout")? {
                    p.idle_timeout_ms = v;
                }
                self.elevator = Some(crate::sched::BfqType::new(p));
            }
            Some(other) => {
                return Err(o.error("scheduler", other, "none, mq-deadline, kyber or bfq"))
            }
        }
        Ok(())
    }

    /// `riops`, `wiops`, `rbps`, `wbps` (sizes such as `50m`) and
    /// `throttle_burst_ms`.
    fn take_io_max(&mut self, o: &mut SpecOptions) -> Result<()> {
        let mut l = IoMaxLimits::default();
        let mut any = false;
        for (key, slot) in [("riops", &mut l.riops), ("wiops", &mut l.wiops)] {
            if let Some(v) = o.take_size(key)? {
                *slot = v;
                any = true;
            }
        }
        for (key, slot) in [("rbps", &mut l.rbps), ("wbps", &mut l.wbps)] {
            if let Some(v) = o.take_size(key)? {
                *slot = v;
                any = true;
            }
        }
        let burst = o.take_u64("throttle_burst_ms")?;
        if let Some(b) = burst {
            if b > 10_000 {
                return Err(o.error("throttle_burst_ms", &b.to_string(), "0 to 10000"));
            }
        }
        if any || burst.is_some() {
            self.io_max = Some(IoMax::new(
                l,
                burst.unwrap_or(crate::throttle::DEFAULT_BURST_MS),
            ));
        }
        Ok(())
    }
}
