//! The device and its request queue (Linux `struct gendisk` and
//! `struct request_queue`): the control plane.
//!
//! Creating a device binds a [`Driver`] to hardware queues, tag sets, a
//! buffer pool and stats, and fixes the queue mode. Everything here runs at
//! setup; the per-I/O path (in [`crate::context`]) never takes a lock that
//! setup takes.

use std::sync::Arc;

use crate::buf::BufPool;
use crate::completion::HwNotifier;
use crate::driver::{Bound, DeviceOps, Driver, Extent, HwQueueSetup};
use crate::error::{Error, Result};
use crate::hw_queue::HwQueue;
use crate::limits::{QueueInfo, QueueLimits, SECTOR_SHIFT};
use crate::sched::ElevatorType;
use crate::spec::SpecOptions;
use crate::stats::DeviceStats;
use crate::sync::Notify;
use crate::tag::Tags;
use crate::throttle::{IoMax, IoMaxLimits, ThrottleType};

pub use crate::limits::QueueMode;

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

/// The lock of the legacy queue modes, a spinlock like Linux's
/// `q->queue_lock` and `io_request_lock`: one atomic exchange to take it, a
/// plain release store to drop it. Waiters spin, then yield, so a holder
/// that was preempted is not starved of the CPU.
pub(crate) struct SpinLock {
    locked: std::sync::atomic::AtomicBool,
}

pub(crate) struct SpinGuard<'a>(&'a SpinLock);

impl SpinLock {
    pub(crate) const fn new() -> SpinLock {
        SpinLock {
            locked: std::sync::atomic::AtomicBool::new(false),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> SpinGuard<'_> {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        let mut spins = 0u32;
        while self.locked.swap(true, Acquire) {
            // Test before test-and-set: spin on a shared line, not an owned one.
            while self.locked.load(Relaxed) {
                spins += 1;
                if spins < 128 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
        SpinGuard(self)
    }
}

impl Drop for SpinGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0
            .locked
            .store(false, std::sync::atomic::Ordering::Release);
    }
}

/// The lock of the legacy queue modes. `None` in `mq` mode.
pub(crate) enum QueueLock {
    None,
    Device(SpinLock),
    Global,
}

/// Linux 2.4's `io_request_lock`: one lock for every queue in the process.
static IO_REQUEST_LOCK: SpinLock = SpinLock::new();

impl QueueLock {
    /// Take the legacy lock, if this mode has one.
    #[inline]
    pub(crate) fn hold(&self) -> Option<SpinGuard<'_>> {
        match self {
            QueueLock::None => None,
            QueueLock::Device(l) => Some(l.lock()),
            QueueLock::Global => Some(IO_REQUEST_LOCK.lock()),
        }
    }
}

/// Settings that change only while the queue is frozen, and the contexts
/// that must drain before they do. Control plane: the data path reads a
/// context's own copy, refreshed when the gate's generation moves.
pub(crate) struct Control {
    pub(crate) hw_limits: QueueLimits,
    pub(crate) limits: QueueLimits,
    pub(crate) plug: bool,
    pub(crate) nomerges: u8,
    /// The hardware queues have an elevator (requests then carry their
    /// group, weight and priority).
    pub(crate) elevator: bool,
    /// Scheduler tags writes may hold per hardware queue (0: no limit).
    pub(crate) async_depth: u32,
    pub(crate) contexts: Vec<Arc<crate::request::RqOwner>>,
    /// The registered partitions (`None`: none).
    pub(crate) partitions: Option<Arc<crate::partition::PartTable>>,
}

/// The gate word: bit 0 set while frozen, the rest a generation bumped at
/// every unfreeze.
pub(crate) const GATE_FROZEN: u64 = 1;

pub(crate) struct DeviceInner {
    pub(crate) info: QueueInfo,
    pub(crate) gate: crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>,
    pub(crate) ctl: std::sync::Mutex<Control>,
    pub(crate) cfg: DeviceConfig,
    pub(crate) hw_queues: Box<[HwQueue]>,
    pub(crate) tags: Box<[Arc<Tags>]>,
    pub(crate) lock: QueueLock,
    pub(crate) buf_pool: BufPool,
    /// Zeros that emulated write-zeroes pieces point at (never written).
    pub(crate) zero_buf: crate::buf::IoBuf,
    pub(crate) ops: Arc<dyn DeviceOps>,
    pub(crate) stats: DeviceStats,
    pub(crate) completes_async: bool,
    /// The driver implements `Driver::wait`.
    pub(crate) driver_waits: bool,
    /// The driver's own bound on requests per hardware queue.
    pub(crate) driver_budget: Option<u32>,
    pub(crate) next_ctx: std::sync::atomic::AtomicU32,
    pub(crate) groups: crate::blkcg::Groups,
    /// The device's own io.max (unlimited unless the spec or the control
    /// plane sets limits).
    pub(crate) io_max: Arc<IoMax>,
    /// How many of the device's and its groups' io.max buckets have limits
    /// (0: no bio is charged).
    pub(crate) qos_active: Arc<std::sync::atomic::AtomicU32>,
}

impl DeviceInner {
    pub(crate) fn ctl(&self) -> std::sync::MutexGuard<'_, Control> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A quiesced queue; dropping it restarts dispatch.
pub struct Quiesced<'a> {
    dev: &'a Device,
}

impl Drop for Quiesced<'_> {
    fn drop(&mut self) {
        for hq in self.dev.inner.hw_queues.iter() {
            hq.lock().quiesced = false;
            hq.notify.notify();
        }
    }
}

/// A frozen queue: no I/O in flight, none admitted. Settings changed here
/// apply to every bio submitted after the unfreeze (when the guard drops).
pub struct Frozen<'a> {
    dev: &'a Device,
    ctl: std::sync::MutexGuard<'a, Control>,
}

impl Frozen<'_> {
    /// Change the number of tags per tag set (up to `queue_depth_max`).
    pub fn set_queue_depth(&mut self, depth: u32) -> Result<()> {
        let inner = &self.dev.inner;
        let mut seen: Vec<*const Tags> = Vec::new();
        for t in inner.tags.iter() {
            let p = Arc::as_ptr(t);
            if seen.contains(&p) {
                continue;
            }
            seen.push(p);
            t.set_depth(depth).map_err(|reason| Error::Setup {
                device: inner.info.name.clone(),
                reason,
            })?;
        }
        Ok(())
    }

    /// Set the limits below the driver's (none of them above).
    pub fn set_limits(&mut self, overrides: LimitOverrides) -> Result<()> {
        let mut lim = self.ctl.hw_limits;
        overrides.apply(&mut lim);
        lim.check().map_err(|reason| Error::Setup {
            device: self.dev.inner.info.name.clone(),
            reason,
        })?;
        self.ctl.limits = lim;
        Ok(())
    }

    /// Switch every hardware queue's elevator (Linux: writing
    /// `/sys/block/*/queue/scheduler`). No request waits anywhere while the
    /// queue is frozen, so none is lost. The scheduler tags grow up to the
    /// tags allocated (`queue_depth_max`).
    pub fn set_elevator(&mut self, elevator: Option<Arc<dyn ElevatorType>>) -> Result<()> {
        let inner = &self.dev.inner;
        let depth = inner.cfg.queue_depth;
        let sched_depth = elevator
            .as_ref()
            .map_or(depth, |e| e.nr_requests(depth).max(depth))
            .min(inner.tags[0].depth_max());
        self.set_queue_depth(sched_depth)?;
        self.ctl.elevator = elevator.is_some();
        self.ctl.async_depth = elevator
            .as_ref()
            .and_then(|e| e.async_depth(sched_depth))
            .unwrap_or(0);
        for (i, hq) in inner.hw_queues.iter().enumerate() {
            let mut h = hq.lock();
            h.set_elevator(elevator.as_ref().map(|e| e.init(i as u16, sched_depth)));
            let driver_budget = inner.driver_budget.unwrap_or(u32::MAX);
            h.set_budget(match elevator {
                Some(_) => driver_budget.min(depth),
                None => driver_budget,
            });
        }
        Ok(())
    }

    /// Plugging on or off.
    pub fn set_plug(&mut self, on: bool) {
        self.ctl.plug = on;
    }

    /// Merging: 0, 1 or 2, as `nomerges`.
    pub fn set_nomerges(&mut self, n: u8) {
        self.ctl.nomerges = n.min(2);
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering::SeqCst;
        let gate = &self.dev.inner.gate;
        let g = gate.load(SeqCst);
        // Clear the frozen bit and move to the next generation.
        gate.store(((g >> 1) + 1) << 1, SeqCst);
        for hq in self.dev.inner.hw_queues.iter() {
            hq.notify.notify();
        }
    }
}

/// A block device: a driver behind hardware queues. Cheap to clone; every
/// clone is the same device. Open a [`crate::context::Context`] per thread
/// to do I/O.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
    /// Set on a remapped view of `inner` ([`Device::remap`]).
    pub(crate) view: Option<Arc<crate::remap::View>>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.info().name)
            .field("capacity_sectors", &self.info().capacity_sectors)
            .field("mode", &self.inner.info.mode)
            .field("hw_queues", &self.inner.hw_queues.len())
            .finish()
    }
}

impl Device {
    /// Create a device from a driver and a configuration.
    pub fn new<D: Driver>(driver: D, cfg: DeviceConfig) -> Result<Device> {
        let name: Arc<str> = Arc::from(cfg.name.as_str());
        let setup = |reason: String| Error::Setup {
            device: name.clone(),
            reason,
        };
        let mut limits = driver.limits();
        limits
            .check()
            .map_err(|e| setup(format!("driver limits: {e}")))?;
        let hw_limits = limits;
        cfg.limit_overrides.apply(&mut limits);
        limits
            .check()
            .map_err(|e| setup(format!("configured limits: {e}")))?;
        if let Some(c) = cfg.limit_overrides.chunk_sectors {
            let lbs_sectors = limits.logical_block_size / 512;
            if c % lbs_sectors != 0 {
                return Err(setup(format!(
                    "chunk_sectors {c} is not a multiple of the logical block ({lbs_sectors} sectors)"
                )));
            }
        }
        let mut features = driver.features();
        features.read_only |= cfg.read_only;
        if cfg.nr_hw_queues == 0 || cfg.queue_depth == 0 {
            return Err(setup("need at least one hardware queue and one tag".into()));
        }
        let lbs = u64::from(limits.logical_block_size);
        let capacity_bytes = cfg.capacity_bytes / lbs * lbs;
        if capacity_bytes == 0 {
            return Err(setup(format!(
                "capacity {} is smaller than one logical block of {lbs} bytes",
                cfg.capacity_bytes
            )));
        }
        let shared = cfg.shared_tags || cfg.queue_mode != QueueMode::Mq;
        let nr = cfg.nr_hw_queues as usize;
        // With an elevator, the tag sets are its scheduler tags, and the
        // driver's tags become the budget of each hardware queue.
        let sched_depth = cfg.elevator.as_ref().map_or(cfg.queue_depth, |e| {
            e.nr_requests(cfg.queue_depth).max(cfg.queue_depth)
        });
        let depth_max = cfg.queue_depth_max.max(sched_depth);
        let tags: Box<[Arc<Tags>]> = if shared {
            let t = Arc::new(Tags::with_max(sched_depth, depth_max, cfg.reserved_tags, 0));
            (0..nr).map(|_| t.clone()).collect()
        } else {
            (0..nr)
                .map(|i| {
                    Arc::new(Tags::with_max(
                        sched_depth,
                        depth_max,
                        cfg.reserved_tags,
                        i as u16,
                    ))
                })
                .collect()
        };
        let completes_async = driver.completes_async();
        let driver_waits = driver.can_wait();
        let budget = driver.budget();
        let align = (limits.dma_alignment as usize + 1).max(crate::buf::PAGE_SIZE);
        let buf_pool = BufPool::with_arena(align, driver.buffer_arena_bytes());
        let buf_regions = buf_pool.regions();
        let driver = Arc::new(driver);
        let mut hw_queues = Vec::with_capacity(nr);
        for (i, t) in tags.iter().enumerate() {
            let notify = crate::sync::Arc::new(Notify::default());
            let hq = driver.init_hw_queue(HwQueueSetup {
                index: i as u16,
                notifier: HwNotifier(notify.clone()),
                queue_depth: depth_max,
                reserved_tags: cfg.reserved_tags,
                buf_regions: &buf_regions,
            })?;
            let ops = Box::new(Bound {
                driver: driver.clone(),
                hq,
            });
            let hwq = HwQueue::new(i as u16, ops, notify, t.clone(), budget, cfg.timeout_ms);
            if let Some(e) = &cfg.elevator {
                let mut inner = hwq.lock();
                inner.set_elevator(Some(e.init(i as u16, sched_depth)));
                inner.set_budget(budget.unwrap_or(u32::MAX).min(cfg.queue_depth));
            }
            hw_queues.push(hwq);
        }
        let lock = match cfg.queue_mode {
            QueueMode::Mq => QueueLock::None,
            QueueMode::DeviceLock => QueueLock::Device(SpinLock::new()),
            QueueMode::GlobalLock => QueueLock::Global,
        };
        let qos_active = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let groups = crate::blkcg::Groups::new(&name, qos_active.clone());
        let io_max = cfg.io_max.clone().unwrap_or_else(|| {
            IoMax::new(IoMaxLimits::default(), crate::throttle::DEFAULT_BURST_MS)
        });
        io_max.attach(&qos_active);
        Ok(Device {
            view: None,
            inner: Arc::new(DeviceInner {
                info: QueueInfo {
                    name,
                    capacity_sectors: capacity_bytes >> SECTOR_SHIFT,
                    limits,
                    features,
                    mode: cfg.queue_mode,
                },
                gate: crossbeam_utils::CachePadded::new(std::sync::atomic::AtomicU64::new(0)),
                ctl: std::sync::Mutex::new(Control {
                    hw_limits,
                    limits,
                    plug: cfg.plug,
                    nomerges: cfg.nomerges,
                    elevator: cfg.elevator.is_some(),
                    async_depth: cfg
                        .elevator
                        .as_ref()
                        .and_then(|e| e.async_depth(sched_depth))
                        .unwrap_or(0),
                    contexts: Vec::new(),
                    partitions: None,
                }),
                cfg,
                hw_queues: hw_queues.into_boxed_slice(),
                tags,
                lock,
                buf_pool,
                zero_buf: crate::buf::IoBuf::new(64 << 10, align).into_readonly(),
                ops: driver,
                stats: DeviceStats::new(),
                completes_async,
                driver_waits,
                driver_budget: budget,
                next_ctx: std::sync::atomic::AtomicU32::new(0),
                groups,
                io_max,
                qos_active,
            }),
        })
    }

    /// Create a group (see [`crate::blkcg`]). Its name must be new, 1 to
    /// 64 characters of letters, digits, `-`, `_` and `.`.
    pub fn create_group(
        &self,
        name: &str,
        cfg: crate::blkcg::GroupConfig,
    ) -> Result<Arc<crate::blkcg::Group>> {
        self.inner.groups.create(&self.inner.info.name, name, cfg)
    }

    /// The group called `name`.
    pub fn group(&self, name: &str) -> Result<Arc<crate::blkcg::Group>> {
        self.inner.groups.find(&self.inner.info.name, name)
    }

    /// Every group's name, the default group first.
    pub fn group_names(&self) -> Vec<String> {
        self.inner.groups.names()
    }

    /// Remove a group that no context is in. The default group stays.
    pub fn remove_group(&self, name: &str) -> Result<()> {
        self.inner.groups.remove(&self.inner.info.name, name)
    }

    /// The device's `io.max` limits (none unless set): change them with
    /// [`IoMax::set_limits`] while I/O runs.
    pub fn io_max(&self) -> &Arc<IoMax> {
        &self.inner.io_max
    }

    /// The read-mostly facts: name, capacity, limits, features, mode.
    pub fn info(&self) -> &QueueInfo {
        match &self.view {
            None => &self.inner.info,
            Some(v) => &v.info,
        }
    }

    /// True if `other` is a handle to this same device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            && match (&self.view, &other.view) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }

    /// True if the driver completes requests without being polled (a thread
    /// or the kernel does, and wakes the hardware queue): a stacked device
    /// over such legs can sleep until woken.
    pub fn completes_async(&self) -> bool {
        self.inner.completes_async
    }

    /// True if the driver gives its hardware queues interrupt lines
    /// ([`crate::driver::Driver::irq_fd`]): its completions need polling,
    /// but a context's completion fd fires when there are some.
    pub fn has_irq_lines(&self) -> bool {
        self.inner.hw_queues.iter().any(|q| q.irq_fd.is_some())
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.info().name
    }

    /// Capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.info().capacity_sectors << SECTOR_SHIFT
    }

    /// Logical block size in bytes.
    pub fn logical_block_size(&self) -> u32 {
        self.inner.info.limits.logical_block_size
    }

    /// The queue mode.
    pub fn queue_mode(&self) -> QueueMode {
        self.inner.info.mode
    }

    /// The configuration the device was created with.
    pub fn config(&self) -> &DeviceConfig {
        &self.inner.cfg
    }

    /// Number of hardware queues.
    pub fn nr_hw_queues(&self) -> usize {
        self.inner.hw_queues.len()
    }

    /// The device's buffer pool (buffers aligned for this device).
    pub fn buf_pool(&self) -> &BufPool {
        &self.inner.buf_pool
    }

    /// A buffer of `len` bytes from the pool.
    pub fn alloc_buf(&self, len: usize) -> crate::buf::IoBuf {
        self.inner.buf_pool.get(len)
    }

    /// The device's stats.
    pub fn stats(&self) -> &DeviceStats {
        match &self.view {
            None => &self.inner.stats,
            Some(v) => &v.stats,
        }
    }

    /// A window of `len_bytes` from `offset_bytes` of this device, named
    /// `name` (Linux `blk_partition_remap`): a partition, or a linear table
    /// of one line. It shares this device's queues, tags, scheduler and
    /// limits; its bios are checked against the window and shifted in the
    /// submitting context, with no second pipeline. A bio past its end gets
    /// [`Error::OutOfRange`] naming `name`. Its stats count its own I/O,
    /// and this device's include them. `owner` is kept alive as long as the
    /// view (a stacked table's handle). A `read_only` view refuses writes
    /// (a view of a read-only device is read-only anyway). Control plane.
    pub fn remap(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        name: &str,
        read_only: bool,
        owner: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Result<Device> {
        let base = self.view.as_ref().map_or(0, |v| v.start_bytes);
        let mut view =
            crate::remap::View::new(self.info(), base, offset_bytes, len_bytes, name, owner)?;
        view.info.features.read_only |= read_only;
        self.stats().add_view(&view.stats);
        Ok(Device {
            inner: self.inner.clone(),
            view: Some(Arc::new(view)),
        })
    }

    /// For a remapped view, the device it is a window of and where the
    /// window starts, in bytes.
    pub fn remapped_from(&self) -> Option<(Device, u64)> {
        self.view.as_ref().map(|v| {
            (
                Device {
                    inner: self.inner.clone(),
                    view: None,
                },
                v.start_bytes,
            )
        })
    }

    pub(crate) fn ctl(&self) -> std::sync::MutexGuard<'_, Control> {
        self.inner.ctl()
    }

    /// The queue limits in force now.
    pub fn limits(&self) -> QueueLimits {
        self.ctl().limits
    }

    /// Freeze the queue (Linux `blk_mq_freeze_queue`): new submissions wait
    /// at the gate, and this returns once every context has drained its
    /// in-flight I/O, or fails after `timeout`. Change settings through the
    /// returned guard; dropping it unfreezes. Contexts drain by polling, so
    /// a context whose owner never polls keeps the freeze from completing.
    pub fn freeze(&self, timeout: std::time::Duration) -> Result<Frozen<'_>> {
        use std::sync::atomic::Ordering::SeqCst;
        let ctl = self.ctl();
        self.inner.gate.fetch_or(GATE_FROZEN, SeqCst);
        let start = std::time::Instant::now();
        loop {
            // Drained: no request in flight, and no tag held (a context
            // caches tags in batches, and one that passed the gate just
            // before the freeze holds its tag until it queues the request).
            let busy: u32 = ctl
                .contexts
                .iter()
                .map(|c| c.in_flight.load(SeqCst))
                .sum::<u32>()
                + self.inner.tags.iter().map(|t| t.busy()).sum::<u32>();
            if busy == 0 {
                break;
            }
            if start.elapsed() >= timeout {
                // Unfreeze (the guard's drop) and report.
                drop(Frozen { dev: self, ctl });
                return Err(Error::Setup {
                    device: self.inner.info.name.clone(),
                    reason: format!(
                        "freeze timed out after {} ms with {busy} requests or tags in use",
                        timeout.as_millis()
                    ),
                });
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        Ok(Frozen { dev: self, ctl })
    }

    /// Register the disk's partitions for accounting (Linux
    /// `add_partition`), replacing any registered before; an empty list
    /// removes them. The queue is frozen meanwhile (up to `timeout`), so
    /// every request is counted in the table it started under. Each range
    /// is in 512-byte sectors; ranges must be inside the device and must
    /// not overlap.
    pub fn set_partitions(
        &self,
        ranges: &[crate::partition::PartitionRange],
        timeout: std::time::Duration,
    ) -> Result<()> {
        let table = if ranges.is_empty() {
            None
        } else {
            Some(Arc::new(crate::partition::PartTable::new(
                &self.inner.info.name,
                self.inner.info.capacity_sectors,
                ranges,
            )?))
        };
        let mut frozen = self.freeze(timeout)?;
        frozen.ctl.partitions = table;
        Ok(())
    }

    /// Each registered partition with its counters (the 17 diskstats
    /// fields), in the order registered.
    pub fn partition_stats(
        &self,
    ) -> Vec<(crate::partition::PartitionRange, crate::stats::DiskStats)> {
        let table = self.ctl().partitions.clone();
        table.map_or_else(Vec::new, |t| t.snapshot())
    }

    /// Stop dispatching to the driver (Linux `blk_mq_quiesce_queue`):
    /// submissions are still accepted and wait in the software queues; no
    /// request reaches the driver until the returned guard is dropped. Once
    /// this returns, no dispatch is in progress on any hardware queue.
    pub fn quiesce(&self) -> Quiesced<'_> {
        for hq in self.inner.hw_queues.iter() {
            hq.lock().quiesced = true;
        }
        Quiesced { dev: self }
    }

    /// Data and hole extents covering `[offset_bytes, offset_bytes +
    /// len_bytes)` (clipped to the device), for block status. A driver that
    /// does not track allocation reports one data extent.
    pub fn extents(&self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<Extent>> {
        let cap = self.capacity_bytes();
        let end = offset_bytes.saturating_add(len_bytes).min(cap);
        if offset_bytes >= end {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let base = self.view.as_ref().map_or(0, |v| v.start_bytes);
        if self
            .inner
            .ops
            .extents(base + offset_bytes, end - offset_bytes, &mut out)?
        {
            for e in &mut out {
                e.offset_bytes -= base;
            }
        } else {
            out.clear();
            out.push(Extent {
                offset_bytes,
                len_bytes: end - offset_bytes,
                hole: false,
                zero: false,
            });
        }
        Ok(out)
    }
}
