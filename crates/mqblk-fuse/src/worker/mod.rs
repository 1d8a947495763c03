//! The data half: one thread with its own cloned `/dev/fuse` descriptor
//! and its own mqblk [`Context`]. It reads requests without blocking
//! while it has free slots, turns each read and write into one bio whose
//! one segment is the slot's buffer (a write's data is read from the
//! kernel straight onto a page boundary of that buffer; a read's data is
//! read by the device into it and sent back with one `writev` of the
//! header and the buffer: no copy in between), and answers completions in
//! the order the device finishes them. It sleeps in epoll on the
//! descriptor and the context's completion fd.
//!
//! By call order: this file (the loop: take requests, sleep), `serve`
//! (each opcode), `slow` (requests off the device's blocks, fallocate),
//! `submit` (a request's bio), `complete` (completions answered, the
//! drain), `answer` (replies written to the descriptor), `wait` (the
//! sleep).

mod answer;
mod complete;
mod serve;
mod slow;
mod submit;
mod wait;

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqblk_core::{Context, Device, IoBuf, Status};

use crate::abi::WRITE_PREFIX_LEN;
use crate::reply::{Attr, InitOut};
use crate::request::{self, Parsed};

/// Memory page size: a write's data lands on a page boundary.
pub(crate) const PAGE: usize = 4096;

/// What every thread of an export shares (set up once; the hot path reads
/// it and takes no lock).
pub(crate) struct Shared {
    pub(crate) dev: Device,
    pub(crate) read_only: bool,
    pub(crate) capacity: u64,
    pub(crate) block: u64,
    pub(crate) max_write: u32,
    pub(crate) discard: bool,
    pub(crate) init: InitOut,
    /// The file's attributes (GETATTR and SETATTR only).
    pub(crate) attr: Mutex<Attr>,
    /// The slow path's read-modify-writes, one at a time.
    pub(crate) rmw: Mutex<()>,
    /// Leave once the requests in flight are answered, even if the
    /// connection lives (a user holds the detached file).
    pub(crate) quit: AtomicBool,
}

impl Shared {
    /// The attributes of a fresh export: the device's size, the original
    /// file's owner and times, 0644 (0444 read-only).
    pub(crate) fn attr_of(meta: &std::fs::Metadata, capacity: u64, read_only: bool) -> Attr {
        use std::os::unix::fs::MetadataExt;
        Attr {
            ino: crate::abi::ROOT_ID,
            size: capacity,
            blocks: capacity.div_ceil(512),
            atime: (meta.atime() as u64, meta.atime_nsec() as u32),
            mtime: (meta.mtime() as u64, meta.mtime_nsec() as u32),
            ctime: (meta.ctime() as u64, meta.ctime_nsec() as u32),
            mode: libc::S_IFREG | if read_only { 0o444 } else { 0o644 },
            uid: meta.uid(),
            gid: meta.gid(),
            blksize: PAGE as u32,
        }
    }
}

/// What a slot's request waits for.
#[derive(Clone, Copy)]
enum Pending {
    /// Its data: `len` bytes of the slot's buffer, after the header.
    Read { len: u32 },
    /// `fuse_write_out` with `len`.
    Write { len: u32 },
    /// A bare header (fsync).
    Done,
}

/// A request slot: free, or holding the request its bio serves.
#[derive(Clone, Copy)]
enum Slot {
    Free,
    InFlight { unique: u64, pending: Pending },
}

/// Counters of one thread, summed when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WorkerEnd {
    /// Requests answered.
    pub(crate) requests: u64,
    /// Requests answered with an error (ENOSYS, the kernel's probing,
    /// aside).
    pub(crate) errors: u64,
    /// Requests still in flight after the drain (their buffers leaked).
    pub(crate) abandoned: u32,
}

/// One thread's descriptor, context and slots.
pub(crate) struct Worker {
    fd: OwnedFd,
    ctx: Context,
    shared: Arc<Shared>,
    /// Each slot's buffer: a page before the data, for the header.
    bufs: Vec<IoBuf>,
    base: Vec<NonNull<u8>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    in_flight: u32,
    done: Vec<(u32, Status)>,
    /// The slow path's buffer, made at its first use.
    bounce: Option<IoBuf>,
    /// The connection ended (ENODEV).
    gone: bool,
    said_broken: bool,
    id: usize,
    /// Counted here, summed when the thread ends (no shared line written
    /// per request).
    requests: u64,
    errors: u64,
}

// SAFETY: the raw pointers point into `bufs`, which the worker owns and
// which move with it; nothing else holds them between calls.
unsafe impl Send for Worker {}

/// Why a read of `/dev/fuse` gave nothing.
enum NoRequest {
    Empty,
    Gone,
}

impl Worker {
    /// A worker on `fd` and `ctx` with `depth` slots.
    pub(crate) fn new(
        fd: OwnedFd,
        ctx: Context,
        shared: Arc<Shared>,
        depth: usize,
        id: usize,
    ) -> std::io::Result<Worker> {
        // SAFETY: `fd` is open; F_GETFL/F_SETFL only change its flags.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let size = PAGE + shared.max_write as usize;
        let bufs: Vec<IoBuf> = (0..depth).map(|_| IoBuf::page_aligned(size)).collect();
        let base = bufs
            .iter()
            .map(|b| NonNull::new(b.as_ptr()).expect("an IoBuf is never null"))
            .collect();
        Ok(Worker {
            fd,
            ctx,
            shared,
            bufs,
            base,
            slots: vec![Slot::Free; depth],
            free: (0..depth as u32).rev().collect(),
            in_flight: 0,
            done: Vec::with_capacity(depth),
            bounce: None,
            gone: false,
            said_broken: false,
            id,
            requests: 0,
            errors: 0,
        })
    }

    /// Serve until the connection ends (or [`Shared::quit`]), then drain.
    pub(crate) fn run(mut self) -> WorkerEnd {
        // A device that completes on its own (a thread, the kernel) or
        // has interrupt lines wakes the thread through the completion fd;
        // one that completes only when polled needs none.
        let dev = &self.shared.dev;
        let completion_fd = if dev.completes_async() || dev.has_irq_lines() {
            match self.ctx.completion_fd() {
                Ok(fd) => Some(fd),
                Err(e) => {
                    eprintln!("mqblk serve: FUSE thread {}: {e}", self.id);
                    None
                }
            }
        } else {
            None
        };
        let waiter = match wait::Waiter::new(self.fd.as_raw_fd(), completion_fd) {
            Ok(w) => Some(w),
            Err(e) => {
                eprintln!("mqblk serve: FUSE thread {}: epoll: {e}", self.id);
                None
            }
        };
        loop {
            let took = self.take_requests();
            self.ctx.unplug();
            let reaped = self.reap();
            let quit = self.shared.quit.load(Ordering::Acquire);
            if (self.gone || quit) && self.in_flight == 0 {
                break;
            }
            if took == 0 && reaped == 0 {
                let listen = !self.gone && !quit && !self.free.is_empty();
                match &waiter {
                    Some(w) => w.wait(listen, self.in_flight > 0),
                    None => std::thread::sleep(wait::SLEEP_MAX / 10),
                }
            }
        }
        let abandoned = self.drain(Duration::from_secs(1));
        if abandoned > 0 {
            // The device may still write into the buffers: keep them.
            for b in std::mem::take(&mut self.bufs) {
                std::mem::forget(b);
            }
        }
        WorkerEnd {
            requests: self.requests,
            errors: self.errors,
            abandoned,
        }
    }

    /// Read and serve requests while slots are free; how many were read.
    fn take_requests(&mut self) -> usize {
        let mut took = 0;
        while !self.gone && !self.shared.quit.load(Ordering::Relaxed) {
            let Some(&slot) = self.free.last() else { break };
            match self.read_request(slot) {
                Ok(n) => {
                    took += 1;
                    self.handle(slot, n);
                }
                Err(NoRequest::Empty) => break,
                Err(NoRequest::Gone) => self.gone = true,
            }
        }
        took
    }

    /// Where slot `slot`'s message starts: so that a write's data lands on
    /// the page boundary at [`PAGE`].
    fn msg_ptr(&self, slot: u32) -> *mut u8 {
        debug_assert!((slot as usize) < self.base.len());
        // SAFETY: each buffer is PAGE + max_write bytes; PAGE - 80 is
        // inside it.
        unsafe {
            self.base[slot as usize]
                .as_ptr()
                .add(PAGE - WRITE_PREFIX_LEN)
        }
    }

    /// The data area of slot `slot` (after the page that holds a header).
    fn data_ptr(&self, slot: u32) -> NonNull<u8> {
        debug_assert!((slot as usize) < self.base.len());
        // SAFETY: PAGE is inside the buffer of PAGE + max_write bytes.
        unsafe { self.base[slot as usize].add(PAGE) }
    }

    fn read_request(&mut self, slot: u32) -> Result<usize, NoRequest> {
        let len = WRITE_PREFIX_LEN + self.shared.max_write as usize;
        loop {
            // SAFETY: the slot is free (no bio points into its buffer), and
            // `len` bytes from PAGE - 80 end at the buffer's end.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), self.msg_ptr(slot).cast(), len) };
            if n >= 0 {
                return Ok(n as usize);
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // ENOENT: the request was interrupted before it was read.
                Some(libc::EAGAIN) | Some(libc::ENOENT) => return Err(NoRequest::Empty),
                Some(libc::ENODEV) => return Err(NoRequest::Gone),
                _ => {
                    eprintln!(
                        "mqblk serve: FUSE thread {}: reading /dev/fuse: {}",
                        self.id,
                        std::io::Error::last_os_error()
                    );
                    return Err(NoRequest::Gone);
                }
            }
        }
    }

    fn handle(&mut self, slot: u32, n: usize) {
        // SAFETY: the read gave `n` bytes at the slot's message start, in
        // its buffer; the slot is free, so nothing else touches them.
        let msg = unsafe { std::slice::from_raw_parts(self.msg_ptr(slot), n) };
        match request::parse(msg) {
            Parsed::Request(h, op) => self.serve(slot, h, op),
            Parsed::Malformed(h, why) => {
                self.say_broken(why);
                self.reply_err(h.unique, libc::EINVAL);
            }
            Parsed::Broken(why) => self.say_broken(why),
        }
    }

    fn say_broken(&mut self, why: &str) {
        if !self.said_broken {
            eprintln!(
                "mqblk serve: FUSE thread {}: a message from the kernel could not be read: {why}",
                self.id
            );
            self.said_broken = true;
        }
    }
}
