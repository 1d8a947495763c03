//! The rbd driver itself (Linux: drivers/block/rbd.c's `rbd_mq_ops`, with
//! librbd where the kernel has its own RADOS client): the [`Driver`] at
//! the end of the pipeline.
//!
//! - `queue_rq` makes one librbd call per request: `rbd_aio_readv` /
//!   `rbd_aio_writev` with iovecs that point straight at the request's
//!   buffers (no copy on our side), `rbd_aio_flush`, `rbd_aio_discard`,
//!   `rbd_aio_write_zeroes` (never a discard: librbd ignores a discard
//!   smaller than its granularity). The completion's argument is a per-tag
//!   token, allocated with the queue, so completion needs no lookup and no
//!   allocation on our side.
//! - Completions come back through librbd's event queue: the image's
//!   eventfd (`rbd_set_image_notification`) is signalled by librbd's
//!   thread after it queues a completion, and `poll` drains
//!   `rbd_poll_io_events` until it is empty; a poll that finds nothing
//!   reads the eventfd (clearing it) and looks once more, so the eventfd
//!   is readable while a completion may wait (and at most until the next
//!   poll after one that found some: one `read` per round, not per poll).
//!   That
//!   eventfd, with the queue's hand-over eventfd, is the queue's
//!   **interrupt line** ([`Driver::irq_fd`]): the core puts it in every
//!   completion fd of the queue, and a context alone on its queue sleeps
//!   on it in [`Driver::wait`], as fio's rbd engine does. No thread of
//!   ours waits for completions, and none is started per I/O.
//! - Image handles: one per device, shared by every hardware queue
//!   (`handles=shared`, the default), or one per hardware queue
//!   (`handles=queue`). A shared handle has one event queue, so a queue's
//!   poll may reap another queue's completion: it hands it over through
//!   that queue's mailbox (a short list under a lock, touched only then)
//!   and rings its notifier. With one hardware queue nothing is handed
//!   over. Separate handles are separate librbd clients of one image, and
//!   the image's exclusive lock moves between them on every write from
//!   another handle: measured slower for writes (see the crate's doc).
//!
//! Timeouts: librbd has no cancel, and while it holds a request it holds
//! the iovecs that point into the request's buffers (a read is copied into
//! them when the OSD answers). A request the layer has timed out is
//! therefore marked, and it completes, with [`Status::Timeout`], only
//! when librbd gives it back: until then its buffers stay the request's.
//! The device's `io_timeout_ms` is also handed to librados as
//! `rados_osd_op_timeout` (see `cluster.rs`), so librbd does give it back,
//! with ETIMEDOUT, about when the layer's timeout fires, even when the
//! OSD is dead. A queue dropped with requests still in librbd (which the
//! core's drain prevents) leaks its tokens, iovecs and image handle
//! rather than free memory librbd may still use.

use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use libc::{c_int, c_void, iovec};
use mqblk_core::bio::Op;
use mqblk_core::driver::{
    Completions, Driver, Extent, ExtentBuilder, HwQueueSetup, QueueRq, RqRef, TimeoutAction,
};
use mqblk_core::error::{Error, InvalidKind, Result, Status};
use mqblk_core::limits::{Features, QueueLimits};

use crate::cluster::{Image, IoCtx, OpenError};
use crate::ffi;
use crate::spec::{Handles, RbdTarget};

mod handle;

pub(crate) use handle::Handle;
use handle::{drain, signal};

/// Most segments in one request (iovecs per tag).
pub const MAX_SEGMENTS: usize = 64;
/// Largest read or write, in sectors (8 MiB: two default objects).
pub const MAX_RW_SECTORS: u32 = 16384;
/// Largest discard or write-zeroes, in sectors (1 GiB).
pub const MAX_ZERO_SECTORS: u32 = 1 << 21;
/// Completions taken from librbd per `rbd_poll_io_events` call.
const EVENT_BATCH: usize = 32;

/// What a completion's argument points at: which queue and tag it is.
#[derive(Debug)]
struct Token {
    route: u16,
    tag: u32,
}

/// A heap array at a stable address, owned through a raw pointer (taken
/// once, so moving the queue never moves or retags it), freed in Drop
/// unless leaked.
struct RawArray<T> {
    ptr: NonNull<T>,
    len: usize,
}

impl<T> RawArray<T> {
    fn new(v: Vec<T>) -> RawArray<T> {
        let b: Box<[T]> = v.into_boxed_slice();
        let len = b.len();
        let ptr = NonNull::new(Box::into_raw(b).cast::<T>()).expect("Box is never null");
        RawArray { ptr, len }
    }

    #[inline]
    fn at(&self, i: usize) -> *mut T {
        debug_assert!(i < self.len, "index {i} past {}", self.len);
        // SAFETY: i is in bounds (checked above in debug builds; callers
        // index by tag, below the depth the array was sized to).
        unsafe { self.ptr.as_ptr().add(i) }
    }

    /// Never free: librbd may still hold pointers into it.
    fn leak(&mut self) {
        self.len = 0;
        self.ptr = NonNull::dangling();
    }
}

impl<T> Drop for RawArray<T> {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        let s = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: ptr/len came from Box::into_raw of a boxed slice, freed
        // once here.
        drop(unsafe { Box::from_raw(s) });
    }
}

/// One tag's request in librbd.
#[derive(Debug, Default)]
struct Slot {
    rq: Option<RqRef>,
    /// The layer timed it out: it ends with `Timeout` when librbd gives
    /// it back.
    timed_out: bool,
}

/// The in-flight state of one hardware queue.
#[derive(Debug)]
struct InFlight {
    slots: Box<[Slot]>,
    count: u32,
}

impl InFlight {
    /// librbd gave back the request at `tag` with `ret`.
    #[inline]
    fn finish(&mut self, tag: u32, ret: i64, done: &mut Completions<'_>) -> usize {
        let Some(slot) = self.slots.get_mut(tag as usize) else {
            debug_assert!(false, "completion for unknown tag {tag}");
            return 0;
        };
        let Some(rq) = slot.rq.take() else {
            debug_assert!(false, "completion for idle tag {tag}");
            return 0;
        };
        let status = if slot.timed_out {
            Status::Timeout
        } else {
            status_of(rq.op(), rq.len_bytes(), ret)
        };
        slot.timed_out = false;
        debug_assert!(self.count > 0);
        self.count -= 1;
        done.complete(rq, status);
        1
    }
}

/// librbd's return value as a status. A read returns its length.
#[inline]
fn status_of(op: Op, len_bytes: u64, ret: i64) -> Status {
    if ret >= 0 {
        if op == Op::Read && (ret as u64) < len_bytes {
            // Never pass a short read off as success.
            return Status::IoError;
        }
        return Status::Ok;
    }
    errno_status(-ret as i32)
}

/// A librbd errno as a status.
fn errno_status(e: i32) -> Status {
    match e {
        libc::EROFS => Status::Invalid(InvalidKind::ReadOnly),
        // Blocklisted or shut down: the handle is unusable.
        libc::ESHUTDOWN => Status::Shutdown,
        e => Status::from_errno(e),
    }
}

/// One hardware queue.
pub struct RbdQueue {
    handle: Arc<Handle>,
    route: u16,
    inflight: InFlight,
    tokens: RawArray<Token>,
    /// MAX_SEGMENTS iovecs per tag.
    iovecs: RawArray<iovec>,
    events: [ffi::rbd_completion_t; EVENT_BATCH],
}

// SAFETY: the raw pointers (iovecs, tokens, event buffer) are owned by
// this queue and move with it; the image handle is thread-safe; the core
// reaches a hardware queue through &mut only.
unsafe impl Send for RbdQueue {}

impl std::fmt::Debug for RbdQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbdQueue")
            .field("route", &self.route)
            .field("in_flight", &self.inflight.count)
            .finish()
    }
}

impl Drop for RbdQueue {
    fn drop(&mut self) {
        if self.inflight.count > 0 {
            // The core drains before a device goes; if librbd still holds
            // requests, never free what it points into, and never close
            // the image under them (rbd_close would wait for them).
            self.tokens.leak();
            self.iovecs.leak();
            std::mem::forget(self.handle.clone());
        }
    }
}

impl RbdQueue {
    /// Take every completion librbd has for this handle; ours complete,
    /// another queue's go to its mailbox. The eventfd is cleared only when
    /// nothing was waiting (then the queue is about to be idle): clear,
    /// then look once more, so that a completion queued from the clear on
    /// signals it again and it is readable exactly while one may wait. A
    /// poll that found completions leaves it set, and the next poll (the
    /// caller's loop goes round once more after finding work) clears it:
    /// one `read` per round of completions, not one per poll.
    #[inline]
    fn reap(&mut self, done: &mut Completions<'_>) -> usize {
        let n = self.take_events(done);
        if n > 0 {
            return n;
        }
        drain(self.handle.efd.as_raw_fd());
        self.take_events(done)
    }

    /// Take what librbd's event queue holds (no system call).
    #[inline]
    fn take_events(&mut self, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        loop {
            // SAFETY: events has room for EVENT_BATCH completions.
            let k = unsafe {
                ffi::rbd_poll_io_events(
                    self.handle.image.ptr,
                    self.events.as_mut_ptr(),
                    EVENT_BATCH as c_int,
                )
            };
            if k <= 0 {
                break;
            }
            let k = (k as usize).min(EVENT_BATCH);
            for i in 0..k {
                let c = self.events[i];
                // SAFETY: c is a completion librbd handed back, finished;
                // its argument is a Token (see queue_rq); it is released
                // once, after its result is read.
                let (t, ret) = unsafe {
                    let t = &*(ffi::rbd_aio_get_arg(c) as *const Token);
                    let ret = ffi::rbd_aio_get_return_value(c) as i64;
                    ffi::rbd_aio_release(c);
                    (t, ret)
                };
                if t.route == self.route {
                    n += self.inflight.finish(t.tag, ret, done);
                } else {
                    self.hand_over(t, ret);
                }
            }
            if k < EVENT_BATCH {
                break;
            }
        }
        n
    }

    #[cold]
    fn hand_over(&self, t: &Token, ret: i64) {
        let Some(r) = self.handle.routes.get(t.route as usize) else {
            debug_assert!(false, "completion for unknown queue {}", t.route);
            return;
        };
        let mut l = r.list.lock().unwrap_or_else(|e| e.into_inner());
        l.push((t.tag, ret));
        r.pending.store(true, Ordering::Release);
        drop(l);
        if let Some(n) = r.notifier.get() {
            n.notify();
        }
        signal(r.wake.as_raw_fd());
    }

    #[cold]
    fn take_mailbox(&mut self, done: &mut Completions<'_>) -> usize {
        let r = &self.handle.routes[self.route as usize];
        // As in `reap`: clear the signal, then take what it announced.
        drain(r.wake.as_raw_fd());
        let mut l = r.list.lock().unwrap_or_else(|e| e.into_inner());
        r.pending.store(false, Ordering::Relaxed);
        let mut n = 0;
        for (tag, ret) in l.drain(..) {
            n += self.inflight.finish(tag, ret, done);
        }
        n
    }
}

/// The rbd driver of one device.
pub struct RbdDriver {
    name: String,
    target: RbdTarget,
    io: Arc<IoCtx>,
    /// The device's handle: every queue's (shared), or queue 0's.
    handle: Arc<Handle>,
    handles: Handles,
    size_bytes: u64,
    obj_size_bytes: u64,
    read_only: bool,
    write_cache: bool,
}

impl std::fmt::Debug for RbdDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbdDriver")
            .field("name", &self.name)
            .field("target", &self.target)
            .field("size_bytes", &self.size_bytes)
            .field("obj_size_bytes", &self.obj_size_bytes)
            .field("write_cache", &self.write_cache)
            .finish()
    }
}

impl RbdDriver {
    /// Open the image for a device of `nr_hw_queues` queues.
    pub(crate) fn new(
        name: String,
        io: Arc<IoCtx>,
        target: RbdTarget,
        handles: Handles,
        read_only: bool,
        nr_hw_queues: u16,
    ) -> std::result::Result<RbdDriver, OpenError> {
        let read_only = read_only || target.snap.is_some();
        let image = Image::open(io.clone(), &target, read_only)?;
        let (size_bytes, obj_size_bytes) = image.stat()?;
        // A volatile write cache exactly when librbd acknowledges writes
        // before the OSDs have them: rbd_cache on, in writeback or
        // writearound mode (writethrough waits for the OSDs).
        let cache_on = image.config("rbd_cache").as_deref() == Some("true");
        let policy = image.config("rbd_cache_policy").unwrap_or_default();
        let write_cache = cache_on && policy != "writethrough" && !read_only;
        if write_cache {
            // librbd's cache stays write-through until it sees a flush
            // (`rbd_cache_writethrough_until_flush`, for guests that never
            // flush). The device says it has a volatile cache, so its
            // users flush: let the cache be one from the start.
            image.flush()?;
        }
        let routes = match handles {
            Handles::Shared => usize::from(nr_hw_queues.max(1)),
            Handles::PerQueue => 1,
        };
        let handle = Arc::new(Handle::new(image, routes)?);
        Ok(RbdDriver {
            name,
            target,
            io,
            handle,
            handles,
            size_bytes,
            obj_size_bytes,
            read_only,
            write_cache,
        })
    }

    /// Image size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// True if librbd's cache acknowledges writes before the OSDs have them.
    pub fn write_cache(&self) -> bool {
        self.write_cache
    }

    fn setup_error(&self, reason: String) -> Error {
        Error::Setup {
            device: self.name.as_str().into(),
            reason,
        }
    }
}

impl Driver for RbdDriver {
    type HwQueue = RbdQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<RbdQueue> {
        let depth = (setup.queue_depth + setup.reserved_tags) as usize;
        let (handle, route) = match self.handles {
            Handles::Shared => (self.handle.clone(), setup.index),
            Handles::PerQueue if setup.index == 0 => (self.handle.clone(), 0),
            Handles::PerQueue => {
                let image =
                    Image::open(self.io.clone(), &self.target, self.read_only).map_err(|e| {
                        self.setup_error(format!("hardware queue {}: {e}", setup.index))
                    })?;
                let h = Handle::new(image, 1).map_err(|e| {
                    self.setup_error(format!("hardware queue {}: {e}", setup.index))
                })?;
                (Arc::new(h), 0)
            }
        };
        let Some(r) = handle.routes.get(usize::from(route)) else {
            return Err(self.setup_error(format!(
                "hardware queue {} has no completion route (the device was opened for {})",
                setup.index,
                handle.routes.len()
            )));
        };
        r.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .reserve_exact(depth);
        if r.notifier.set(setup.notifier.clone()).is_err() {
            return Err(self.setup_error(format!("hardware queue {} set up twice", setup.index)));
        }
        let tokens = (0..depth)
            .map(|tag| Token {
                route,
                tag: tag as u32,
            })
            .collect();
        let iov0 = iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        Ok(RbdQueue {
            handle,
            route,
            inflight: InFlight {
                slots: (0..depth).map(|_| Slot::default()).collect(),
                count: 0,
            },
            tokens: RawArray::new(tokens),
            iovecs: RawArray::new(vec![iov0; depth * MAX_SEGMENTS]),
            events: [std::ptr::null_mut(); EVENT_BATCH],
        })
    }

    #[inline]
    fn queue_rq(
        &self,
        hq: &mut RbdQueue,
        mut rq: RqRef,
        last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        let tag = rq.tag() as usize;
        if tag >= hq.inflight.slots.len() {
            debug_assert!(false, "tag {tag} past the queue's depth");
            done.complete(rq, Status::Invalid(InvalidKind::Driver));
            return QueueRq::Issued;
        }
        debug_assert!(hq.inflight.slots[tag].rq.is_none(), "tag {tag} in use");
        let img = hq.handle.image.ptr;
        let (off, len) = (rq.offset_bytes(), rq.len_bytes());
        let op = rq.op();
        // The iovecs of this tag.
        let iov = hq.iovecs.at(tag * MAX_SEGMENTS);
        let mut n = 0usize;
        let mut fill = |p: *mut u8, l: usize| {
            if n < MAX_SEGMENTS {
                // SAFETY: n < MAX_SEGMENTS, so iov + n is inside this
                // tag's iovecs, which only this queue writes.
                unsafe {
                    iov.add(n).write(iovec {
                        iov_base: p.cast(),
                        iov_len: l,
                    })
                };
            }
            n += 1;
        };
        match op {
            Op::Read => rq.read_bufs().for_each(|b| fill(b.as_mut_ptr(), b.len())),
            Op::Write => rq
                .write_bufs()
                .for_each(|b| fill(b.as_ptr().cast_mut(), b.len())),
            _ => {}
        }
        if n > MAX_SEGMENTS {
            // The limits say MAX_SEGMENTS; the core enforces them.
            done.complete(rq, Status::Invalid(InvalidKind::TooManySegments));
            return QueueRq::Issued;
        }
        let mut c: ffi::rbd_completion_t = std::ptr::null_mut();
        // SAFETY: the token lives until this completion is reaped (see
        // RbdQueue's Drop); c is a live out-pointer. No callback: the
        // completion comes back through the event queue.
        let r = unsafe { ffi::rbd_aio_create_completion(hq.tokens.at(tag).cast(), None, &mut c) };
        if r < 0 {
            done.complete(rq, errno_status(-r));
            return QueueRq::Issued;
        }
        // SAFETY: 1. img is an open image that outlives the request (the
        // queue holds its handle, and leaks it if a request never comes
        // back). 2. The iovecs point at the request's buffers: a read's
        // are ours exclusively (read_bufs), a write's are only read. The
        // request is parked in its slot below and is given back to the
        // core only once librbd returns this completion (even after a
        // timeout), so the buffers and iovecs outlive librbd's use.
        let r = unsafe {
            match op {
                Op::Read => ffi::rbd_aio_readv(img, iov, n as c_int, off, c),
                Op::Write => ffi::rbd_aio_writev(img, iov, n as c_int, off, c),
                Op::Flush => ffi::rbd_aio_flush(img, c),
                Op::Discard => ffi::rbd_aio_discard(img, off, len, c),
                Op::WriteZeroes => ffi::rbd_aio_write_zeroes(img, off, len as usize, c, 0, 0),
            }
        };
        if r < 0 {
            // SAFETY: librbd refused it, so it holds no reference to c.
            unsafe { ffi::rbd_aio_release(c) };
            done.complete(rq, errno_status(-r));
            return QueueRq::Issued;
        }
        hq.inflight.slots[tag].rq = Some(rq);
        hq.inflight.count += 1;
        if last {
            // What librbd finished at once (its cache took a write) ends
            // now, as fio finds it at its first look; without a system
            // call (the eventfd is left to the poll that finds nothing).
            hq.take_events(done);
        }
        QueueRq::Issued
    }

    /// librbd sends each request at once: there is no doorbell.
    #[inline]
    fn commit_rqs(&self, _hq: &mut RbdQueue) {}

    #[inline]
    fn poll(&self, hq: &mut RbdQueue, done: &mut Completions<'_>) -> usize {
        let mut n = 0;
        if hq.handle.routes[hq.route as usize]
            .pending
            .load(Ordering::Acquire)
        {
            n += hq.take_mailbox(done);
        }
        if hq.inflight.count > 0 {
            n += hq.reap(done);
        }
        n
    }

    fn can_wait(&self) -> bool {
        true
    }

    /// Sleep on the queue's interrupt line (the handle's eventfd and this
    /// queue's hand-over eventfd), as fio's rbd engine does. The wait
    /// reads nothing: the `poll` that follows clears what it finds.
    fn wait(&self, hq: &mut RbdQueue, timeout: std::time::Duration) -> bool {
        if hq.inflight.count == 0 {
            return true;
        }
        let route = &hq.handle.routes[hq.route as usize];
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 2];
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as c_int;
        // SAFETY: out has room for the 2 events asked for.
        unsafe { libc::epoll_wait(route.ep.as_raw_fd(), out.as_mut_ptr(), 2, ms) };
        true
    }

    /// The layer gave up on `tag`: it completes with `Timeout` when librbd
    /// gives it back (see the module doc), which `rados_osd_op_timeout`
    /// bounds.
    fn timeout(&self, hq: &mut RbdQueue, tag: u32, _done: &mut Completions<'_>) -> TimeoutAction {
        match hq.inflight.slots.get_mut(tag as usize) {
            Some(Slot {
                rq: Some(rq),
                timed_out,
            }) => {
                *timed_out = true;
                TimeoutAction::Held(mqblk_core::Overdue::of(rq))
            }
            // Finished and not yet reaped (or handed over): the next poll
            // completes it.
            _ => TimeoutAction::ResetTimer,
        }
    }

    fn limits(&self) -> QueueLimits {
        QueueLimits {
            logical_block_size: 512,
            physical_block_size: 512,
            max_sectors: MAX_RW_SECTORS,
            max_segments: MAX_SEGMENTS as u32,
            max_segment_size: u32::MAX,
            seg_boundary_mask: u64::MAX,
            chunk_sectors: 0,
            // librbd takes any address and length.
            dma_alignment: 0,
            max_discard_sectors: if self.read_only { 0 } else { MAX_ZERO_SECTORS },
            max_write_zeroes_sectors: if self.read_only { 0 } else { MAX_ZERO_SECTORS },
        }
    }

    fn features(&self) -> Features {
        Features {
            write_cache: self.write_cache,
            fua: false,
            discard: !self.read_only,
            write_zeroes: !self.read_only,
            read_only: self.read_only,
            rotational: false,
        }
    }

    /// Completions are taken by polling (`rbd_poll_io_events`); the
    /// interrupt line says when to poll.
    fn completes_async(&self) -> bool {
        false
    }

    fn irq_fd(&self, hq: &RbdQueue) -> Option<std::os::fd::RawFd> {
        Some(hq.handle.routes[hq.route as usize].ep.as_raw_fd())
    }

    /// Allocated and unallocated runs from `rbd_diff_iterate2` (whole
    /// objects, from the object map when the image has one).
    fn extents(&self, offset_bytes: u64, len_bytes: u64, out: &mut Vec<Extent>) -> Result<bool> {
        let end = offset_bytes.saturating_add(len_bytes).min(self.size_bytes);
        if offset_bytes >= end {
            return Ok(true);
        }
        // The gaps between the runs the diff reports are holes.
        let mut acc = ExtentBuilder::new(out, offset_bytes, end - offset_bytes);
        // SAFETY: the callback gets &mut acc back as its argument, only
        // during this call.
        let r = unsafe {
            ffi::rbd_diff_iterate2(
                self.handle.image.ptr,
                std::ptr::null(),
                offset_bytes,
                end - offset_bytes,
                1,
                1,
                Some(extent_cb),
                (&mut acc as *mut ExtentBuilder<'_>).cast(),
            )
        };
        if r < 0 {
            return Ok(false);
        }
        acc.fill_rest(true, true);
        Ok(true)
    }
}

unsafe extern "C" fn extent_cb(
    off: u64,
    len: libc::size_t,
    exists: c_int,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: arg is the &mut ExtentBuilder passed to rbd_diff_iterate2,
    // which calls back only during that call, on its thread.
    let acc = unsafe { &mut *(arg as *mut ExtentBuilder<'_>) };
    let hole = exists == 0;
    acc.push_until(off, true, true);
    acc.push(off, len as u64, hole, hole);
    0
}
