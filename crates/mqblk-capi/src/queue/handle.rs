//! A queue's state, below submission and completion both: its context of
//! the core and the completions reaped but not handed out yet.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

use mqblk::Context;

use crate::error::Failure;

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
    pub(crate) ctx: Context,
    /// Completions reaped but not handed out yet (a caller may ask for
    /// fewer than are ready). Sized at creation; it grows only if the
    /// caller leaves more than that uncollected.
    pub(crate) ready: VecDeque<MqblkCompletion>,
}

/// Borrow a queue, or fail with MQBLK_ERROR_NULL.
///
/// # Safety
///
/// `q` is NULL or a live queue that no other thread uses now.
pub(super) unsafe fn queue_mut<'a>(
    q: *mut MqblkQueue,
    func: &str,
) -> Result<&'a mut MqblkQueue, Failure> {
    // SAFETY: NULL or live and unshared (the caller's promise).
    unsafe { q.as_mut() }.ok_or_else(|| Failure::null(func, "q"))
}
