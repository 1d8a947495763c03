//! Making a queue and keeping its ring usable: registration, binding to
//! the submitting thread, and rebuilding the ring; and its drop.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{cqueue, types};
use mqblk_core::buf::BufRegion;
use mqblk_core::driver::HwNotifier;

use crate::config::WaitMode;
use crate::discover::{DiscardHow, TargetKind};
use crate::info::{note, Notes};
use crate::psync::PsyncQueue;
use crate::target::{Target, MAX_SEGMENTS};

use super::irq::{eventfd, Irq};
use super::queue::*;
use super::ring::{build_ring, Flavor, RingConfig};

/// The name of the file system under `fd` if its requests wait for a
/// server (so an inline issue can block the submitting thread).
pub(super) fn blocking_file_system(fd: RawFd) -> Option<&'static str> {
    // SAFETY: fstatfs writes one statfs into `st`, a zeroed local.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return None;
    }
    // Magic numbers from linux/magic.h and the file systems' sources.
    match st.f_type as u64 {
        0x6573_5546 => Some("FUSE"),
        0x6969 => Some("NFS"),
        0xFF53_4D42 | 0xFE53_4D42 => Some("SMB"),
        0x0102_1997 => Some("9p"),
        0x00C3_6400 => Some("Ceph"),
        _ => None,
    }
}

thread_local! {
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// The calling thread's id, cached (no system call after the first).
#[inline]
pub(super) fn tid() -> i32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        // SAFETY: gettid has no preconditions.
        let v = unsafe { libc::gettid() };
        t.set(v);
        v
    })
}

impl UringQueue {
    /// Set up the ring of hardware queue `index`: `depth` tags, buffers
    /// from `regions`, the file registered.
    pub fn new(
        target: Target,
        cfg: RingConfig,
        index: u16,
        depth: usize,
        regions: &[BufRegion],
        hw: HwNotifier,
        notes: Notes,
    ) -> io::Result<UringQueue> {
        let (ring, flavor) = build_ring(&cfg, true)?;
        let side = match (target.kind, target.discard) {
            (TargetKind::Block, Some(DiscardHow::BlkDiscard)) => Some(PsyncQueue::new(
                target.clone(),
                index,
                1,
                depth,
                hw.clone(),
            )?),
            _ => None,
        };
        let irq = match cfg.wait {
            WaitMode::Sleep => Some(Irq::new(index, hw)?),
            WaitMode::Poll => None,
        };
        let line = if cfg.irq_line() {
            Some(eventfd(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)?)
        } else {
            None
        };
        let iovec0 = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut q = UringQueue {
            ring,
            cfg,
            flavor,
            target,
            index,
            fixed_file: false,
            fixed_bufs: Vec::new(),
            regions: regions.to_vec(),
            slots: (0..depth).map(|_| Slot::default()).collect(),
            iovecs: vec![iovec0; depth * MAX_SEGMENTS].into_boxed_slice(),
            resubmit: Vec::with_capacity(depth),
            in_flight: 0,
            unsubmitted: 0,
            owner: 0,
            draining: false,
            side,
            irq,
            line,
            line_dirty: false,
            notes,
            iopoll_refused: false,
            force_async: false,
        };
        if let Some(fs) = blocking_file_system(q.target.fd) {
            q.force_async = true;
            if index == 0 {
                note(
                    &q.notes,
                    format!(
                        "the file is on {fs}, whose requests wait for a server: I/O is issued \
                         from io_uring's workers (IOSQE_ASYNC), so a hung request can be \
                         cancelled"
                    ),
                );
            }
        }
        q.register()?;
        Ok(q)
    }

    /// Register the file, the buffer regions and the eventfd with the
    /// (new) ring. Files and buffers are optimisations: a failure is
    /// noted, not fatal.
    pub(super) fn register(&mut self) -> io::Result<()> {
        let sub = self.ring.submitter();
        self.fixed_file = match sub.register_files(&[self.target.fd]) {
            Ok(()) => true,
            Err(e) => {
                note(
                    &self.notes,
                    format!("registered file not in use (IORING_REGISTER_FILES: {e})"),
                );
                false
            }
        };
        self.fixed_bufs.clear();
        if !self.regions.is_empty() {
            let iov: Vec<libc::iovec> = self
                .regions
                .iter()
                .map(|r| libc::iovec {
                    iov_base: r.addr as *mut libc::c_void,
                    iov_len: r.len,
                })
                .collect();
            // SAFETY: every region is a live buffer arena of the device's
            // pool; arenas outlive the hardware queues (the device drops
            // its queues before its pool, and an arena lives on while any
            // of its buffers does), and the kernel pins the pages.
            match unsafe { sub.register_buffers(&iov) } {
                Ok(()) => {
                    self.fixed_bufs = self
                        .regions
                        .iter()
                        .enumerate()
                        .map(|(i, r)| (r.arena_id, i as u16))
                        .collect();
                }
                Err(e) => note(
                    &self.notes,
                    format!(
                        "registered buffers not in use (IORING_REGISTER_BUFFERS of {} bytes: {e}; \
                     raise RLIMIT_MEMLOCK or lower fixed_bufs=)",
                        self.regions.iter().map(|r| r.len).sum::<usize>()
                    ),
                ),
            }
        }
        if let Some(irq) = &self.irq {
            sub.register_eventfd(irq.fd())?;
        }
        if let Some(line) = &self.line {
            sub.register_eventfd(line.as_raw_fd())?;
        }
        Ok(())
    }

    /// May this thread submit on the ring now? Binds a fresh
    /// SINGLE_ISSUER ring to its first user, and rebuilds it for a second
    /// one once it is idle.
    #[inline]
    pub(super) fn usable(&mut self) -> bool {
        if self.flavor != Flavor::Defer {
            return true;
        }
        let me = tid();
        if self.owner == me && !self.draining {
            return true;
        }
        self.bind_slow(me)
    }

    #[cold]
    pub(super) fn bind_slow(&mut self, me: i32) -> bool {
        if self.owner == 0 {
            match self.ring.submitter().register_enable_rings() {
                Ok(()) => {
                    self.owner = me;
                    return true;
                }
                Err(e) => {
                    note(&self.notes, format!("enabling the ring failed ({e})"));
                    return self.rebuild(me);
                }
            }
        }
        if self.in_flight == 0 && self.unsubmitted == 0 {
            return self.rebuild(me);
        }
        self.draining = true;
        false
    }

    /// Replace the idle ring by one without SINGLE_ISSUER.
    #[cold]
    pub(super) fn rebuild(&mut self, me: i32) -> bool {
        if !self.replace_ring(false, me) {
            return false;
        }
        note(
            &self.notes,
            format!(
                "hardware queue {} was used by a second thread: its ring was rebuilt with {}",
                self.index,
                self.flavor.describe()
            ),
        );
        true
    }

    /// Build a new ring from `self.cfg` (nothing may be in flight on the
    /// old one), register with it, and bind it to `me` if it is
    /// SINGLE_ISSUER.
    #[cold]
    pub(super) fn replace_ring(&mut self, allow_defer: bool, me: i32) -> bool {
        debug_assert_eq!(self.unsubmitted, 0);
        let (ring, flavor) = match build_ring(&self.cfg, allow_defer) {
            Ok(r) => r,
            Err(e) => {
                note(
                    &self.notes,
                    format!(
                        "hardware queue {}: rebuilding the ring failed ({e})",
                        self.index
                    ),
                );
                return false;
            }
        };
        self.ring = ring;
        self.flavor = flavor;
        self.owner = 0;
        self.draining = false;
        if let Err(e) = self.register() {
            note(
                &self.notes,
                format!("registering with the rebuilt ring failed ({e})"),
            );
        }
        if flavor == Flavor::Defer {
            if self.ring.submitter().register_enable_rings().is_err() {
                return false;
            }
            self.owner = me;
        }
        true
    }
}

impl Drop for UringQueue {
    fn drop(&mut self) {
        // The core drains every context before a device goes, so nothing
        // should be in flight; if something is, the kernel may still write
        // into its buffers, so wait for it (bounded) and leak what never
        // came back rather than free memory under the kernel.
        let mut steps = 0;
        while self.in_flight > 0 && steps < DROP_WAIT_STEPS {
            steps += 1;
            if self.flavor == Flavor::Defer && self.owner != tid() {
                break;
            }
            let ts = types::Timespec::new().nsec(100_000_000);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            let cq: Vec<cqueue::Entry> = self.ring.completion().collect();
            for cqe in cq {
                let tag = (cqe.user_data() & 0xffff_ffff) as usize;
                // The request cannot go back to a core that is gone; an
                // RqRef owns nothing, so letting go of it frees nothing.
                let ended = cqe.user_data() >> 32 == UD_MAIN
                    && self
                        .slots
                        .get_mut(tag)
                        .is_some_and(|s| s.rq.take().is_some());
                if ended {
                    self.in_flight -= 1;
                }
            }
        }
        if self.in_flight > 0 {
            // The kernel may still read these iovecs: never free them.
            let iovecs = std::mem::take(&mut self.iovecs);
            std::mem::forget(iovecs);
        }
    }
}
