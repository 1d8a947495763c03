//! End-to-end tests of the pipeline on the null device: tags, requeue,
//! timeouts, fault injection, queue modes, plugging and the three front ends.

use std::collections::HashMap;
use std::sync::mpsc;
use std::time::Duration;

use mqblk::{Bio, Device, Error, IoBuf, Op, Status};

/// Run `f` on a thread and fail (instead of hanging) if it takes too long.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hung for 60 s"),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            panic!("{what}: the test thread panicked (see above)")
        }
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Submit `n` reads with distinct cookies through the callback API and
/// return how many times each cookie completed, with its status.
fn run_callbacks(dev: &Device, n: u64, bs: usize) -> HashMap<u64, (u32, Status)> {
    let mut ctx = dev.context().unwrap();
    let mut seen: HashMap<u64, (u32, Status)> = HashMap::new();
    let blocks = dev.capacity_bytes() / bs as u64;
    let mut next = 0u64;
    let mut free: Vec<Bio> = (0..32)
        .map(|_| Bio::read_at(0, dev.alloc_buf(bs)))
        .collect();
    while next < n || ctx.in_flight() > 0 || ctx.ready() > 0 {
        while next < n {
            let Some(mut bio) = free.pop() else { break };
            bio.set_offset_bytes((next * 7919 % blocks) * bs as u64);
            bio.private = next;
            match ctx.submit(bio) {
                Ok(()) => next += 1,
                Err(bio) => {
                    free.push(bio.into_bio());
                    break;
                }
            }
        }
        ctx.poll_wait(1, |c| {
            let e = seen.entry(c.private()).or_insert((0, c.status()));
            e.0 += 1;
            e.1 = c.status();
            free.push(c.into_bio());
        });
    }
    seen
}

#[test]
fn every_bio_completes_exactly_once_under_fault_injection() {
    let seen = within("faults", || {
        let dev = mqblk::open(
            "null,size=64M,hw_queues=2,queue_depth=8,completion=deferred,\
             error_probability=10,requeue_probability=10,timeout_probability=2,\
             io_timeout_ms=20,seed=7",
        )
        .unwrap();
        let seen = run_callbacks(&dev, 3000, 4096);
        let stats = dev.stats().snapshot();
        assert!(stats.requeues > 0, "requeue injection never fired");
        assert!(stats.timeouts > 0, "timeout injection never fired");
        assert!(stats.errors > 0, "error injection never fired");
        seen
    });
    assert_eq!(seen.len(), 3000, "some bios never completed");
    assert!(seen.values().all(|(n, _)| *n == 1), "a bio completed twice");
    let statuses: std::collections::HashSet<Status> = seen.values().map(|(_, s)| *s).collect();
    assert!(statuses.contains(&Status::Ok));
    assert!(statuses.contains(&Status::IoError));
    assert!(statuses.contains(&Status::Timeout));
}

#[test]
fn tag_exhaustion_waits_instead_of_failing() {
    // Four tags, 32 bios in flight from one context: submit must wait for
    // tags (polling its own completions) and never lose a bio.
    let seen = within("exhaustion", || {
        let dev =
            mqblk::open("null,size=16M,hw_queues=1,queue_depth=4,completion=deferred").unwrap();
        run_callbacks(&dev, 1000, 4096)
    });
    assert_eq!(seen.len(), 1000);
    assert!(seen.values().all(|(n, s)| *n == 1 && s.is_ok()));
}

#[test]
fn tag_waiter_is_woken_when_another_context_frees() {
    // One shared tag set of 2 tags, timer completion so requests stay in
    // flight a while. Two threads fight for the tags; both must finish.
    within("wakeup", || {
        let dev = mqblk::open(
            "null,size=16M,hw_queues=1,queue_depth=2,shared_tags=1,completion=timer,completion_nsec=200000",
        )
        .unwrap();
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let dev = dev.clone();
                std::thread::spawn(move || run_callbacks(&dev, 200, 4096))
            })
            .collect();
        for t in threads {
            let seen = t.join().unwrap();
            assert_eq!(seen.len(), 200);
            assert!(seen.values().all(|(n, s)| *n == 1 && s.is_ok()));
        }
    });
}

#[test]
fn requeued_requests_are_retried_until_done() {
    let seen = within("requeue", || {
        let dev = mqblk::open("null,size=16M,hw_queues=1,requeue_probability=50,seed=3").unwrap();
        let seen = run_callbacks(&dev, 500, 4096);
        assert!(dev.stats().snapshot().requeues > 100);
        seen
    });
    assert_eq!(seen.len(), 500);
    assert!(seen.values().all(|(n, s)| *n == 1 && s.is_ok()));
}

#[test]
fn timed_out_request_fails_with_timeout_and_device_stays_usable() {
    within("timeout", || {
        let dev = mqblk::open(
            "null,size=16M,timeout_probability=100,timeout_interval=2,io_timeout_ms=30",
        )
        .unwrap();
        let mut ctx = dev.context().unwrap();
        let mut buf = dev.alloc_buf(4096);
        let mut outcomes = Vec::new();
        for i in 0..4u64 {
            outcomes.push(ctx.read_at(buf.as_mut_slice(), i * 4096));
        }
        let timeouts = outcomes
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Err(Error::Io {
                        status: Status::Timeout,
                        ..
                    })
                )
            })
            .count();
        assert_eq!(timeouts, 2, "{outcomes:?}");
        assert_eq!(outcomes.iter().filter(|r| r.is_ok()).count(), 2);
        let msg = outcomes
            .iter()
            .find_map(|r| r.as_ref().err())
            .unwrap()
            .to_string();
        assert!(msg.contains("nullb") && msg.contains("timed out"), "{msg}");
        assert_eq!(dev.stats().snapshot().timeouts, 2);
        // Still usable after the timeouts.
        ctx.read_at(buf.as_mut_slice(), 0).ok();
        drop(ctx);
        assert_eq!(
            dev.stats().snapshot().timeouts,
            2,
            "stats survive the context"
        );
    });
}

fn roundtrip_all_modes(extra: &str) {
    for mode in ["mq", "device-lock", "global-lock"] {
        let dev = mqblk::open(&format!(
            "null,size=8M,memory_backed=1,hw_queues=2,queue_mode={mode}{extra}"
        ))
        .unwrap();
        assert_eq!(dev.queue_mode().name(), mode);
        let threads: Vec<_> = (0..2u64)
            .map(|t| {
                let dev = dev.clone();
                std::thread::spawn(move || {
                    let mut ctx = dev.context().unwrap();
                    let mut w = dev.alloc_buf(8192);
                    let mut r = dev.alloc_buf(8192);
                    for i in 0..64u64 {
                        let off = (t * 64 + i) * 8192;
                        w.as_mut_slice().copy_from_slice(&pattern(off + 1, 8192));
                        ctx.write_at(w.as_slice(), off).unwrap();
                        ctx.read_at(r.as_mut_slice(), off).unwrap();
                        assert_eq!(r.as_slice(), w.as_slice(), "mode {mode} offset {off}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = dev.stats().snapshot();
        assert_eq!(s.ios[0], 128, "reads counted in diskstats ({mode})");
        assert_eq!(s.ios[1], 128, "writes counted in diskstats ({mode})");
        assert_eq!(s.sectors[0], 128 * 16);
        assert_eq!(s.in_flight, 0);
    }
}

#[test]
fn data_roundtrips_in_every_queue_mode() {
    within("modes", || roundtrip_all_modes(""));
}

#[test]
fn data_roundtrips_with_plug_off_and_iostats_off() {
    within("plug off", || roundtrip_all_modes(",plug=off"));
    within("iostats off", || {
        let dev = mqblk::open("null,size=8M,memory_backed=1,iostats=0").unwrap();
        let mut ctx = dev.context().unwrap();
        let w = vec![9u8; 4096];
        let mut r = dev.alloc_buf(4096);
        let mut wb = dev.alloc_buf(4096);
        wb.as_mut_slice().copy_from_slice(&w);
        ctx.write_at(wb.as_slice(), 0).unwrap();
        ctx.read_at(r.as_mut_slice(), 0).unwrap();
        assert_eq!(r.as_slice(), &w[..]);
        assert_eq!(
            ctx.histograms().group(mqblk::stats::StatGroup::Read).len(),
            0
        );
        drop(ctx);
        assert_eq!(dev.stats().snapshot().ios[0], 0, "iostats=0 counts nothing");
    });
}

#[test]
fn vectored_io_is_one_request() {
    let dev = mqblk::open("null,size=8M,memory_backed=1,hw_queues=1").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut bufs: Vec<IoBuf> = (0..6)
        .map(|i| {
            let mut b = dev.alloc_buf(4096);
            b.as_mut_slice().copy_from_slice(&pattern(i, 4096));
            b
        })
        .collect();
    let slices: Vec<std::io::IoSlice<'_>> = bufs
        .iter()
        .map(|b| std::io::IoSlice::new(b.as_slice()))
        .collect();
    ctx.writev_at(&slices, 65536).unwrap();
    let before = ctx.stats().requests;
    let mut out: Vec<IoBuf> = (0..6).map(|_| dev.alloc_buf(4096)).collect();
    let mut islices: Vec<std::io::IoSliceMut<'_>> = out
        .iter_mut()
        .map(|b| std::io::IoSliceMut::new(b.as_mut_slice()))
        .collect();
    ctx.readv_at(&mut islices, 65536).unwrap();
    assert_eq!(
        ctx.stats().requests - before,
        1,
        "a readv of 6 segments is one request"
    );
    for (a, b) in bufs.iter_mut().zip(out.iter()) {
        assert_eq!(a.as_slice(), b.as_slice());
    }
}

#[test]
fn flush_discard_and_write_zeroes() {
    let dev = mqblk::open("null,size=8M,memory_backed=1").unwrap();
    let mut ctx = dev.context().unwrap();
    let mut w = dev.alloc_buf(16384);
    w.as_mut_slice().fill(0xee);
    ctx.write_at(w.as_slice(), 0).unwrap();
    ctx.flush().unwrap();
    ctx.discard(0, 4096).unwrap();
    ctx.write_zeroes(4096, 4096).unwrap();
    let mut r = dev.alloc_buf(16384);
    ctx.read_at(r.as_mut_slice(), 0).unwrap();
    assert!(r.as_slice()[..8192].iter().all(|&b| b == 0));
    assert!(r.as_slice()[8192..].iter().all(|&b| b == 0xee));
    drop(ctx);
    let s = dev.stats().snapshot();
    assert_eq!(
        s.ios[3], 0,
        "no write cache: a flush completes without a device request"
    );
    assert_eq!(s.ios[2], 1, "one discard counted");
}

#[test]
fn end_io_callbacks_run_after_the_reap() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    // A stateful handler: a closure that owns its counter, shared by all
    // ten bios (one Arc, no allocation per I/O).
    let calls = Arc::new(AtomicU64::new(0));
    let seen = calls.clone();
    let handler: Arc<dyn mqblk::EndIo> = Arc::new(move |c: mqblk::Completion<'_>| {
        assert!(c.result().is_ok());
        seen.fetch_add(c.private(), Ordering::Relaxed);
    });
    let dev = mqblk::open("null,size=8M").unwrap();
    let mut ctx = dev.context().unwrap();
    for i in 1..=10u64 {
        let mut bio = Bio::read_at(i * 4096, dev.alloc_buf(4096));
        bio.set_end_io(Some(handler.clone()));
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    let mut to_closure = 0;
    ctx.poll_wait(10, |_| to_closure += 1);
    assert_eq!(
        to_closure, 0,
        "bios with end_io do not reach the poll closure"
    );
    assert_eq!(calls.load(Ordering::Relaxed), 55);
}

#[test]
fn futures_complete_without_a_runtime() {
    let dev = mqblk::open("null,size=8M,memory_backed=1,completion=deferred").unwrap();
    let actx = mqblk::AsyncContext::new(dev.context().unwrap());
    let mut w = dev.alloc_buf(4096);
    w.as_mut_slice().copy_from_slice(&pattern(5, 4096));
    let expect = w.as_slice().to_vec();
    let (w, r) = mqblk::block_on(actx.write(w, 8192));
    r.unwrap();
    drop(w);
    // Two reads in flight at once, polled by hand in turn.
    let f1 = actx.read(dev.alloc_buf(4096), 8192);
    let f2 = actx.read(dev.alloc_buf(4096), 0);
    let (a, b) = mqblk::block_on(async {
        let a = f1.await;
        let b = f2.await;
        (a, b)
    });
    a.1.unwrap();
    b.1.unwrap();
    assert_eq!(a.0.as_slice(), &expect[..]);
    assert!(b.0.as_slice().iter().all(|&x| x == 0));
    mqblk::block_on(actx.flush()).unwrap();
    // A future dropped while in flight leaves nothing behind.
    {
        let mut f = Box::pin(actx.read(dev.alloc_buf(4096), 0));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let _ = f.as_mut().poll(&mut cx);
    }
    let ctx = actx.into_inner();
    drop(ctx);
}

#[test]
fn op_helpers() {
    assert!(Op::Write.is_write());
    assert_eq!(Op::WriteZeroes.name(), "write-zeroes");
}

use std::future::Future;

#[test]
fn extents_report_holes_of_a_memory_backed_device() {
    let dev = mqblk::open("null,size=1M,memory_backed=1").unwrap();
    // A device that does not track allocation reports one data extent.
    let plain = mqblk::open("null,size=1M").unwrap();
    let e = plain.extents(0, 1 << 20).unwrap();
    assert_eq!(e.len(), 1);
    assert!(!e[0].hole);
    let mut ctx = dev.context().unwrap();
    let w = dev.alloc_buf(8192);
    ctx.write_at(w.as_slice(), 65536).unwrap();
    let e = dev.extents(0, 1 << 20).unwrap();
    let shape: Vec<(u64, u64, bool)> = e
        .iter()
        .map(|x| (x.offset_bytes, x.len_bytes, x.hole))
        .collect();
    assert_eq!(
        shape,
        vec![
            (0, 65536, true),
            (65536, 8192, false),
            (73728, (1 << 20) - 73728, true)
        ]
    );
    ctx.discard(65536, 4096).unwrap();
    let e = dev.extents(65536, 8192).unwrap();
    let shape: Vec<(u64, u64, bool)> = e
        .iter()
        .map(|x| (x.offset_bytes, x.len_bytes, x.hole))
        .collect();
    assert_eq!(shape, vec![(65536, 4096, true), (69632, 4096, false)]);
    assert!(
        dev.extents(2 << 20, 10).unwrap().is_empty(),
        "past the end: nothing"
    );
}
