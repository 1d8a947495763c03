//! Replies written to the thread's descriptor: one `writev` each, a
//! read's data as its last piece.

use std::os::fd::AsRawFd;

use super::state::Worker;
use crate::reply;

impl Worker {
    /// Send a reply made of `parts`; a connection that ended is noted.
    pub(super) fn send(&mut self, parts: &[&[u8]]) {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3];
        debug_assert!(parts.len() <= iov.len());
        for (v, p) in iov.iter_mut().zip(parts) {
            v.iov_base = p.as_ptr() as *mut libc::c_void;
            v.iov_len = p.len();
        }
        // SAFETY: each iovec points at a live slice of its length.
        let r = unsafe { libc::writev(self.fd.as_raw_fd(), iov.as_ptr(), parts.len() as i32) };
        if r < 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                // The request was interrupted, or the connection aborted.
                Some(libc::ENOENT) => {}
                Some(libc::ENODEV) => self.gone = true,
                _ => eprintln!(
                    "mqblk serve: FUSE thread {}: replying: {}",
                    self.id,
                    std::io::Error::last_os_error()
                ),
            }
        }
    }

    pub(super) fn reply_err(&mut self, unique: u64, errno: i32) {
        self.requests += 1;
        // ENOSYS is the kernel probing for what the export serves.
        if errno != 0 && errno != libc::ENOSYS {
            self.errors += 1;
        }
        let h = reply::header(unique, errno, 0);
        self.send(&[&h]);
    }

    pub(super) fn reply(&mut self, unique: u64, body: &[u8]) {
        self.requests += 1;
        let h = reply::header(unique, 0, body.len());
        self.send(&[&h, body]);
    }
}
