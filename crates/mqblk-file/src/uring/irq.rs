//! A queue's interrupt line: the ring's eventfd, and the thread that
//! turns it into the hardware queue's notifier.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use mqblk_core::driver::HwNotifier;

/// The eventfd "interrupt line" of `wait=sleep`: the ring signals it when
/// completions (or their task work) arrive; a helper thread blocked on it
/// rings the hardware queue's notifier, waking sleeping contexts.
pub(super) struct Irq {
    pub(super) efd: Arc<OwnedFd>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: Option<JoinHandle<()>>,
}

impl Irq {
    pub(super) fn new(index: u16, hw: HwNotifier) -> io::Result<Irq> {
        let efd = Arc::new(eventfd(libc::EFD_CLOEXEC)?);
        let stop = Arc::new(AtomicBool::new(false));
        let (e2, s2) = (efd.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name(format!("mqblk-irq{index}"))
            .stack_size(64 << 10)
            .spawn(move || loop {
                let mut v = 0u64;
                // SAFETY: read writes 8 bytes into `v`, a live local.
                let r = unsafe { libc::read(e2.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                if s2.load(Ordering::Acquire) {
                    return;
                }
                if r == 8 {
                    hw.notify();
                } else if crate::target::errno() != libc::EINTR {
                    return;
                }
            })?;
        Ok(Irq {
            efd,
            stop,
            thread: Some(thread),
        })
    }

    pub(super) fn fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }
}

impl Drop for Irq {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let one = 1u64;
        // SAFETY: write reads 8 bytes from `one`, a live local.
        unsafe { libc::write(self.efd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A new eventfd, with its count at 0.
pub(super) fn eventfd(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
