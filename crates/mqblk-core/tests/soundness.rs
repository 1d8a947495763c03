//! Soundness tests of the core through toy drivers (public driver API
//! only), written to run under Miri: write data that stays shared,
//! emulated write-zeroes, split pieces completing out of order, panics in
//! callbacks and inside blocking calls, a tiny bio set, completion fds and
//! futures woken by completion.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{mem_device, Order};

/// Miri interprets every byte: it gets the same shapes at a smaller size.
const KIB: usize = if cfg!(miri) { 256 } else { 1024 };
use mqblk_core::{Bio, Error, IoBuf, Status};

#[test]
fn write_from_shared_slice_while_another_borrow_lives() {
    let (dev, data, _) = mem_device(1 << 20, Order::Inline);
    let mut ctx = dev.context().unwrap();
    let buf = vec![0x42u8; 8192];
    let view: &[u8] = &buf;
    let again: &[u8] = &buf[4096..];
    ctx.write_at(view, 4096).unwrap();
    assert_eq!(again[0], 0x42);
    assert!(data.lock().unwrap()[4096..12288] == [0x42; 8192]);
}

#[test]
fn emulated_write_zeroes_uses_the_read_only_zero_page() {
    let (dev, data, _) = mem_device(1 << 20, Order::Inline);
    let mut ctx = dev.context().unwrap();
    ctx.write_at(&vec![9u8; 256 * KIB], 0).unwrap();
    // The toy disk has no write-zeroes: the core writes its zero page,
    // many pieces pointing at the same read-only memory.
    ctx.write_zeroes(4096, 200 * KIB as u64).unwrap();
    let d = data.lock().unwrap();
    assert!(d[..4096] == [9; 4096]);
    assert!(common::all_zero(&d[4096..4096 + 200 * KIB]));
    assert!(d[4096 + 200 * KIB..256 * KIB] == vec![9; 256 * KIB - 4096 - 200 * KIB]);
}

#[test]
fn split_pieces_complete_out_of_order_into_one_caller_buffer() {
    let mut disk = common::MemDisk::new(1 << 20, Order::Reversed);
    disk.limits.max_sectors = 8; // 4 KiB pieces
    let data = disk.data.clone();
    let dev = mqblk_core::Device::new(disk, common::config("rev0", 1 << 20)).unwrap();
    let mut ctx = dev.context().unwrap();
    {
        let mut d = data.lock().unwrap();
        for (i, b) in d.iter_mut().enumerate().skip(8192).take(64 * KIB) {
            *b = (i % 253) as u8;
        }
    }
    // Aligned: pieces are views of the caller's buffer, filled newest first.
    let mut aligned = IoBuf::page_aligned(64 * KIB);
    let back = aligned.as_mut_slice();
    ctx.read_at(back, 8192).unwrap();
    assert_eq!(dev.stats().snapshot().bytes_copied, 0);
    assert!(back
        .iter()
        .enumerate()
        .all(|(i, &b)| b == ((i + 8192) % 253) as u8));
    // Misaligned: every piece bounces, and each copy lands while its
    // siblings are still in flight in the same buffer.
    let mut raw = vec![0u8; 64 * KIB + 3];
    ctx.read_at(&mut raw[3..], 8192).unwrap();
    assert_eq!(&raw[3..], &back[..]);
    assert_eq!(dev.stats().snapshot().bytes_copied, 64 * KIB as u64);
}

#[test]
fn a_tiny_bio_set_cuts_a_large_write_without_livelock() {
    let mut disk = common::MemDisk::new(4 << 20, Order::Reversed);
    // 1 MiB in 16 KiB pieces (256 KiB in 4 KiB pieces under Miri): 64.
    disk.limits.max_sectors = (32 * KIB / 1024) as u32;
    let data = disk.data.clone();
    let mut cfg = common::config("tiny0", 4 << 20);
    cfg.bioset_size = 2;
    let dev = mqblk_core::Device::new(disk, cfg).unwrap();
    let mut ctx = dev.context().unwrap();
    let src: Vec<u8> = (0..1024 * KIB as u32).map(|i| (i % 241) as u8).collect();
    ctx.write_at(&src, 1 << 20).unwrap();
    assert_eq!(
        &data.lock().unwrap()[1 << 20..(1 << 20) + src.len()],
        &src[..]
    );
    let s = dev.stats().snapshot();
    assert_eq!(s.splits, 1);
    assert!(s.requests >= 64, "{} requests", s.requests);
    // A flush with every slot holding an unpolled completion fails, typed,
    // instead of spinning.
    ctx.submit(Bio::write_at(0, IoBuf::page_aligned(4096)))
        .unwrap();
    ctx.submit(Bio::write_at(4096, IoBuf::page_aligned(4096)))
        .unwrap();
    ctx.unplug();
    let e = ctx.submit(Bio::flush()).unwrap_err();
    assert!(matches!(e.error(), Error::Unpolled { slots: 2, .. }), "{e}");
    let mut n = 0;
    while n < 2 {
        n += ctx.poll_wait(2, |c| c.result().unwrap());
    }
    ctx.submit(e.into_bio()).unwrap();
    assert_eq!(ctx.poll_wait(1, |c| c.result().unwrap()), 1);
}

#[test]
fn a_panicking_callback_frees_its_slot_and_the_context_goes_on() {
    let (dev, _, _) = mem_device(1 << 20, Order::Reversed);
    let mut ctx = dev.context().unwrap();
    for i in 0..4u64 {
        ctx.submit(Bio::write_at(i * 4096, IoBuf::page_aligned(4096)))
            .unwrap();
    }
    let mut seen = 0;
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.poll_wait(4, |_| {
            seen += 1;
            if seen == 2 {
                panic!("callback panics");
            }
        })
    }));
    assert!(r.is_err());
    // The rest are still delivered, once each.
    let mut rest = 0;
    while seen + rest < 4 {
        rest += ctx.poll(|c| c.result().unwrap());
    }
    assert_eq!(seen + rest, 4);
    assert_eq!(ctx.in_flight(), 0);
    let mut back = vec![1u8; 4096];
    ctx.read_at(&mut back, 0).unwrap();
    assert!(common::all_zero(&back));
}

#[test]
fn a_panic_inside_a_blocking_call_waits_for_the_io_before_unwinding() {
    let (dev, data, panic_next_poll) = mem_device(1 << 20, Order::Reversed);
    data.lock().unwrap()[..4096].fill(0x77);
    let mut ctx = dev.context().unwrap();
    let mut buf = vec![0u8; 4096];
    panic_next_poll.store(true, Ordering::SeqCst);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.read_at(&mut buf, 0)));
    assert!(r.is_err(), "the driver's panic reaches the caller");
    // The guard waited for the read before the unwind went on: the
    // request is no longer in flight, and the buffer was filled.
    assert_eq!(ctx.in_flight(), 0);
    assert!(*buf == vec![0x77; buf.len()]);
    ctx.read_at(&mut buf, 4096).unwrap();
}

#[test]
fn status_is_per_submission() {
    // A bio that failed once (out of range) and is aimed in range again
    // succeeds: its status starts clean at every submission.
    let (dev, _, _) = mem_device(1 << 20, Order::Inline);
    let mut ctx = dev.context().unwrap();
    let mut bio = Bio::read_at(1 << 20, IoBuf::page_aligned(4096));
    bio.private = 7;
    ctx.submit(bio).unwrap();
    let mut failed = None;
    ctx.poll_wait(1, |c| {
        assert!(c.result().is_err());
        failed = Some(c.into_bio());
    });
    let mut bio = failed.unwrap();
    assert!(!bio.status().is_ok());
    bio.set_offset_bytes(0);
    ctx.submit(bio).unwrap();
    ctx.poll_wait(1, |c| assert_eq!(c.status(), Status::Ok));
}

#[test]
fn async_offsets_that_are_not_sectors_are_refused() {
    let (dev, _, _) = mem_device(1 << 20, Order::Inline);
    let actx = mqblk_core::AsyncContext::new(dev.context().unwrap());
    let (_, r) = mqblk_core::block_on(actx.read(IoBuf::page_aligned(4096), 100));
    assert!(
        matches!(
            r,
            Err(Error::BadLength {
                offset_bytes: 100,
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn futures_are_woken_by_the_completion_not_by_themselves() {
    use std::future::Future;
    use std::task::{Context as TaskCx, Poll, Wake, Waker};
    let polls = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let drv = common::Threaded {
        delay: Duration::from_millis(20),
        polls: polls.clone(),
        irq_line: false,
    };
    let dev = mqblk_core::Device::new(drv, common::config("thr0", 1 << 20)).unwrap();
    let actx = mqblk_core::AsyncContext::new(dev.context().unwrap());

    struct Counting(std::sync::atomic::AtomicU32, std::thread::Thread);
    impl Wake for Counting {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.unpark();
        }
    }
    let w = Arc::new(Counting(0.into(), std::thread::current()));
    let waker = Waker::from(w.clone());
    let mut cx = TaskCx::from_waker(&waker);
    let mut fut = std::pin::pin!(actx.read(IoBuf::page_aligned(4096), 0));
    let mut future_polls = 0;
    let out = loop {
        future_polls += 1;
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            break v;
        }
        std::thread::park_timeout(Duration::from_secs(5));
    };
    out.1.unwrap();
    // A self-waking future would be polled thousands of times in 20 ms.
    assert!(future_polls <= 4, "polled {future_polls} times");
    assert!(w.0.load(Ordering::SeqCst) >= 1, "the completion woke it");
}

#[test]
#[cfg_attr(miri, ignore = "epoll_wait with a timeout on a socket pair")]
fn one_epoll_wait_hears_a_socket_and_a_completion_fd() {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    let drv = common::Threaded {
        delay: Duration::from_millis(10),
        polls: Default::default(),
        irq_line: false,
    };
    let dev = mqblk_core::Device::new(drv, common::config("thr1", 1 << 20)).unwrap();
    let mut ctx = dev.context().unwrap();
    let cfd = ctx.completion_fd().unwrap();
    let (mut tx, rx) = std::os::unix::net::UnixStream::pair().unwrap();
    // SAFETY: plain epoll syscalls on fds this test owns.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    for (fd, key) in [(cfd, 1u64), (rx.as_raw_fd(), 2u64)] {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: key,
        };
        // SAFETY: ev is a live epoll_event; fd and ep are open.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) };
        assert_eq!(r, 0);
    }
    let wait = |ep: i32| -> Vec<u64> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: evs has room for 4 events.
        let n = unsafe { libc::epoll_wait(ep, evs.as_mut_ptr(), 4, 5000) };
        assert!(n > 0, "epoll_wait timed out");
        evs[..n as usize].iter().map(|e| e.u64).collect()
    };
    // Nothing in flight: the completion fd is quiet; the socket wakes us.
    tx.write_all(b"x").unwrap();
    assert_eq!(wait(ep), vec![2]);
    let mut byte = [0u8; 1];
    std::io::Read::read_exact(&mut &rx, &mut byte).unwrap();
    // A read in flight on a driver that completes from its own thread:
    // the fd becomes readable when the completion arrives.
    ctx.submit(Bio::read_at(0, IoBuf::page_aligned(4096)))
        .unwrap();
    ctx.unplug();
    let mut got = 0;
    while got == 0 {
        let keys = wait(ep);
        assert!(keys.contains(&1), "{keys:?}");
        got += ctx.poll(|c| c.result().unwrap());
    }
    assert_eq!(got, 1);
    // SAFETY: ep is ours.
    unsafe { libc::close(ep) };
}

#[test]
#[cfg_attr(miri, ignore = "epoll and timerfd")]
fn a_throttled_bio_wakes_the_completion_fd_when_its_time_comes() {
    let drv = common::Threaded {
        delay: Duration::from_millis(1),
        polls: Default::default(),
        irq_line: false,
    };
    let mut cfg = common::config("thr2", 1 << 20);
    // 20 reads a second, no burst: the 2nd and 3rd read wait 50 and 100 ms
    // in the throttle, with no thread and nothing in flight to wake anyone.
    cfg.io_max = Some(mqblk_core::throttle::IoMax::new(
        mqblk_core::throttle::IoMaxLimits {
            riops: 20,
            ..Default::default()
        },
        0,
    ));
    let dev = mqblk_core::Device::new(drv, cfg).unwrap();
    let mut ctx = dev.context().unwrap();
    let cfd = ctx.completion_fd().unwrap();
    for i in 0..3 {
        let mut bio = Bio::read_at(i * 4096, IoBuf::page_aligned(4096));
        bio.private = i;
        ctx.submit(bio).unwrap();
    }
    ctx.unplug();
    // Deliveries per bio, by its `private` tag.
    let mut delivered = [0u32; 3];
    let mut got = 0;
    while got < 3 {
        let mut pfd = libc::pollfd {
            fd: cfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, 5000) };
        assert!(
            n == 1,
            "the completion fd stayed quiet with {} bios throttled",
            3 - got
        );
        got += ctx.poll(|c| {
            c.result().unwrap();
            delivered[c.private() as usize] += 1;
        });
    }
    assert_eq!(ctx.in_flight(), 0);
    ctx.poll(|c| delivered[c.private() as usize] += 1);
    assert_eq!(delivered, [1, 1, 1], "deliveries of each throttled bio");
}

/// A driver that completes only when polled, and only after its interrupt
/// line (one end of a socket pair) has a byte on it.
struct Wired {
    line: Mutex<Option<std::os::unix::net::UnixStream>>,
}

struct WiredQueue {
    line: std::os::unix::net::UnixStream,
    held: Vec<mqblk_core::driver::RqRef>,
}

impl mqblk_core::driver::Driver for Wired {
    type HwQueue = WiredQueue;

    fn init_hw_queue(&self, _s: mqblk_core::driver::HwQueueSetup<'_>) -> Result<WiredQueue, Error> {
        let line = self
            .line
            .lock()
            .unwrap()
            .take()
            .expect("one hardware queue");
        line.set_nonblocking(true).unwrap();
        Ok(WiredQueue {
            line,
            held: Vec::new(),
        })
    }

    fn queue_rq(
        &self,
        hq: &mut WiredQueue,
        rq: mqblk_core::driver::RqRef,
        _last: bool,
        _done: &mut mqblk_core::driver::Completions<'_>,
    ) -> mqblk_core::driver::QueueRq {
        hq.held.push(rq);
        mqblk_core::driver::QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut WiredQueue) {}

    fn poll(&self, hq: &mut WiredQueue, done: &mut mqblk_core::driver::Completions<'_>) -> usize {
        let mut b = [0u8; 64];
        if !matches!(std::io::Read::read(&mut &hq.line, &mut b), Ok(n) if n > 0) {
            return 0;
        }
        let n = hq.held.len();
        for rq in hq.held.drain(..) {
            done.complete(rq, Status::Ok);
        }
        n
    }

    fn irq_fd(&self, hq: &WiredQueue) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(hq.line.as_raw_fd())
    }
}

#[test]
#[cfg_attr(miri, ignore = "poll on a socket pair")]
fn a_polled_driver_s_interrupt_line_wakes_the_completion_fd_and_nothing_else_does() {
    use std::io::Write;
    let (mut wire, line) = std::os::unix::net::UnixStream::pair().unwrap();
    let drv = Wired {
        line: Mutex::new(Some(line)),
    };
    let dev = mqblk_core::Device::new(drv, common::config("wired", 1 << 20)).unwrap();
    assert!(!dev.completes_async());
    let mut ctx = dev.context().unwrap();
    let cfd = ctx.completion_fd().unwrap();
    let readable = |ms: i32| {
        let mut pfd = libc::pollfd {
            fd: cfd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
    };
    ctx.submit(Bio::read_at(0, IoBuf::page_aligned(4096)))
        .unwrap();
    ctx.unplug();
    assert_eq!(ctx.poll(|_| {}), 0);
    // In flight on a driver that completes only when polled, but with an
    // interrupt line: the fd is quiet until the line fires, so an event
    // loop sleeps instead of spinning.
    assert!(
        !readable(100),
        "the completion fd is readable with the line quiet"
    );
    wire.write_all(b"!").unwrap();
    assert!(
        readable(5000),
        "the line fired and the completion fd stayed quiet"
    );
    assert_eq!(ctx.poll(|c| c.result().unwrap()), 1);
    assert_eq!(ctx.in_flight(), 0);
}

#[test]
fn has_room_says_when_a_submission_would_wait_for_a_tag() {
    let disk = common::MemDisk::new(1 << 20, Order::Reversed);
    let mut cfg = common::config("room0", 1 << 20);
    cfg.queue_depth = 2;
    let dev = mqblk_core::Device::new(disk, cfg).unwrap();
    let mut ctx = dev.context().unwrap();
    assert!(ctx.has_room());
    // Two reads apart from each other (no merge) hold both tags: the toy
    // disk keeps them until the next poll.
    for i in 0..2u64 {
        let mut bio = Bio::at(mqblk_core::Op::Read, i * 65536);
        bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
        ctx.submit(bio).unwrap();
    }
    assert!(!ctx.has_room(), "both tags are in use");
    assert_eq!(ctx.poll_wait(2, |c| assert!(c.status().is_ok())), 2);
    assert!(ctx.has_room(), "the completions freed the tags");
    let mut bio = Bio::at(mqblk_core::Op::Read, 0);
    bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
    ctx.submit(bio).unwrap();
    assert_eq!(ctx.poll_wait(1, |_| {}), 1);
}

#[test]
fn a_bio_built_in_place_reuses_a_kept_slot_and_lets_its_buffers_go() {
    let (dev, data, _) = mem_device(1 << 20, Order::Inline);
    let mut ctx = dev.context().unwrap();
    let mut bufs = [vec![0x11u8; 4096], vec![0x22u8; 4096]];
    for round in 0..3u64 {
        for (i, b) in bufs.iter_mut().enumerate() {
            let p = std::ptr::NonNull::new(b.as_mut_ptr()).unwrap();
            ctx.submit_with(|bio| {
                // A blank bio: the slot kept no buffer of the last round.
                assert!(bio.segments().is_empty());
                assert_eq!(bio.len_bytes(), 0);
                assert_eq!(bio.private, 0);
                bio.set_op(mqblk_core::Op::Write);
                bio.set_offset_bytes(4096 * (2 * round + i as u64));
                bio.private = 7 + i as u64;
                // SAFETY: `b` outlives the bio, which is reaped below
                // before `b` is touched again.
                let buf = unsafe { IoBuf::from_raw(p, 4096) };
                bio.push_segment(buf, 0, 4096);
            })
            .unwrap();
        }
        let mut seen = Vec::new();
        while seen.len() < 2 {
            ctx.poll_wait(1, |c| {
                assert_eq!(c.status(), Status::Ok);
                seen.push(c.private());
            });
        }
        seen.sort_unstable();
        assert_eq!(seen, [7, 8]);
    }
    let d = data.lock().unwrap();
    for round in 0..3usize {
        assert!(d[8192 * round..8192 * round + 4096]
            .iter()
            .all(|&b| b == 0x11));
        assert!(d[8192 * round + 4096..8192 * (round + 1)]
            .iter()
            .all(|&b| b == 0x22));
    }
    // An owned buffer let go with its slot is freed (Miri sees no leak).
    drop(d);
    ctx.submit_with(|bio| {
        bio.push_segment(IoBuf::new(4096, 4096), 0, 4096);
    })
    .unwrap();
    ctx.poll_wait(1, |_| {});
}
