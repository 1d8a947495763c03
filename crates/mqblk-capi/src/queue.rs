//! Per-thread queues: submission with a user pointer, and completion by
//! blocking, by polling or through a completion fd (libblkio's `blkioq_*`).
//!
//! A queue is a `Context` of the core: it belongs to one thread at a time
//! (it may move between threads, but two threads must not call into the
//! same queue at once). Submitting builds the bio in place, in a slot of
//! the queue's bio set, around the caller's buffer (up to four segments
//! inline: no allocation, no copy, and the bio itself is never moved);
//! its completion carries the user pointer back.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use mqblk::{Bio, BioFlags, Context, IoBuf, Op};

use crate::device::{dev_ref, Mqblk, MqblkStats};
use crate::error::{entry, Failure, MqblkError};

/// Force unit access: the write is durable when it completes.
pub const MQBLK_REQ_FUA: u32 = 1;
/// Flush the device's write cache before this request.
pub const MQBLK_REQ_PREFLUSH: u32 = 2;
/// Never merge this request with a neighbour.
pub const MQBLK_REQ_NOMERGE: u32 = 4;
const REQ_ALL: u32 = MQBLK_REQ_FUA | MQBLK_REQ_PREFLUSH | MQBLK_REQ_NOMERGE;

/// One finished request.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MqblkCompletion {
    /// The pointer given when the request was submitted.
    pub user_data: *mut c_void,
    /// MQBLK_ERROR_OK, or the negative error code of the request.
    pub ret: c_int,
    /// The errno a POSIX call would have set (0 on success).
    pub errno_value: c_int,
}

/// A queue for one thread (opaque).
pub struct MqblkQueue {
    ctx: Context,
    /// Completions reaped but not handed out yet (a caller may ask for
    /// fewer than are ready). Sized at creation; it grows only if the
    /// caller leaves more than that uncollected.
    ready: VecDeque<MqblkCompletion>,
}

/// Make a queue on `dev` for the calling thread. On success `*out` is the
/// queue. Control plane: this allocates; make queues before the I/O loop.
///
/// # Safety
///
/// `dev` is NULL or a live device; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_create(dev: *const Mqblk, out: *mut *mut MqblkQueue) -> c_int {
    entry("mqblk_queue_create", || {
        // SAFETY: the caller's promise, passed on.
        let d = unsafe { dev_ref(dev, "mqblk_queue_create") }?;
        if out.is_null() {
            return Err(Failure::null("mqblk_queue_create", "out"));
        }
        let ctx = d.dev.context()?;
        let cap = (d.dev.config().queue_depth_max as usize * 4).max(256);
        let q = Box::into_raw(Box::new(MqblkQueue {
            ctx,
            ready: VecDeque::with_capacity(cap),
        }));
        // SAFETY: `out` is non-NULL and writable (the caller's promise).
        unsafe { out.write(q) };
        Ok(0)
    })
}

/// Destroy a queue. It waits for the queue's requests in flight to end
/// first, so their buffers may be freed once this returns; completions not
/// collected are dropped. NULL is ignored.
///
/// # Safety
///
/// `q` is NULL or a live queue, not used after this call.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_destroy(q: *mut MqblkQueue) {
    entry("mqblk_queue_destroy", || {
        if !q.is_null() {
            // SAFETY: `q` came from Box::into_raw in mqblk_queue_create and
            // is destroyed once (the caller's promise).
            drop(unsafe { Box::from_raw(q) });
        }
        Ok(0)
    });
}

/// Borrow a queue, or fail with MQBLK_ERROR_NULL.
///
/// # Safety
///
/// `q` is NULL or a live queue that no other thread uses now.
unsafe fn queue_mut<'a>(q: *mut MqblkQueue, func: &str) -> Result<&'a mut MqblkQueue, Failure> {
    // SAFETY: NULL or live and unshared (the caller's promise).
    unsafe { q.as_mut() }.ok_or_else(|| Failure::null(func, "q"))
}

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
unsafe fn user_buf(buf: *mut c_void, len: usize, func: &str) -> Result<IoBuf, Failure> {
    let Some(p) = NonNull::new(buf.cast::<u8>()) else {
        return Err(Failure::null(func, "buf"));
    };
    if len > u32::MAX as usize {
        return Err(Failure::new(
            MqblkError::Inval,
            format!("{func}: a segment of {len} bytes is over the 4 GiB limit of one segment"),
        ));
    }
    // SAFETY: valid and exclusively lent until the completion is reaped
    // (the caller's promise above).
    Ok(unsafe { IoBuf::from_raw(p, len) })
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
            let b = unsafe { user_buf(v.iov_base, v.iov_len, func) }?;
            bufs.push((b, v.iov_len as u32));
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
fn no_data(func: &str, q: *mut MqblkQueue, bio: Bio, user_data: *mut c_void, flags: u32) -> c_int {
    entry(func, || {
        // SAFETY: `q` is NULL or a live, unshared queue: the promise of
        // every exported caller of this function.
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
    no_data("mqblk_queue_flush", q, Bio::flush(), user_data, flags)
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
    no_data(
        "mqblk_queue_discard",
        q,
        Bio::discard_at(offset, len),
        user_data,
        flags,
    )
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
    no_data(
        "mqblk_queue_write_zeroes",
        q,
        Bio::write_zeroes_at(offset, len),
        user_data,
        flags,
    )
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

/// Issue what is submitted, and collect completions into `completions`:
/// at least `min` (waiting for them; fewer only when nothing is left in
/// flight) and at most `max`. Returns how many were written, or a negative
/// error code. `min = 0` polls without blocking. Completions beyond `max`
/// stay in the queue for the next call.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now; `completions`
/// has room for `max` entries (it may be NULL when `max` is 0).
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_do_io(
    q: *mut MqblkQueue,
    completions: *mut MqblkCompletion,
    min: c_int,
    max: c_int,
) -> c_int {
    // SAFETY: the caller's promise, passed on.
    unsafe { do_io("mqblk_queue_do_io", q, completions, min, max, None) }
}

/// Like `mqblk_queue_do_io()`, but waits at most `timeout_ns` nanoseconds
/// for `min` completions (libblkio's `blkioq_do_io` timeout); a negative
/// `timeout_ns` waits as long as it takes. Returns how many completions
/// were written, fewer than `min` if the time ran out, or a negative error
/// code. It sleeps in poll(2) on the queue's completion fd.
///
/// # Safety
///
/// As for `mqblk_queue_do_io()`.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_do_io_timeout(
    q: *mut MqblkQueue,
    completions: *mut MqblkCompletion,
    min: c_int,
    max: c_int,
    timeout_ns: i64,
) -> c_int {
    let timeout = u64::try_from(timeout_ns)
        .ok()
        .map(std::time::Duration::from_nanos);
    // SAFETY: the caller's promise, passed on.
    unsafe {
        do_io(
            "mqblk_queue_do_io_timeout",
            q,
            completions,
            min,
            max,
            timeout,
        )
    }
}

/// The body of both do_io calls: `timeout` None waits as long as it takes.
///
/// # Safety
///
/// As for `mqblk_queue_do_io()`.
unsafe fn do_io(
    func: &'static str,
    q: *mut MqblkQueue,
    completions: *mut MqblkCompletion,
    min: c_int,
    max: c_int,
    timeout: Option<std::time::Duration>,
) -> c_int {
    entry(func, || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, func) }?;
        if min < 0 || max < min {
            return Err(Failure::new(
                MqblkError::Inval,
                format!("{func}: want 0 <= min <= max, got min {min}, max {max}"),
            ));
        }
        if max > 0 && completions.is_null() {
            return Err(Failure::null(func, "completions"));
        }
        let (min, max) = (min as usize, max as usize);
        let MqblkQueue { ctx, ready } = q;
        // What is left from an earlier call goes first, in order.
        let mut n = 0;
        if !ready.is_empty() {
            n = ready.len().min(max);
            for (i, c) in ready.drain(..n).enumerate() {
                // SAFETY: `completions` has room for `max` entries and i < max.
                unsafe { completions.add(i).write(c) };
            }
        }
        // New completions go straight into the caller's array; only those
        // past `max` wait in the queue.
        let mut sink = Sink {
            out: completions,
            n: &mut n,
            max,
            ready,
        };
        if sink.room() > 0 || max == 0 {
            ctx.poll(|c| sink.push(c));
        }
        match timeout {
            None => {
                if *sink.n < min {
                    let more = min - *sink.n;
                    ctx.poll_wait(more, |c| sink.push(c));
                }
            }
            Some(limit) => {
                let deadline = std::time::Instant::now() + limit;
                while *sink.n < min && ctx.in_flight() > 0 {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let fd = ctx
                        .completion_fd()
                        .map_err(|e| Failure::new(MqblkError::Os, e.to_string()))?;
                    let mut pfd = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // Whole milliseconds, rounded up, so a short wait still sleeps.
                    let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as c_int;
                    // SAFETY: `pfd` is one valid pollfd for the call.
                    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
                    if rc < 0 {
                        let e = std::io::Error::last_os_error();
                        if e.kind() != std::io::ErrorKind::Interrupted {
                            return Err(Failure::new(MqblkError::Os, format!("{func}: poll: {e}")));
                        }
                    }
                    ctx.poll(|c| sink.push(c));
                }
            }
        }
        Ok(n as c_int)
    })
}

/// Where `mqblk_queue_do_io` puts completions: the caller's array, then
/// the queue's own list once the array is full.
struct Sink<'a> {
    out: *mut MqblkCompletion,
    n: &'a mut usize,
    max: usize,
    ready: &'a mut VecDeque<MqblkCompletion>,
}

impl Sink<'_> {
    fn room(&self) -> usize {
        self.max - *self.n
    }

    #[inline]
    fn push(&mut self, c: mqblk::Completion<'_>) {
        let status = c.status();
        let (ret, errno_value) = if status == mqblk::Status::Ok {
            (0, 0)
        } else {
            failed(status)
        };
        let done = MqblkCompletion {
            user_data: c.private() as *mut c_void,
            ret,
            errno_value,
        };
        if *self.n < self.max {
            // SAFETY: the caller of mqblk_queue_do_io gave room for `max`
            // entries, and n < max.
            unsafe { self.out.add(*self.n).write(done) };
            *self.n += 1;
        } else {
            self.ready.push_back(done);
        }
    }
}

/// A failed request's code and errno (out of line: requests succeed).
#[cold]
#[inline(never)]
fn failed(status: mqblk::Status) -> (c_int, c_int) {
    (MqblkError::of_status(status).code(), status.errno())
}

/// A file descriptor that becomes readable when `mqblk_queue_do_io()` would
/// make progress, for an event loop (epoll, poll, select) that waits on
/// I/O and sockets together. It lives as long as the queue; do not close
/// it. Returns the fd or a negative error code.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_completion_fd(q: *mut MqblkQueue) -> c_int {
    entry("mqblk_queue_completion_fd", || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, "mqblk_queue_completion_fd") }?;
        q.ctx
            .completion_fd()
            .map_err(|e| Failure::new(MqblkError::Os, e.to_string()))
    })
}

/// Fill `*out` with this queue's own counters.
///
/// # Safety
///
/// `q` is NULL or a live queue used by no other thread now; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn mqblk_queue_get_stats(q: *mut MqblkQueue, out: *mut MqblkStats) -> c_int {
    entry("mqblk_queue_get_stats", || {
        // SAFETY: the caller's promise, passed on.
        let q = unsafe { queue_mut(q, "mqblk_queue_get_stats") }?;
        if out.is_null() {
            return Err(Failure::null("mqblk_queue_get_stats", "out"));
        }
        let s = MqblkStats::from(q.ctx.stats());
        // SAFETY: `out` is non-NULL and writable (the caller's promise).
        unsafe { out.write(s) };
        Ok(0)
    })
}
