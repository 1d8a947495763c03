//! The null driver itself (Linux null_blk's `null_mq_ops`): the
//! [`Driver`] implementation at the end of the pipeline.
//!
//! `queue_rq` is the whole data path. In its default setting (inline
//! completion, no memory, no faults, no bandwidth limit) it is a few
//! predictable branches and one `done.complete`: no allocation, no lock, no
//! clock read, so that what a benchmark measures is the layer above it.
//! Every option that costs something is behind its own branch:
//!
//! 1. `mbps`: admission against a device-wide byte budget (busy if spent);
//! 2. fault injection: requeue (busy), timeout (kept), error;
//! 3. `bad_blocks` and `memory_backed`: the data itself, through the
//!    volatile write cache when `cache_size > 0` (flushes and FUA writes
//!    only mean something there);
//! 4. completion: inline, or onto the queue's pending list for `poll`.

use std::sync::Arc;

use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::clock;
use mqblk_core::driver::Completions;
use mqblk_core::driver::RqRef;
use mqblk_core::driver::{Driver, Extent, ExtentBuilder, HwQueueSetup, QueueRq, TimeoutAction};
use mqblk_core::error::{Error, Result, Status};
use mqblk_core::limits::{Features, QueueLimits, SECTOR_SIZE};
use mqblk_core::queue::DeviceConfig;

use crate::bad_blocks::BadBlocks;
use crate::cache::WriteCache;
use crate::config::{CompletionMode, NullConfig};
use crate::fault::{Fault, FaultInjector};
use crate::handle::{NullHandle, Shared};
use crate::hw_queue::NullQueue;
use crate::store::{Store, PAGE_BYTES};
use crate::throttle::Throttle;

/// The null block driver. Build it with [`NullDriver::new`], or let
/// [`crate::open`] and [`crate::create`] build the whole device.
#[derive(Debug)]
pub struct NullDriver {
    /// The device's name, for errors.
    name: Arc<str>,
    cfg: NullConfig,
    /// True if requests need their data or range looked at: memory-backed
    /// or with bad blocks.
    touches_data: bool,
    store: Option<Store>,
    throttle: Option<Throttle>,
    /// The write cache and counters, shared with [`NullHandle`]s.
    shared: Arc<Shared>,
}

impl NullDriver {
    /// A driver for `cfg`, sized for the queues and tags of `dev`.
    ///
    /// Fails if timeout injection is on but `dev` disables the core's
    /// timeout handling (`io_timeout_ms=0`): the kept requests would never
    /// come back. Fails if `cfg` asks for a write cache without
    /// `memory_backed`, or of a size that is not whole blocks.
    pub fn new(cfg: NullConfig, dev: &DeviceConfig) -> Result<NullDriver> {
        let setup = |reason: String| Error::Setup {
            device: dev.name.as_str().into(),
            reason,
        };
        if cfg.timeout.is_enabled() && dev.timeout_ms == 0 {
            return Err(setup(
                "timeout_probability > 0 needs the core's timeout handling: \
                 set io_timeout_ms to more than 0"
                    .into(),
            ));
        }
        if cfg.has_write_cache() && !cfg.memory_backed {
            return Err(setup(
                "cache_size > 0 needs memory_backed=1: the write cache holds data".into(),
            ));
        }
        if !cfg
            .cache_size_bytes
            .is_multiple_of(u64::from(cfg.block_size))
        {
            return Err(setup(format!(
                "cache_size {} is not a multiple of block_size {}",
                cfg.cache_size_bytes, cfg.block_size
            )));
        }
        let store = cfg.memory_backed.then(Store::new);
        let throttle = (cfg.mbps > 0).then(|| Throttle::new(cfg.mbps, clock::coarse_ms()));
        let cache = cfg
            .has_write_cache()
            .then(|| WriteCache::new(cfg.block_size, cfg.cache_size_bytes));
        Ok(NullDriver {
            name: dev.name.as_str().into(),
            touches_data: cfg.memory_backed || !cfg.bad_blocks.is_empty(),
            cfg,
            store,
            throttle,
            shared: Arc::new(Shared {
                cache,
                ..Shared::default()
            }),
        })
    }

    /// A handle on this device's power and counters (see [`NullHandle`]).
    /// Take it before handing the driver to [`mqblk_core::queue::Device::new`].
    pub fn handle(&self) -> NullHandle {
        NullHandle::new(self.shared.clone())
    }

    /// The configuration.
    pub fn config(&self) -> &NullConfig {
        &self.cfg
    }

    /// The durable backing store, if memory-backed. With a write cache,
    /// this is what survives a power cut, not what reads return.
    pub fn store(&self) -> Option<&Store> {
        self.store.as_ref()
    }

    /// The bad blocks.
    pub fn bad_blocks(&self) -> &BadBlocks {
        &self.cfg.bad_blocks
    }

    /// Serve the data of `rq`: bad blocks, then the store. Off the default
    /// path, so kept out of line.
    #[inline(never)]
    fn transfer(&self, rq: &mut RqRef) -> Status {
        let op = rq.op();
        if op == Op::Flush {
            Shared::count(&self.shared.flushes);
        } else if op == Op::Write && rq.flags().contains(BioFlags::FUA) {
            Shared::count(&self.shared.fua_writes);
        }
        if op.has_data()
            && self
                .cfg
                .bad_blocks
                .hits_bytes(rq.offset_bytes(), rq.len_bytes())
        {
            return Status::Medium;
        }
        let Some(store) = &self.store else {
            return Status::Ok;
        };
        if let Some(cache) = &self.shared.cache {
            return self.transfer_cached(cache, store, rq);
        }
        let mut pos = rq.offset_bytes();
        match op {
            Op::Write => {
                for data in rq.write_bufs() {
                    store.write(pos, data);
                    pos += data.len() as u64;
                }
            }
            Op::Read => {
                for buf in rq.read_bufs() {
                    store.read(pos, buf);
                    pos += buf.len() as u64;
                }
            }
            Op::Discard | Op::WriteZeroes => store.discard(pos, rq.len_bytes()),
            Op::Flush => {}
        }
        Status::Ok
    }

    /// Serve `rq` through the write cache, holding it for the whole request
    /// so no other queue sees the request half done. A FUA write is written
    /// through only if the device declares FUA: with `fua=0` a real drive
    /// would not honour the bit, so neither do we, and a core that relied
    /// on it would lose the write at the next power cut.
    fn transfer_cached(&self, cache: &WriteCache, store: &Store, rq: &mut RqRef) -> Status {
        let mut c = cache.lock(store);
        let mut pos = rq.offset_bytes();
        match rq.op() {
            Op::Write if self.cfg.fua && rq.flags().contains(BioFlags::FUA) => {
                for data in rq.write_bufs() {
                    c.write_through(pos, data);
                    pos += data.len() as u64;
                }
            }
            Op::Write => {
                for data in rq.write_bufs() {
                    c.write(pos, data);
                    pos += data.len() as u64;
                }
            }
            Op::Read => {
                for buf in rq.read_bufs() {
                    c.read(pos, buf);
                    pos += buf.len() as u64;
                }
            }
            Op::Discard | Op::WriteZeroes => c.discard(pos, rq.len_bytes()),
            Op::Flush => c.flush(),
        }
        Status::Ok
    }
}

impl Driver for NullDriver {
    type HwQueue = NullQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<NullQueue> {
        let index = setup.index;
        let c = &self.cfg;
        let faults = FaultInjector::new(c.requeue, c.timeout, c.error, c.seed, index);
        NullQueue::new(
            index,
            c.completion,
            c.completion_nsec,
            faults,
            (setup.queue_depth + setup.reserved_tags) as usize,
        )
        .map_err(|e| Error::Setup {
            device: self.name.clone(),
            reason: format!("cannot make the timer of hardware queue {index}: {e}"),
        })
    }

    #[inline]
    fn queue_rq(
        &self,
        hq: &mut NullQueue,
        mut rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        if let Some(t) = &self.throttle {
            if !t.admit(rq.len_bytes(), clock::coarse_ms()) {
                return QueueRq::Busy(rq);
            }
        }
        let mut status = Status::Ok;
        if hq.faults_enabled {
            match hq.faults.decide() {
                Fault::None => {}
                Fault::Requeue => return QueueRq::Busy(rq),
                Fault::Timeout => {
                    hq.keep(rq);
                    return QueueRq::Issued;
                }
                Fault::Error => status = Status::IoError,
            }
        }
        if self.touches_data && status.is_ok() {
            status = self.transfer(&mut rq);
        }
        match hq.completion {
            CompletionMode::Inline => done.complete(rq, status),
            CompletionMode::Deferred => hq.push_pending(rq, status, 0),
            CompletionMode::Timer => {
                let due_ns = clock::now_ns().saturating_add(hq.completion_nsec);
                hq.push_pending(rq, status, due_ns);
            }
        }
        QueueRq::Issued
    }

    #[inline]
    fn commit_rqs(&self, _hq: &mut NullQueue) {}

    #[inline]
    fn poll(&self, hq: &mut NullQueue, done: &mut Completions<'_>) -> usize {
        if hq.pending_is_empty() {
            return 0;
        }
        match hq.completion {
            CompletionMode::Inline => 0,
            CompletionMode::Deferred => hq.complete_all(done),
            CompletionMode::Timer => hq.complete_due(clock::now_ns(), done),
        }
    }

    /// Timer mode's timerfd, set for the earliest deadline.
    fn irq_fd(&self, hq: &NullQueue) -> Option<std::os::fd::RawFd> {
        hq.irq_fd()
    }

    fn timeout(&self, hq: &mut NullQueue, tag: u32, done: &mut Completions<'_>) -> TimeoutAction {
        hq.complete_timed_out(tag, done)
    }

    fn limits(&self) -> QueueLimits {
        let bs = self.cfg.block_size;
        // The largest range in whole blocks that a u32 of sectors can carry.
        let sectors_per_block = bs / SECTOR_SIZE as u32;
        let max_range_sectors = u32::MAX / sectors_per_block * sectors_per_block;
        QueueLimits {
            max_discard_sectors: max_range_sectors,
            max_write_zeroes_sectors: max_range_sectors,
            ..QueueLimits::with_block_size(bs)
        }
    }

    fn features(&self) -> Features {
        let write_cache = self.shared.cache.is_some();
        Features {
            write_cache,
            fua: write_cache && self.cfg.fua,
            discard: true,
            write_zeroes: true,
            read_only: false,
            rotational: false,
        }
    }

    /// With `memory_backed=1`, pages never written (or discarded) are holes;
    /// a page with a cached block is data.
    fn extents(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) -> Result<bool> {
        let Some(store) = self.store() else {
            return Ok(false);
        };
        let page = PAGE_BYTES as u64;
        let end = offset_bytes + len_bytes;
        let first = offset_bytes / page;
        let last = end.div_ceil(page);
        let mut resident = store.resident_in(first, last);
        if let Some(cache) = &self.shared.cache {
            resident.extend(cache.pages_in(first, last, page));
            resident.sort_unstable();
            resident.dedup();
        }
        let mut b = ExtentBuilder::new(out, offset_bytes, len_bytes);
        for p in resident {
            b.push_until(p * page, true, true);
            b.push_until((p + 1) * page, false, false);
        }
        b.fill_rest(true, true);
        Ok(true)
    }

    fn completes_async(&self) -> bool {
        false
    }
}
