//! A worker's state, at the bottom of its files: the export's shared
//! facts, the thread's slots and buffers, and where in a slot's buffer a
//! message and its data sit. Every other file of the worker works on it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_utils::CachePadded;

use mqblk_core::{Context, Device, IoBuf, Status};

use crate::abi::WRITE_PREFIX_LEN;
use crate::reply::{Attr, InitOut};

/// Memory page size: a write's data lands on a page boundary.
pub(crate) const PAGE: usize = 4096;

/// What every thread of an export shares (set up once; the hot path reads
/// it and takes no lock).
pub(crate) struct Shared {
    pub(crate) dev: Device,
    pub(crate) read_only: bool,
    pub(crate) capacity: u64,
    pub(crate) block: u64,
    pub(crate) max_write: u32,
    pub(crate) discard: bool,
    pub(crate) init: InitOut,
    /// The file's attributes (GETATTR and SETATTR only).
    pub(crate) attr: Mutex<Attr>,
    /// The slow path's read-modify-writes (and fallocates), one at a
    /// time, each excluding every aligned write (see `rmw`).
    pub(crate) rmw: Mutex<()>,
    /// A read-modify-write holds the device: aligned writes wait (park).
    pub(crate) rmw_active: AtomicBool,
    /// Each thread's aligned writes in flight, on a line of its own that
    /// only its thread writes (an RMW reads them all).
    pub(crate) writes_in_flight: Vec<CachePadded<AtomicU32>>,
    /// Leave once the requests in flight are answered, even if the
    /// connection lives (a user holds the detached file).
    pub(crate) quit: AtomicBool,
}

impl Shared {
    /// The attributes of a fresh export: the device's size, the original
    /// file's owner and times, 0644 (0444 read-only).
    pub(crate) fn attr_of(meta: &std::fs::Metadata, capacity: u64, read_only: bool) -> Attr {
        use std::os::unix::fs::MetadataExt;
        Attr {
            ino: crate::abi::ROOT_ID,
            size: capacity,
            blocks: capacity.div_ceil(512),
            atime: (meta.atime() as u64, meta.atime_nsec() as u32),
            mtime: (meta.mtime() as u64, meta.mtime_nsec() as u32),
            ctime: (meta.ctime() as u64, meta.ctime_nsec() as u32),
            mode: libc::S_IFREG | if read_only { 0o444 } else { 0o644 },
            uid: meta.uid(),
            gid: meta.gid(),
            blksize: PAGE as u32,
        }
    }
}

/// The counters of the read-modify-write exclusion (`rmw` has the
/// argument); at the bottom, so that completions reach them without
/// reaching up.
impl Shared {
    /// Count an aligned write of thread `id` in flight, unless an RMW
    /// holds the device (then the caller parks it).
    pub(crate) fn start_aligned_write(&self, id: usize) -> bool {
        let mine = &self.writes_in_flight[id];
        mine.fetch_add(1, Ordering::SeqCst);
        if self.rmw_active.load(Ordering::SeqCst) {
            mine.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// An aligned write of thread `id` completed.
    pub(crate) fn end_aligned_write(&self, id: usize) {
        let was = self.writes_in_flight[id].fetch_sub(1, Ordering::Release);
        debug_assert!(was > 0);
    }
}

/// What a slot's request waits for.
#[derive(Clone, Copy)]
pub(super) enum Pending {
    /// Its data: `len` bytes of the slot's buffer, after the header.
    Read { len: u32 },
    /// `fuse_write_out` with `len`.
    Write { len: u32 },
    /// A bare header (fsync).
    Done,
}

/// An aligned write that arrived while a read-modify-write held the
/// device: its data waits in its slot until the RMW ends.
#[derive(Clone, Copy)]
pub(super) struct Parked {
    pub(super) slot: u32,
    pub(super) unique: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
}

/// A request slot: free, or holding the request its bio serves.
#[derive(Clone, Copy)]
pub(super) enum Slot {
    Free,
    InFlight { unique: u64, pending: Pending },
}

/// Counters of one thread, summed when it ends.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WorkerEnd {
    /// Requests answered.
    pub(crate) requests: u64,
    /// Requests answered with an error (ENOSYS, the kernel's probing,
    /// aside).
    pub(crate) errors: u64,
    /// Requests still in flight after the drain (their buffers leaked).
    pub(crate) abandoned: u32,
}

/// One thread's descriptor, context and slots.
pub(crate) struct Worker {
    pub(super) fd: OwnedFd,
    pub(super) ctx: Context,
    pub(super) shared: Arc<Shared>,
    /// Each slot's buffer: a page before the data, for the header.
    pub(super) bufs: Vec<IoBuf>,
    pub(super) base: Vec<NonNull<u8>>,
    pub(super) slots: Vec<Slot>,
    pub(super) free: Vec<u32>,
    pub(super) in_flight: u32,
    pub(super) done: Vec<(u32, Status)>,
    /// Aligned writes waiting for a read-modify-write to end (their slots
    /// are neither free nor in flight).
    pub(super) parked: Vec<Parked>,
    /// The slow path's buffer, made at its first use.
    pub(super) bounce: Option<IoBuf>,
    /// The data replies of a reap, written with one submission (None:
    /// one `writev` each).
    pub(super) batch: Option<super::ring::Batch>,
    /// A batch that failed may still point into the buffers: never free
    /// them.
    pub(super) keep_buffers: bool,
    /// The connection ended (ENODEV).
    pub(super) gone: bool,
    pub(super) said_broken: bool,
    pub(super) id: usize,
    /// Counted here, summed when the thread ends (no shared line written
    /// per request).
    pub(super) requests: u64,
    pub(super) errors: u64,
}

// SAFETY: the raw pointers point into `bufs`, which the worker owns and
// which move with it; nothing else holds them between calls.
unsafe impl Send for Worker {}

impl Worker {
    /// A worker on `fd` and `ctx` with `depth` slots.
    pub(crate) fn new(
        fd: OwnedFd,
        ctx: Context,
        shared: Arc<Shared>,
        depth: usize,
        id: usize,
    ) -> std::io::Result<Worker> {
        // SAFETY: `fd` is open; F_GETFL/F_SETFL only change its flags.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let size = PAGE + shared.max_write as usize;
        let bufs: Vec<IoBuf> = (0..depth).map(|_| IoBuf::page_aligned(size)).collect();
        let base = bufs
            .iter()
            .map(|b| NonNull::new(b.as_ptr()).expect("an IoBuf is never null"))
            .collect();
        Ok(Worker {
            fd,
            ctx,
            shared,
            bufs,
            base,
            slots: vec![Slot::Free; depth],
            free: (0..depth as u32).rev().collect(),
            in_flight: 0,
            done: Vec::with_capacity(depth),
            parked: Vec::with_capacity(depth),
            bounce: None,
            batch: super::ring::Batch::new(depth),
            keep_buffers: false,
            gone: false,
            said_broken: false,
            id,
            requests: 0,
            errors: 0,
        })
    }

    /// Where slot `slot`'s message starts: so that a write's data lands on
    /// the page boundary at [`PAGE`].
    pub(super) fn msg_ptr(&self, slot: u32) -> *mut u8 {
        debug_assert!((slot as usize) < self.base.len());
        // SAFETY: each buffer is PAGE + max_write bytes; PAGE - 80 is
        // inside it.
        unsafe {
            self.base[slot as usize]
                .as_ptr()
                .add(PAGE - WRITE_PREFIX_LEN)
        }
    }

    /// The data area of slot `slot` (after the page that holds a header).
    pub(super) fn data_ptr(&self, slot: u32) -> NonNull<u8> {
        debug_assert!((slot as usize) < self.base.len());
        // SAFETY: PAGE is inside the buffer of PAGE + max_write bytes.
        unsafe { self.base[slot as usize].add(PAGE) }
    }
}
