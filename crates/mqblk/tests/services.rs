//! The block-layer services: splitting to limits, bouncing, merging,
//! write-zeroes emulation, and their accounting.

mod common;

use common::{pattern, recorder};
use mqblk::{Bio, BioFlags, Features, IoBuf, Op, QueueLimits};

/// Submit `n` bios built by `make(i)` through the callback API, in batches
/// of `batch`, and wait for all; returns how many failed.
fn run(ctx: &mut mqblk::Context, n: u64, batch: u64, mut make: impl FnMut(u64) -> Bio) -> u64 {
    let mut failed = 0;
    let mut next = 0;
    while next < n {
        let end = (next + batch).min(n);
        for i in next..end {
            ctx.submit(make(i)).unwrap();
        }
        let want = (end - next) as usize;
        let mut got = 0;
        while got < want {
            got += ctx.poll_wait(want - got, |c| {
                if c.result().is_err() {
                    failed += 1;
                }
            });
        }
        next = end;
    }
    failed
}

#[test]
fn large_io_is_one_request_per_bio_by_default() {
    let dev = mqblk::open("null,size=1G,hw_queues=1").unwrap();
    let mut ctx = dev.context().unwrap();
    let blocks = (1u64 << 30) / (128 << 10);
    run(&mut ctx, 256, 32, |i| {
        Bio::read_at((i * 7919 % blocks) * (128 << 10), dev.alloc_buf(128 << 10))
    });
    let s = ctx.stats();
    assert_eq!(s.bios, 256);
    assert_eq!(s.requests, 256, "128 KiB reads are never chopped up");
    assert_eq!(s.splits, 0);
}

#[test]
fn max_sectors_64_gives_exactly_four_requests_per_128k_bio() {
    let dev = mqblk::open("null,size=1G,hw_queues=1,max_sectors=64").unwrap();
    assert_eq!(dev.info().limits.max_sectors, 64);
    let mut ctx = dev.context().unwrap();
    let blocks = (1u64 << 30) / (128 << 10);
    let failed = run(&mut ctx, 200, 8, |i| {
        Bio::read_at((i * 7919 % blocks) * (128 << 10), dev.alloc_buf(128 << 10))
    });
    assert_eq!(failed, 0);
    let s = ctx.stats();
    assert_eq!(s.bios, 200);
    assert_eq!(s.requests, 800);
    assert_eq!(s.splits, 200);
    assert_eq!(s.bytes_copied, 0, "splitting is by reference");
}

#[test]
fn a_128_mib_io_is_split_not_refused_and_data_survives() {
    let (dev, shared) = recorder(
        256 << 20,
        QueueLimits {
            max_sectors: 256,
            max_segments: 16,
            ..QueueLimits::default()
        },
        Features::default(),
        |_| {},
    );
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(128 << 20);
    w.as_mut_slice().copy_from_slice(&pattern(1, 128 << 20));
    ctx.write_at(w.as_slice(), 64 << 20).unwrap();
    let mut r = dev.alloc_buf(128 << 20);
    ctx.read_at(r.as_mut_slice(), 64 << 20).unwrap();
    assert!(r.as_slice() == w.as_slice(), "128 MiB round trip");
    let log = shared.log.lock().unwrap();
    assert_eq!(log.len(), 2 * 1024, "128 MiB in 128 KiB requests, twice");
    assert!(log
        .iter()
        .all(|s| s.len_bytes <= 256 * 512 && s.nr_segments <= 16));
    assert_eq!(ctx.stats().splits, 2);
}

#[test]
fn requests_respect_chunk_boundaries_and_segment_limits() {
    let (dev, shared) = recorder(
        4 << 20,
        QueueLimits {
            chunk_sectors: 64,
            max_segments: 3,
            max_segment_size: 8192,
            ..QueueLimits::default()
        },
        Features::default(),
        |_| {},
    );
    let mut ctx = dev.context().unwrap();
    // Five 16 KiB segments starting 8 sectors before a chunk boundary.
    let bufs: Vec<IoBuf> = (0..5)
        .map(|i| {
            let mut b = dev.alloc_buf(16384);
            b.as_mut_slice().copy_from_slice(&pattern(i, 16384));
            b
        })
        .collect();
    let expect: Vec<u8> = bufs.iter().flat_map(|b| b.as_slice().to_vec()).collect();
    let slices: Vec<std::io::IoSlice<'_>> = bufs
        .iter()
        .map(|b| std::io::IoSlice::new(b.as_slice()))
        .collect();
    ctx.writev_at(&slices, 56 * 512).unwrap();
    for s in shared.log.lock().unwrap().iter() {
        assert_eq!(
            s.sector / 64,
            (s.sector + s.len_bytes / 512 - 1) / 64,
            "{s:?} crosses a chunk"
        );
        assert!(s.nr_segments <= 3, "{s:?}");
    }
    let mut r = dev.alloc_buf(expect.len());
    ctx.read_at(r.as_mut_slice(), 56 * 512).unwrap();
    assert!(r.as_slice() == &expect[..]);
}

#[test]
fn misaligned_buffers_are_bounced_counted_and_correct() {
    let dev = mqblk::open("null,size=16M,memory_backed=1,block_size=4096").unwrap();
    let mut ctx = dev.context().unwrap();
    let data = pattern(7, 16384);
    let mut backing = vec![0u8; 16384 + 1];
    backing[1..].copy_from_slice(&data);
    // Write from, then read into, a buffer one byte off alignment.
    ctx.write_at(&backing[1..], 8192).unwrap();
    let mut back = vec![0u8; 16384 + 3];
    ctx.read_at(&mut back[3..], 8192).unwrap();
    assert!(back[3..] == data[..]);
    assert_eq!(
        ctx.stats().bytes_copied,
        2 * 16384,
        "both directions counted"
    );
    // An aligned read of the same range needs no copy and agrees.
    let before = ctx.stats().bytes_copied;
    let mut aligned = dev.alloc_buf(16384);
    ctx.read_at(aligned.as_mut_slice(), 8192).unwrap();
    assert!(aligned.as_slice() == &data[..]);
    assert_eq!(ctx.stats().bytes_copied, before);
}

#[test]
fn sequential_writes_merge_in_the_plug_and_nomerges_2_stops_it() {
    for (spec, expect_merges) in [
        ("null,size=64M,memory_backed=1,hw_queues=1", true),
        ("null,size=64M,memory_backed=1,hw_queues=1,nomerges=1", true),
        (
            "null,size=64M,memory_backed=1,hw_queues=1,nomerges=2",
            false,
        ),
    ] {
        let dev = mqblk::open(spec).unwrap();
        let mut ctx = dev.context().unwrap();
        let failed = run(&mut ctx, 512, 32, |i| {
            let mut b = dev.alloc_buf(4096);
            b.as_mut_slice().copy_from_slice(&pattern(i, 4096));
            Bio::write_at(i * 4096, b)
        });
        assert_eq!(failed, 0);
        let s = ctx.stats();
        assert_eq!(s.bios, 512);
        if expect_merges {
            assert!(s.merges[1] > 0, "{spec}: no merges");
            assert!(
                s.requests < s.bios,
                "{spec}: requests {} bios {}",
                s.requests,
                s.bios
            );
            assert_eq!(s.requests + s.merges[1], s.bios);
        } else {
            assert_eq!(s.merges[1], 0, "{spec}");
            assert_eq!(s.requests, s.bios);
        }
        // Merged or not, every byte landed where it belongs.
        let mut r = dev.alloc_buf(512 * 4096);
        ctx.read_at(r.as_mut_slice(), 0).unwrap();
        for i in 0..512u64 {
            assert!(
                r.as_slice()[(i as usize) * 4096..][..4096] == pattern(i, 4096)[..],
                "{spec} block {i}"
            );
        }
    }
}

#[test]
fn merges_never_break_limits_and_front_merges_work() {
    let (dev, shared) = recorder(
        8 << 20,
        QueueLimits {
            max_sectors: 32,
            ..QueueLimits::default()
        },
        Features::default(),
        |_| {},
    );
    let mut ctx = dev.context().unwrap();
    // Descending sectors: each bio precedes the last one (front merges).
    run(&mut ctx, 64, 32, |i| {
        Bio::write_at((63 - i) * 4096, dev.alloc_buf(4096))
    });
    let s = ctx.stats();
    assert!(s.merges[1] > 0, "front merges happen");
    let log = shared.log.lock().unwrap();
    assert!(
        log.iter().all(|r| r.len_bytes <= 32 * 512),
        "a merge broke max_sectors"
    );
    assert!(log.iter().any(|r| r.nr_bios > 1));
}

#[test]
fn discards_merge_and_split() {
    let (dev, shared) = recorder(
        8 << 20,
        QueueLimits {
            max_discard_sectors: 64,
            ..QueueLimits::default()
        },
        Features {
            discard: true,
            ..Features::default()
        },
        |_| {},
    );
    let mut ctx = dev.context().unwrap();
    run(&mut ctx, 16, 16, |i| Bio::discard_at(i * 4096, 4096));
    ctx.discard(1 << 20, 200 * 512).unwrap();
    let s = ctx.stats();
    assert!(s.merges[2] > 0, "contiguous discards merge");
    let log = shared.log.lock().unwrap();
    assert!(log
        .iter()
        .all(|r| r.op == Op::Discard && r.len_bytes <= 64 * 512));
    let big: u64 = log
        .iter()
        .filter(|r| r.sector >= 2048)
        .map(|r| r.len_bytes)
        .sum();
    assert_eq!(big, 200 * 512);
}

#[test]
fn write_zeroes_is_emulated_with_writes_when_the_device_lacks_it() {
    let (dev, shared) = recorder(8 << 20, QueueLimits::default(), Features::default(), |_| {});
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(1 << 20);
    w.as_mut_slice().fill(0xaa);
    ctx.write_at(w.as_slice(), 0).unwrap();
    ctx.write_zeroes(4096, 300 * 1024).unwrap();
    let mut r = dev.alloc_buf(1 << 20);
    ctx.read_at(r.as_mut_slice(), 0).unwrap();
    let r = r.as_slice();
    assert!(r[..4096].iter().all(|&b| b == 0xaa));
    assert!(r[4096..4096 + 300 * 1024].iter().all(|&b| b == 0));
    assert!(r[4096 + 300 * 1024..].iter().all(|&b| b == 0xaa));
    let log = shared.log.lock().unwrap();
    assert!(
        log.iter().all(|s| s.op != Op::WriteZeroes),
        "the device never sees write-zeroes"
    );
}

#[test]
fn fua_reaches_a_device_that_has_it_and_is_dropped_without_a_cache() {
    let feats = Features {
        write_cache: true,
        fua: true,
        ..Features::default()
    };
    let (dev, shared) = recorder(1 << 20, QueueLimits::default(), feats, |_| {});
    let mut ctx = dev.context().unwrap();
    let mut bio = Bio::write_at(0, dev.alloc_buf(4096));
    bio.set_flags(BioFlags::FUA);
    ctx.submit_wait(bio).1.unwrap();
    assert!(shared.log.lock().unwrap()[0].fua);

    // Write cache without FUA: DATA then POSTFLUSH.
    let feats = Features {
        write_cache: true,
        ..Features::default()
    };
    let (dev, shared) = recorder(1 << 20, QueueLimits::default(), feats, |_| {});
    let mut ctx = dev.context().unwrap();
    let mut bio = Bio::write_at(0, dev.alloc_buf(4096));
    bio.set_flags(BioFlags::FUA | BioFlags::PREFLUSH);
    ctx.submit_wait(bio).1.unwrap();
    let ops: Vec<(Op, bool)> = shared
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.op, s.fua))
        .collect();
    assert_eq!(
        ops,
        vec![(Op::Flush, false), (Op::Write, false), (Op::Flush, false)]
    );

    // No write cache: no flushes at all, and no FUA flag.
    let (dev, shared) = recorder(1 << 20, QueueLimits::default(), Features::default(), |_| {});
    let mut ctx = dev.context().unwrap();
    let mut bio = Bio::write_at(0, dev.alloc_buf(4096));
    bio.set_flags(BioFlags::FUA | BioFlags::PREFLUSH);
    ctx.submit_wait(bio).1.unwrap();
    ctx.flush().unwrap();
    let ops: Vec<(Op, bool)> = shared
        .log
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.op, s.fua))
        .collect();
    assert_eq!(ops, vec![(Op::Write, false)]);
}

#[test]
fn a_split_bio_fails_once_with_the_first_error() {
    let dev =
        mqblk::open("null,size=64M,hw_queues=1,max_sectors=8,error_probability=2,seed=11").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut completions = 0;
    let mut failures = 0;
    for i in 0..64u64 {
        ctx.submit(Bio::read_at(i * 65536, dev.alloc_buf(64 << 10)))
            .unwrap();
    }
    while completions < 64 {
        completions += ctx.poll_wait(1, |c| {
            if let Err(e) = c.result() {
                failures += 1;
                assert!(e.to_string().contains("I/O error"), "{e}");
            }
        });
    }
    assert_eq!(completions, 64, "each parent completes exactly once");
    assert!(failures > 0 && failures < 64, "{failures}");
    assert_eq!(ctx.stats().requests, 64 * 16);
}

#[test]
fn depth_limits_and_plug_change_100_times_under_io() {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let dev = mqblk::open(
        "null,size=64M,memory_backed=1,hw_queues=2,queue_depth=32,queue_depth_max=128,completion=deferred",
    )
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let jobs: Vec<_> = (0..2u64)
        .map(|t| {
            let (dev, stop) = (dev.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ctx = dev.context().unwrap();
                let mut seen: HashMap<u64, u32> = HashMap::new();
                let mut free: Vec<Bio> = (0..48)
                    .map(|_| Bio::write_at(0, dev.alloc_buf(64 << 10)))
                    .collect();
                let mut next = 0u64;
                while !stop.load(Ordering::Relaxed) || ctx.in_flight() > 0 || ctx.ready() > 0 {
                    while !stop.load(Ordering::Relaxed) {
                        let Some(mut bio) = free.pop() else { break };
                        // Each job writes its own half; 64 KiB bios, so a
                        // small max_sectors splits them.
                        bio.set_op(if next.is_multiple_of(3) {
                            Op::Read
                        } else {
                            Op::Write
                        });
                        bio.set_offset_bytes((t * 65536 + (next % 256) * 128) * 512);
                        bio.private = next;
                        next += 1;
                        if let Err(b) = ctx.submit(bio) {
                            free.push(b.into_bio());
                            break;
                        }
                    }
                    ctx.poll_wait(1, |c| {
                        assert!(c.result().is_ok(), "{:?}", c.result());
                        *seen.entry(c.private()).or_default() += 1;
                        free.push(c.into_bio());
                    });
                }
                (next, seen)
            })
        })
        .collect();
    let t = std::time::Instant::now();
    while jobs.iter().any(|j| !j.is_finished()) && t.elapsed() < std::time::Duration::from_millis(5)
    {
        std::thread::yield_now();
    }
    for i in 0..100u32 {
        let mut f = dev
            .freeze(std::time::Duration::from_secs(30))
            .expect("freeze drains");
        f.set_queue_depth([4, 128, 16, 64][i as usize % 4]).unwrap();
        f.set_limits(mqblk::LimitOverrides {
            max_sectors: Some([8, 256, 64, 128][i as usize % 4]),
            ..Default::default()
        })
        .unwrap();
        f.set_plug(i % 2 == 0);
        drop(f);
        std::thread::sleep(std::time::Duration::from_micros(300));
    }
    assert_eq!(dev.limits().max_sectors, 128);
    stop.store(true, Ordering::Relaxed);
    for j in jobs {
        let (issued, seen) = j.join().unwrap();
        assert!(issued > 0);
        assert_eq!(seen.len() as u64, issued, "every bio completed");
        assert!(seen.values().all(|&n| n == 1), "a bio completed twice");
    }
    assert!(
        dev.stats().snapshot().splits > 0,
        "small max_sectors split some bios"
    );
    // Lowering below what is in use fails cleanly rather than corrupting.
    let mut f = dev.freeze(std::time::Duration::from_secs(5)).unwrap();
    assert!(f.set_queue_depth(0).is_err());
    assert!(f.set_queue_depth(1000).is_err());
}

#[test]
fn quiesce_holds_dispatch_and_unquiesce_releases_it() {
    let (dev, shared) = recorder(1 << 20, QueueLimits::default(), Features::default(), |c| {
        c.plug = false;
    });
    let mut ctx = dev.context().unwrap();
    let q = dev.quiesce();
    for i in 0..8u64 {
        ctx.submit(Bio::read_at(i * 4096, dev.alloc_buf(4096)))
            .unwrap();
    }
    let mut done = 0;
    for _ in 0..100 {
        done += ctx.poll(|_| {});
    }
    assert_eq!(done, 0, "nothing completes while quiesced");
    assert!(
        shared.log.lock().unwrap().is_empty(),
        "nothing reached the driver"
    );
    // While the first request waits in the software queue, the contiguous
    // bios after it merge into it.
    assert_eq!(ctx.in_flight(), 1);
    assert_eq!(ctx.stats().merges[0], 7);
    drop(q);
    while done < 8 {
        done += ctx.poll_wait(8 - done, |c| assert!(c.result().is_ok()));
    }
    let log = shared.log.lock().unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].nr_bios, 8);
    assert_eq!(log[0].len_bytes, 8 * 4096);
}

/// A driver whose completions appear only after `wait` (as an interrupt-
/// driven device's would): without the core's driver-wait path a waiting
/// context would never see them. With `can_wait` false it is never asked.
mod waiting {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use mqblk::driver::HwQueueSetup;
    use mqblk::driver::{Completions, Driver, QueueRq, RqRef};
    use mqblk::{Device, DeviceConfig, Status};

    pub struct Irq {
        pub waits: Arc<AtomicU64>,
        pub can: bool,
    }

    #[derive(Default)]
    pub struct Q {
        held: Vec<RqRef>,
        ready: bool,
    }

    impl Driver for Irq {
        type HwQueue = Q;
        fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> mqblk::Result<Q> {
            Ok(Q::default())
        }
        fn queue_rq(&self, q: &mut Q, rq: RqRef, _last: bool, _d: &mut Completions<'_>) -> QueueRq {
            q.held.push(rq);
            QueueRq::Issued
        }
        fn commit_rqs(&self, _q: &mut Q) {}
        fn poll(&self, q: &mut Q, done: &mut Completions<'_>) -> usize {
            if !q.ready && self.can {
                return 0;
            }
            q.ready = false;
            let n = q.held.len();
            for rq in q.held.drain(..) {
                done.complete(rq, Status::Ok);
            }
            n
        }
        fn wait(&self, q: &mut Q, _t: std::time::Duration) -> bool {
            assert!(self.can, "the core asked a driver that cannot wait");
            self.waits.fetch_add(1, Ordering::Relaxed);
            q.ready = true;
            true
        }
        fn can_wait(&self) -> bool {
            self.can
        }
    }

    pub fn device(can: bool) -> (Device, Arc<AtomicU64>) {
        let waits = Arc::new(AtomicU64::new(0));
        let mut c = DeviceConfig::new("irq0", 1 << 20);
        c.nr_hw_queues = 1;
        let dev = Device::new(
            Irq {
                waits: waits.clone(),
                can,
            },
            c,
        )
        .unwrap();
        (dev, waits)
    }
}

#[test]
fn a_waiting_context_blocks_in_a_driver_that_can_wait() {
    // Without the driver-wait path the first read would never complete:
    // fail after a bound instead of hanging.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        driver_wait_body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("a read on a waiting driver hung")
        }
        Err(_) => panic!("the test thread panicked (see above)"),
    }
}

fn driver_wait_body() {
    let (dev, waits) = waiting::device(true);
    let mut ctx = dev.context().unwrap();
    let mut buf = dev.alloc_buf(4096);
    ctx.read_at(buf.as_mut_slice(), 0).unwrap();
    assert!(
        waits.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "completion came through Driver::wait"
    );
    // A driver without the capability is polled, never asked to wait.
    let (dev, waits) = waiting::device(false);
    let mut ctx = dev.context().unwrap();
    ctx.read_at(buf.as_mut_slice(), 0).unwrap();
    assert_eq!(waits.load(std::sync::atomic::Ordering::Relaxed), 0);
}
