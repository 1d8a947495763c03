//! The extension points the next layers plug into, each exercised through a
//! toy implementation written against the public API only: a per-hardware-
//! queue elevator with its own scheduler tags, a bio throttle that runs
//! before a request is taken, and a stateful completion through which a
//! stacked driver completes its parents without blocking.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqblk_core::driver::{Completions, Driver, HwQueueSetup, Op, QueueRq, Request, RqRef, Status};
use mqblk_core::sched::{Elevator, ElevatorType};
use mqblk_core::throttle::{Admit, Throttle, ThrottleType};
use mqblk_core::{Bio, Completion, Device, EndIo, Error, IoBuf};

/// Counts what an elevator was told.
#[derive(Default)]
struct Calls {
    inserted: AtomicU32,
    dispatched: AtomicU32,
    requeued: AtomicU32,
    completed: AtomicU32,
}

/// Issues the lowest sector first.
struct Sorted {
    calls: Arc<Calls>,
    queue: BTreeMap<(u64, u32), RqRef>,
}

impl Elevator for Sorted {
    fn insert(&mut self, rq: RqRef) {
        self.calls.inserted.fetch_add(1, Ordering::SeqCst);
        self.queue.insert((rq.offset_bytes(), rq.tag()), rq);
    }
    fn dispatch(&mut self) -> Option<RqRef> {
        let rq = self.queue.pop_first().map(|(_, rq)| rq);
        if rq.is_some() {
            self.calls.dispatched.fetch_add(1, Ordering::SeqCst);
        }
        rq
    }
    fn has_work(&self) -> bool {
        !self.queue.is_empty()
    }
    fn requeue(&mut self, rq: RqRef) {
        self.calls.requeued.fetch_add(1, Ordering::SeqCst);
        self.queue.insert((rq.offset_bytes(), rq.tag()), rq);
    }
    fn completed(&mut self, _rq: &Request) {
        self.calls.completed.fetch_add(1, Ordering::SeqCst);
    }
}

struct SortedType(Arc<Calls>, u32);

impl ElevatorType for SortedType {
    fn name(&self) -> &str {
        "sorted"
    }
    fn nr_requests(&self, _queue_depth: u32) -> u32 {
        self.1
    }
    fn init(&self, _hwq: u16, nr_requests: u32) -> Box<dyn Elevator> {
        assert_eq!(nr_requests, self.1);
        Box::new(Sorted {
            calls: self.0.clone(),
            queue: BTreeMap::new(),
        })
    }
}

/// Records the sectors it is handed, holds them until poll, refuses every
/// `busy_every`-th request once, and tracks how many it holds at most.
struct Recorder {
    order: Arc<Mutex<Vec<u64>>>,
    held_max: Arc<AtomicU32>,
    busy_every: u32,
}

struct RecQueue {
    held: Vec<RqRef>,
    n: u32,
}

impl Driver for Recorder {
    type HwQueue = RecQueue;
    fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> Result<RecQueue, Error> {
        Ok(RecQueue {
            held: Vec::with_capacity(256),
            n: 0,
        })
    }
    fn queue_rq(
        &self,
        hq: &mut RecQueue,
        rq: RqRef,
        _l: bool,
        _d: &mut Completions<'_>,
    ) -> QueueRq {
        hq.n += 1;
        if self.busy_every > 0 && hq.n.is_multiple_of(self.busy_every) {
            return QueueRq::Busy(rq);
        }
        self.order.lock().unwrap().push(rq.offset_bytes());
        hq.held.push(rq);
        self.held_max
            .fetch_max(hq.held.len() as u32, Ordering::SeqCst);
        QueueRq::Issued
    }
    fn commit_rqs(&self, _hq: &mut RecQueue) {}
    fn poll(&self, hq: &mut RecQueue, done: &mut Completions<'_>) -> usize {
        let n = hq.held.len();
        for rq in hq.held.drain(..) {
            done.complete(rq, Status::Ok);
        }
        n
    }
}

fn recorder_device(
    elevator: Option<Arc<dyn ElevatorType>>,
    busy_every: u32,
) -> (Device, Arc<Mutex<Vec<u64>>>, Arc<AtomicU32>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let held_max = Arc::new(AtomicU32::new(0));
    let drv = Recorder {
        order: order.clone(),
        held_max: held_max.clone(),
        busy_every,
    };
    let mut cfg = common::config("rec0", 64 << 20);
    cfg.queue_depth = 4;
    cfg.elevator = elevator;
    (Device::new(drv, cfg).unwrap(), order, held_max)
}

#[test]
fn an_elevator_orders_dispatch_and_its_scheduler_tags_outnumber_the_drivers() {
    let calls = Arc::new(Calls::default());
    let (dev, order, held_max) = recorder_device(Some(Arc::new(SortedType(calls.clone(), 32))), 0);
    let mut ctx = dev.context().unwrap();
    let quiesced = dev.quiesce();
    // 16 writes, highest sector first, all waiting in the elevator: more
    // than the driver's 4 tags, within the 32 scheduler tags.
    // Sectors with gaps, so nothing merges.
    for i in (0..16u64).rev() {
        ctx.submit(Bio::write_at(i * 8192, IoBuf::page_aligned(4096)))
            .unwrap();
    }
    ctx.unplug();
    assert!(
        order.lock().unwrap().is_empty(),
        "quiesced: nothing dispatched"
    );
    drop(quiesced);
    let mut n = 0;
    while n < 16 {
        n += ctx.poll_wait(16 - n, |c| c.result().unwrap());
    }
    let seen = order.lock().unwrap().clone();
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    assert_eq!(seen, sorted, "the elevator issued lowest sector first");
    assert_eq!(seen.len(), 16);
    assert!(
        held_max.load(Ordering::SeqCst) <= 4,
        "driver tags bound the driver"
    );
    assert_eq!(calls.inserted.load(Ordering::SeqCst), 16);
    assert_eq!(calls.dispatched.load(Ordering::SeqCst), 16);
    assert_eq!(calls.completed.load(Ordering::SeqCst), 16);

    // Switched off at run time, under a freeze: I/O goes on without it.
    dev.freeze(Duration::from_secs(5))
        .unwrap()
        .set_elevator(None)
        .unwrap();
    let mut buf = vec![0u8; 4096];
    ctx.read_at(&mut buf, 0).unwrap();
    assert_eq!(calls.completed.load(Ordering::SeqCst), 16);
}

#[test]
fn requests_the_driver_refuses_go_back_to_the_elevator_and_complete_once() {
    let calls = Arc::new(Calls::default());
    let (dev, order, _) = recorder_device(Some(Arc::new(SortedType(calls.clone(), 16))), 3);
    let mut ctx = dev.context().unwrap();
    let mut ends = HashMap::new();
    for i in 0..40u64 {
        let mut bio = Bio::read_at(i * 8192, IoBuf::page_aligned(4096));
        bio.private = i;
        loop {
            match ctx.submit(bio) {
                Ok(()) => break,
                Err(e) => {
                    bio = e.into_bio();
                    ctx.poll(|c| *ends.entry(c.private()).or_insert(0) += 1);
                }
            }
        }
    }
    while ends.len() < 40 {
        ctx.poll_wait(1, |c| {
            c.result().unwrap();
            *ends.entry(c.private()).or_insert(0) += 1;
        });
    }
    assert!(
        ends.values().all(|&n| n == 1),
        "each bio completes exactly once"
    );
    assert!(calls.requeued.load(Ordering::SeqCst) > 0);
    assert_eq!(calls.completed.load(Ordering::SeqCst), 40);
    assert_eq!(order.lock().unwrap().len(), 40);
}

/// Holds every other bio back by `delay`.
struct EveryOther {
    delay_ns: u64,
    n: u32,
    asked: Arc<AtomicU32>,
}

impl Throttle for EveryOther {
    fn admit(&mut self, _bio: &Bio, now_ns: u64) -> Admit {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.n += 1;
        if self.n % 2 == 1 {
            Admit::At(now_ns + self.delay_ns)
        } else {
            Admit::Now
        }
    }
}

struct EveryOtherType(Arc<AtomicU32>);

impl ThrottleType for EveryOtherType {
    fn name(&self) -> &str {
        "every-other"
    }
    fn for_context(&self, _ctx_id: u32) -> Box<dyn Throttle> {
        Box::new(EveryOther {
            delay_ns: 2_000_000,
            n: 0,
            asked: self.0.clone(),
        })
    }
}

#[test]
fn the_throttle_holds_bios_back_before_they_take_a_request() {
    let asked = Arc::new(AtomicU32::new(0));
    let mut disk = common::MemDisk::new(1 << 20, common::Order::Inline);
    disk.limits = Default::default();
    let mut cfg = common::config("thr0", 1 << 20);
    cfg.throttle = Some(Arc::new(EveryOtherType(asked.clone())));
    let dev = Device::new(disk, cfg).unwrap();
    let mut ctx = dev.context().unwrap();
    for i in 0..6u64 {
        let mut bio = Bio::write_at(i * 8192, IoBuf::page_aligned(4096));
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    // The held-back bios took no request yet.
    assert_eq!(dev.stats().snapshot().requests, 3);
    let mut order = Vec::new();
    while order.len() < 6 {
        ctx.poll_wait(1, |c| {
            c.result().unwrap();
            order.push(c.private());
        });
    }
    assert_eq!(asked.load(Ordering::SeqCst), 6);
    // Admitted bios overtook the held ones.
    assert_eq!(&order[..3], &[1, 3, 5]);
    let mut rest = order[3..].to_vec();
    rest.sort_unstable();
    assert_eq!(rest, vec![0, 2, 4]);
    // Each was delivered once: nothing comes again.
    let again = ctx.poll(|c| panic!("bio {} was delivered again", c.private()));
    assert_eq!(again, 0);
    assert_eq!(ctx.in_flight(), 0);
    // A flush is never throttled; blocking calls wait for held bios.
    ctx.flush().unwrap();
    ctx.write_at(&[1u8; 4096], 0).unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 7);
}

/// A stacked "linear" driver: byte b of the upper device is byte
/// `b + offset` of a lower device. Each parent request becomes a clone bio
/// submitted to the lower device's context without blocking; a stateful
/// completion handler records the child's end, and the upper poll
/// completes the parent.
struct Linear {
    lower: Device,
    offset_bytes: u64,
}

struct LinearQueue {
    lower: mqblk_core::Context,
    parents: HashMap<u32, RqRef>,
    finished: Arc<Mutex<Vec<(u32, Status)>>>,
    handler: Arc<dyn EndIo>,
}

impl Driver for Linear {
    type HwQueue = LinearQueue;
    fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> Result<LinearQueue, Error> {
        let finished: Arc<Mutex<Vec<(u32, Status)>>> = Arc::new(Mutex::new(Vec::new()));
        let sink = finished.clone();
        let handler: Arc<dyn EndIo> = Arc::new(move |c: Completion<'_>| {
            sink.lock().unwrap().push((c.private() as u32, c.status()));
        });
        Ok(LinearQueue {
            lower: self.lower.context()?,
            parents: HashMap::new(),
            finished,
            handler,
        })
    }
    fn queue_rq(
        &self,
        hq: &mut LinearQueue,
        rq: RqRef,
        _l: bool,
        _d: &mut Completions<'_>,
    ) -> QueueRq {
        let offset = if rq.op() == Op::Flush {
            0
        } else {
            rq.offset_bytes() + self.offset_bytes
        };
        // SAFETY: the parent stays in `parents` until the clone's completion
        // was reaped (in poll, below), and only then is it completed.
        let mut child = unsafe { rq.clone_bio(offset) };
        child.private = u64::from(rq.tag());
        child.set_end_io(Some(hq.handler.clone()));
        match hq.lower.submit(child) {
            Ok(()) => {
                hq.parents.insert(rq.tag(), rq);
                QueueRq::Issued
            }
            Err(_) => QueueRq::Busy(rq),
        }
    }
    fn commit_rqs(&self, hq: &mut LinearQueue) {
        hq.lower.unplug();
    }
    fn poll(&self, hq: &mut LinearQueue, done: &mut Completions<'_>) -> usize {
        hq.lower.poll(|_| {});
        let finished: Vec<_> = hq.finished.lock().unwrap().drain(..).collect();
        for (tag, status) in &finished {
            let rq = hq.parents.remove(tag).expect("a parent per child");
            done.complete(rq, *status);
        }
        finished.len()
    }
}

#[test]
fn a_stacked_driver_completes_parents_from_stateful_completions() {
    let (lower, data, _) = common::mem_device(4 << 20, common::Order::Reversed);
    let upper = Device::new(
        Linear {
            lower: lower.clone(),
            offset_bytes: 1 << 20,
        },
        common::config("linear0", 2 << 20),
    )
    .unwrap();
    let mut ctx = upper.context().unwrap();
    let src: Vec<u8> = (0..64 << 10).map(|i: u32| (i % 199) as u8).collect();
    ctx.write_at(&src, 8192).unwrap();
    assert_eq!(
        &data.lock().unwrap()[(1 << 20) + 8192..(1 << 20) + 8192 + src.len()],
        &src[..]
    );
    let mut back = vec![0u8; src.len()];
    ctx.read_at(&mut back, 8192).unwrap();
    assert_eq!(back, src);
    ctx.flush().unwrap();
    // Out of range on the upper device is refused there, typed.
    let e = ctx.read_at(&mut back, (2 << 20) - 4096).unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
}

/// A driver whose backend keeps every request until told to let go: its
/// timeout answers `Held`, as a driver with no cancel (librbd) does.
struct Keeper {
    release: Arc<std::sync::atomic::AtomicBool>,
}

struct KeeperQueue {
    held: Vec<RqRef>,
}

impl Driver for Keeper {
    type HwQueue = KeeperQueue;
    fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> Result<KeeperQueue, Error> {
        Ok(KeeperQueue {
            held: Vec::with_capacity(64),
        })
    }
    fn queue_rq(
        &self,
        hq: &mut KeeperQueue,
        rq: RqRef,
        _l: bool,
        _d: &mut Completions<'_>,
    ) -> QueueRq {
        hq.held.push(rq);
        QueueRq::Issued
    }
    fn commit_rqs(&self, _hq: &mut KeeperQueue) {}
    fn poll(&self, hq: &mut KeeperQueue, done: &mut Completions<'_>) -> usize {
        if !self.release.load(Ordering::SeqCst) {
            return 0;
        }
        let n = hq.held.len();
        for rq in hq.held.drain(..) {
            done.complete(rq, Status::Timeout);
        }
        n
    }
    fn timeout(
        &self,
        hq: &mut KeeperQueue,
        tag: u32,
        _done: &mut Completions<'_>,
    ) -> mqblk_core::driver::TimeoutAction {
        match hq.held.iter().find(|rq| rq.tag() == tag) {
            Some(rq) => mqblk_core::driver::TimeoutAction::Held(mqblk_core::Overdue::of(rq)),
            None => mqblk_core::driver::TimeoutAction::ResetTimer,
        }
    }
}

/// A request its driver holds past its deadline is named as overdue (op,
/// offset, length) soon after the timeout, while its bio stays in flight;
/// it completes once, when the driver lets go.
#[test]
#[cfg_attr(miri, ignore)] // waits on the clock for a timeout
fn a_request_held_past_its_timeout_is_named_overdue_and_completes_once_later() {
    let release = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut cfg = common::config("keep0", 64 << 20);
    cfg.timeout_ms = 200;
    let dev = Device::new(
        Keeper {
            release: release.clone(),
        },
        cfg,
    )
    .unwrap();
    let mut ctx = dev.context().unwrap();
    assert_eq!(ctx.take_overdue(), None);
    ctx.submit(Bio::read_at(8192, dev.alloc_buf(4096))).unwrap();
    let t = std::time::Instant::now();
    let mut seen = 0;
    let overdue = loop {
        ctx.poll_wait_for(1, Duration::from_millis(20), |_| seen += 1);
        if let Some(o) = ctx.take_overdue() {
            break o;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never named overdue");
    };
    let at = t.elapsed();
    // The timeout plus one scan period (at most 250 ms) and a margin.
    assert!(at >= Duration::from_millis(200), "named early: {at:?}");
    assert!(
        mqblk_test_support::time_bound("overdue", at, Duration::from_millis(200 + 250 + 500)),
        "named late: {at:?}"
    );
    assert_eq!(overdue.op, Op::Read);
    assert_eq!(overdue.offset_bytes, 8192);
    assert_eq!(overdue.len_bytes, 4096);
    assert_eq!(seen, 0, "the bio is still in flight");
    assert_eq!(ctx.in_flight(), 1);
    release.store(true, Ordering::SeqCst);
    let mut statuses = Vec::new();
    while ctx.in_flight() > 0 {
        ctx.poll_wait(1, |c| statuses.push(c.status()));
    }
    ctx.poll(|c| statuses.push(c.status()));
    assert_eq!(statuses, vec![Status::Timeout], "completes exactly once");
}

/// A bio on a remapped view (a partition) that fails at the freeze gate
/// (the device stays frozen past the wait's bound) comes back with the
/// offset it was given, not shifted back by the window's start.
#[test]
#[cfg_attr(miri, ignore)] // waits on the clock for the gate's bound
fn a_view_bio_failed_at_the_freeze_gate_keeps_its_offset() {
    let mut cfg = common::config("gate0", 64 << 20);
    cfg.timeout_ms = 50;
    let dev = Device::new(
        Keeper {
            release: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        },
        cfg,
    )
    .unwrap();
    let view = dev.remap(1 << 20, 8 << 20, "gate0p1", false, None).unwrap();
    let mut ctx = view.context().unwrap();
    // Frozen after the context opened: its next bio waits at the gate for
    // the timeout plus the grace, then fails.
    let frozen = dev.freeze(Duration::from_secs(5)).unwrap();
    let (bio, r) = ctx.submit_wait(Bio::read_at(4096, view.alloc_buf(4096)));
    drop(frozen);
    assert_eq!(r.unwrap_err().status(), Status::Resource);
    assert_eq!(bio.offset_bytes(), 4096, "the offset the caller gave");
}
