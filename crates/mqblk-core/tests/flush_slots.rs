//! A flush never fails for want of a bio slot (issue 34, item 2). Caller
//! flushes that arrive while one runs wait in the flush machine, each in a
//! slot of the context's bio set; when they fill every slot, the flush
//! request they wait for still needs one. The bio set keeps a reserve for
//! the layer's own bios (as Linux keeps a `flush_rq` per hardware queue),
//! so that request is issued and every waiter ends well.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mqblk_core::driver::{Completions, Driver, HwQueueSetup, QueueRq, RqRef, Status};
use mqblk_core::limits::{Features, QueueLimits};
use mqblk_core::{Bio, BioFlags, Device, Error};

/// A device with a volatile write cache (no FUA) that holds every
/// request until `release` is set, then completes them all well; its
/// requests carry at most `max_sectors`.
struct Gate {
    release: Arc<AtomicBool>,
    max_sectors: u32,
}

struct GateQueue {
    held: Vec<RqRef>,
}

impl Driver for Gate {
    type HwQueue = GateQueue;
    fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> Result<GateQueue, Error> {
        Ok(GateQueue {
            held: Vec::with_capacity(64),
        })
    }
    fn queue_rq(
        &self,
        hq: &mut GateQueue,
        rq: RqRef,
        _last: bool,
        _done: &mut Completions<'_>,
    ) -> QueueRq {
        hq.held.push(rq);
        QueueRq::Issued
    }
    fn commit_rqs(&self, _hq: &mut GateQueue) {}
    fn poll(&self, hq: &mut GateQueue, done: &mut Completions<'_>) -> usize {
        if !self.release.load(Ordering::SeqCst) {
            return 0;
        }
        let n = hq.held.len();
        for rq in hq.held.drain(..) {
            done.complete(rq, Status::Ok);
        }
        n
    }
    fn limits(&self) -> QueueLimits {
        QueueLimits {
            max_sectors: self.max_sectors,
            ..QueueLimits::default()
        }
    }
    fn features(&self) -> Features {
        Features {
            write_cache: true,
            ..Features::default()
        }
    }
}

/// Bio slots for a caller in these tests.
const SLOTS: u32 = 16;

/// A held device whose context has [`SLOTS`] slots, and its gate.
fn gated(name: &str, max_sectors: u32) -> (Device, Arc<AtomicBool>) {
    let release = Arc::new(AtomicBool::new(false));
    let mut cfg = common::config(name, 1 << 20);
    cfg.bioset_size = SLOTS;
    let gate = Gate {
        release: release.clone(),
        max_sectors,
    };
    (Device::new(gate, cfg).unwrap(), release)
}

/// Submit `bios` (the first a flush, whose request the device holds; the
/// rest wait for the next flush, one slot each, until no slot is left for
/// a caller), open the gate, and see every one end Ok.
fn fill_then_release(dev: &Device, release: &AtomicBool, bios: Vec<Bio>) {
    let mut ctx = dev.context().unwrap();
    let n = bios.len();
    for (i, bio) in bios.into_iter().enumerate() {
        ctx.submit(bio)
            .unwrap_or_else(|e| panic!("bio {i} of {n}: {e}"));
        ctx.unplug();
    }
    assert!(!ctx.has_room(), "every slot holds a waiting bio");
    release.store(true, Ordering::SeqCst);
    let mut statuses = Vec::new();
    let t = Instant::now();
    while statuses.len() < n {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} of {n} bios ended in 10 s",
            statuses.len()
        );
        ctx.poll_wait(1, |c| statuses.push(c.status()));
    }
    assert_eq!(statuses, vec![Status::Ok; n]);
    assert_eq!(ctx.in_flight(), 0);
    // The context goes on: a slot for the next one.
    ctx.flush().expect("a flush after the storm");
}

/// Every slot of the bio set holds a caller's flush waiting on the running
/// one: the next flush request still gets a slot, and all of them end Ok.
#[test]
#[cfg_attr(miri, ignore)] // polls with sleeps
fn flushes_that_fill_every_slot_still_get_their_flush_request() {
    let (dev, release) = gated("wc0", u32::MAX);
    let bios = (0..SLOTS).map(|_| Bio::flush()).collect();
    fill_then_release(&dev, &release, bios);
}

/// Every slot holds a write with PREFLUSH and FUA (on a cache without FUA:
/// PREFLUSH, data, POSTFLUSH) larger than a request may be: after the
/// flush, each is cut into pieces, which need slots of their own, and
/// then the POSTFLUSH its flush request. All of them end Ok.
#[test]
#[cfg_attr(miri, ignore)] // polls with sleeps
fn split_flush_sequences_that_fill_every_slot_still_get_their_pieces() {
    // 64 KiB writes, 8 KiB requests: 8 pieces each.
    let (dev, release) = gated("wc1", 16);
    let mut bios = vec![Bio::flush()];
    for i in 1..u64::from(SLOTS) {
        let mut b = Bio::write_at(i * 65536, dev.alloc_buf(65536));
        b.set_flags(BioFlags::PREFLUSH | BioFlags::FUA);
        bios.push(b);
    }
    fill_then_release(&dev, &release, bios);
}
