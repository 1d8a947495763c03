//! A completion fd that cannot watch its hardware queue's interrupt line
//! (the kernel refuses it: here a line that is itself epoll sets nested
//! as deep as the kernel allows, so one more level is ELOOP) does not
//! leave its caller waiting: the context polls instead, keeping the fd
//! readable while requests are in flight, and every request completes.

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::readable;
use mqblk_core::driver::{Completions, Driver, HwQueueSetup, QueueRq, RqRef};
use mqblk_core::{Bio, Error, IoBuf, Status};

/// A wait that passes this failed (a hang guard, not a timing claim).
const WAIT_MAX: Duration = Duration::from_secs(10);

fn epoll_holding(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    // SAFETY: a fresh fd nobody else owns.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0,
    };
    // SAFETY: a live epoll_event; both fds are open.
    let rc = unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
    (rc == 0).then_some(ep)
}

/// Completes what it holds when polled after a byte came on its line; its
/// interrupt fd is the line inside epoll sets nested as deep as the
/// kernel takes.
struct Chained {
    line: Mutex<Option<std::os::unix::net::UnixStream>>,
}

struct ChainedQueue {
    line: std::os::unix::net::UnixStream,
    chain: Vec<OwnedFd>,
    held: Vec<RqRef>,
}

impl Driver for Chained {
    type HwQueue = ChainedQueue;

    fn init_hw_queue(&self, _s: HwQueueSetup<'_>) -> Result<ChainedQueue, Error> {
        let line = self.line.lock().unwrap().take().expect("one queue");
        line.set_nonblocking(true).unwrap();
        let mut chain: Vec<OwnedFd> = Vec::new();
        loop {
            let inner = chain.last().map_or(line.as_raw_fd(), |e| e.as_raw_fd());
            match epoll_holding(inner) {
                Some(ep) => chain.push(ep),
                None => break,
            }
        }
        assert!(chain.len() >= 2, "the kernel nests epoll sets");
        Ok(ChainedQueue {
            line,
            chain,
            held: Vec::new(),
        })
    }

    fn queue_rq(
        &self,
        hq: &mut ChainedQueue,
        rq: RqRef,
        _last: bool,
        _done: &mut Completions<'_>,
    ) -> QueueRq {
        hq.held.push(rq);
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut ChainedQueue) {}

    fn poll(&self, hq: &mut ChainedQueue, done: &mut Completions<'_>) -> usize {
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

    fn irq_fd(&self, hq: &ChainedQueue) -> Option<RawFd> {
        hq.chain.last().map(|e| e.as_raw_fd())
    }
}

#[test]
#[cfg_attr(miri, ignore = "epoll sets and a socket pair")]
fn a_line_the_completion_fd_cannot_watch_makes_the_context_poll_and_nothing_waits_forever() {
    use std::io::Write;
    let (mut wire, line) = std::os::unix::net::UnixStream::pair().unwrap();
    let drv = Chained {
        line: Mutex::new(Some(line)),
    };
    let dev = mqblk_core::Device::new(drv, common::config("chained", 1 << 20)).unwrap();
    assert!(dev.has_irq_lines());
    let mut ctx = dev.context().unwrap();
    // The fd is made; its set cannot take the line.
    let cfd = ctx.completion_fd().unwrap();
    ctx.submit(Bio::read_at(0, IoBuf::page_aligned(4096)))
        .unwrap();
    ctx.unplug();
    assert_eq!(ctx.poll(|_| {}), 0);
    // With the line quiet, the fd is readable anyway: the caller's loop
    // polls rather than sleeping on a set that would not wake.
    assert!(
        readable(cfd, WAIT_MAX.as_millis() as i32),
        "the completion fd stays quiet although it cannot hear the line"
    );
    wire.write_all(b"!").unwrap();
    let start = Instant::now();
    let mut got = 0;
    let mut wakes = 0u32;
    while got == 0 {
        assert!(start.elapsed() < WAIT_MAX, "the read never completed");
        assert!(readable(cfd, WAIT_MAX.as_millis() as i32));
        wakes += 1;
        got += ctx.poll(|c| c.result().unwrap());
    }
    eprintln!(
        "read completed after {wakes} wake-ups of the degraded fd, in {:?}",
        start.elapsed()
    );
    assert_eq!(got, 1);
    assert_eq!(ctx.in_flight(), 0);
    // And a blocking wait on such a context ends too.
    ctx.submit(Bio::read_at(4096, IoBuf::page_aligned(4096)))
        .unwrap();
    ctx.unplug();
    wire.write_all(b"!").unwrap();
    assert_eq!(ctx.poll_wait(1, |c| c.result().unwrap()), 1);
}
