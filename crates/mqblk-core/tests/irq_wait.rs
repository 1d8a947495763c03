//! A context that waits for a tag on a driver with an interrupt line
//! (`Driver::irq_fd`) sleeps on the line: it does not spin through polls
//! while its own completion fd is still readable from an earlier
//! announcement. Counted in driver polls, not in time.

mod common;

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqblk_core::driver::{Completions, Driver, HwQueueSetup, QueueRq, RqRef, Status};
use mqblk_core::{Bio, Error, IoBuf, Op};

/// Completes each request `delay` after it was queued, from a thread that
/// then writes a byte to the queue's interrupt line (a socket); `poll`
/// drains the line, then completes what the thread finished.
struct Irq {
    delay: Duration,
    polls: Arc<AtomicU32>,
}

struct IrqQueue {
    line: UnixStream,
    inbox: Arc<Mutex<Vec<RqRef>>>,
    tx: std::sync::mpsc::Sender<RqRef>,
}

impl Driver for Irq {
    type HwQueue = IrqQueue;

    fn init_hw_queue(&self, _setup: HwQueueSetup<'_>) -> Result<IrqQueue, Error> {
        let (mut raise, line) = UnixStream::pair().expect("socketpair");
        line.set_nonblocking(true).expect("nonblocking line");
        let inbox: Arc<Mutex<Vec<RqRef>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel::<RqRef>();
        let (to, delay) = (inbox.clone(), self.delay);
        std::thread::spawn(move || {
            // Ends when the queue (and its sender) is dropped.
            while let Ok(rq) = rx.recv() {
                std::thread::sleep(delay);
                to.lock().unwrap().push(rq);
                let _ = raise.write_all(&[1]);
            }
        });
        Ok(IrqQueue { line, inbox, tx })
    }

    fn queue_rq(
        &self,
        hq: &mut IrqQueue,
        rq: RqRef,
        _last: bool,
        _done: &mut Completions<'_>,
    ) -> QueueRq {
        hq.tx.send(rq).expect("completion thread runs");
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut IrqQueue) {}

    fn poll(&self, hq: &mut IrqQueue, done: &mut Completions<'_>) -> usize {
        self.polls.fetch_add(1, Ordering::Relaxed);
        let mut b = [0u8; 64];
        while matches!(hq.line.read(&mut b), Ok(n) if n > 0) {}
        let mut inbox = hq.inbox.lock().unwrap();
        let n = inbox.len();
        for rq in inbox.drain(..) {
            done.complete(rq, Status::Ok);
        }
        n
    }

    fn irq_fd(&self, hq: &IrqQueue) -> Option<std::os::fd::RawFd> {
        Some(hq.line.as_raw_fd())
    }
}

fn read_bio(offset: u64) -> Bio {
    let mut bio = Bio::at(Op::Read, offset);
    bio.push_segment(IoBuf::page_aligned(4096), 0, 4096);
    bio
}

#[test]
#[cfg_attr(miri, ignore = "a socket and a thread as the interrupt")]
fn a_bio_waiting_for_a_tag_sleeps_on_the_interrupt_line() {
    let polls = Arc::new(AtomicU32::new(0));
    let drv = Irq {
        delay: Duration::from_millis(200),
        polls: polls.clone(),
    };
    let mut cfg = common::config("irq0", 1 << 20);
    cfg.queue_depth = 1;
    let dev = mqblk_core::Device::new(drv, cfg).unwrap();
    let mut ctx = dev.context().unwrap();
    ctx.completion_fd().unwrap();
    // The first read holds the one tag; the second waits for it, and
    // leaves the first's completion for the caller: the completion fd
    // announces it, and nobody polls it away.
    ctx.submit(read_bio(0)).unwrap();
    ctx.submit(read_bio(65536)).unwrap();
    assert_eq!(ctx.ready(), 1, "the first read waits to be polled");
    // The third waits 200 ms for the second's tag, with the fd readable.
    let before = polls.load(Ordering::Relaxed);
    ctx.submit(read_bio(131072)).unwrap();
    let during = polls.load(Ordering::Relaxed) - before;
    assert!(
        during < 200,
        "{during} driver polls while waiting for one interrupt: the wait spins"
    );
    let mut n = 0;
    while n < 3 {
        n += ctx.poll_wait(1, |c| assert!(c.status().is_ok()));
    }
}
