//! The opened target as both engines see it: its descriptor, how each
//! operation maps to a system call, and the request-to-iovec step that
//! both the ring and the psync workers use.
//!
//! | request | regular file | block device |
//! |---|---|---|
//! | read / write | pread(v) / pwrite(v), READ(_FIXED) / WRITE(_FIXED) | same |
//! | FUA write | RWF_DSYNC | same |
//! | flush (and PREFLUSH) | fdatasync | same (a cache flush) |
//! | discard | fallocate(PUNCH_HOLE \| KEEP_SIZE) | ioctl(BLKDISCARD) |
//! | write-zeroes | fallocate(ZERO_RANGE \| KEEP_SIZE), or PUNCH_HOLE | fallocate(ZERO_RANGE) / ioctl(BLKZEROOUT) |

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use mqblk_core::bio::{BioFlags, Op};
use mqblk_core::driver::RqRef;
use mqblk_core::error::Status;

use crate::discover::{DiscardHow, Geometry, TargetKind, ZeroHow, BLKDISCARD, BLKZEROOUT};

/// Largest number of segments in one request: the iovec array each tag
/// keeps (Linux's default `BLK_MAX_SEGMENTS`).
pub const MAX_SEGMENTS: usize = 128;

/// Retries of an operation that failed with EAGAIN or EINTR before the
/// error is reported.
pub const MAX_RETRIES: u8 = 16;

/// Asked by a synchronous system call loop before every retry: true once
/// the request has timed out and must not be carried on (the psync
/// engine's interrupt path).
pub trait Cancel {
    /// True if the request must stop now.
    fn cancelled(&self) -> bool;
}

/// The opened file and how operations map onto it. Shared by every
/// hardware queue (and psync worker) of a device.
#[derive(Debug, Clone)]
pub struct Target {
    file: Arc<File>,
    /// The raw descriptor (valid while `file` lives).
    pub fd: RawFd,
    /// Regular file or block device.
    pub kind: TargetKind,
    /// How discard is done, if offered.
    pub discard: Option<DiscardHow>,
    /// How write-zeroes is done, if offered.
    pub write_zeroes: Option<ZeroHow>,
}

impl Target {
    /// The target for `file` as discovery described it.
    pub fn new(file: File, geom: &Geometry) -> Target {
        let fd = file.as_raw_fd();
        Target {
            file: Arc::new(file),
            fd,
            kind: geom.kind,
            discard: geom.discard,
            write_zeroes: geom.write_zeroes,
        }
    }

    /// The file.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The fallocate mode for a discard or write-zeroes, or None if the op
    /// needs an ioctl (block device discard).
    #[inline]
    pub fn fallocate_mode(&self, op: Op) -> Option<libc::c_int> {
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        let zero = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
        match (op, self.discard, self.write_zeroes) {
            (Op::Discard, Some(DiscardHow::PunchHole), _) => Some(punch),
            (Op::WriteZeroes, _, Some(ZeroHow::ZeroRange)) => Some(zero),
            (Op::WriteZeroes, _, Some(ZeroHow::PunchHole)) => Some(punch),
            _ => None,
        }
    }

    /// Carry out `rq` synchronously (the psync engine, and ring-less ops).
    /// Short transfers are continued; an unexpected end of file is an
    /// I/O error, never a silent success. A system call interrupted (EINTR)
    /// or cut short after `cancel` says stop is not carried on: the answer
    /// is then [`Status::Timeout`].
    pub fn execute(&self, rq: &mut RqRef, cancel: &impl Cancel) -> Status {
        let op = rq.op();
        let flags = rq.flags();
        if op == Op::Write && flags.contains(BioFlags::PREFLUSH) {
            let s = self.fdatasync(cancel);
            if !s.is_ok() {
                return s;
            }
        }
        match op {
            Op::Read | Op::Write => self.transfer(rq, cancel),
            Op::Flush => self.fdatasync(cancel),
            Op::Discard | Op::WriteZeroes => {
                self.deallocate(op, rq.offset_bytes(), rq.len_bytes(), cancel)
            }
        }
    }

    fn fdatasync(&self, cancel: &impl Cancel) -> Status {
        retry_again(cancel, || {
            // SAFETY: fdatasync takes no pointers.
            unsafe { libc::fdatasync(self.fd) as isize }
        })
        .map_or_else(Status::from_errno, |_| Status::Ok)
    }

    fn deallocate(&self, op: Op, offset: u64, len: u64, cancel: &impl Cancel) -> Status {
        let ioctl_req = match (self.kind, op, self.discard, self.write_zeroes) {
            (TargetKind::Block, Op::Discard, Some(DiscardHow::BlkDiscard), _) => Some(BLKDISCARD),
            (TargetKind::Block, Op::WriteZeroes, _, Some(ZeroHow::BlkZeroout)) => Some(BLKZEROOUT),
            _ => None,
        };
        if let Some(req) = ioctl_req {
            let range: [u64; 2] = [offset, len];
            return retry_again(cancel, || {
                // SAFETY: BLKDISCARD and BLKZEROOUT read two u64s (start,
                // length) from the pointer, a live local.
                unsafe { libc::ioctl(self.fd, req as _, range.as_ptr()) as isize }
            })
            .map_or_else(Status::from_errno, |_| Status::Ok);
        }
        let Some(mode) = self.fallocate_mode(op) else {
            return Status::NotSupported;
        };
        retry_again(cancel, || {
            // SAFETY: fallocate takes no pointers.
            unsafe {
                libc::fallocate(self.fd, mode, offset as libc::off_t, len as libc::off_t) as isize
            }
        })
        .map_or_else(Status::from_errno, |_| Status::Ok)
    }

    fn transfer(&self, rq: &mut RqRef, cancel: &impl Cancel) -> Status {
        let total = rq.len_bytes();
        let offset = rq.offset_bytes();
        let write = rq.op() == Op::Write;
        let rw_flags = if write && rq.flags().contains(BioFlags::FUA) {
            libc::RWF_DSYNC
        } else {
            0
        };
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX_SEGMENTS];
        let mut done = 0u64;
        let mut retries = 0u8;
        while done < total {
            if cancel.cancelled() {
                return Status::Timeout;
            }
            let (n, _) = fill_iovecs(rq, done, &mut iov);
            if n == 0 {
                return Status::Invalid(mqblk_core::error::InvalidKind::TooManySegments);
            }
            let at = (offset + done) as libc::off_t;
            let r = if write {
                // SAFETY: iov[..n] describes the request's segments, which
                // the request owns (and we own the request) until it is
                // completed; pwritev2 only reads them.
                unsafe { libc::pwritev2(self.fd, iov.as_ptr(), n as libc::c_int, at, rw_flags) }
            } else {
                // SAFETY: as above; preadv2 writes into the segments, which
                // nothing else touches while we hold the request.
                unsafe { libc::preadv2(self.fd, iov.as_ptr(), n as libc::c_int, at, 0) }
            };
            if r < 0 {
                let e = errno();
                if (e == libc::EINTR || e == libc::EAGAIN) && retries < MAX_RETRIES {
                    retries += 1;
                    continue;
                }
                return Status::from_errno(e);
            }
            if r == 0 {
                // End of file (a file truncated under us) or of device.
                return Status::IoError;
            }
            done += r as u64;
        }
        Status::Ok
    }
}

/// Fill `out` with iovecs for the data of `rq`, skipping its first `skip`
/// bytes (the part of a short transfer already done). Returns how many
/// were filled (0 if they do not fit) and, when there is exactly one, the
/// buffer arena that segment was carved from.
#[inline]
pub fn fill_iovecs(rq: &RqRef, skip: u64, out: &mut [libc::iovec]) -> (usize, Option<u16>) {
    let mut n = 0usize;
    let mut skip = skip;
    let mut arena = None;
    let mut overflow = false;
    rq.for_each_segment(|seg| {
        let len = u64::from(seg.len());
        if skip >= len {
            skip -= len;
            return;
        }
        if n == out.len() {
            overflow = true;
            return;
        }
        // The kernel writes a read's buffers: they are writable (every
        // buffer of a read bio is), and the request owns them.
        let base = seg.addr() as *mut u8;
        debug_assert!(n < out.len());
        out[n] = libc::iovec {
            // SAFETY: skip < len, so the pointer stays inside the segment.
            iov_base: unsafe { base.add(skip as usize) }.cast(),
            iov_len: (len - skip) as usize,
        };
        arena = seg.buf().arena_id();
        skip = 0;
        n += 1;
    });
    if overflow {
        return (0, None);
    }
    (n, if n == 1 { arena } else { None })
}

/// The calling thread's errno.
#[inline]
pub fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Run a system call that returns -1 on error, retrying EINTR and EAGAIN a bounded
/// number of times unless `cancel` says stop. Returns the errno on failure
/// (ETIMEDOUT once cancelled).
fn retry_again(cancel: &impl Cancel, mut f: impl FnMut() -> isize) -> Result<isize, i32> {
    let mut tries = 0;
    loop {
        if cancel.cancelled() {
            return Err(libc::ETIMEDOUT);
        }
        let r = f();
        if r >= 0 {
            return Ok(r);
        }
        let e = errno();
        if (e == libc::EINTR || e == libc::EAGAIN) && tries < MAX_RETRIES {
            tries += 1;
            continue;
        }
        return Err(e);
    }
}
