//! The context: one submitting thread's handle on a device, and the front of
//! the pipeline (Linux: the per-CPU `struct blk_mq_ctx`, plus the task's
//! plug, plus `submit_bio`).
//!
//! `caller → Bio → plug → software queue → scheduler → hardware queue →
//! driver → completion → caller`. A context owns its bio set, plug, software
//! queue, tag cache, completion lists and stats shard, so submitting and
//! completing touch nothing another context touches, except the hardware
//! queue's lock, once per batch, and only when contexts share a hardware
//! queue. Completions are routed back to the submitting context, and
//! callbacks run only after the reap, never recursively.
//!
//! A context is `Send` (it may move to another thread) but not `Sync`.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::bio::Completion;
use crate::bio::{Bio, BioFlags, Op};
use crate::bioset::{BioNode, BioSet, Delivery, SlotState};
use crate::bounce::{self, BouncePool};
use crate::buf::IoBuf;
use crate::clock;
use crate::error::{Error, InvalidKind, Result, Status, SubmitError};
use crate::flush::{self, FlushMachine, Step};
use crate::limits::QueueLimits;
use crate::limits::SECTOR_SHIFT;
use crate::merge;
use crate::plug::Plug;
use crate::queue::{Device, DeviceInner};
use crate::request::{RqOwner, RqRef, RqState};
use crate::sbitmap::AllocHint;
use crate::split::{self, Fit, Splitter};
use crate::stats::{bump, drop_by, DiskStats, Histograms, LatencyRun, StatGroup, StatShard};
use crate::sw_queue::SwQueue;
use crate::sync::RemoteQueue;
use crate::tag::{TagCache, Tags};
use crate::throttle::{Admit, Throttle};

/// Polls before a waiting context goes to sleep on its hardware queue.
const SPIN_POLLS: u32 = 256;
/// Longest sleep between polls for a driver that only completes when polled.
const POLL_SLEEP: Duration = Duration::from_micros(50);
/// Longest a driver's own wait blocks before the context looks around
/// (timeouts, freeze) again.
const DRIVER_WAIT: Duration = Duration::from_millis(10);
/// Longest sleep for a driver that notifies.
const NOTIFY_SLEEP: Duration = Duration::from_millis(10);

/// A per-thread handle for I/O on one device.
pub struct Context {
    dev: Arc<DeviceInner>,
    st: CtxState,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: the raw pointers a context holds (into its own bio set and its own
// boxed RqOwner, and RqRefs into the device's tag sets) stay valid wherever
// the context goes, and the context is not Sync, so moving it to another
// thread moves all access with it.
unsafe impl Send for Context {}

struct CtxState {
    shared: Arc<RqOwner>,
    /// The gate word as this context last saw it.
    gate_seen: u64,
    id: u32,
    hwq: u16,
    tags: Arc<Tags>,
    hint: AllocHint,
    tag_cache: TagCache,
    bioset: BioSet,
    plug: Plug,
    plug_on: bool,
    sw: SwQueue,
    done: Vec<RqRef>,
    ended: VecDeque<u32>,
    resubmit: Vec<u32>,
    freed_tags: Vec<u32>,
    stats: Arc<CachePadded<StatShard>>,
    hist: Histograms,
    iostats: bool,
    timeout_ms: u32,
    /// This context's copy of the queue limits (refreshed after a freeze).
    limits: QueueLimits,
    nomerges: u8,
    /// Copy of the control plane's `elevator`.
    sched_on: bool,
    /// Copy of the control plane's `async_depth` (0: no limit). The writes
    /// it limits are counted on the hardware queue (`async_writes`).
    async_depth: u32,
    bounce_on: bool,
    bounce: BouncePool,
    flush: FlushMachine,
    /// Scratch lists for the flush machine (sized once, never grown).
    seq_scratch: Vec<u32>,
    failed: Vec<(u32, Status)>,
    /// Clock of the current batch (0: not read yet).
    batch_ns: u64,
    /// Requests this context built that have not ended yet.
    in_flight: u32,
    /// The completion fd, once asked for.
    efd: Option<Arc<crate::sync::EventFd>>,
    /// What the caller waits on: the eventfd and the throttle's timer.
    fd_timer: Option<crate::sync::FdTimer>,
    /// This context made the eventfd readable and has not polled since.
    fd_signalled: bool,
    /// The completion fd also watches the hardware queue's interrupt line:
    /// requests in flight on a polled driver need not keep it readable.
    irq_in_fd: bool,
    /// This context has bounced a segment already (it is said once).
    bounced_once: bool,
    /// This context's bio throttle, if the device has one.
    throttle: Option<Box<dyn Throttle>>,
    /// Hardware queues of stacked devices told of this queue's notifies.
    forwards: Vec<crate::sync::Arc<crate::sync::Notify>>,
    /// Bios the throttle holds back, with the time each may go, in order.
    throttled: VecDeque<(u64, u32)>,
    /// The priority this context's requests carry, if set on the context
    /// (otherwise its group's).
    ioprio: Option<crate::ioprio::IoPrio>,
    /// The group this context is in.
    group: crate::blkcg::Membership,
    /// The window, for a context opened on a remapped view.
    window: Option<Arc<crate::remap::View>>,
    /// The device's partitions, with this context's shards and last hit
    /// (`None`: the device has none).
    parts: Option<crate::partition::CtxParts>,
}

impl Device {
    /// Open a context for the calling thread. Control plane: allocates the
    /// context's bio set and lists, sized to the tag depth.
    pub fn context(&self) -> Result<Context> {
        self.context_in(&self.inner.groups.default_group())
    }

    /// Open a context in `group` (see [`crate::blkcg`]).
    pub fn context_in(&self, group: &Arc<crate::blkcg::Group>) -> Result<Context> {
        let group = group.clone();
        let dev = self.inner.clone();
        let id = dev
            .next_ctx
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Linux blk_mq_map_queues: contexts round-robin over hardware queues.
        let hwq = (id as usize % dev.hw_queues.len()) as u16;
        let tags = dev.tags[hwq as usize].clone();
        let total = tags.total() as usize;
        let bioset_size = match dev.cfg.bioset_size {
            0 => (2 * total + dev.cfg.plug_max as usize).max(64),
            n => n as usize,
        };
        let st = CtxState {
            shared: Arc::new(RqOwner {
                remote: RemoteQueue::new(total),
                in_flight: CachePadded::new(std::sync::atomic::AtomicU32::new(0)),
            }),
            gate_seen: u64::MAX,
            id,
            hwq,
            hint: AllocHint::new(id),
            tag_cache: TagCache::default(),
            bioset: BioSet::new(bioset_size as u32),
            plug: Plug::new(dev.cfg.plug_max),
            plug_on: dev.cfg.plug,
            sw: SwQueue::new(total),
            done: Vec::with_capacity(total),
            ended: VecDeque::with_capacity(bioset_size),
            resubmit: Vec::with_capacity(bioset_size),
            freed_tags: Vec::with_capacity(total),
            stats: match &self.view {
                None => dev.stats.register(),
                Some(v) => v.stats.register(),
            },
            hist: Histograms::new(),
            iostats: dev.cfg.iostats,
            timeout_ms: dev.cfg.timeout_ms,
            limits: dev.info.limits,
            nomerges: dev.cfg.nomerges,
            sched_on: dev.cfg.elevator.is_some(),
            async_depth: dev.ctl().async_depth,
            bounce_on: dev.cfg.bounce,
            bounce: BouncePool::new(dev.buf_pool.align()),
            flush: FlushMachine::new(bioset_size),
            seq_scratch: Vec::with_capacity(bioset_size),
            failed: Vec::with_capacity(bioset_size),
            batch_ns: 0,
            in_flight: 0,
            efd: None,
            fd_timer: None,
            fd_signalled: false,
            irq_in_fd: false,
            bounced_once: false,
            throttle: dev.cfg.throttle.as_ref().map(|t| t.for_context(id)),
            forwards: Vec::new(),
            throttled: VecDeque::with_capacity(bioset_size),
            ioprio: None,
            group: crate::blkcg::Membership::join(group),
            window: self.view.clone(),
            // Filled in at the gate, which every context passes first.
            parts: None,
            tags,
        };
        dev.ctl().contexts.push(st.shared.clone());
        dev.hw_queues[hwq as usize]
            .nr_ctx
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Context {
            dev,
            st,
            _not_sync: PhantomData,
        })
    }
}

impl Context {
    /// The device.
    pub fn device(&self) -> Device {
        Device {
            view: self.st.window.clone(),
            inner: self.dev.clone(),
        }
    }

    /// This context's index (its software queue).
    pub fn id(&self) -> u32 {
        self.st.id
    }

    /// The hardware queue this context is mapped to.
    pub fn hw_queue(&self) -> u16 {
        self.st.hwq
    }

    /// The I/O priority of this context's requests (Linux
    /// `ioprio_set`), for schedulers that honour it (mq-deadline, bfq).
    pub fn set_ioprio(&mut self, prio: crate::ioprio::IoPrio) {
        self.st.ioprio = Some(prio);
    }

    /// This context's I/O priority: its own, or else its group's.
    pub fn ioprio(&self) -> crate::ioprio::IoPrio {
        self.st.ioprio.unwrap_or_else(|| self.st.group.0.ioprio())
    }

    /// The group this context is in.
    pub fn group(&self) -> &Arc<crate::blkcg::Group> {
        &self.st.group.0
    }

    /// I/O submitted and not yet completed: requests in the pipeline, and
    /// bios the throttle still holds.
    pub fn in_flight(&self) -> u32 {
        self.st.in_flight + self.st.throttled.len() as u32
    }

    /// True if a bio of one request submitted now would start at once:
    /// a bio slot is free and so is a request (a tag), so `submit` will
    /// not wait for this context's completions. An event loop (the NBD
    /// server) asks before it takes a request off a socket, and leaves the
    /// rest queued in the socket while this is false, rather than block
    /// every connection on the loop behind one device's queue depth
    /// (Linux's `REQ_NOWAIT`, answered before the bio exists). Nothing is
    /// taken: a tag this context cached counts, and otherwise the free
    /// tags are counted, which other contexts on the queue may race (then
    /// the submission waits briefly, as it would have). A bio that would
    /// merge into a plugged request needs no tag, but is not known here.
    pub fn has_room(&self) -> bool {
        let st = &self.st;
        if st.bioset.available() == 0 && st.in_flight > 0 {
            return false;
        }
        st.tags.has_cached(&st.tag_cache) || st.tags.has_free()
    }

    /// Completed bios waiting for [`Context::poll`].
    pub fn ready(&self) -> usize {
        self.st.ended.len()
    }

    /// This context's own counters.
    pub fn stats(&self) -> DiskStats {
        self.st.stats.snapshot()
    }

    /// This context's latency histograms.
    pub fn histograms(&self) -> &Histograms {
        &self.st.hist
    }

    /// Clear this context's latency histograms (end of a warm-up).
    pub fn reset_histograms(&mut self) {
        self.st.hist.reset();
    }

    /// Submit a bio. Its completion is delivered exactly once: to its
    /// `end_io`, or to the closure of a later [`Context::poll`]. A bio that
    /// fails validation completes with the error, like any other.
    ///
    /// When tags run out, this waits for in-flight I/O to finish. It gives
    /// the bio back only when the context is full of completions the caller
    /// has not polled yet: poll, then submit again.
    // Back-pressure hands the caller's bio back by value; boxing it would
    // allocate per I/O.
    #[inline]
    pub fn submit(&mut self, bio: Bio) -> std::result::Result<(), SubmitError> {
        match self.st.submit(&self.dev, bio, Delivery::Callback) {
            Ok(_) => {
                self.st.kick_fd(&self.dev);
                Ok(())
            }
            Err(bio) => Err(SubmitError::new(
                self.st.unpolled_error(&self.dev, &bio),
                bio,
            )),
        }
    }

    /// Flush the plug: issue everything submitted so far (Linux
    /// `blk_finish_plug`).
    #[inline]
    pub fn unplug(&mut self) {
        self.st.flush_plug(&self.dev);
        self.st.kick_fd(&self.dev);
    }

    /// Issue what is plugged, reap completions, and deliver them: each bio
    /// to its `end_io`, or to `f`. Returns how many were delivered. Never
    /// blocks.
    #[inline]
    pub fn poll(&mut self, f: impl FnMut(Completion<'_>)) -> usize {
        if let Some(fd) = &self.st.efd {
            fd.drain();
            self.st.fd_signalled = false;
        }
        if let Some(t) = self.st.fd_timer.as_mut() {
            if t.is_armed() {
                t.clear_fired(clock::now_ns());
            }
        }
        self.st.flush_plug(&self.dev);
        self.st.reap(&self.dev);
        self.st.process_deferred(&self.dev);
        let n = self.st.deliver(&self.dev, f);
        self.st.kick_fd(&self.dev);
        n
    }

    /// A file descriptor that is readable whenever [`Context::poll`] would
    /// make progress (libblkio's `blkioq_get_completion_fd`): a completion
    /// is ready, a driver thread or another context finished one of this
    /// context's requests, bios wait in the plug, or requests are in flight
    /// on a driver that completes only when polled. An event loop waits on
    /// it with its sockets (epoll, poll, select), then calls `poll`, which
    /// clears it. The fd lives as long as the context. Control plane: the
    /// first call makes the eventfd; with no fd asked for, the hot path pays
    /// one branch.
    pub fn completion_fd(&mut self) -> Result<std::os::fd::RawFd> {
        self.st.completion_fd(&self.dev).map_err(|e| Error::Setup {
            device: self.dev.info.name.clone(),
            reason: format!("cannot make a completion fd: {e}"),
        })
    }

    /// Tell `up` (a stacked device's hardware queue, from its driver's
    /// [`crate::driver::HwQueueSetup::notifier`]) whenever this context's
    /// hardware queue is notified: a lower driver's thread finished a
    /// request, so the stacked driver's `poll` will find its child done.
    /// Control plane; lasts as long as this context.
    pub fn forward_completions(&mut self, up: &crate::driver::HwNotifier) {
        let hq = &self.dev.hw_queues[self.st.hwq as usize];
        hq.notify.forward_to(up.0.clone());
        self.st.forwards.push(up.0.clone());
    }

    /// Like [`Context::poll`], but waits until at least `min` completions
    /// were delivered or nothing is left in flight.
    pub fn poll_wait(&mut self, min: usize, mut f: impl FnMut(Completion<'_>)) -> usize {
        let mut n = self.poll(&mut f);
        let mut spins = 0u32;
        while n < min && (self.st.in_flight > 0 || self.st.has_deferred()) {
            let hq = &self.dev.hw_queues[self.st.hwq as usize];
            let seen = hq.notify.seq();
            let got = self.poll(&mut f);
            n += got;
            if got > 0 || n >= min {
                spins = 0;
                continue;
            }
            self.st.backoff(&self.dev, seen, &mut spins);
        }
        n
    }

    /// Submit `bio`, wait for it, and hand it back with its result.
    pub fn submit_wait(&mut self, bio: Bio) -> (Bio, Result<()>) {
        let idx = match self.st.submit(&self.dev, bio, Delivery::Waiter) {
            Ok(idx) => idx,
            Err(bio) => return self.blocked_by_unpolled(bio),
        };
        // A blocking call may carry memory borrowed from the caller's stack:
        // if anything below panics, the guard keeps the unwind from freeing
        // it while the driver may still touch it.
        let guard = UnwindGuard { ctx: self, idx };
        guard.ctx.st.wait_slot(&guard.ctx.dev, idx);
        let ctx = guard.disarm();
        ctx.take_waiter(idx)
    }

    /// A blocking call found every bio slot holding a completion the caller
    /// has not polled: it cannot wait for them, so it reports that.
    fn blocked_by_unpolled(&mut self, bio: Bio) -> (Bio, Result<()>) {
        let e = self.st.unpolled_error(&self.dev, &bio);
        (bio, Err(e))
    }

    fn blocking(
        &mut self,
        op: Op,
        offset_bytes: u64,
        bufs: &[(*mut u8, usize)],
        len_bytes: u64,
    ) -> Result<()> {
        // Offsets and lengths are checked like any bio's, at submit.
        let mut bio = Bio::at(op, offset_bytes);
        if op.has_data() {
            for &(ptr, len) in bufs {
                // Slices never have null pointers, even when empty.
                let p = NonNull::new(ptr).unwrap_or(NonNull::dangling());
                // SAFETY: the caller's slice is valid for `len` bytes and
                // borrowed by this call, which does not return before the
                // bio's completion is reaped (submit_wait waits for it).
                // Write data was lent as `&[u8]`: it becomes a read-only
                // buffer, so nothing ever makes a `&mut` over it.
                let buf = unsafe {
                    if op == Op::Write {
                        IoBuf::from_raw_readonly(p, len)
                    } else {
                        IoBuf::from_raw(p, len)
                    }
                };
                bio.push_segment(buf, 0, len as u32);
            }
        } else if op != Op::Flush {
            bio = match op {
                Op::Discard => Bio::discard_at(offset_bytes, len_bytes),
                _ => Bio::write_zeroes_at(offset_bytes, len_bytes),
            };
        }
        self.submit_wait(bio).1
    }

    /// Read `buf.len()` bytes at `offset_bytes` into `buf`.
    ///
    /// `offset_bytes` and `buf.len()` must be multiples of the device's
    /// logical block size. The data goes straight into `buf` (no copy) only
    /// when `buf`'s address and length are multiples of the device's buffer
    /// alignment (`limits().dma_alignment + 1`, printed by `mqblk info`);
    /// buffers from [`Device::alloc_buf`] always are. Otherwise the device
    /// reads into an aligned bounce buffer and the layer copies the data
    /// into `buf`, counted in the stats' `bytes_copied` (the first bounce on
    /// a context says so once on stderr); with `bounce=0` in the spec the
    /// read fails with [`Error::Misaligned`] instead. A `Vec<u8>` is usually
    /// not aligned enough for an O_DIRECT file (512 or 4096) and is copied.
    pub fn read_at(&mut self, buf: &mut [u8], offset_bytes: u64) -> Result<()> {
        let len = buf.len();
        self.blocking(
            Op::Read,
            offset_bytes,
            &[(buf.as_mut_ptr(), len)],
            len as u64,
        )
    }

    /// Write `buf` at `offset_bytes`.
    ///
    /// `offset_bytes` and `buf.len()` must be multiples of the device's
    /// logical block size. The device reads straight from `buf` (no copy,
    /// and never through a `&mut`) only when `buf`'s address and length are
    /// multiples of the device's buffer alignment (`limits().dma_alignment
    /// + 1`); buffers from [`Device::alloc_buf`] always are. Otherwise `buf`
    /// is first copied into an aligned bounce buffer, counted in the stats'
    /// `bytes_copied` (the first bounce on a context says so once on
    /// stderr); with `bounce=0` the write fails with [`Error::Misaligned`].
    pub fn write_at(&mut self, buf: &[u8], offset_bytes: u64) -> Result<()> {
        let len = buf.len();
        // The driver only reads a write's memory.
        self.blocking(
            Op::Write,
            offset_bytes,
            &[(buf.as_ptr() as *mut u8, len)],
            len as u64,
        )
    }

    /// Read into several buffers as one bio (one request).
    pub fn readv_at(&mut self, bufs: &mut [IoSliceMut<'_>], offset_bytes: u64) -> Result<()> {
        let mut segs: smallvec::SmallVec<[(*mut u8, usize); 8]> = smallvec::SmallVec::new();
        let mut total = 0u64;
        for b in bufs.iter_mut() {
            total += b.len() as u64;
            segs.push((b.as_mut_ptr(), b.len()));
        }
        self.blocking(Op::Read, offset_bytes, &segs, total)
    }

    /// Write several buffers as one bio (one request).
    pub fn writev_at(&mut self, bufs: &[IoSlice<'_>], offset_bytes: u64) -> Result<()> {
        let mut segs: smallvec::SmallVec<[(*mut u8, usize); 8]> = smallvec::SmallVec::new();
        let mut total = 0u64;
        for b in bufs {
            total += b.len() as u64;
            segs.push((b.as_ptr() as *mut u8, b.len()));
        }
        self.blocking(Op::Write, offset_bytes, &segs, total)
    }

    /// Make completed writes durable.
    pub fn flush(&mut self) -> Result<()> {
        self.blocking(Op::Flush, 0, &[], 0)
    }

    /// Discard `len_bytes` at `offset_bytes`.
    pub fn discard(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.blocking(Op::Discard, offset_bytes, &[], len_bytes)
    }

    /// Make `len_bytes` at `offset_bytes` read back as zeros.
    pub fn write_zeroes(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<()> {
        self.blocking(Op::WriteZeroes, offset_bytes, &[], len_bytes)
    }

    // ---- futures support (see crate::future) ----

    #[allow(clippy::result_large_err)]
    pub(crate) fn submit_waiter(&mut self, bio: Bio) -> std::result::Result<u32, Bio> {
        let r = self.st.submit(&self.dev, bio, Delivery::Waiter);
        self.st.flush_plug(&self.dev);
        r
    }

    /// Reap, and report whether slot `idx` is done (registering `waker` if not).
    pub(crate) fn check_waiter(&mut self, idx: u32, waker: &std::task::Waker) -> bool {
        let notify = &self.dev.hw_queues[self.st.hwq as usize].notify;
        let seen = notify.seq();
        if !self.st.bioset.is_ended(idx) {
            self.st.flush_plug(&self.dev);
            self.st.reap(&self.dev);
            self.st.process_deferred(&self.dev);
            // Orphans (futures dropped early) are freed here.
            self.st.deliver(&self.dev, |_| {});
        }
        if self.st.bioset.is_ended(idx) {
            return true;
        }
        // Woken when the slot ends, by whichever future reaps it...
        let slot = self.st.bioset.waker_mut(idx);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
        if self.dev.completes_async && !self.st.has_deferred() {
            // ...or when the driver's thread (or another context) signals
            // a completion on our hardware queue. A notify since `seen`
            // may have come before the subscription: look again.
            notify.subscribe_waker(waker);
            if notify.seq() != seen {
                waker.wake_by_ref();
            }
        } else {
            // A driver that completes only when polled makes progress only
            // when someone polls: ask to be polled again (as an SPDK reactor
            // or io_uring IOPOLL does).
            waker.wake_by_ref();
        }
        false
    }

    pub(crate) fn take_waiter(&mut self, idx: u32) -> (Bio, Result<()>) {
        let bio = self
            .st
            .bioset
            .remove(idx)
            .expect("waited slot holds its bio");
        // The wait may have quieted the completion fd while other bios'
        // completions came in: announce them again.
        self.st.kick_fd(&self.dev);
        let r = match bio.status() {
            Status::Ok => Ok(()),
            s => Err(self.st.info(&self.dev).error_for(&bio, s)),
        };
        (bio, r)
    }

    pub(crate) fn orphan_waiter(&mut self, idx: u32) {
        if self.st.bioset.is_ended(idx) {
            self.st.bioset.remove(idx);
        } else {
            self.st.bioset.node_mut(idx).delivery = Delivery::Orphan;
            *self.st.bioset.waker_mut(idx) = None;
        }
    }
}

impl CtxState {
    /// What this context's bios are checked against and errors name: the
    /// device's, or its view's.
    #[inline]
    fn info<'a>(&'a self, dev: &'a DeviceInner) -> &'a crate::limits::QueueInfo {
        match &self.window {
            None => &dev.info,
            Some(w) => &w.info,
        }
    }

    /// Linux blk_partition_remap, for a context on a remapped view: a user
    /// bio, once checked against the window, is aimed at the lower device
    /// (`back == false`, at submit); `finish`, where every user bio ends,
    /// failed or not, aims it back (`back == true`). Flushes have no
    /// offset.
    #[cold]
    #[inline(never)]
    fn shift(&mut self, idx: u32, back: bool) {
        let Some(w) = &self.window else { return };
        if let Some(b) = self.bioset.node_mut(idx).bio.as_mut() {
            if b.op() != Op::Flush {
                let off = if back {
                    b.offset_bytes().wrapping_sub(w.start_bytes)
                } else {
                    b.offset_bytes().wrapping_add(w.start_bytes)
                };
                b.set_offset_bytes(off);
            }
        }
    }

    /// A user bio on a remapped view: check it against the window (the
    /// device's own check, just made, saw a window offset), then aim it at
    /// the lower device.
    #[cold]
    #[inline(never)]
    fn remap(&mut self, idx: u32) -> Status {
        let Some(w) = &self.window else {
            return Status::Ok;
        };
        let bio = self.bioset.bio(idx);
        let status = w.info.validate(bio, self.bounce_on);
        self.shift(idx, false);
        status
    }

    /// The stats this context's busy time goes to.
    #[inline]
    fn dstats<'a>(&'a self, dev: &'a DeviceInner) -> &'a crate::stats::DeviceStats {
        match &self.window {
            None => &dev.stats,
            Some(w) => &w.stats,
        }
    }

    /// Make the completion fd readable if polling would make progress.
    #[inline]
    /// See [`Context::completion_fd`].
    fn completion_fd(&mut self, dev: &DeviceInner) -> std::io::Result<std::os::fd::RawFd> {
        if let Some(t) = &self.fd_timer {
            return Ok(t.raw());
        }
        let fd = Arc::new(crate::sync::EventFd::new()?);
        let timer = crate::sync::FdTimer::new(&fd)?;
        let hq = &dev.hw_queues[self.hwq as usize];
        if let Some(irq) = hq.irq_fd {
            // The hardware queue (and so the driver's fd) outlives every
            // context on it.
            timer.add_readable(irq)?;
            self.irq_in_fd = true;
        }
        hq.notify.subscribe_fd(fd.clone());
        let raw = timer.raw();
        self.efd = Some(fd);
        self.fd_timer = Some(timer);
        self.kick_fd(dev);
        Ok(raw)
    }

    fn kick_fd(&mut self, dev: &DeviceInner) {
        // A throttled bio's time is the fd's timer.
        if let (Some(t), Some(&(at, _))) = (self.fd_timer.as_mut(), self.throttled.front()) {
            t.arm(at);
        }
        let Some(fd) = &self.efd else { return };
        // Readable already (this context signalled it and nobody polled
        // since): no second write.
        if self.fd_signalled {
            return;
        }
        if !self.ended.is_empty()
            || !self.plug.is_empty()
            || !self.sw.is_empty()
            || self.flush.has_work()
            || (self.in_flight > 0 && !dev.completes_async && !self.irq_in_fd)
        {
            fd.signal();
            self.fd_signalled = true;
        }
    }

    #[inline]
    fn shared_ptr(&self) -> NonNull<RqOwner> {
        NonNull::from(&*self.shared)
    }

    /// The clock of the current submission batch: read once per batch,
    /// when the batch's first request starts. That is also when the
    /// device's busy time is brought up to date (Linux `update_io_ticks`
    /// in `blk_account_io_start`): the batch's other requests start at the
    /// same millisecond, where it would do nothing.
    #[inline]
    fn batch_start(&mut self, dev: &DeviceInner) -> u64 {
        if self.batch_ns == 0 {
            self.batch_ns = clock::now_ns();
            self.dstats(dev)
                .update_io_ticks(self.batch_ns / 1_000_000, false);
        }
        self.batch_ns
    }

    #[allow(clippy::result_large_err)]
    #[inline]
    fn submit(
        &mut self,
        dev: &DeviceInner,
        bio: Bio,
        delivery: Delivery,
    ) -> std::result::Result<u32, Bio> {
        if self.bioset.available() == 0 {
            self.make_room(dev);
            if self.bioset.available() == 0 {
                return Err(bio);
            }
        }
        let idx = self.bioset.insert_index(bio, delivery)?;
        self.submit_node(dev, idx);
        Ok(idx)
    }

    /// Validate the bio in slot `idx` (just filled or reused, owned by this
    /// context, in no request) and send it down the pipeline.
    #[inline]
    fn submit_node(&mut self, dev: &DeviceInner, idx: u32) {
        if dev.gate.load(std::sync::atomic::Ordering::Acquire) != self.gate_seen {
            self.pass_gate(dev);
        }
        let (op, flags, mut status) = {
            let bio = self.bioset.bio(idx);
            (
                bio.op(),
                bio.flags(),
                dev.info.validate(bio, self.bounce_on),
            )
        };
        if self.window.is_some() {
            status = self.remap(idx);
        }
        bump(&self.stats.bios, 1);
        if !status.is_ok() {
            bump(&self.stats.errors, 1);
            self.finish(idx, status);
            return;
        }
        if op != Op::Flush
            && (self.throttle.is_some()
                || dev.qos_active.load(std::sync::atomic::Ordering::Relaxed) != 0)
        {
            let now = clock::now_ns();
            let bio = self.bioset.bio(idx);
            let mut at = now;
            if let Some(t) = self.throttle.as_mut() {
                if let Admit::At(t) = t.admit(bio, now) {
                    at = t;
                }
            }
            for m in [&*dev.io_max, self.group.0.io_max()] {
                if m.is_limited() {
                    at = at.max(m.charge(bio.op(), bio.len_bytes(), now));
                }
            }
            if at > now {
                debug_assert!(self.throttled.len() < self.throttled.capacity());
                self.throttled.push_back((at, idx));
                return;
            }
        }
        self.issue(dev, idx, op, flags);
    }

    /// Send bio `idx`, validated and admitted, down the pipeline: its flush
    /// sequence, or straight to its data stage.
    #[inline]
    fn issue(&mut self, dev: &DeviceInner, idx: u32, op: Op, flags: BioFlags) {
        if op == Op::Flush || flags.bits() & (BioFlags::FUA.bits() | BioFlags::PREFLUSH.bits()) != 0
        {
            let stages = flush::policy(op, flags, &dev.info.features);
            if stages != flush::DATA {
                self.bioset.node_mut(idx).stages = stages;
                self.advance(dev, idx);
                return;
            }
        }
        self.submit_data(dev, idx);
    }

    /// Issue the throttled bios whose time has come, oldest first.
    fn release_throttled(&mut self, dev: &DeviceInner) {
        if self.throttled.is_empty() {
            return;
        }
        let now = clock::now_ns();
        let mut released = false;
        while let Some(&(at, idx)) = self.throttled.front() {
            if at > now {
                break;
            }
            self.throttled.pop_front();
            let bio = self.bioset.node(idx).bio.as_ref();
            let (op, flags) = bio.map_or((Op::Flush, BioFlags::NONE), |b| (b.op(), b.flags()));
            self.issue(dev, idx, op, flags);
            released = true;
        }
        if released {
            // Released from a poll or a wait, not a submission: nobody may
            // be left to unplug them.
            self.flush_plug(dev);
        }
    }

    /// How long until the first throttled bio may go (None: none waits).
    fn throttle_wait(&self) -> Option<Duration> {
        let &(at, _) = self.throttled.front()?;
        Some(Duration::from_nanos(at.saturating_sub(clock::now_ns())))
    }

    /// The queue was frozen or reconfigured: drain while frozen (our own
    /// in-flight I/O must finish for the freeze to complete), then take a
    /// fresh copy of the settings.
    #[cold]
    fn pass_gate(&mut self, dev: &DeviceInner) {
        use std::sync::atomic::Ordering::Acquire;
        let mut spins = 0;
        while dev.gate.load(Acquire) & crate::queue::GATE_FROZEN != 0 {
            let seen = dev.hw_queues[self.hwq as usize].notify.seq();
            self.flush_plug(dev);
            // Tags taken in a batch but not used yet count as in use.
            self.tags.drain_cache(&mut self.tag_cache);
            self.reap(dev);
            self.process_deferred(dev);
            if dev.gate.load(Acquire) & crate::queue::GATE_FROZEN == 0 {
                break;
            }
            self.backoff(dev, seen, &mut spins);
        }
        let ctl = dev.ctl();
        self.gate_seen = dev.gate.load(Acquire);
        self.limits = ctl.limits;
        self.plug_on = ctl.plug;
        self.nomerges = ctl.nomerges;
        self.sched_on = ctl.elevator;
        self.async_depth = ctl.async_depth;
        let same = match (&self.parts, &ctl.partitions) {
            (Some(p), Some(t)) => p.is_of(t),
            (None, None) => true,
            _ => false,
        };
        if !same {
            if let Some(p) = self.parts.take() {
                p.retire();
            }
            self.parts = ctl
                .partitions
                .clone()
                .map(|t| crate::partition::CtxParts::new(t, dev.cfg.part_cache));
        }
    }

    /// Send the data of bio `idx` on: merge it, make it a request, or split
    /// (and bounce) it.
    #[inline]
    fn submit_data(&mut self, dev: &DeviceInner, idx: u32) {
        let node = self.bioset.node_ptr(idx);
        // SAFETY: slot `idx` is owned by this context and not in a request.
        let bio = unsafe { node.as_ref() }
            .bio
            .as_ref()
            .expect("slot holds a bio");
        let emulate_zeroes = bio.op() == Op::WriteZeroes && !dev.info.features.write_zeroes;
        if emulate_zeroes || split::fits(bio, &self.limits) == Fit::Split {
            self.split_submit(dev, idx, emulate_zeroes);
            return;
        }
        if self.nomerges < 2 && merge::mergeable(bio) && self.try_merge(dev, node) {
            return;
        }
        if self.async_depth != 0 && bio.op().is_write() {
            self.wait_async_room(dev);
        }
        let rq = self.get_rq(dev);
        let full = {
            let _legacy = dev.lock.hold();
            self.queue_rq(dev, rq, node)
        };
        if full {
            self.flush_plug(dev);
        }
    }

    /// Try to join a waiting request: the plug's newest, then (with
    /// `nomerges=0`) the last few in the software queue.
    #[inline]
    fn try_merge(&mut self, dev: &DeviceInner, node: NonNull<BioNode>) -> bool {
        // SAFETY: the slot is owned by this context and not in a request.
        let bio = unsafe { node.as_ref() }
            .bio
            .as_ref()
            .expect("slot holds a bio");
        let (sector, bytes, segs, group) = (
            bio.sector(),
            bio.len_bytes(),
            bio.segments().len(),
            StatGroup::of(bio.op()),
        );
        let flags = flush::request_flags(bio.flags(), &dev.info.features);
        let _legacy = dev.lock.hold();
        let lim = &self.limits;
        let candidates = if self.nomerges == 0 { 8 } else { 1 };
        let target = match self.plug.last_mut() {
            Some(rq) => merge::can_merge(rq, bio, flags, lim).map(|side| (rq, side)),
            None => self
                .sw
                .iter_mut_newest(candidates)
                .find_map(|rq| merge::can_merge(rq, bio, flags, lim).map(|side| (rq, side))),
        };
        let Some((rq, side)) = target else {
            return false;
        };
        merge::attach(rq, node, sector, bytes, segs, side);
        bump(&self.stats.merges[group as usize], 1);
        if let Some(p) = &self.parts {
            p.merged(rq.part, group);
        }
        true
    }

    /// Cut bio `idx` into pieces that fit (bouncing misaligned ones) and
    /// submit each; the parent ends once, after all of them.
    fn split_submit(&mut self, dev: &DeviceInner, idx: u32, emulate_zeroes: bool) {
        split::parent::begin(self.bioset.node_mut(idx));
        let parent_ptr = self.bioset.node_ptr(idx);
        let mut splitter = Splitter::default();
        let mut pieces = 0u32;
        let mut failed = Status::Ok;
        loop {
            // SAFETY: the parent slot stays owned by this context while it is
            // cut; pieces live in other slots, so nothing else touches it.
            let parent = unsafe { parent_ptr.as_ref() }
                .bio
                .as_ref()
                .expect("parent holds its bio");
            let zero = emulate_zeroes.then_some(&dev.zero_buf);
            let piece = match splitter.next(parent, &self.limits, zero) {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(_) => {
                    failed = Status::Invalid(InvalidKind::TooManySegments);
                    break;
                }
            };
            pieces += 1;
            let mut child = piece.bio;
            child.private = u64::from(idx);
            let delivery = if piece.bounce {
                if !self.bounced_once {
                    self.bounced_once = true;
                    report_first_bounce(dev, parent);
                }
                let len = child.len_bytes() as usize;
                let mut buf = self.bounce.get(len);
                if child.op() == Op::Write {
                    let n = bounce::copy_from_bio(
                        parent,
                        piece.offset_in_parent,
                        &mut buf.as_mut_slice()[..len],
                    );
                    bump(&self.stats.bytes_copied, n);
                }
                child.set_len_bytes(0);
                child.push_segment(buf, 0, len as u32);
                Delivery::Bounce
            } else {
                Delivery::Child
            };
            let cnode = match self.insert_internal(dev, child, delivery) {
                Ok(n) => n,
                Err(child) => {
                    // No slot can be freed: end the parent with what was
                    // issued so far, failed, rather than spin.
                    if let Some(buf) = (delivery == Delivery::Bounce)
                        .then(|| child.into_buffers().next())
                        .flatten()
                    {
                        self.bounce.put(buf);
                    }
                    failed = Status::Resource;
                    break;
                }
            };
            split::parent::add_piece(self.bioset.node_mut(idx));
            let rq = self.get_rq(dev);
            let full = {
                let _legacy = dev.lock.hold();
                self.queue_rq(dev, rq, cnode)
            };
            if full {
                self.flush_plug(dev);
            }
        }
        if pieces > 1 {
            bump(&self.stats.splits, 1);
        }
        self.child_done(idx, failed);
    }

    /// A piece of parent `idx` ended (or the cutting did).
    fn child_done(&mut self, idx: u32, status: Status) {
        if let Some(status) = split::parent::piece_done(self.bioset.node_mut(idx), status) {
            self.data_done(idx, status);
        }
    }

    /// The data stage of bio `idx` ended with `status`.
    #[inline]
    fn data_done(&mut self, idx: u32, status: Status) {
        if self.bioset.node(idx).stages != 0 && status.is_ok() {
            // More stages (a POSTFLUSH): run them from a submitting path.
            self.flush.stage_done(idx);
        } else {
            self.finish(idx, status);
        }
    }

    /// Run the next stage of bio `idx`'s flush sequence.
    fn advance(&mut self, dev: &DeviceInner, idx: u32) {
        match FlushMachine::next_step(&mut self.bioset.node_mut(idx).stages) {
            Step::Flush => {
                if self.flush.join(idx) {
                    self.issue_flush(dev);
                }
            }
            Step::Data => self.submit_data(dev, idx),
            Step::End => self.finish(idx, Status::Ok),
        }
    }

    /// Issue the flush request the flush machine asked for.
    fn issue_flush(&mut self, dev: &DeviceInner) {
        self.flush.issued();
        let node = match self.insert_internal(dev, Bio::flush(), Delivery::FlushInternal) {
            Ok(n) => n,
            Err(_) => {
                // No slot for the flush: its waiters fail, typed, instead
                // of spinning.
                self.flush_done(Status::Resource);
                return;
            }
        };
        let rq = self.get_rq(dev);
        let full = {
            let _legacy = dev.lock.hold();
            self.queue_rq(dev, rq, node)
        };
        if full {
            self.flush_plug(dev);
        }
    }

    /// The running flush ended.
    fn flush_done(&mut self, status: Status) {
        let mut failed = std::mem::take(&mut self.failed);
        self.flush
            .flush_done(status, |idx, s| failed.push((idx, s)));
        for (idx, s) in failed.drain(..) {
            self.finish(idx, s);
        }
        self.failed = failed;
    }

    #[inline]
    fn has_deferred(&self) -> bool {
        self.flush.has_work() || !self.throttled.is_empty()
    }

    /// Stages that completions made ready; run here, never from the reap,
    /// so no completion recurses into submission.
    fn process_deferred(&mut self, dev: &DeviceInner) {
        self.release_throttled(dev);
        // Bounded: each pass either issues a stage or ends a bio, and a
        // sequence has at most three stages.
        while self.flush.has_work() {
            while self.flush.has_work() {
                let mut ready = std::mem::take(&mut self.seq_scratch);
                if self.flush.take_work(&mut ready) {
                    self.issue_flush(dev);
                }
                for &idx in &ready {
                    self.advance(dev, idx);
                }
                ready.clear();
                self.seq_scratch = ready;
            }
            // Sequence stages go straight to dispatch, as Linux's flush
            // machinery does: nobody may be left to unplug them. Dispatch
            // can complete them inline and make the next stage ready.
            self.flush_plug(dev);
        }
    }

    /// Submit again the bios whose callbacks asked for it.
    #[inline]
    fn resubmit_pending(&mut self, dev: &DeviceInner) {
        let mut pending = std::mem::take(&mut self.resubmit);
        for &idx in &pending {
            self.bioset.reuse(idx);
            self.submit_node(dev, idx);
        }
        pending.clear();
        self.resubmit = pending;
    }

    #[cold]
    fn unpolled_error(&self, dev: &DeviceInner, bio: &Bio) -> Error {
        Error::Unpolled {
            device: dev.info.name.clone(),
            op: bio.op(),
            offset_bytes: bio.offset_bytes(),
            slots: self.bioset.capacity(),
        }
    }

    /// Put a bio the layer made (a piece, a flush) in a slot: when none is
    /// free, reap this context's own completions to free one. Gives the bio
    /// back when every slot holds a completion the caller has not polled:
    /// the caller fails the bio it serves instead of spinning.
    #[allow(clippy::result_large_err)]
    fn insert_internal(
        &mut self,
        dev: &DeviceInner,
        bio: Bio,
        delivery: Delivery,
    ) -> std::result::Result<NonNull<BioNode>, Bio> {
        match self.bioset.insert(bio, delivery) {
            Ok(n) => Ok(n),
            Err(bio) => {
                self.make_room(dev);
                self.bioset.insert(bio, delivery)
            }
        }
    }

    /// Wait (bounded by the request timeouts) until a bio slot is free.
    fn make_room(&mut self, dev: &DeviceInner) {
        let mut spins = 0;
        while self.bioset.available() == 0 && self.in_flight > 0 {
            let seen = dev.hw_queues[self.hwq as usize].notify.seq();
            self.flush_plug(dev);
            self.reap(dev);
            self.backoff(dev, seen, &mut spins);
        }
    }

    /// Under a scheduler with an `async_depth`, wait until the writes
    /// holding scheduler tags on this hardware queue are fewer than it
    /// (Linux's `dd_limit_depth`): the rest of the tags, and of the
    /// driver's depth when it is set below that, stay for reads. Contexts
    /// that check at once may each go one over; completions bring the
    /// count back.
    #[cold]
    fn wait_async_room(&mut self, dev: &DeviceInner) {
        use std::sync::atomic::Ordering::Relaxed;
        let hq = &dev.hw_queues[self.hwq as usize];
        let mut spins = 0;
        while hq.async_writes.load(Relaxed) >= self.async_depth {
            let seen = hq.notify.seq();
            self.flush_plug(dev);
            self.reap(dev);
            self.process_deferred(dev);
            if hq.async_writes.load(Relaxed) < self.async_depth {
                break;
            }
            self.backoff(dev, seen, &mut spins);
        }
    }

    /// Get a request (a tag), waiting if all are in use.
    #[inline]
    fn get_rq(&mut self, dev: &DeviceInner) -> RqRef {
        if let Some(rq) = self.tags.take_cached(&mut self.tag_cache) {
            return rq;
        }
        // No batches under a scheduler: cached tags would be scheduler
        // tags that nobody else may use.
        let want = if self.plug_on && !self.sched_on {
            dev.cfg.plug_max.clamp(1, 64)
        } else {
            1
        };
        self.tags
            .get_batch(&mut self.hint, want, &mut self.tag_cache);
        if let Some(rq) = self.tags.take_cached(&mut self.tag_cache) {
            return rq;
        }
        self.get_rq_slow(dev)
    }

    #[cold]
    fn get_rq_slow(&mut self, dev: &DeviceInner) -> RqRef {
        let mut spins = 0;
        loop {
            // Our own plugged and in-flight requests hold tags: push them on.
            let seen = dev.hw_queues[self.hwq as usize].notify.seq();
            self.flush_plug(dev);
            self.reap(dev);
            if let Some(rq) = self.tags.get(&mut self.hint) {
                return rq;
            }
            if self.in_flight > 0 && !dev.completes_async {
                // Our completions need polling: poll, with a short sleep.
                self.backoff(dev, seen, &mut spins);
            } else if let Some(rq) = self.tags.get_wait(&mut self.hint, Duration::from_millis(1)) {
                return rq;
            }
        }
    }

    /// Build the request from the bio and queue it. Returns true if the plug
    /// is full.
    #[inline]
    fn queue_rq(&mut self, dev: &DeviceInner, mut rq: RqRef, mut node: NonNull<BioNode>) -> bool {
        {
            // SAFETY: the slot was just filled by this context and no
            // request holds it yet: this is the only access.
            let n = unsafe { node.as_mut() };
            debug_assert_eq!(n.state, SlotState::Owned);
            n.state = SlotState::InFlight;
        }
        // SAFETY: as above; the request that will hold it is ours too.
        let bio = unsafe { node.as_ref() }
            .bio
            .as_ref()
            .expect("slot holds a bio");
        rq.op = bio.op();
        rq.flags = flush::request_flags(bio.flags(), &dev.info.features);
        rq.sector = bio.sector();
        rq.size_bytes = bio.len_bytes();
        rq.nr_bios = 1;
        rq.nr_segs = bio.segments().len().min(u16::MAX as usize) as u16;
        rq.bio_head = Some(node);
        rq.bio_tail = Some(node);
        rq.owner = Some(self.shared_ptr());
        rq.hwq = self.hwq;
        if self.sched_on {
            if self.async_depth != 0 && rq.op.is_write() {
                dev.hw_queues[self.hwq as usize]
                    .async_writes
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            let g = &self.group.0;
            rq.ioprio = self.ioprio.unwrap_or_else(|| g.ioprio());
            rq.group = g.id();
            rq.weight = g.weight() as u16;
        }
        rq.status = Status::Ok;
        rq.set_driver_data(0);
        if self.iostats {
            rq.start_ns = self.batch_start(dev);
            bump(&self.stats.in_flight[rq.op.is_write() as usize], 1);
            rq.part = match self.parts.as_mut() {
                None => crate::partition::NO_PART,
                Some(p) => p.start(rq.sector, rq.op.is_write(), rq.start_ns / 1_000_000),
            };
        }
        rq.transition(RqState::Idle, RqState::Queued);
        bump(&self.stats.requests, 1);
        self.in_flight += 1;
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Relaxed);
        if self.plug_on {
            self.plug.push(rq)
        } else {
            self.sw.push(rq);
            true
        }
    }

    /// Move the plug into the software queue and run the hardware queue.
    #[inline]
    fn flush_plug(&mut self, dev: &DeviceInner) {
        if self.plug.is_empty() && self.sw.is_empty() {
            return;
        }
        for rq in self.plug.drain() {
            self.sw.push(rq);
        }
        self.tags.drain_cache(&mut self.tag_cache);
        self.run_hw_queue(dev);
    }

    /// Dispatch the software queue to the hardware queue (Linux
    /// `blk_mq_run_hw_queue`), then end what completed inline.
    #[inline]
    fn run_hw_queue(&mut self, dev: &DeviceInner) {
        let hq = &dev.hw_queues[self.hwq as usize];
        let out = {
            let _legacy = dev.lock.hold();
            hq.run(&mut self.sw, &mut self.done, self.timeout_ms)
        };
        if out.busy > 0 {
            bump(&self.stats.requeues, u64::from(out.busy));
        }
        self.batch_ns = 0;
        self.complete_done(dev);
    }

    /// Reap the hardware queue and the remote queue, then end completions.
    /// Timeouts are counted when their requests end (`end_request`).
    #[inline]
    fn reap(&mut self, dev: &DeviceInner) {
        let remote = self.shared.remote.drain_into(&mut self.done);
        if self.in_flight as usize > remote {
            let hq = &dev.hw_queues[self.hwq as usize];
            let out = {
                let _legacy = dev.lock.hold();
                hq.reap(&mut self.sw, &mut self.done, self.timeout_ms)
            };
            if out.busy > 0 {
                bump(&self.stats.requeues, u64::from(out.busy));
            }
        }
        self.complete_done(dev);
    }

    /// End every request in `done`: route foreign ones to their owners, and
    /// end our own (stats, bios, tags). Callbacks do not run here.
    #[inline]
    fn complete_done(&mut self, dev: &DeviceInner) {
        if self.done.is_empty() {
            return;
        }
        let now = if self.iostats { clock::now_ns() } else { 0 };
        let me = self.shared_ptr();
        let mut done = std::mem::take(&mut self.done);
        // Hardware queues whose contexts were handed completions: each is
        // notified once for the batch, not once per request (a notify
        // signals every completion fd subscribed to the queue).
        let mut routed: Option<usize> = None;
        let mut run = LatencyRun::default();
        let mut async_writes = 0u32;
        // One hold of the legacy lock (single and global modes) for the
        // batch, as the old queue lock was held over a completion run.
        let legacy = dev.lock.hold();
        for rq in done.drain(..) {
            match rq.owner {
                Some(owner) if owner != me => {
                    let hwq = rq.hwq as usize;
                    // SAFETY: a context outlives its requests (its Drop waits
                    // for all of them), so the owner's RqOwner is alive.
                    unsafe { owner.as_ref() }.remote.push(rq);
                    match routed {
                        Some(h) if h == hwq => {}
                        Some(h) => {
                            dev.hw_queues[h].notify.notify();
                            routed = Some(hwq);
                        }
                        None => routed = Some(hwq),
                    }
                }
                _ => {
                    async_writes += u32::from(self.async_depth != 0 && rq.op.is_write());
                    self.end_request(rq, now, &mut run);
                }
            }
        }
        drop(legacy);
        if async_writes > 0 {
            dev.hw_queues[self.hwq as usize]
                .async_writes
                .fetch_sub(async_writes, std::sync::atomic::Ordering::Relaxed);
        }
        run.flush(&mut self.hist);
        if let Some(h) = routed {
            dev.hw_queues[h].notify.notify();
        }
        self.done = done;
        self.tags.put_batch(&mut self.freed_tags);
        if self.iostats {
            self.dstats(dev).update_io_ticks(now / 1_000_000, true);
        }
    }

    #[inline]
    fn end_request(&mut self, mut rq: RqRef, now_ns: u64, run: &mut LatencyRun) {
        debug_assert_eq!(rq.state(), RqState::Complete);
        let status = rq.status;
        if self.iostats {
            let g = StatGroup::of(rq.op);
            let lat = now_ns.saturating_sub(rq.start_ns);
            let sh: &StatShard = &self.stats;
            bump(&sh.ios[g as usize], 1);
            bump(&sh.sectors[g as usize], rq.size_bytes >> SECTOR_SHIFT);
            bump(&sh.nsecs[g as usize], lat);
            drop_by(&sh.in_flight[rq.op.is_write() as usize], 1);
            run.push(&mut self.hist, g, lat);
            // Partitions first: without them, one test of the context.
            if let Some(p) = &self.parts {
                if rq.part != crate::partition::NO_PART {
                    let sectors = rq.size_bytes >> SECTOR_SHIFT;
                    p.end(rq.part, g, sectors, lat, rq.op.is_write(), now_ns);
                }
            }
        }
        if !status.is_ok() {
            bump(&self.stats.errors, 1);
            if status == Status::Timeout {
                bump(&self.stats.timeouts, 1);
            }
        }
        let mut node = rq.bio_head.take();
        rq.bio_tail = None;
        while let Some(n) = node {
            // SAFETY: the request came back to its owner, so its bio chain
            // (slots of this context's bio set) is ours again.
            let next = unsafe { n.as_ref().next };
            let idx = self.bioset.index_of(n);
            node = next;
            let slot = self.bioset.node_mut(idx);
            debug_assert_eq!(slot.state, SlotState::InFlight);
            slot.state = SlotState::Owned;
            self.end_bio(idx, status);
        }
        debug_assert!(self.in_flight > 0);
        self.in_flight -= 1;
        self.shared
            .in_flight
            .store(self.in_flight, std::sync::atomic::Ordering::Release);
        self.tags.retire(rq, &mut self.freed_tags);
    }

    /// A bio's request ended: route by what the bio is.
    #[inline]
    fn end_bio(&mut self, idx: u32, status: Status) {
        let n = self.bioset.node(idx);
        match n.delivery {
            Delivery::Callback | Delivery::Waiter | Delivery::Orphan => self.data_done(idx, status),
            Delivery::Child => {
                let parent = n.bio.as_ref().map_or(0, |b| b.private as u32);
                self.bioset.remove(idx);
                self.child_done(parent, status);
            }
            Delivery::Bounce => {
                let child = self.bioset.remove(idx).expect("bounce piece holds its bio");
                let parent = child.private as u32;
                if status.is_ok() && child.op() == Op::Read {
                    let pbio = self.bioset.node(parent).bio.as_ref();
                    let pbio = pbio.expect("parent holds its bio");
                    let offset = (child.sector() - pbio.sector()) << SECTOR_SHIFT;
                    let len = child.len_bytes() as usize;
                    let n =
                        bounce::copy_to_bio(pbio, offset, &child.segments()[0].as_slice()[..len]);
                    bump(&self.stats.bytes_copied, n);
                }
                if let Some(buf) = child.into_buffers().next() {
                    self.bounce.put(buf);
                }
                self.child_done(parent, status);
            }
            Delivery::FlushInternal => {
                self.bioset.remove(idx);
                self.flush_done(status);
            }
        }
    }

    /// End a user bio for good: to its waiter, or queued for callbacks.
    #[inline(always)]
    fn finish(&mut self, idx: u32, status: Status) {
        if self.window.is_some() {
            self.shift(idx, true);
        }
        let final_status = match self.bioset.node(idx).bio.as_ref() {
            Some(b) if !b.status.is_ok() => b.status,
            _ => status,
        };
        match self.bioset.end(idx, final_status) {
            Delivery::Waiter => {}
            _ => {
                debug_assert!(self.ended.len() < self.ended.capacity());
                self.ended.push_back(idx);
            }
        }
    }

    /// Run callbacks for ended bios, oldest first. Bios the callbacks ask
    /// to resubmit are sent again afterwards, not from inside the callback.
    #[inline]
    fn deliver(&mut self, dev: &DeviceInner, mut f: impl FnMut(Completion<'_>)) -> usize {
        let mut n = 0;
        // What the callbacks see of the device: a view's window, or the
        // device itself (looked up once per batch, not per bio).
        let info = match &self.window {
            None => &dev.info,
            Some(w) => &w.info,
        };
        while let Some(idx) = self.ended.pop_front() {
            let node = self.bioset.node_mut(idx);
            if node.delivery == Delivery::Orphan || node.bio.is_none() {
                self.bioset.remove(idx);
                continue;
            }
            let end_io = node.bio.as_ref().and_then(|b| b.end_io().cloned());
            let mut again = false;
            let c = Completion {
                slot: &mut node.bio,
                resubmit: &mut again,
                info,
            };
            // A panicking callback frees its own slot (the bio ended: no
            // driver holds it) and leaves the rest queued for the next poll.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match end_io {
                Some(end_io) => end_io.end_io(c),
                None => f(c),
            }));
            if let Err(panic) = ran {
                self.bioset.remove(idx);
                std::panic::resume_unwind(panic);
            }
            n += 1;
            if again && self.bioset.node(idx).bio.is_some() {
                debug_assert!(self.resubmit.len() < self.resubmit.capacity());
                self.resubmit.push(idx);
            } else {
                self.bioset.remove(idx);
            }
        }
        if !self.resubmit.is_empty() {
            self.resubmit_pending(dev);
        }
        n
    }

    /// Wait for slot `idx` to end.
    fn wait_slot(&mut self, dev: &DeviceInner, idx: u32) {
        self.flush_plug(dev);
        let mut spins = 0;
        while !self.bioset.is_ended(idx) {
            let seen = dev.hw_queues[self.hwq as usize].notify.seq();
            self.reap(dev);
            self.process_deferred(dev);
            if self.bioset.is_ended(idx) {
                break;
            }
            self.backoff(dev, seen, &mut spins);
        }
    }

    /// One step of waiting: spin-poll for a while, then sleep on the
    /// hardware queue's futex (bounded), woken by a driver's notifier or a
    /// remote completion.
    fn backoff(&mut self, dev: &DeviceInner, seen: u32, spins: &mut u32) {
        let hq = &dev.hw_queues[self.hwq as usize];
        // A hardware queue of our own, with requests out: let the driver
        // block in its own completion source (one wakeup, no spinning), if
        // it can. The legacy modes keep the core's wait.
        if dev.driver_waits
            && self.in_flight > 0
            && matches!(dev.lock, crate::queue::QueueLock::None)
            && hq.nr_ctx.load(std::sync::atomic::Ordering::Relaxed) == 1
            && hq.lock().driver_wait(DRIVER_WAIT)
        {
            return;
        }
        if self.in_flight > 0 && !dev.completes_async && hq.irq_fd.is_some() {
            // A polled driver with an interrupt line, on a queue shared
            // with other contexts: sleep on this context's completion fd,
            // which the line wakes, and so does another context that
            // routes a completion here. No spinning: each spin would be a
            // poll of the driver.
            if let Ok(fd) = self.completion_fd(dev) {
                // Quiet the fd's own sources first, or the wait returns at
                // once for as long as the caller does not poll (a bio
                // waiting for a tag inside `submit` would spin): our
                // eventfd (what it announced is what the caller's loop is
                // about to look at) and a throttle timer that fired. A
                // notify since the caller looked (`seen`) means go round
                // again; one after this check signals the fd anew. The
                // public calls signal it again on their way out if
                // completions wait for the caller (`kick_fd`).
                if let Some(e) = &self.efd {
                    e.drain();
                    self.fd_signalled = false;
                }
                if let Some(t) = self.fd_timer.as_mut() {
                    if t.is_armed() {
                        t.clear_fired(clock::now_ns());
                    }
                }
                if hq.notify.seq() != seen {
                    return;
                }
                let mut t = NOTIFY_SLEEP;
                if let Some(until) = self.throttle_wait() {
                    t = t.min(until);
                }
                crate::sync::wait_readable(fd, t);
                return;
            }
        }
        *spins += 1;
        if *spins < SPIN_POLLS {
            std::hint::spin_loop();
            return;
        }
        let mut t = if dev.completes_async {
            NOTIFY_SLEEP
        } else {
            POLL_SLEEP
        };
        if let Some(until) = self.throttle_wait() {
            // A throttled bio's time is the timer this sleep must not miss.
            t = t.min(until);
        }
        dev.hw_queues[self.hwq as usize].notify.wait(seen, t);
    }
}

/// Say once per context that a bio is bounced, and why: the copy is
/// silent otherwise, and it costs what zero-copy I/O is for.
#[cold]
fn report_first_bounce(dev: &DeviceInner, bio: &Bio) {
    let dma = dev.info.limits.dma_alignment as usize;
    let seg = bio
        .segments()
        .iter()
        .find(|s| (s.addr() | s.len() as usize) & dma != 0);
    let (addr, len) = seg.map_or((0, 0), |s| (s.addr(), s.len()));
    eprintln!(
        "mqblk: {}: {} at offset {}: buffer segment at {addr:#x} of {len} bytes is not aligned to {} bytes; it is copied through a bounce buffer (counted in bytes_copied). Buffers from Device::alloc_buf avoid the copy; bounce=0 refuses such I/O instead. Said once per context.",
        dev.info.name,
        bio.op(),
        bio.offset_bytes(),
        dma + 1
    );
}

/// Held by a blocking call while its bio is in flight. On the normal path
/// it is disarmed; if a panic unwinds through the call, its drop waits
/// (bounded by the request timeout plus a grace period) until the bio has
/// ended, because the bio may point at the caller's memory, which the
/// unwind is about to free. If the bio never ends, it aborts the process
/// with a message: memory a driver may still write cannot be handed back.
struct UnwindGuard<'a> {
    ctx: &'a mut Context,
    idx: u32,
}

/// Added to the request timeout for waits that must end.
const GRACE: Duration = Duration::from_secs(5);

impl<'a> UnwindGuard<'a> {
    fn disarm(self) -> &'a mut Context {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the reference is moved out
        // exactly once.
        unsafe { std::ptr::read(&this.ctx) }
    }
}

impl Drop for UnwindGuard<'_> {
    #[cold]
    fn drop(&mut self) {
        let ctx = &mut *self.ctx;
        let dev = &*ctx.dev;
        let limit = Duration::from_millis(u64::from(ctx.st.timeout_ms)) + GRACE;
        eprintln!(
            "mqblk: {}: a panic unwinds through a blocking call; waiting up to {} ms for its I/O to end before its memory is freed",
            dev.info.name,
            limit.as_millis()
        );
        let start = std::time::Instant::now();
        let mut spins = 0;
        while !ctx.st.bioset.is_ended(self.idx) && start.elapsed() < limit {
            let seen = dev.hw_queues[ctx.st.hwq as usize].notify.seq();
            ctx.st.flush_plug(dev);
            ctx.st.reap(dev);
            ctx.st.process_deferred(dev);
            if !ctx.st.bioset.is_ended(self.idx) {
                ctx.st.backoff(dev, seen, &mut spins);
            }
        }
        if !ctx.st.bioset.is_ended(self.idx) {
            eprintln!(
                "mqblk: {}: the I/O of a panicking blocking call did not end within {} ms; aborting, because the driver may still write into the caller's memory",
                dev.info.name,
                limit.as_millis()
            );
            std::process::abort();
        }
        ctx.st.bioset.remove(self.idx);
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        let dev = &*self.dev;
        let st = &mut self.st;
        st.flush_plug(dev);
        let mut spins = 0;
        // Requests end by the timeout at the latest; a driver that keeps one
        // past it (its timeout handler resets the timer forever) gets the
        // grace period, then this context's slots are leaked, not freed
        // under it.
        let limit = Duration::from_millis(u64::from(st.timeout_ms.max(30_000))) + GRACE;
        let start = std::time::Instant::now();
        while st.in_flight > 0 || st.has_deferred() {
            let seen = dev.hw_queues[st.hwq as usize].notify.seq();
            st.reap(dev);
            st.process_deferred(dev);
            if st.in_flight > 0 || st.has_deferred() {
                if start.elapsed() > limit {
                    eprintln!(
                        "mqblk: {}: {} requests of a dropped context did not end within {} ms; leaking the context's bio slots",
                        dev.info.name,
                        st.in_flight,
                        limit.as_millis()
                    );
                    std::mem::replace(&mut st.bioset, BioSet::new(0)).leak();
                    std::mem::forget(st.shared.clone());
                    st.ended.clear();
                    st.flush.abandon();
                    st.throttled.clear();
                    break;
                }
                st.backoff(dev, seen, &mut spins);
            }
        }
        // Bios with end_io still get their call; the rest are dropped.
        st.deliver(dev, |_| {});
        st.tags.drain_cache(&mut st.tag_cache);
        if let Some(fd) = st.efd.take() {
            dev.hw_queues[st.hwq as usize].notify.unsubscribe_fd(&fd);
        }
        for up in st.forwards.drain(..) {
            dev.hw_queues[st.hwq as usize].notify.unforward(&up);
        }
        match &st.window {
            None => dev.stats.retire(&st.stats, &st.hist),
            Some(w) => w.stats.retire(&st.stats, &st.hist),
        }
        if let Some(p) = st.parts.take() {
            p.retire();
        }
        dev.ctl().contexts.retain(|c| !Arc::ptr_eq(c, &st.shared));
        dev.hw_queues[st.hwq as usize]
            .nr_ctx
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
