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
use crate::stats::DeviceStats;
use crate::sync::Notify;
use crate::tag::Tags;
use crate::throttle::{IoMax, IoMaxLimits};

pub use crate::limits::QueueMode;

mod bio;
mod config;
mod group;
mod lock;
mod trace;

pub use config::{DeviceConfig, LimitOverrides};
pub(crate) use lock::{QueueLock, SpinLock};

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
    /// The scheduler's name (`none` without one), as `scheduler=` takes it.
    pub(crate) scheduler: Arc<str>,
    /// Scheduler tags writes may hold per hardware queue (0: no limit).
    pub(crate) async_depth: u32,
    pub(crate) contexts: Vec<Arc<crate::request::RqOwner>>,
    /// The registered partitions (`None`: none).
    pub(crate) partitions: Option<Arc<crate::partition::PartTable>>,
    /// The blktrace session, while the device is traced.
    pub(crate) trace: Option<Arc<crate::blktrace::BlkTrace>>,
}

/// The gate word: bit 0 set while frozen, the rest a generation bumped at
/// every unfreeze.
pub(crate) const GATE_FROZEN: u64 = 1;

pub(crate) struct DeviceInner {
    pub(crate) info: QueueInfo,
    pub(crate) gate: Arc<crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>>,
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
    /// The device's number in blktrace records.
    pub(crate) devnum: crate::blktrace::DevNum,
    /// A bio-based device's driver, which opens each context's bio queue
    /// (`None`: bios become requests).
    pub(crate) bio: Option<Box<dyn crate::bio_based::BioOpener>>,
}

impl DeviceInner {
    pub(crate) fn ctl(&self) -> std::sync::MutexGuard<'_, Control> {
        self.ctl.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A blktrace session of this device into `dir` (made if missing).
    fn trace_into(&self, dir: &std::path::Path) -> Result<Arc<crate::blktrace::BlkTrace>> {
        crate::blktrace::BlkTrace::start(dir, &self.info.name, self.devnum).map_err(|e| {
            Error::Setup {
                device: self.info.name.clone(),
                reason: format!("cannot trace into {}: {e}", dir.display()),
            }
        })
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
        self.ctl.scheduler = elevator.as_ref().map_or("none", |e| e.name()).into();
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
        Self::build(driver, cfg, None)
    }

    pub(crate) fn build<D: Driver>(
        driver: D,
        cfg: DeviceConfig,
        bio: Option<(Box<dyn crate::bio_based::BioOpener>, bool)>,
    ) -> Result<Device> {
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
        let devnum = crate::blktrace::DevNum::next();
        let mut hw_queues = Vec::with_capacity(nr);
        for (i, t) in tags.iter().enumerate() {
            let notify = crate::sync::Arc::new(Notify::default());
            let irq = crate::irq::IrqLines::default();
            let hq = driver.init_hw_queue(HwQueueSetup {
                index: i as u16,
                notifier: HwNotifier(notify.clone()),
                queue_depth: depth_max,
                reserved_tags: cfg.reserved_tags,
                buf_regions: &buf_regions,
                devnum,
                irq_lines: irq.clone(),
            })?;
            let ops = Box::new(Bound {
                driver: driver.clone(),
                hq,
            });
            let mut hwq = HwQueue::new(
                i as u16,
                ops,
                notify,
                t.clone(),
                budget,
                cfg.timeout_ms,
                irq.clone(),
            );
            if bio.as_ref().is_some_and(|b| b.1) {
                // A bio-based device's lines fill as its contexts open
                // their lower contexts, which forward their lines here.
                hwq.irq = Some(irq);
            }
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
        let gate = Arc::new(crossbeam_utils::CachePadded::new(
            std::sync::atomic::AtomicU64::new(0),
        ));
        let qos_active = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let watch = crate::throttle::QosWatch {
            count: qos_active.clone(),
            gate: gate.clone(),
        };
        let groups = crate::blkcg::Groups::new(&name, watch.clone());
        let io_max = cfg.io_max.clone().unwrap_or_else(|| {
            IoMax::new(IoMaxLimits::default(), crate::throttle::DEFAULT_BURST_MS)
        });
        io_max.attach(&watch);
        let trace = cfg.trace.clone();
        let dev = Device {
            view: None,
            inner: Arc::new(DeviceInner {
                info: QueueInfo {
                    name,
                    capacity_sectors: capacity_bytes >> SECTOR_SHIFT,
                    limits,
                    features,
                    mode: cfg.queue_mode,
                },
                gate,
                ctl: std::sync::Mutex::new(Control {
                    hw_limits,
                    limits,
                    plug: cfg.plug,
                    nomerges: cfg.nomerges,
                    elevator: cfg.elevator.is_some(),
                    scheduler: cfg.elevator.as_ref().map_or("none", |e| e.name()).into(),
                    async_depth: cfg
                        .elevator
                        .as_ref()
                        .and_then(|e| e.async_depth(sched_depth))
                        .unwrap_or(0),
                    contexts: Vec::new(),
                    partitions: None,
                    trace: None,
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
                devnum,
                bio: bio.map(|b| b.0),
            }),
        };
        if let Some(dir) = trace {
            // Traced from its first bio: no context has opened yet, so no
            // gate needs bumping (what `Device::start_trace` adds).
            let t = dev.inner.trace_into(&dir)?;
            dev.ctl().trace = Some(t);
            dev.stamp_completions(true);
        }
        Ok(dev)
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
        self.inner.hw_queues.iter().any(|q| q.irq.is_some())
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

    /// Have the drivers' completions carry their time (while traced).
    fn stamp_completions(&self, on: bool) {
        for hq in self.inner.hw_queues.iter() {
            hq.lock().stamp = on;
        }
    }

    /// The I/O scheduler of its hardware queues now (`none`,
    /// `mq-deadline`, `kyber`, `bfq`), as `scheduler=` names it.
    pub fn scheduler(&self) -> Arc<str> {
        self.ctl().scheduler.clone()
    }

    /// The queue limits in force now.
    pub fn limits(&self) -> QueueLimits {
        self.ctl().limits
    }

    /// Move the gate's generation without freezing: every context takes
    /// a fresh copy of the settings at its next bio.
    fn bump_gate(&self) {
        self.inner
            .gate
            .fetch_add(2, std::sync::atomic::Ordering::SeqCst);
        for hq in self.inner.hw_queues.iter() {
            hq.notify.notify();
        }
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
