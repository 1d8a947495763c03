//! Submission: each request is built in place in a slot of the queue's bio
//! set around the caller's buffers, and carries the user pointer back.

use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use mqblk::{Bio, BioFlags, IoBuf, Op};

use super::handle::{queue_mut, MqblkQueue};
use crate::error::{entry, Failure, MqblkError};

/// Force unit access: the write is durable when it completes.
pub const MQBLK_REQ_FUA: u32 = 1;
/// Flush the device's write cache before this request.
pub const MQBLK_REQ_PREFLUSH: u32 = 2;
/// Never merge this request with a neighbour.
pub const MQBLK_REQ_NOMERGE: u32 = 4;
const REQ_ALL: u32 = MQBLK_REQ_FUA | MQBLK_REQ_PREFLUSH | MQBLK_REQ_NOMERGE;

fn bio_flags(flags: u32, func: &str) -> Result<BioFlags, Failure> {
    if flags & !REQ_ALL != 0 {
        return Err(Failure::new(
            MqblkError::Inval,
            format!("{func}: unknown flag bits {:#x} (known: MQBLK_REQ_FUA, MQBLK_REQ_PREFLUSH, MQBLK_REQ_NOMERGE)", flags & !REQ_ALL),
        ));
    }
    let mut f = BioFlags::NONE;
    if flags & MQBLK_REQ_FUA != 0 {
        f |= BioFlags::FUA;
    }
    if flags & MQBLK_REQ_PREFLUSH != 0 {
        f |= BioFlags::PREFLUSH;
    }
    if flags & MQBLK_REQ_NOMERGE != 0 {
        f |= BioFlags::NOMERGE;
    }
    Ok(f)
}

/// The caller's buffer, checked: not NULL, at most 4 GiB.
#[inline]
fn user_span(buf: *mut c_void, len: usize, func: &str) -> Result<(NonNull<u8>, u32), Failure> {
    let Some(p) = NonNull::new(buf.cast::<u8>()) else {
        return Err(Failure::null(func, "buf"));
    };
    match u32::try_from(len) {
        Ok(len) => Ok((p, len)),
        Err(_) => Err(Failure::new(
            MqblkError::Inval,
            format!("{func}: a segment of {len} bytes is over the 4 GiB limit of one segment"),
        )),
    }
}

/// A non-owning buffer over the caller's memory.
///
/// # Safety
///
/// `buf` is valid for `len` bytes and left alone by the caller until the
/// request's completion is collected (the contract of every submission
/// function).
unsafe fn user_buf(buf: *mut c_void, len: usize, func: &str) -> Result<(IoBuf, u32), Failure> {
    let (p, len) = user_span(buf, len, func)?;
    // SAFETY: valid and exclusively lent until the completion is reaped
    // (the caller's promise above).
    Ok((unsafe { IoBuf::from_raw(p, len as usize) }, len))
}

fn submit(
    q: &mut MqblkQueue,
    mut bio: Bio,
    user_data: *mut c_void,
    flags: BioFlags,
) -> Result<c_int, Failure> {
    bio.private = user_data as u64;
    bio.set_flags(flags);
    match q.ctx.submit(bio) {
        Ok(()) => Ok(0),
        // The bio (and its non-owning buffers) is dropped: nothing of the
        // caller's memory is touched after this returns.
        Err(e) => Err(Failure::from(e.error().clone())),
    }
}

/// Submit a data request built in place by `segments` (which adds the
/// caller's buffers to the blank bio it is given).
#[inline]
fn submit_data(
    q: &mut MqblkQueue,
    r: &Req,
    flags: BioFlags,
    segments: impl FnOnce(&mut Bio),
) -> Result<c_int, Failure> {
    let (op, offset, user_data) = (r.op, r.offset, r.user_data as u64);
    let built = q.ctx.submit_with(move |bio| {
        bio.set_op(op);
        bio.set_offset_bytes(offset);
        bio.set_flags(flags);
        bio.private = user_data;
        segments(bio);
    });
    match built {
        Ok(()) => Ok(0),
        // The bio (and its non-owning buffers) is dropped: nothing of the
        // caller's memory is touched after this returns.
        Err(e) => Err(Failure::from(e.error().clone())),
    }
}

/// What every submission names besides its data: the entry point (for
/// messages), the operation and offset, the user pointer and the flags.
struct Req {
    func: &'static str,
    op: Op,
    offset: u64,
    user_data: *mut c_void,
    flags: u32,
}

/// One data request: a read or a write of one buffer.
///
/// # Safety
///
/// See `mqblk_queue_read`.
#[inline]
unsafe fn data_one(q: *mut MqblkQueue, r: Req, buf: *mut c_void, len: usize) -> c_int {
    let func = r.func;
    entry(func, || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, func) }?;
        let flags = bio_flags(r.flags, func)?;
        let (p, len) = user_span(buf, len, func)?;
        submit_data(q, &r, flags, move |bio| {
            // SAFETY: valid and exclusively lent until the completion is
            // reaped (the caller's promise); built where the bio keeps it.
            let b = unsafe { IoBuf::from_raw(p, len as usize) };
            bio.push_segment(b, 0, len);
        })
    })
}

/// One vectored request over `iovcnt` buffers (one bio, one request).
///
/// # Safety
///
/// See `mqblk_queue_readv`.
unsafe fn data_vec(q: *mut MqblkQueue, r: Req, iov: *const libc::iovec, iovcnt: c_int) -> c_int {
    let func = r.func;
    entry(func, || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, func) }?;
        let flags = bio_flags(r.flags, func)?;
        if iov.is_null() {
            return Err(Failure::null(func, "iov"));
        }
        let Ok(n) = usize::try_from(iovcnt) else {
            return Err(Failure::new(
                MqblkError::Inval,
                format!("{func}: iovcnt is {iovcnt}"),
            ));
        };
        // SAFETY: `iov` points to `iovcnt` iovecs (the caller's promise).
        let iov = unsafe { std::slice::from_raw_parts(iov, n) };
        // Every buffer is checked before the request takes a slot.
        let mut bufs: smallvec::SmallVec<[(IoBuf, u32); 4]> = smallvec::SmallVec::new();
        for v in iov {
            // SAFETY: each iovec's memory is valid and lent until the
            // completion is collected (the caller's promise).
            bufs.push(unsafe { user_buf(v.iov_base, v.iov_len, func) }?);
        }
        submit_data(q, &r, flags, |bio| {
            for (b, len) in bufs {
                bio.push_segment(b, 0, len);
            }
        })
    })
}

/// Submit a read of `len` bytes at byte `offset` into `buf`. Its completion
/// carries `user_data`. `offset` and `len` must be multiples of the
/// device's logical block size; `flags` is 0 or MQBLK_REQ_* bits.
///
/// The request may wait in the queue's plug until `mqblk_queue_commit()`
/// or `mqblk_queue_do_io()`. An invalid request (out of range, unaligned)
/// still completes, with its error in the completion; a negative return
/// means nothing was submitted.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now. `buf` is valid
/// for `len` bytes, and the caller neither frees nor touches it until the
/// completion of this request is collected (or the queue is destroyed).
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_read(
    q: *mut MqblkQueue,
    offset: u64,
    buf: *mut c_void,
    len: usize,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        data_one(
            q,
            Req {
                func: "mqblk_queue_read",
                op: Op::Read,
                offset,
                user_data,
                flags,
            },
            buf,
            len,
        )
    }
}

/// Submit a write of `len` bytes from `buf` at byte `offset` (see
/// `mqblk_queue_read()`; the layer and the driver only read `buf`).
///
/// # Safety
///
/// As for `mqblk_queue_read()`: `buf` stays valid and unchanged until the
/// completion is collected.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_write(
    q: *mut MqblkQueue,
    offset: u64,
    buf: *const c_void,
    len: usize,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // A write's buffer is only ever read: by the driver, or by the copy
    // into a bounce buffer.
    // SAFETY: the caller's promise, passed on.
    unsafe {
        data_one(
            q,
            Req {
                func: "mqblk_queue_write",
                op: Op::Write,
                offset,
                user_data,
                flags,
            },
            buf.cast_mut(),
            len,
        )
    }
}

/// Submit one read into `iovcnt` buffers at byte `offset` (one request).
/// Up to four buffers are carried without allocating.
///
/// # Safety
///
/// `iov` points to `iovcnt` iovecs; each one's memory is as `buf` of
/// `mqblk_queue_read()`. The iovec array itself may be reused once this
/// returns.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_readv(
    q: *mut MqblkQueue,
    offset: u64,
    iov: *const libc::iovec,
    iovcnt: c_int,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        data_vec(
            q,
            Req {
                func: "mqblk_queue_readv",
                op: Op::Read,
                offset,
                user_data,
                flags,
            },
            iov,
            iovcnt,
        )
    }
}

/// Submit one write from `iovcnt` buffers at byte `offset` (one request).
///
/// # Safety
///
/// As for `mqblk_queue_readv()`.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_writev(
    q: *mut MqblkQueue,
    offset: u64,
    iov: *const libc::iovec,
    iovcnt: c_int,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        data_vec(
            q,
            Req {
                func: "mqblk_queue_writev",
                op: Op::Write,
                offset,
                user_data,
                flags,
            },
            iov,
            iovcnt,
        )
    }
}

/// A request without data: flush, discard or write-zeroes.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now.
unsafe fn no_data(
    func: &str,
    q: *mut MqblkQueue,
    bio: Bio,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    entry(func, || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, func) }?;
        let flags = bio_flags(flags, func)?;
        submit(q, bio, user_data, flags)
    })
}

/// Submit a flush of the device's write cache: writes completed before it
/// are durable when it completes.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_flush(
    q: *mut MqblkQueue,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { no_data("mqblk_queue_flush", q, Bio::flush(), user_data, flags) }
}

/// Submit a discard of `len` bytes at byte `offset`.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_discard(
    q: *mut MqblkQueue,
    offset: u64,
    len: u64,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        no_data(
            "mqblk_queue_discard",
            q,
            Bio::discard_at(offset, len),
            user_data,
            flags,
        )
    }
}

/// Submit a write-zeroes of `len` bytes at byte `offset`: they read back as
/// zeros once it completes.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_write_zeroes(
    q: *mut MqblkQueue,
    offset: u64,
    len: u64,
    user_data: *mut c_void,
    flags: u32,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe {
        no_data(
            "mqblk_queue_write_zeroes",
            q,
            Bio::write_zeroes_at(offset, len),
            user_data,
            flags,
        )
    }
}

/// Issue every request submitted so far (flush the plug) without waiting.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_commit(q: *mut MqblkQueue) -> c_int {
    entry("mqblk_queue_commit", || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, "mqblk_queue_commit") }?;
        q.ctx.unplug();
        Ok(0)
    })
}
