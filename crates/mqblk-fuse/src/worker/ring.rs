//! The reply ring of a worker: an io_uring and, per slot, the bytes and
//! iovecs of a reply queued on it (`batch` fills and submits it). At the
//! bottom of the worker's files, beside `state`, which holds one.

use io_uring::IoUring;

use crate::abi::{body_len, OUT_HEADER_LEN};

/// A reply's header and, for a write, its `fuse_write_out`.
pub(super) const HEAD_LEN: usize = OUT_HEADER_LEN + body_len::WRITE_OUT;

/// The ring and, per slot, the bytes and iovecs of a reply queued on it.
pub(super) struct Batch {
    pub(super) ring: IoUring,
    pub(super) heads: Vec<[u8; HEAD_LEN]>,
    pub(super) iovs: Vec<[libc::iovec; 2]>,
    /// Writes pushed and not yet reaped.
    pub(super) queued: usize,
}

impl Batch {
    /// A batch for `depth` slots; None if this kernel gives no io_uring.
    pub(super) fn new(depth: usize) -> Option<Batch> {
        let ring = IoUring::new(depth.next_power_of_two() as u32).ok()?;
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Some(Batch {
            ring,
            heads: vec![[0; HEAD_LEN]; depth],
            iovs: vec![[empty; 2]; depth],
            queued: 0,
        })
    }
}
