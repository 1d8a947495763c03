//! Submission: a request's entries (with a linked fdatasync before a
//! PREFLUSH write), pushed to the ring and submitted in batches.

use io_uring::{opcode, squeue, types};
use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::driver::RqRef;
use mqblk_core::error::Status;

use crate::target::{fill_iovecs, MAX_SEGMENTS};

use super::queue::*;
use super::ring::Flavor;
use super::setup::tid;

impl UringQueue {
    /// Issue `rq`. Busy when the submission queue is full or the ring is
    /// changing hands.
    #[inline]
    pub fn queue_rq(&mut self, rq: RqRef, last: bool) -> Result<(), RqRef> {
        let op = rq.op();
        if let Some(side) = self.side.as_mut() {
            if op == Op::Discard {
                side.queue(rq, last);
                if last {
                    self.submit();
                }
                return Ok(());
            }
        }
        if !self.usable() {
            return Err(rq);
        }
        let need = if op == Op::Write && rq.flags().contains(BioFlags::PREFLUSH) {
            2
        } else {
            1
        };
        if !self.sq_has_room(need) {
            self.submit();
            if !self.sq_has_room(need) {
                return Err(rq);
            }
        }
        let tag = rq.tag() as usize;
        debug_assert!(tag < self.slots.len(), "tag {tag} beyond the ring's slots");
        let slot = &mut self.slots[tag];
        debug_assert!(slot.rq.is_none(), "tag {tag} already in flight");
        *slot = Slot {
            rq: Some(rq),
            done_bytes: 0,
            retries: 0,
            status: Status::Ok,
            timed_out: false,
        };
        let extra = if self.force_async {
            squeue::Flags::ASYNC
        } else {
            squeue::Flags::empty()
        };
        if need == 2 {
            let e = self
                .fsync_entry(UD_PREFLUSH | tag as u64)
                .flags(squeue::Flags::IO_LINK | extra);
            self.push(&e);
        }
        let e = self.entry(tag).flags(extra);
        self.push(&e);
        self.in_flight += 1;
        if last {
            self.submit();
        }
        Ok(())
    }

    #[inline]
    pub(super) fn sq_has_room(&mut self, need: usize) -> bool {
        let sq = self.ring.submission();
        sq.capacity() - sq.len() >= need
    }

    #[inline]
    pub(super) fn push(&mut self, e: &squeue::Entry) {
        // SAFETY: every entry built by `entry`/`fsync_entry` points only at
        // memory that outlives the operation: the request's segments (the
        // request is held in its slot until its completion is reaped) and
        // the slot's iovecs (owned by this queue, which waits for in-flight
        // I/O before it is dropped).
        let r = unsafe { self.ring.submission().push(e) };
        debug_assert!(r.is_ok(), "room was checked");
        self.unsubmitted += 1;
    }

    pub(super) fn fsync_entry(&self, ud: u64) -> squeue::Entry {
        let f = types::FsyncFlags::DATASYNC;
        if self.fixed_file {
            opcode::Fsync::new(types::Fixed(0)).flags(f).build()
        } else {
            opcode::Fsync::new(types::Fd(self.target.fd))
                .flags(f)
                .build()
        }
        .user_data(ud)
    }

    /// The submission entry for the request at `tag`, from its
    /// `done_bytes` on.
    #[inline]
    pub(super) fn entry(&mut self, tag: usize) -> squeue::Entry {
        let slot = &mut self.slots[tag];
        let skip = slot.done_bytes;
        let rq = slot.rq.as_mut().expect("slot holds its request");
        let op = rq.op();
        let ud = UD_MAIN | tag as u64;
        let fd = self.target.fd;
        let fixed_file = self.fixed_file;
        macro_rules! with_fd {
            ($f:ident => $e:expr) => {
                if fixed_file {
                    let $f = types::Fixed(0);
                    $e
                } else {
                    let $f = types::Fd(fd);
                    $e
                }
            };
        }
        match op {
            Op::Read | Op::Write => {
                let offset = rq.offset_bytes() + skip;
                let rw_flags = if op == Op::Write && rq.flags().contains(BioFlags::FUA) {
                    libc::RWF_DSYNC
                } else {
                    0
                };
                let base = tag * MAX_SEGMENTS;
                let iov = &mut self.iovecs[base..base + MAX_SEGMENTS];
                let (n, arena) = fill_iovecs(rq, skip, iov);
                if n == 1 {
                    let (ptr, len) = (iov[0].iov_base.cast::<u8>(), iov[0].iov_len as u32);
                    let fixed = arena.and_then(|a| {
                        self.fixed_bufs
                            .iter()
                            .find(|(id, _)| *id == a)
                            .map(|&(_, i)| i)
                    });
                    match (op, fixed) {
                        (Op::Read, Some(i)) => with_fd!(f => opcode::ReadFixed::new(f, ptr, len, i)
                            .offset(offset)
                            .build()),
                        (Op::Read, None) => with_fd!(f => opcode::Read::new(f, ptr, len)
                            .offset(offset)
                            .build()),
                        (_, Some(i)) => with_fd!(f => opcode::WriteFixed::new(f, ptr, len, i)
                            .offset(offset)
                            .rw_flags(rw_flags)
                            .build()),
                        (_, None) => with_fd!(f => opcode::Write::new(f, ptr, len)
                            .offset(offset)
                            .rw_flags(rw_flags)
                            .build()),
                    }
                } else {
                    // n == 0 only if the request has more segments than
                    // the limit the core enforces; the kernel answers
                    // EINVAL for an empty vector, which reaches the caller.
                    let p = iov.as_ptr();
                    if op == Op::Read {
                        with_fd!(f => opcode::Readv::new(f, p, n as u32).offset(offset).build())
                    } else {
                        with_fd!(f => opcode::Writev::new(f, p, n as u32)
                            .offset(offset)
                            .rw_flags(rw_flags)
                            .build())
                    }
                }
            }
            Op::Flush => return self.fsync_entry(ud),
            Op::Discard | Op::WriteZeroes => {
                let (offset, len) = (rq.offset_bytes(), rq.len_bytes());
                // The driver checked that the op has a fallocate mode.
                let mode = self.target.fallocate_mode(op).unwrap_or(0);
                with_fd!(f => opcode::Fallocate::new(f, len)
                    .offset(offset)
                    .mode(mode)
                    .build())
            }
        }
        .user_data(ud)
    }

    /// Hand the pushed entries to the kernel (one system call), running
    /// deferred completion work in the same call.
    #[inline]
    pub fn submit(&mut self) {
        if let Some(side) = self.side.as_mut() {
            side.commit();
        }
        if self.unsubmitted == 0 {
            return;
        }
        if self.cfg.sqpoll_idle_ms.is_some() {
            // The kernel thread consumes the queue; a system call only if
            // it went to sleep.
            if self.ring.submitter().submit().is_ok() {
                self.unsubmitted = 0;
            }
            return;
        }
        if self.flavor == Flavor::Defer && self.owner != tid() {
            return;
        }
        let flags = io_uring::EnterFlags::GETEVENTS.bits();
        // SAFETY: no argument is passed; the entries were pushed with valid
        // memory (see `push`).
        let r = unsafe {
            self.ring
                .submitter()
                .enter::<libc::sigset_t>(self.unsubmitted, 0, flags, None)
        };
        if let Ok(n) = r {
            self.unsubmitted -= (n as u32).min(self.unsubmitted);
        }
        // EAGAIN/EBUSY/EINTR: the entries stay queued and the next
        // submit or poll tries again.
    }

    #[cold]
    pub(super) fn resubmit_pending(&mut self) {
        while let Some(&tag) = self.resubmit.last() {
            if !self.sq_has_room(1) {
                self.submit();
                if !self.sq_has_room(1) {
                    break;
                }
            }
            self.resubmit.pop();
            let mut e = self.entry(tag as usize);
            if self.force_async {
                e = e.flags(squeue::Flags::ASYNC);
            }
            self.push(&e);
        }
        self.submit();
    }
}
