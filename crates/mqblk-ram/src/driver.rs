//! The ram driver itself (Linux brd's `brd_submit_bio`, here as a blk-mq
//! driver): the [`Driver`] implementation at the end of the pipeline.
//!
//! `queue_rq` does the whole I/O in place and completes it before
//! returning: it copies between the request's segments and the
//! [`Store`] (the segments of every merged bio, in order, the device
//! offset advancing across them), or frees the range for discard and
//! write-zeroes. Nothing is left for `poll` or `commit_rqs`, and a
//! hardware queue needs no state of its own: the store is shared, and its
//! sharded locks keep queues apart.

use std::sync::Arc;

use mqblk_core::bio::Op;
use mqblk_core::driver::Completions;
use mqblk_core::driver::RqRef;
use mqblk_core::driver::{Driver, Extent, ExtentBuilder, HwQueueSetup, QueueRq};
use mqblk_core::error::{Result, Status};
use mqblk_core::limits::{Features, QueueLimits, SECTOR_SIZE};
use mqblk_core::queue::DeviceConfig;

use crate::config::RamConfig;
use crate::store::{Store, PAGE_BYTES};

/// The ram block driver. Build it with [`RamDriver::new`], or let
/// [`crate::open`] and [`crate::create`] build the whole device.
#[derive(Debug)]
pub struct RamDriver {
    cfg: RamConfig,
    store: Arc<Store>,
}

impl RamDriver {
    /// A driver for `cfg`, its store sharded for the hardware queues of
    /// `dev`.
    pub fn new(cfg: RamConfig, dev: &DeviceConfig) -> RamDriver {
        let store = Arc::new(Store::for_queues(usize::from(dev.nr_hw_queues)));
        RamDriver { cfg, store }
    }

    /// The configuration.
    pub fn config(&self) -> &RamConfig {
        &self.cfg
    }

    /// The backing store. The handle outlives the device if kept, and so
    /// does the memory it holds.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Bytes of page memory the device holds now (see
    /// [`Store::resident_bytes`]).
    pub fn resident_bytes(&self) -> u64 {
        self.store.resident_bytes()
    }

    /// Move the data of `rq` between its segments and the store.
    #[inline]
    fn transfer(&self, rq: &mut RqRef) -> Status {
        let pos = rq.offset_bytes();
        match rq.op() {
            Op::Write => match self.store.write_vectored(pos, rq.write_bufs()) {
                Ok(()) => Status::Ok,
                Err(_) => Status::NoSpace,
            },
            Op::Read => {
                self.store.read_vectored(pos, rq.read_bufs());
                Status::Ok
            }
            Op::Discard | Op::WriteZeroes => {
                self.store.discard(pos, rq.len_bytes());
                Status::Ok
            }
            // No write cache: every write is in the store when it completes.
            Op::Flush => Status::Ok,
        }
    }
}

impl Driver for RamDriver {
    /// Nothing per queue: the store is shared.
    type HwQueue = ();

    fn init_hw_queue(&self, _setup: HwQueueSetup<'_>) -> Result<()> {
        Ok(())
    }

    /// Serve `rq` from the store and complete it at once. A write the
    /// allocator refuses completes with [`Status::NoSpace`].
    #[inline]
    fn queue_rq(
        &self,
        _hq: &mut (),
        mut rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        let status = self.transfer(&mut rq);
        done.complete(rq, status);
        QueueRq::Issued
    }

    #[inline]
    fn commit_rqs(&self, _hq: &mut ()) {}

    #[inline]
    fn poll(&self, _hq: &mut (), _done: &mut Completions<'_>) -> usize {
        0
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

    /// Pages not stored are holes (reading as zeros); stored pages are data,
    /// even if partly zeroed. Adjacent extents of one kind are merged.
    fn extents(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) -> Result<bool> {
        let page = PAGE_BYTES as u64;
        let end = offset_bytes.saturating_add(len_bytes);
        if offset_bytes >= end {
            return Ok(true);
        }
        let (first, last) = (offset_bytes / page, end.div_ceil(page));
        let mut b = ExtentBuilder::new(out, offset_bytes, len_bytes);
        for run in self.store.resident_runs(first, last) {
            b.push_until(run.start * page, true, true);
            b.push_until(run.end.saturating_mul(page), false, false);
        }
        b.fill_rest(true, true);
        Ok(true)
    }
}
