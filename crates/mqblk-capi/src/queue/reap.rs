//! Completion: `do_io` issues what is plugged and collects finished
//! requests into the caller's array, blocking, polling or waiting with a
//! time limit on the completion fd.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

use super::handle::{queue_mut, MqblkCompletion, MqblkQueue};
use crate::device::MqblkStats;
use crate::error::{entry, Failure, MqblkError};

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
