//! The data replies of one reap, written to the descriptor with one
//! io_uring submission instead of one `writev` each.
//!
//! Why: each reply ends a request, and the kernel wakes the program that
//! waits for it. On the way back from the system call that woke it, this
//! thread is often switched out for that program (wakeup preemption). One
//! submission for all the replies of a reap costs that switch once, not
//! once a reply. The submission waits for every write it carries (they
//! run inline: a write to `/dev/fuse` does not block), so a slot's buffer
//! is free again when [`Worker::flush_replies`] returns.
//!
//! Without io_uring (an old kernel, a seccomp filter), replies are written
//! one `writev` each, as before.

use std::os::fd::AsRawFd;

use io_uring::{opcode, types};

use super::ring::HEAD_LEN;
use super::state::Worker;
use crate::abi::{body_len, OUT_HEADER_LEN};
use crate::reply;

/// What follows a reply's header.
pub(super) enum Body {
    /// A read's data: `len` bytes of the slot's data area.
    Data(u32),
    /// A write's `fuse_write_out` with its size.
    Written(u32),
}

impl Worker {
    /// Answer slot `slot`'s request `unique` with `body`: queued on the
    /// batch, or written at once without one.
    pub(super) fn reply_data(&mut self, slot: u32, unique: u64, body: Body) {
        self.requests += 1;
        let data = self.data_ptr(slot);
        // A full ring is written out first, so that the push below has a
        // place (a reap answers at most one reply a slot, and the ring has
        // a place for each, so this is a guard, not a path).
        if self
            .batch
            .as_mut()
            .is_some_and(|b| b.ring.submission().is_full())
        {
            self.flush_replies();
        }
        let Some(b) = self.batch.as_mut() else {
            match body {
                Body::Data(len) => {
                    let h = reply::header(unique, 0, len as usize);
                    // SAFETY: the device finished with the slot's data
                    // area; `len` bytes of it are the read's data.
                    let data = unsafe { std::slice::from_raw_parts(data.as_ptr(), len as usize) };
                    self.send(&[&h, data]);
                }
                Body::Written(len) => {
                    let h = reply::header(unique, 0, body_len::WRITE_OUT);
                    self.send(&[&h, &reply::write(len)]);
                }
            }
            return;
        };
        let s = slot as usize;
        let head = &mut b.heads[s];
        let iov = &mut b.iovs[s];
        let parts = match body {
            Body::Data(len) => {
                head[..OUT_HEADER_LEN].copy_from_slice(&reply::header(unique, 0, len as usize));
                iov[0].iov_len = OUT_HEADER_LEN;
                iov[1] = libc::iovec {
                    iov_base: data.as_ptr().cast(),
                    iov_len: len as usize,
                };
                2
            }
            Body::Written(len) => {
                head[..OUT_HEADER_LEN].copy_from_slice(&reply::header(
                    unique,
                    0,
                    body_len::WRITE_OUT,
                ));
                head[OUT_HEADER_LEN..].copy_from_slice(&reply::write(len));
                iov[0].iov_len = HEAD_LEN;
                1
            }
        };
        iov[0].iov_base = head.as_mut_ptr().cast();
        let sqe = opcode::Writev::new(types::Fd(self.fd.as_raw_fd()), iov.as_ptr(), parts)
            .build()
            .user_data(u64::from(slot));
        // SAFETY: the iovecs, the header and the slot's data live in the
        // worker until `flush_replies` has reaped this write, which it does
        // before the slot can be reused (at the end of every reap).
        // The ring has a place (made above), so the push succeeds.
        let pushed = unsafe { b.ring.submission().push(&sqe) }.is_ok();
        debug_assert!(pushed, "the ring was not full");
        b.queued += usize::from(pushed);
    }

    /// Submit the queued replies and wait until each is written.
    pub(super) fn flush_replies(&mut self) {
        let Worker {
            batch,
            gone,
            keep_buffers,
            id,
            ..
        } = self;
        let Some(b) = batch.as_mut() else { return };
        let mut tries = 0;
        while b.queued > 0 {
            match b.ring.submit_and_wait(b.queued) {
                Ok(_) => {}
                // A signal, or a completion queue to empty first: reap
                // what is there and go on.
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => {
                    tries += 1;
                    if tries == 3 {
                        // The ring cannot be used: its writes may still
                        // point into the buffers, so keep both for ever and
                        // end this connection's thread.
                        eprintln!("mqblk serve: FUSE thread {id}: replying: {e}");
                        std::mem::forget(batch.take());
                        *keep_buffers = true;
                        *gone = true;
                        return;
                    }
                }
            }
            for cqe in b.ring.completion() {
                b.queued -= 1;
                match -cqe.result() {
                    r if r <= 0 => {}
                    // The request was interrupted, or the connection aborted.
                    libc::ENOENT => {}
                    libc::ENODEV => *gone = true,
                    errno => eprintln!(
                        "mqblk serve: FUSE thread {id}: replying: {}",
                        std::io::Error::from_raw_os_error(errno)
                    ),
                }
            }
        }
    }
}
