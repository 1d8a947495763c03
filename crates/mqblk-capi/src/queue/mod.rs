//! Per-thread queues: submission with a user pointer, and completion by
//! blocking, by polling or through a completion fd (libblkio's `blkioq_*`).
//!
//! A queue is a `Context` of the core: it belongs to one thread at a time
//! (it may move between threads, but two threads must not call into the
//! same queue at once). Submitting builds the bio in place, in a slot of
//! the queue's bio set, around the caller's buffer (up to four segments
//! inline: no allocation, no copy, and the bio itself is never moved);
//! its completion carries the user pointer back.
//!
//! By call order: a queue ([`handle`]: its context and the completions
//! ready) is made here, requests go in through [`submit`]
//! (read, write, their vectors, flush, discard, write-zeroes, and the
//! commit of the plug), and completions come back through [`reap`]
//! (`do_io`, the completion fd, the queue's counters).

use std::collections::VecDeque;
use std::ffi::c_int;

use crate::device::{dev_ref, Mqblk};
use crate::error::{entry, Failure};

mod handle;
mod reap;
mod submit;

pub use handle::{MqblkCompletion, MqblkQueue};
pub use reap::*;
pub use submit::*;

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
