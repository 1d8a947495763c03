//! Toy drivers for the core's own tests, written against the public driver
//! API only: a memory disk whose completion order and failures a test
//! controls, and one that completes from its own thread, as an interrupt
//! would.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqblk_core::driver::{
    Completions, Driver, Features, HwNotifier, HwQueueSetup, Op, QueueLimits, QueueRq, RqRef,
    Status,
};
use mqblk_core::{Device, DeviceConfig, Error};

/// How the memory disk completes what it is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Inside `queue_rq`.
    Inline,
    /// At the next poll, newest first.
    Reversed,
}

/// A memory disk without write-zeroes, so the core emulates it.
pub struct MemDisk {
    pub data: Arc<Mutex<Vec<u8>>>,
    pub order: Order,
    /// Panic in the next poll (once).
    pub panic_in_poll: Arc<AtomicBool>,
    pub limits: QueueLimits,
}

pub struct MemQueue {
    held: VecDeque<RqRef>,
}

impl MemDisk {
    pub fn new(bytes: usize, order: Order) -> MemDisk {
        MemDisk {
            data: Arc::new(Mutex::new(vec![0; bytes])),
            order,
            panic_in_poll: Arc::new(AtomicBool::new(false)),
            limits: QueueLimits::default(),
        }
    }

    fn serve(&self, rq: &mut RqRef) {
        let mut data = self.data.lock().unwrap();
        let mut pos = rq.offset_bytes() as usize;
        match rq.op() {
            Op::Read => {
                for buf in rq.read_bufs() {
                    buf.copy_from_slice(&data[pos..pos + buf.len()]);
                    pos += buf.len();
                }
            }
            Op::Write => {
                for src in rq.write_bufs() {
                    data[pos..pos + src.len()].copy_from_slice(src);
                    pos += src.len();
                }
            }
            Op::Discard | Op::WriteZeroes => {
                let n = rq.len_bytes() as usize;
                data[pos..pos + n].fill(0);
            }
            Op::Flush => {}
        }
    }
}

impl Driver for MemDisk {
    type HwQueue = MemQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<MemQueue, Error> {
        Ok(MemQueue {
            held: VecDeque::with_capacity((setup.queue_depth + setup.reserved_tags) as usize),
        })
    }

    fn queue_rq(
        &self,
        hq: &mut MemQueue,
        mut rq: RqRef,
        _last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        self.serve(&mut rq);
        match self.order {
            Order::Inline => done.complete(rq, Status::Ok),
            Order::Reversed => hq.held.push_back(rq),
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut MemQueue) {}

    fn poll(&self, hq: &mut MemQueue, done: &mut Completions<'_>) -> usize {
        if self.panic_in_poll.swap(false, Ordering::SeqCst) {
            panic!("toy driver panics in poll");
        }
        let n = hq.held.len();
        while let Some(rq) = hq.held.pop_back() {
            done.complete(rq, Status::Ok);
        }
        n
    }

    fn limits(&self) -> QueueLimits {
        self.limits
    }

    fn features(&self) -> Features {
        Features {
            write_zeroes: false,
            ..Features::default()
        }
    }
}

/// A driver whose requests a thread completes after `delay`, calling the
/// hardware queue's notifier, as an interrupt handler would. With
/// `irq_line`, the thread instead writes a byte to the queue's interrupt
/// line (a socket, its `Driver::irq_fd`), and `poll` drains the line and
/// completes what the thread finished.
pub struct Threaded {
    pub delay: Duration,
    pub polls: Arc<AtomicU32>,
    pub irq_line: bool,
}

pub struct ThreadedQueue {
    inbox: Arc<Mutex<Vec<RqRef>>>,
    tx: std::sync::mpsc::Sender<RqRef>,
    line: Option<UnixStream>,
}

impl Driver for Threaded {
    type HwQueue = ThreadedQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<ThreadedQueue, Error> {
        let inbox: Arc<Mutex<Vec<RqRef>>> = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel::<RqRef>();
        let (to, notifier, delay): (_, HwNotifier, _) = (inbox.clone(), setup.notifier, self.delay);
        let (mut raise, line) = match self.irq_line {
            true => {
                let (raise, line) = UnixStream::pair().expect("socketpair");
                line.set_nonblocking(true).expect("nonblocking line");
                (Some(raise), Some(line))
            }
            false => (None, None),
        };
        std::thread::spawn(move || {
            // Ends when the queue (and its sender) is dropped.
            while let Ok(rq) = rx.recv() {
                std::thread::sleep(delay);
                to.lock().unwrap().push(rq);
                match raise.as_mut() {
                    Some(r) => {
                        let _ = r.write_all(&[1]);
                    }
                    None => notifier.notify(),
                }
            }
        });
        Ok(ThreadedQueue { inbox, tx, line })
    }

    fn queue_rq(
        &self,
        hq: &mut ThreadedQueue,
        rq: RqRef,
        _last: bool,
        _done: &mut Completions<'_>,
    ) -> QueueRq {
        hq.tx.send(rq).expect("completion thread runs");
        QueueRq::Issued
    }

    fn commit_rqs(&self, _hq: &mut ThreadedQueue) {}

    fn poll(&self, hq: &mut ThreadedQueue, done: &mut Completions<'_>) -> usize {
        self.polls.fetch_add(1, Ordering::Relaxed);
        if let Some(line) = hq.line.as_mut() {
            let mut b = [0u8; 64];
            while matches!(line.read(&mut b), Ok(n) if n > 0) {}
        }
        let mut inbox = hq.inbox.lock().unwrap();
        let n = inbox.len();
        for rq in inbox.drain(..) {
            done.complete(rq, Status::Ok);
        }
        n
    }

    /// Through the notifier, yes; through the line, completions wait for a
    /// poll.
    fn completes_async(&self) -> bool {
        !self.irq_line
    }

    fn irq_fd(&self, hq: &ThreadedQueue) -> Option<std::os::fd::RawFd> {
        hq.line.as_ref().map(|l| l.as_raw_fd())
    }
}

pub fn config(name: &str, bytes: u64) -> DeviceConfig {
    let mut cfg = DeviceConfig::new(name, bytes);
    cfg.nr_hw_queues = 1;
    cfg.queue_depth = 32;
    cfg
}

pub fn mem_device(bytes: usize, order: Order) -> (Device, Arc<Mutex<Vec<u8>>>, Arc<AtomicBool>) {
    let d = MemDisk::new(bytes, order);
    let (data, panic) = (d.data.clone(), d.panic_in_poll.clone());
    (
        Device::new(d, config("mem0", bytes as u64)).unwrap(),
        data,
        panic,
    )
}

/// True if every byte of `s` is zero: one comparison of the slice (a
/// byte loop costs Miri about a thousand times more).
pub fn all_zero(s: &[u8]) -> bool {
    s == vec![0u8; s.len()].as_slice()
}

/// True if `fd` turns readable within `ms` milliseconds (0: now).
pub fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd for the length of the call.
    unsafe { libc::poll(&mut pfd, 1, ms) == 1 }
}
