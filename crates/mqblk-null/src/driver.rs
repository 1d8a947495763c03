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
//! 3. `bad_blocks` and `memory_backed`: the data itself;
//! 4. completion: inline, or onto the queue's pending list for `poll`.

use mqblk_core::bio::Op;
use mqblk_core::clock;
use mqblk_core::completion::Completions;
use mqblk_core::driver::{Driver, Extent, HwQueueSetup, QueueRq, TimeoutAction};
use mqblk_core::error::{Error, Result, Status};
use mqblk_core::limits::{Features, QueueLimits, SECTOR_SIZE};
use mqblk_core::queue::DeviceConfig;
use mqblk_core::request::RqRef;

use crate::bad_blocks::BadBlocks;
use crate::config::{CompletionMode, NullConfig};
use crate::fault::{Fault, FaultInjector};
use crate::hw_queue::NullQueue;
use crate::store::{Store, PAGE_BYTES};
use crate::throttle::Throttle;

/// The null block driver. Build it with [`NullDriver::new`], or let
/// [`crate::open`] and [`crate::create`] build the whole device.
#[derive(Debug)]
pub struct NullDriver {
    cfg: NullConfig,
    /// Requests one hardware queue can hold at once: the tag depth plus the
    /// reserved tags (with a shared tag set, one queue may hold them all).
    /// True if requests need their data or range looked at: memory-backed
    /// or with bad blocks.
    touches_data: bool,
    store: Option<Store>,
    throttle: Option<Throttle>,
}

impl NullDriver {
    /// A driver for `cfg`, sized for the queues and tags of `dev`.
    ///
    /// Fails if timeout injection is on but `dev` disables the core's
    /// timeout handling (`io_timeout_ms=0`): the kept requests would never
    /// come back.
    pub fn new(cfg: NullConfig, dev: &DeviceConfig) -> Result<NullDriver> {
        if cfg.timeout.is_enabled() && dev.timeout_ms == 0 {
            return Err(Error::Setup {
                device: dev.name.as_str().into(),
                reason: "timeout_probability > 0 needs the core's timeout handling: \
                         set io_timeout_ms to more than 0"
                    .into(),
            });
        }
        let store = cfg.memory_backed.then(Store::new);
        let throttle = (cfg.mbps > 0).then(|| Throttle::new(cfg.mbps, clock::coarse_ms()));
        Ok(NullDriver {
            touches_data: cfg.memory_backed || !cfg.bad_blocks.is_empty(),
            cfg,
            store,
            throttle,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &NullConfig {
        &self.cfg
    }

    /// The backing store, if memory-backed.
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
        let mut pos = rq.offset_bytes();
        match op {
            Op::Write => rq.for_each_segment(|seg| {
                store.write(pos, seg.as_slice());
                pos += u64::from(seg.len());
            }),
            Op::Read => rq.for_each_segment_mut(|seg| {
                store.read(pos, seg.as_mut_slice());
                pos += u64::from(seg.len());
            }),
            Op::Discard | Op::WriteZeroes => store.discard(pos, rq.len_bytes()),
            Op::Flush => {}
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
        Ok(NullQueue::new(
            index,
            c.completion,
            c.completion_nsec,
            faults,
            (setup.queue_depth + setup.reserved_tags) as usize,
        ))
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
        Features {
            write_cache: false,
            fua: false,
            discard: true,
            write_zeroes: true,
            read_only: false,
            rotational: false,
        }
    }

    /// With `memory_backed=1`, pages never written (or discarded) are holes.
    fn extents(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) -> Result<bool> {
        let Some(store) = self.store() else {
            return Ok(false);
        };
        let page = PAGE_BYTES as u64;
        let end = offset_bytes + len_bytes;
        let first = offset_bytes / page;
        let last = end.div_ceil(page);
        let mut push = |from: u64, to: u64, hole: bool| {
            let (from, to) = (from.max(offset_bytes), to.min(end));
            if from >= to {
                return;
            }
            match out.last_mut() {
                Some(e) if e.hole == hole && e.offset_bytes + e.len_bytes == from => {
                    e.len_bytes += to - from
                }
                _ => out.push(Extent {
                    offset_bytes: from,
                    len_bytes: to - from,
                    hole,
                    zero: hole,
                }),
            }
        };
        let mut at = first;
        for p in store.resident_in(first, last) {
            push(at * page, p * page, true);
            push(p * page, (p + 1) * page, false);
            at = p + 1;
        }
        push(at * page, last * page, true);
        Ok(true)
    }

    fn completes_async(&self) -> bool {
        false
    }
}
