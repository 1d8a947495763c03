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
//!
//! This file is the public face; the stages beneath it are files of
//! `context/`, each calling only the ones below it:
//!
//! ```text
//! context.rs   Context: the public calls, the futures' hooks, Drop
//!   poll       progress, delivery to callbacks, resubmission, blocking waits
//!   submit     the gate, checks, window, admission, flush sequences
//!   bio_based  a bio-based device's driver, in place of the data stage
//!   data       merge, split (the loop is split::cut), bounce
//!   rq         tags, building requests, plug, dispatch
//!   end        reap, end requests and bios (completions never submit)
//!   wait       the one bounded wait, the completion fd
//!   state      CtxState and its feature word
//! ```

use std::cell::Cell;
use std::io::{IoSlice, IoSliceMut};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use crate::bio::{Bio, Completion, Op, SubmitError};
use crate::bioset::{BioSet, Delivery};
use crate::buf::IoBuf;
use crate::error::{Result, Status};
use crate::queue::{Device, DeviceInner};
use crate::stats::{DiskStats, Histograms};

mod bio_based;
mod data;
mod end;
mod fd;
mod poll;
mod rq;
mod stacked;
mod state;
mod submit;
mod wait;

use state::CtxState;
use wait::{Bound, Step, GRACE};

/// Pending polls a future spins on a polled driver with no interrupt line
/// before it sleeps on the completion fd.
const SPIN_BUDGET: u32 = 64;

/// What will wake a pending future (see [`Context::check_waiter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiting {
    /// Its bio ended: take it.
    Ready,
    /// The waker was handed to what wakes it (the hardware queue's notify,
    /// or itself). With requests in flight that can time out, the future
    /// must also be woken `recheck` from now: only a poll notices a
    /// timeout.
    Subscribed {
        /// When to poll again at the latest.
        recheck: Option<Duration>,
    },
    /// The waker must sleep on this fd (the context's completion fd), and
    /// be woken when it is readable.
    OnFd(std::os::fd::RawFd),
}

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

impl Device {
    /// Open a context for the calling thread. Control plane: allocates the
    /// context's bio set and lists, sized to the tag depth.
    pub fn context(&self) -> Result<Context> {
        self.context_in(&self.inner.groups.default_group())
    }

    /// Open a context in `group` (see [`crate::blkcg`]).
    pub fn context_in(&self, group: &Arc<crate::blkcg::Group>) -> Result<Context> {
        let dev = self.inner.clone();
        let id = dev
            .next_ctx
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut st = CtxState::new(&dev, id, self.view.clone(), group.clone());
        st.open_bio_queue(&dev)?;
        dev.ctl().contexts.push(st.shared.clone());
        dev.hw_queues[st.hwq as usize]
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

    /// Bios the throttle (`io.max` limits) holds now: submitted, waiting
    /// for their group's or device's budget, not yet at the device. A
    /// caller that waits for them is waiting on its own limits, not on
    /// the device.
    pub fn throttled(&self) -> u32 {
        self.st.throttled.len() as u32
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
    /// merge into a plugged request needs no tag, but is not known here;
    /// a bio-based device takes none (its clones wait for the legs').
    pub fn has_room(&self) -> bool {
        let st = &self.st;
        if st.bioset.available() == 0 && st.in_flight > 0 {
            return false;
        }
        st.bio_q.is_some() || st.tags.has_cached(&st.tag_cache) || st.tags.has_free()
    }

    /// Completed bios waiting for [`Context::poll`].
    pub fn ready(&self) -> usize {
        self.st.ended.len()
    }

    /// Bios routed here whole from a bio-based device above
    /// ([`crate::bio_based::BioDriver::route`]) that ended and wait for
    /// the context above to take them back up: a driver keeps a lower
    /// context it takes out of its table (in
    /// [`crate::bio_based::BioDriver::lower_contexts`]) until this is 0
    /// and nothing is in flight.
    pub fn routed_ready(&self) -> usize {
        self.st.routed.len() + self.st.routed_nodes.len()
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

    /// Submit a bio built in place: `fill` sets up a blank bio (a read at
    /// offset 0, no segments, no flags) in a free slot, which the slot may
    /// have kept from a bio delivered earlier, so the bio is never moved
    /// (SPDK's `bdev_io` and io_uring's SQEs are filled where they lie).
    /// Otherwise as [`Context::submit`]; when every slot holds a completion
    /// the caller has not polled, the error carries the bio `fill` built.
    #[inline]
    pub fn submit_with(
        &mut self,
        fill: impl FnOnce(&mut Bio),
    ) -> std::result::Result<(), SubmitError> {
        match self.st.submit_with(&self.dev, fill) {
            Ok(()) => {
                self.st.kick_fd(&self.dev);
                Ok(())
            }
            Err(fill) => {
                let mut bio = Bio::at(crate::bio::Op::Read, 0);
                fill(&mut bio);
                Err(SubmitError::new(
                    self.st.unpolled_error(&self.dev, &bio),
                    bio,
                ))
            }
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
        self.st.quiet_fd();
        self.st.progress(&self.dev);
        let n = self.st.deliver(&self.dev, f);
        self.st.kick_fd(&self.dev);
        n
    }

    /// A request of this context's hardware queue that its driver holds
    /// past its timeout (a backend that does not answer), if one was named
    /// since the last call: its bio comes back when the driver lets go, but
    /// a caller may stop now. One relaxed load when there is none.
    #[inline]
    pub fn take_overdue(&self) -> Option<crate::request::Overdue> {
        self.dev.hw_queues[self.st.hwq as usize].take_overdue()
    }

    /// Like [`Context::poll`], but waits until at least `min` completions
    /// were delivered or nothing is left in flight. The wait is bounded by
    /// the request timeout plus a grace period (every request ends by its
    /// timeout): past it, this returns what was delivered.
    pub fn poll_wait(&mut self, min: usize, f: impl FnMut(Completion<'_>)) -> usize {
        self.poll_wait_bounded(min, Bound::Timeout, f)
    }

    /// [`Context::poll_wait`] that also returns once `limit` has passed,
    /// with what was delivered by then: for a loop that must notice a stop
    /// (a signal, a deadline) while its device does not answer.
    pub fn poll_wait_for(
        &mut self,
        min: usize,
        limit: std::time::Duration,
        f: impl FnMut(Completion<'_>),
    ) -> usize {
        self.poll_wait_bounded(min, Bound::For(limit), f)
    }

    #[inline]
    fn poll_wait_bounded(
        &mut self,
        min: usize,
        bound: Bound,
        mut f: impl FnMut(Completion<'_>),
    ) -> usize {
        let mut n = self.poll(&mut f);
        if n >= min || (self.st.in_flight == 0 && !self.st.has_deferred()) {
            return n;
        }
        self.st.reap_until(&self.dev, bound, |st, dev| {
            st.quiet_fd();
            st.progress(dev);
            let got = st.deliver(dev, &mut f);
            n += got;
            if n >= min || (st.in_flight == 0 && !st.has_deferred()) {
                Step::Done
            } else if got > 0 {
                Step::Progress
            } else {
                Step::Again
            }
        });
        self.st.kick_fd(&self.dev);
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

    /// Reap, and report whether slot `idx` is done; if not, say what will
    /// wake `waker` (see [`crate::future`]). `polls` counts the future's
    /// pending polls so far: only a driver with no interrupt line at all
    /// spins, and only for a bounded budget before it sleeps on the fd.
    pub(crate) fn check_waiter(
        &mut self,
        idx: u32,
        waker: &std::task::Waker,
        polls: u32,
    ) -> Waiting {
        let hq = &self.dev.hw_queues[self.st.hwq as usize];
        let notify = &hq.notify;
        let seen = notify.seq();
        if !self.st.bioset.is_ended(idx) {
            // The futures are the context's only pollers: quiet its fd as
            // `poll` does, so a sleeping future is woken by news only.
            self.st.quiet_fd();
            self.st.progress(&self.dev);
            // Orphans (futures dropped early) are freed here.
            self.st.deliver(&self.dev, |_| {});
        }
        if self.st.bioset.is_ended(idx) {
            return Waiting::Ready;
        }
        // Woken when the slot ends, by whichever future reaps it...
        let slot = self.st.bioset.waker_mut(idx);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
        let how = if self.dev.completes_async && !self.st.has_deferred() {
            // ...or when the driver's thread (or another context) signals
            // a completion on our hardware queue. A notify since `seen`
            // may have come before the subscription: look again.
            notify.subscribe_waker(waker);
            if notify.seq() != seen {
                waker.wake_by_ref();
            }
            Waiting::Subscribed {
                recheck: self.st.timeout_recheck(),
            }
        } else if hq.irq.is_none() && !self.st.has_deferred() && polls < SPIN_BUDGET {
            // A driver that completes only when polled, with no interrupt
            // line: poll again at once, for a while (as an SPDK reactor
            // does).
            waker.wake_by_ref();
            Waiting::Subscribed { recheck: None }
        } else {
            // ...or when the completion fd says a poll would make
            // progress: the driver's interrupt line, a throttled bio's
            // timer, or a stage ready to run.
            match self.st.completion_fd(&self.dev) {
                Ok(fd) => Waiting::OnFd(fd),
                Err(_) => {
                    waker.wake_by_ref();
                    Waiting::Subscribed { recheck: None }
                }
            }
        };
        self.st.kick_fd(&self.dev);
        if matches!(how, Waiting::OnFd(_)) {
            self.st.arm_timeout_wake();
        }
        how
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
            s => Err(bio.error(self.st.info(&self.dev), s)),
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
        let idx = self.idx;
        let ended = ctx.st.reap_until(dev, Bound::For(limit), |st, dev| {
            st.progress(dev);
            if st.bioset.is_ended(idx) {
                Step::Done
            } else {
                Step::Again
            }
        });
        if !ended {
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
        // Requests end by the timeout at the latest; a driver that keeps one
        // past it (its timeout handler resets the timer forever) gets the
        // grace period, then this context's slots are leaked, not freed
        // under it.
        let limit = Duration::from_millis(u64::from(st.timeout_ms.max(30_000))) + GRACE;
        let drained = st.reap_until(dev, Bound::For(limit), |st, dev| {
            st.reap(dev);
            st.process_deferred(dev);
            if st.in_flight > 0 || st.has_deferred() {
                Step::Again
            } else {
                Step::Done
            }
        });
        if !drained {
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
        }
        // Bios with end_io still get their call; the rest are dropped.
        st.deliver(dev, |_| {});
        st.tags.drain_cache(&mut st.tag_cache);
        st.release_fd(dev);
        for up in st.forwards.drain(..) {
            dev.hw_queues[st.hwq as usize].notify.unforward(&up);
        }
        state::seen_stats(&st.window, dev).retire(&st.stats, &st.hist);
        if let Some(p) = st.parts.take() {
            p.retire();
        }
        dev.ctl().contexts.retain(|c| !Arc::ptr_eq(c, &st.shared));
        dev.hw_queues[st.hwq as usize]
            .nr_ctx
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
