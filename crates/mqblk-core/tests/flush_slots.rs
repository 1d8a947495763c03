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
use mqblk_core::limits::Features;
use mqblk_core::{Bio, Device, Error};

/// A device with a volatile write cache that holds every request until
/// `release` is set, then completes them all well.
struct Gate {
    release: Arc<AtomicBool>,
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
    fn features(&self) -> Features {
        Features {
            write_cache: true,
            ..Features::default()
        }
    }
}

/// Every slot of the bio set holds a caller's flush waiting on the running
/// one: the next flush request still gets a slot, and all of them end Ok.
#[test]
#[cfg_attr(miri, ignore)] // polls with sleeps
fn flushes_that_fill_every_slot_still_get_their_flush_request() {
    const SLOTS: u32 = 16;
    let release = Arc::new(AtomicBool::new(false));
    let mut cfg = common::config("wc0", 1 << 20);
    cfg.bioset_size = SLOTS;
    let dev = Device::new(
        Gate {
            release: release.clone(),
        },
        cfg,
    )
    .unwrap();
    let mut ctx = dev.context().unwrap();
    // The first flush's request goes out and is held; the rest wait for
    // the next flush, one slot each, until no slot is left for a caller.
    for i in 0..SLOTS {
        ctx.submit(Bio::flush())
            .unwrap_or_else(|e| panic!("flush {i} of {SLOTS}: {e}"));
        ctx.unplug();
    }
    assert!(!ctx.has_room(), "every slot holds a waiting flush");
    release.store(true, Ordering::SeqCst);
    let mut statuses = Vec::new();
    let t = Instant::now();
    while statuses.len() < SLOTS as usize {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "{} of {SLOTS} flushes ended in 10 s",
            statuses.len()
        );
        ctx.poll_wait(1, |c| statuses.push(c.status()));
    }
    assert_eq!(statuses, vec![Status::Ok; SLOTS as usize]);
    assert_eq!(ctx.in_flight(), 0);
    // The context goes on: a slot for the next one.
    ctx.flush().expect("a flush after the storm");
}
