//! The data half: one thread with its own cloned `/dev/fuse` descriptor
//! and its own mqblk [`Context`]. It reads requests without blocking
//! while it has free slots, turns each read and write into one bio whose
//! one segment is the slot's buffer (a write's data is read from the
//! kernel straight onto a page boundary of that buffer; a read's data is
//! read by the device into it and sent back as one vectored write of the
//! header and the buffer: no copy in between), and answers completions in
//! the order the device finishes them, the data replies of a reap in one
//! io_uring submission. It sleeps in epoll on the
//! descriptor and the context's completion fd.
//!
//! By call order: this file (the loop: take requests, sleep), `serve`
//! (each opcode), `slow` (requests off the device's blocks, fallocate),
//! `rmw` (read-modify-writes and aligned writes excluding each other),
//! `submit` (a request's bio), `complete` (completions answered, the
//! drain), `batch` (a reap's data replies, one submission for all),
//! `answer` (replies written to the descriptor), `wait` (the
//! sleep), `state` (the worker, its slots and buffers, which all of them
//! work on) and `ring` (the reply ring `state` holds).

mod answer;
mod batch;
mod complete;
mod ring;
mod rmw;
mod serve;
mod slow;
mod state;
mod submit;
mod wait;

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::abi::WRITE_PREFIX_LEN;
use crate::request::{self, Parsed};
pub(crate) use state::{Shared, Worker, WorkerEnd, PAGE};

/// Why a read of `/dev/fuse` gave nothing.
enum NoRequest {
    Empty,
    Gone,
}

impl Worker {
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
            let unparked = if self.parked.is_empty() {
                0
            } else {
                self.unpark()
            };
            let (took, queue_empty) = self.take_requests();
            self.ctx.unplug();
            let reaped = self.reap();
            let quit = self.shared.quit.load(Ordering::Acquire);
            if (self.gone || quit) && self.in_flight == 0 {
                break;
            }
            if !self.parked.is_empty() && unparked == 0 {
                // An RMW holds the device (for a few of its I/Os).
                std::thread::sleep(rmw::PARKED_NAP);
            } else if (took == 0 && reaped == 0) || queue_empty {
                // Nothing done, or the kernel's queue was found empty
                // this round: sleep rather than read it again to find it
                // empty (epoll is level triggered: a request that came
                // meanwhile, or a completion, ends the sleep at once).
                // One read(2) per wakeup saved.
                let listen = !self.gone && !quit && !self.free.is_empty();
                match &waiter {
                    Some(w) => w.wait(listen, self.in_flight > 0),
                    None => std::thread::sleep(wait::SLEEP_MAX / 10),
                }
            }
        }
        // Writes still parked when the connection ended: nobody reads
        // their answer.
        for p in std::mem::take(&mut self.parked) {
            self.reply_err(p.unique, libc::EIO);
            self.free.push(p.slot);
        }
        let abandoned = self.drain(Duration::from_secs(1));
        if abandoned > 0 || self.keep_buffers {
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

    /// Read and serve requests while slots are free; how many were read,
    /// and whether the kernel's queue was found empty.
    fn take_requests(&mut self) -> (usize, bool) {
        let mut took = 0;
        while !self.gone && !self.shared.quit.load(Ordering::Relaxed) {
            let Some(&slot) = self.free.last() else { break };
            match self.read_request(slot) {
                Ok(n) => {
                    took += 1;
                    self.handle(slot, n);
                }
                Err(NoRequest::Empty) => return (took, true),
                Err(NoRequest::Gone) => self.gone = true,
            }
        }
        (took, false)
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
