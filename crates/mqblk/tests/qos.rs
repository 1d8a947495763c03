//! Schedulers and io.max through the front door: spec keys, bad input,
//! priorities, and a scheduler switched under load with nothing lost.
//! (Rates and latencies are measured by scripts/qos-figures.sh, not here.)

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mqblk::sched::{BfqParams, BfqType, DeadlineParams, KyberParams, KyberType, MqDeadlineType};
use mqblk::stats::StatGroup;
use mqblk::throttle::IoMaxLimits;
use mqblk::{Error, IoPrio, IoPrioClass};

use common::pattern;

/// How many times each bio was delivered, by its tag (the bio's `private`
/// word, numbered from 0 as the bios are submitted). Counting a delivery
/// for a tag never given out fails at once.
struct Tally(Vec<u32>);

impl Tally {
    fn new() -> Tally {
        Tally(Vec::new())
    }

    /// The tag of the next bio submitted.
    fn tag(&mut self) -> u64 {
        self.0.push(0);
        self.0.len() as u64 - 1
    }

    fn delivered(&mut self, tag: u64) {
        let n = self.0.len();
        let count = self.0.get_mut(tag as usize).unwrap_or_else(|| {
            panic!("a delivery for tag {tag}, but only {n} bios were submitted")
        });
        *count += 1;
    }

    fn submitted(&self) -> usize {
        self.0.len()
    }

    /// Every bio submitted was delivered, and none more than once.
    fn assert_each_once(&self, what: &str) {
        let never: Vec<usize> = (0..self.0.len()).filter(|&t| self.0[t] == 0).collect();
        let again: Vec<(usize, u32)> = (0..self.0.len())
            .filter(|&t| self.0[t] > 1)
            .map(|t| (t, self.0[t]))
            .collect();
        assert!(never.is_empty(), "{what}: bios never delivered: {never:?}");
        assert!(
            again.is_empty(),
            "{what}: (bio, deliveries) delivered more than once: {again:?}"
        );
    }
}

#[test]
fn bad_scheduler_and_limit_keys_are_refused_by_name() {
    for (spec, key) in [
        ("null,scheduler=cfq", "scheduler"),
        ("null,riops=-5", "riops"),
        ("null,rbps=lots", "rbps"),
        ("null,read_expire=2", "read_expire"),
        ("null,scheduler=mq-deadline,fifo_batch=0", "fifo_batch"),
        ("null,throttle_burst_ms=99999", "throttle_burst_ms"),
        ("null,scheduler=kyber,read_lat_nsec=0", "read_lat_nsec"),
        ("null,scheduler=bfq,max_budget=1", "max_budget"),
    ] {
        match mqblk::open(spec) {
            Err(e @ Error::Spec { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(key), "{spec}: `{msg}` does not name {key}");
            }
            Err(e) => panic!("{spec}: wrong error kind: {e}"),
            Ok(_) => panic!("{spec}: accepted"),
        }
    }
}

#[test]
fn every_scheduler_serves_every_priority_class() {
    for spec in [
        "null,size=64M,scheduler=mq-deadline,read_expire=2,fifo_batch=8",
        "null,size=64M,scheduler=kyber,read_lat_nsec=1000000",
        "null,size=64M,scheduler=bfq,max_budget=64",
        "null,size=64M,completion=timer,completion_nsec=20000,scheduler=bfq,hw_queues=1",
    ] {
        serve_every_class(spec);
    }
}

fn serve_every_class(spec: &str) {
    let dev = mqblk::open(spec).expect("open");
    let mut handles = Vec::new();
    for class in IoPrioClass::ALL {
        let dev = dev.clone();
        handles.push(std::thread::spawn(move || {
            let mut ctx = dev.context().expect("context");
            ctx.set_ioprio(IoPrio { class, level: 0 });
            let mut buf = dev.alloc_buf(4096);
            for i in 0..500u64 {
                ctx.read_at(buf.as_mut_slice(), (i % 1024) * 4096)
                    .expect("read");
                ctx.write_at(buf.as_slice(), (i % 1024) * 4096)
                    .expect("write");
            }
        }));
    }
    for h in handles {
        h.join().expect("worker");
    }
    // Each blocking call is one request (one bio each, none merged): the
    // device completed every one, once.
    let s = dev.stats().snapshot();
    let calls = IoPrioClass::ALL.len() as u64 * 500;
    assert_eq!(s.ios[StatGroup::Read as usize], calls, "{spec}: reads");
    assert_eq!(s.ios[StatGroup::Write as usize], calls, "{spec}: writes");
    assert_eq!(s.in_flight, 0, "{spec}");
}

#[test]
fn io_max_limits_change_while_the_device_runs() {
    let dev = mqblk::open("null,size=64M,riops=1000000,wbps=1g").expect("open");
    let m = dev.io_max().clone();
    assert_eq!(m.limits().riops, 1_000_000);
    assert_eq!(m.limits().wbps, 1 << 30);
    let mut ctx = dev.context().expect("context");
    let mut buf = dev.alloc_buf(4096);
    for i in 0..100 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    m.set_limits(IoMaxLimits {
        riops: 0,
        ..m.limits()
    });
    for i in 0..100 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    assert_eq!(m.limits().riops, 0);
    assert_eq!(dev.stats().snapshot().ios[StatGroup::Read as usize], 200);
}

/// Bios a worker of [`switching_the_scheduler_under_load_loses_nothing`]
/// keeps in flight at once.
const SWITCH_DEPTH: usize = 4;
const SWITCH_BS: usize = 16384;
/// Blocks of `SWITCH_BS` in each worker's own region of the device.
const SWITCH_BLOCKS: u64 = 512;

/// What one switching worker did: how many times each of its bios was
/// delivered, and how many rounds it ran.
struct Delivered {
    tally: Tally,
    rounds: u64,
}

/// One worker of [`switching_the_scheduler_under_load_loses_nothing`]:
/// rounds of `SWITCH_DEPTH` writes then the reads of the same blocks, each
/// bio tagged with its own number, every delivery counted against its tag
/// and every read checked against what its round wrote. After the last
/// round, one more poll catches a delivery that comes late.
fn switching_worker(dev: &mqblk::Device, w: u64, stop: &AtomicBool) -> Delivered {
    let mut ctx = dev.context().expect("context");
    let mut idle: Vec<mqblk::Bio> = (0..SWITCH_DEPTH)
        .map(|_| mqblk::Bio::write_at(0, dev.alloc_buf(SWITCH_BS)))
        .collect();
    let mut tally = Tally::new();
    let region = w * SWITCH_BLOCKS * SWITCH_BS as u64;
    // Stride 7 over the region: the blocks of one round are never
    // neighbours, so every bio is a request of its own.
    let offset = |round: u64, i: usize| {
        region + (round * SWITCH_DEPTH as u64 + i as u64) * 7 % SWITCH_BLOCKS * SWITCH_BS as u64
    };
    let seed = |offset_bytes: u64, round: u64| offset_bytes ^ (round << 40) ^ (w << 60);
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) || round < 50 {
        for op in [mqblk::Op::Write, mqblk::Op::Read] {
            for (i, mut bio) in idle.drain(..).enumerate() {
                let off = offset(round, i);
                bio.set_op(op);
                bio.set_offset_bytes(off);
                let buf = bio.segments_mut()[0].as_mut_slice();
                match op {
                    mqblk::Op::Write => buf.copy_from_slice(&pattern(seed(off, round), SWITCH_BS)),
                    _ => buf.fill(0),
                }
                bio.private = tally.tag();
                ctx.submit(bio).expect("submit");
            }
            ctx.unplug();
            while idle.len() < SWITCH_DEPTH {
                let got = ctx.poll_wait(1, |c| {
                    tally.delivered(c.private());
                    c.result().expect("I/O");
                    let bio = c.into_bio();
                    if bio.op() == mqblk::Op::Read {
                        let off = bio.offset_bytes();
                        assert!(
                            bio.segments()[0].as_slice()
                                == &pattern(seed(off, round), SWITCH_BS)[..],
                            "worker {w} round {round}: the read at {off} does not match its write"
                        );
                    }
                    idle.push(bio);
                });
                assert!(
                    got > 0 || ctx.in_flight() > 0,
                    "worker {w} round {round}: {} bios in flight never completed",
                    SWITCH_DEPTH - idle.len()
                );
            }
        }
        round += 1;
    }
    assert_eq!(ctx.in_flight(), 0);
    ctx.poll(|c| tally.delivered(c.private()));
    Delivered {
        tally,
        rounds: round,
    }
}

/// Acceptance 6 of the QoS issue, shortened: the scheduler switches 100
/// times while writers verify what they wrote; nothing is lost, doubled or
/// corrupted. Every bio carries its own tag, and each delivery is counted
/// against it: a bio delivered twice, or never, fails the test.
#[test]
fn switching_the_scheduler_under_load_loses_nothing() {
    let dev = mqblk::open("ram,size=16M,queue_depth=8").expect("open");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let dev = dev.clone();
            let stop = stop.clone();
            std::thread::spawn(move || switching_worker(&dev, w, &stop))
        })
        .collect();
    let kinds: [Option<Arc<dyn mqblk::sched::ElevatorType>>; 4] = [
        Some(MqDeadlineType::new(DeadlineParams::default())),
        Some(KyberType::new(KyberParams::default())),
        Some(BfqType::new(BfqParams::default())),
        None,
    ];
    for i in 0..100 {
        let mut frozen = dev.freeze(Duration::from_secs(30)).expect("freeze");
        let e = kinds[i % 4].clone();
        frozen.set_elevator(e).expect("switch");
        drop(frozen);
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let mut submitted = 0u64;
    for (w, h) in workers.into_iter().enumerate() {
        let d = h.join().expect("worker");
        // Each round submits SWITCH_DEPTH writes and as many reads.
        let bios = d.tally.submitted() as u64;
        assert_eq!(bios, d.rounds * 2 * SWITCH_DEPTH as u64);
        d.tally.assert_each_once(&format!("worker {w}"));
        println!(
            "worker {w}: {} rounds, {bios} bios, each delivered exactly once",
            d.rounds
        );
        submitted += bios;
    }
    let s = dev.stats().snapshot();
    assert_eq!(s.in_flight, 0, "every request completed");
    assert_eq!(s.errors, 0);
    // No two bios merged, so the device completed one request per bio.
    let (r, w) = (StatGroup::Read as usize, StatGroup::Write as usize);
    assert_eq!(
        s.ios[r] + s.ios[w],
        submitted,
        "requests completed by the device"
    );
}

#[test]
fn groups_are_created_changed_and_removed_with_typed_errors() {
    use mqblk::GroupConfig;
    let dev = mqblk::open("null,size=64M").expect("open");
    assert_eq!(dev.group_names(), vec!["default"]);
    let g = dev
        .create_group(
            "tenant-a",
            GroupConfig {
                weight: 300,
                ..Default::default()
            },
        )
        .expect("create");
    assert_eq!(g.weight(), 300);
    // Bad input names the group and the key.
    let bad = [
        dev.create_group(
            "w0",
            GroupConfig {
                weight: 0,
                ..Default::default()
            },
        ),
        dev.create_group(
            "w1001",
            GroupConfig {
                weight: 1001,
                ..Default::default()
            },
        ),
        dev.create_group("tenant-a", GroupConfig::default()),
        dev.create_group("bad name", GroupConfig::default()),
        dev.group("nobody"),
    ];
    for (r, key) in bad
        .into_iter()
        .zip(["weight", "weight", "name", "name", "name"])
    {
        match r {
            Err(e @ Error::Group { .. }) => {
                let m = e.to_string();
                assert!(m.contains(key), "`{m}` does not name {key}");
            }
            other => panic!("expected a group error, got {other:?}"),
        }
    }
    assert!(matches!(
        g.set_weight(0),
        Err(Error::Group { key: "weight", .. })
    ));
    g.set_weight(50).expect("weight");
    g.set_ioprio(IoPrio {
        class: IoPrioClass::Idle,
        level: 0,
    })
    .expect("prio");

    // A context in the group carries its priority, and the group cannot go
    // while the context is in it.
    let mut ctx = dev.context_in(&g).expect("context");
    assert_eq!(ctx.group().name(), "tenant-a");
    assert_eq!(ctx.ioprio().class, IoPrioClass::Idle);
    let mut buf = dev.alloc_buf(4096);
    ctx.read_at(buf.as_mut_slice(), 0).expect("read");
    assert!(matches!(
        dev.remove_group("tenant-a"),
        Err(Error::Group { .. })
    ));
    assert!(matches!(
        dev.remove_group("default"),
        Err(Error::Group { .. })
    ));
    drop(ctx);
    dev.remove_group("tenant-a").expect("remove");
    assert_eq!(dev.group_names(), vec!["default"]);
}

#[test]
fn a_group_limit_holds_its_contexts_and_changes_live() {
    let dev = mqblk::open("null,size=64M,completion=inline").expect("open");
    let g = dev
        .create_group(
            "slow",
            mqblk::GroupConfig {
                limits: IoMaxLimits {
                    riops: 2000,
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .expect("create");
    let mut ctx = dev.context_in(&g).expect("context");
    let mut buf = dev.alloc_buf(4096);
    // 2000/s with a 10 ms burst: 100 reads take at least ~40 ms of the
    // bucket's clock; what is checked is that they all complete, and that
    // a limit lifted under load lets the rest run free.
    for i in 0..100 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    g.set_limits(IoMaxLimits::default());
    for i in 0..1000 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    assert_eq!(dev.stats().snapshot().ios[0], 1100);
}

/// A 16 MiB null device that completes inline, a group `name` on it with
/// no limit yet, and a context in the group.
fn group_on_inline_null(name: &str) -> (mqblk::Device, Arc<mqblk::Group>, mqblk::Context) {
    let dev = mqblk::open("null,size=16M,completion=inline").expect("open");
    let g = dev
        .create_group(name, mqblk::GroupConfig::default())
        .expect("create");
    let ctx = dev.context_in(&g).expect("context");
    (dev, g, ctx)
}

/// A read's delivery: it succeeded, and it is counted against its tag.
fn read_delivered(tally: &mut Tally, c: mqblk::Completion<'_>) {
    c.result().expect("read");
    tally.delivered(c.private());
}

/// Three 4 KiB reads submitted on a context under riops=1, each tagged in
/// `tally`: at most one goes at once, and the others are held, in flight.
/// How many completed at once.
fn three_reads_held(dev: &mqblk::Device, ctx: &mut mqblk::Context, tally: &mut Tally) -> usize {
    for i in 0..3u64 {
        let mut bio = mqblk::Bio::read_at(i * 4096, dev.alloc_buf(4096));
        bio.private = tally.tag();
        ctx.submit(bio).expect("submit");
    }
    ctx.unplug();
    let done = ctx.poll(|c| read_delivered(tally, c));
    assert!(done <= 1, "{done} reads went at once under riops=1");
    assert_eq!(ctx.in_flight() as usize, 3 - done);
    done
}

/// Wait until the context has nothing in flight, each read's delivery
/// counted; how many completed. A last poll then catches a delivery that
/// comes late.
fn reap_reads(ctx: &mut mqblk::Context, tally: &mut Tally) -> usize {
    let mut done = 0;
    while ctx.in_flight() > 0 {
        done += ctx.poll_wait(1, |c| read_delivered(tally, c));
    }
    ctx.poll(|c| tally.delivered(c.private()));
    done
}

/// A limit set on a group after the device exists holds bios back: the
/// device learns that one of its buckets is limited (one count per
/// device), and the held bios count as in flight until they go.
#[test]
fn a_limit_set_later_on_a_group_holds_its_bios_back() {
    let (dev, g, mut ctx) = group_on_inline_null("late");
    g.set_limits(IoMaxLimits {
        riops: 1,
        ..Default::default()
    });
    g.set_burst_ms(0);
    let mut tally = Tally::new();
    // One read a second: the first went, the other two wait 1 and 2 s.
    let mut done = three_reads_held(&dev, &mut ctx, &mut tally);
    done += reap_reads(&mut ctx, &mut tally);
    assert_eq!(done, 3);
    tally.assert_each_once("riops=1 set later");
}

/// A limit set while a context is already submitting holds its next bios
/// back: setting it moves the device's gate, so the context, which tests
/// admission as one bit of its feature word, looks again at its next bio.
#[test]
fn a_limit_set_on_a_running_context_holds_its_next_bios_back() {
    let (dev, g, mut ctx) = group_on_inline_null("running");
    let mut buf = dev.alloc_buf(4096);
    // Unlimited, and past the gate already.
    for i in 0..10u64 {
        ctx.read_at(buf.as_mut_slice(), i * 4096).expect("read");
    }
    g.set_burst_ms(0);
    g.set_limits(IoMaxLimits {
        riops: 1,
        ..Default::default()
    });
    let mut tally = Tally::new();
    let mut done = three_reads_held(&dev, &mut ctx, &mut tally);
    // Lifted again: what is held goes, and new bios go at once.
    g.set_limits(IoMaxLimits::default());
    done += reap_reads(&mut ctx, &mut tally);
    assert_eq!(done, 3);
    tally.assert_each_once("riops=1 set on a running context, then lifted");
}

/// A driver that holds what it is given until a poll, counting the writes
/// it holds at once.
mod holding {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use mqblk::driver::{Completions, Driver, HwQueueSetup, QueueRq, RqRef};
    use mqblk::Status;

    pub struct Hold {
        pub max_writes: Arc<AtomicU64>,
    }

    #[derive(Default)]
    pub struct Q {
        held: Vec<RqRef>,
        writes: u64,
    }

    impl Driver for Hold {
        type HwQueue = Q;
        fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> mqblk::Result<Q> {
            Ok(Q::default())
        }
        fn queue_rq(&self, q: &mut Q, rq: RqRef, _last: bool, _d: &mut Completions<'_>) -> QueueRq {
            if rq.op().is_write() {
                q.writes += 1;
                self.max_writes.fetch_max(q.writes, Ordering::Relaxed);
            }
            q.held.push(rq);
            QueueRq::Issued
        }
        fn commit_rqs(&self, _q: &mut Q) {}
        fn poll(&self, q: &mut Q, done: &mut Completions<'_>) -> usize {
            let n = q.held.len();
            for rq in q.held.drain(..) {
                q.writes -= u64::from(rq.op().is_write());
                done.complete(rq, Status::Ok);
            }
            n
        }
    }
}

#[test]
fn mq_deadline_async_depth_bounds_the_writes_a_queue_holds() {
    use std::sync::atomic::AtomicU64;
    let max_writes = Arc::new(AtomicU64::new(0));
    let mut c = mqblk::DeviceConfig::new("hold0", 1 << 20);
    c.nr_hw_queues = 1;
    c.queue_depth = 8;
    c.elevator = Some(MqDeadlineType::new(DeadlineParams {
        async_depth: 3,
        ..DeadlineParams::default()
    }));
    let dev = mqblk::Device::new(
        holding::Hold {
            max_writes: max_writes.clone(),
        },
        c,
    )
    .unwrap();
    // The limit is the queue's, not a share of it per context: one
    // context writing, beside another that only reads, reaches it.
    let mut ctxs = [dev.context().unwrap(), dev.context().unwrap()];
    let mut tally = Tally::new();
    for i in 0..40u64 {
        // Apart, so that no two merge into one request.
        let mut bio = mqblk::Bio::at(mqblk::Op::Write, i * 8192);
        bio.push_segment(dev.alloc_buf(4096), 0, 4096);
        bio.private = tally.tag();
        ctxs[0].submit(bio).unwrap();
    }
    let mut bio = mqblk::Bio::at(mqblk::Op::Read, 0);
    bio.push_segment(dev.alloc_buf(4096), 0, 4096);
    bio.private = tally.tag();
    ctxs[1].submit(bio).unwrap();
    for ctx in &mut ctxs {
        while ctx.in_flight() > 0 || ctx.ready() > 0 {
            ctx.poll_wait(1, |c| {
                assert!(c.status().is_ok());
                tally.delivered(c.private());
            });
        }
    }
    for ctx in &mut ctxs {
        ctx.poll(|c| tally.delivered(c.private()));
    }
    assert_eq!(tally.submitted(), 41);
    tally.assert_each_once("async_depth=3");
    let max = max_writes.load(Ordering::Relaxed);
    assert_eq!(
        max, 3,
        "the driver held {max} writes at once, with async_depth=3"
    );
    // The key is mq-deadline's, checked by name.
    for (spec, key) in [
        ("null,scheduler=mq-deadline,async_depth=0", "async_depth"),
        ("null,async_depth=4", "async_depth"),
    ] {
        let msg = match mqblk::open(spec) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{spec}: accepted"),
        };
        assert!(msg.contains(key), "{spec}: {msg}");
    }
    mqblk::open("null,scheduler=mq-deadline,async_depth=6").expect("a valid async_depth");
}
