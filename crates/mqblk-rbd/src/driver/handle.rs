//! An image handle and its event fds: librbd's completion eventfd, and
//! per hardware queue a mailbox, a wake eventfd and the epoll set that is
//! the queue's interrupt line.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};

use mqblk_core::driver::HwNotifier;

use crate::cluster::{Image, OpenError};
use crate::ffi;

/// One image handle and what its completions are routed with.
pub(crate) struct Handle {
    /// Declared first: closed (and librbd done with the eventfd) before
    /// the eventfd and the queues' epoll sets are closed.
    pub(super) image: Image,
    /// The image's completion eventfd (librbd writes it).
    pub(super) efd: OwnedFd,
    /// One mailbox per hardware queue using this handle.
    pub(super) routes: Arc<[Route]>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("routes", &self.routes.len())
            .finish()
    }
}

/// One hardware queue's side of a handle: how it is woken, and the
/// completions another queue reaped for it (shared handle).
#[derive(Debug)]
pub(super) struct Route {
    /// The queue's notifier, set when the queue is set up.
    pub(super) notifier: OnceLock<HwNotifier>,
    /// Signalled when another queue hands this one a completion (cleared
    /// by this queue's `poll`).
    pub(super) wake: OwnedFd,
    /// The queue's interrupt line: an epoll set of the image's eventfd
    /// (exclusive: with several queues on one handle, a context waiting in
    /// [`Driver::wait`] on one of them takes the wakeup alone, reaps for
    /// all, and hands the others theirs) and `wake`.
    pub(super) ep: OwnedFd,
    /// `list` has entries.
    pub(super) pending: AtomicBool,
    /// (tag, librbd's return value), at most the queue's depth.
    pub(super) list: Mutex<Vec<(u32, i64)>>,
}

/// Signal an eventfd.
pub(super) fn signal(fd: libc::c_int) {
    let one = 1u64;
    // SAFETY: write reads 8 bytes from `one`, a live local.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Reset an eventfd (non-blocking).
pub(super) fn drain(fd: libc::c_int) {
    let mut v = 0u64;
    // SAFETY: read writes 8 bytes into v, a live local; the fd is
    // non-blocking.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// A fresh epoll instance watching `fds` (fd, events).
pub(super) fn epoll(fds: &[(libc::c_int, u32)]) -> std::io::Result<OwnedFd> {
    // SAFETY: epoll_create1 takes no pointers.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: ep is a fresh descriptor nothing else owns.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    for &(fd, events) in fds {
        let mut ev = libc::epoll_event {
            events,
            u64: fd as u64,
        };
        // SAFETY: both descriptors are open; ev is a live local.
        if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(ep)
}

/// A fresh non-blocking eventfd.
pub(super) fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Handle {
    pub(super) fn new(image: Image, routes: usize) -> std::result::Result<Handle, OpenError> {
        let call = |call: &str, err| OpenError::Call {
            call: call.into(),
            err,
        };
        let efd = eventfd().map_err(|e| call("eventfd", e))?;
        // SAFETY: image is open; the eventfd outlives it (field order).
        let r = unsafe {
            ffi::rbd_set_image_notification(image.ptr, efd.as_raw_fd(), ffi::EVENT_TYPE_EVENTFD)
        };
        if r < 0 {
            return Err(OpenError::Call {
                call: "rbd_set_image_notification".into(),
                err: std::io::Error::from_raw_os_error(-r),
            });
        }
        let routes: Arc<[Route]> = (0..routes)
            .map(|_| {
                let wake = eventfd()?;
                let ep = epoll(&[
                    (
                        efd.as_raw_fd(),
                        (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
                    ),
                    (wake.as_raw_fd(), libc::EPOLLIN as u32),
                ])?;
                Ok(Route {
                    notifier: OnceLock::new(),
                    wake,
                    ep,
                    pending: AtomicBool::new(false),
                    list: Mutex::new(Vec::new()),
                })
            })
            .collect::<std::io::Result<_>>()
            .map_err(|e| call("eventfd", e))?;
        Ok(Handle { image, efd, routes })
    }
}
