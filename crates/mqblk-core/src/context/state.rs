//! A context's state (Linux `struct blk_mq_ctx` with the task's plug and
//! tag cache), and the one word that says which stages apply to it.
//!
//! The bottom of `context/`: everything above reads and changes this
//! state, and nothing here calls up. The feature word is computed when the
//! context opens and again at the gate (after every freeze or
//! reconfiguration), so a stage that is off costs the hot path one bit
//! test of a word already in a register, as Linux's static keys and queue
//! flags make it.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::bio::Op;
use crate::bioset::BioSet;
use crate::bounce::BouncePool;
use crate::check::FastCheck;
use crate::clock;
use crate::flush::FlushMachine;
use crate::limits::{QueueInfo, QueueLimits};
use crate::plug::Plug;
use crate::queue::DeviceInner;
use crate::request::{RqOwner, RqRef};
use crate::sbitmap::AllocHint;
use crate::stats::{DeviceStats, Histograms, StatShard};
use crate::sw_queue::SwQueue;
use crate::sync::RemoteQueue;
use crate::tag::{TagCache, Tags};
use crate::throttle::Throttle;

/// The stages a context's I/O goes through besides the common path, one
/// bit each (see [`CtxState::feat`]).
pub(super) mod feat {
    /// The context is on a remapped view (a window of a lower device).
    pub(crate) const WINDOW: u32 = 1 << 0;
    /// The device has partitions: requests are accounted to them.
    pub(crate) const PARTS: u32 = 1 << 1;
    /// Bios are admitted by a throttle or an io.max limit.
    pub(crate) const ADMIT: u32 = 1 << 2;
    /// The hardware queues have an elevator.
    pub(crate) const SCHED: u32 = 1 << 3;
    /// Writes are bounded by the elevator's `async_depth`.
    pub(crate) const ASYNC_DEPTH: u32 = 1 << 4;
    /// Requests are timed and counted (`iostats`).
    pub(crate) const IOSTATS: u32 = 1 << 5;
    /// Requests gather in the plug before dispatch.
    pub(crate) const PLUG: u32 = 1 << 6;
    /// Every step is recorded for blktrace (the context has a recorder).
    /// It rides on tests the hot path makes anyway: the fused check's
    /// mask at submit, the elevator's test when a request is built, the
    /// partitions' test after a merge and the window's test where a bio
    /// ends; dispatch tests it once a batch. It shares their byte of the
    /// word, so each stays one byte test.
    pub(crate) const TRACE: u32 = 1 << 7;
    /// Merging is off (`nomerges=2`).
    pub(crate) const NOMERGES: u32 = 1 << 8;
    /// Only the plug's newest request is a merge candidate (`nomerges=1`).
    pub(crate) const MERGE_PLUG_ONLY: u32 = 1 << 9;
    /// Misaligned segments are bounced (otherwise refused).
    pub(crate) const BOUNCE: u32 = 1 << 10;
    /// The device is bio-based: checked, admitted bios go to its driver's
    /// `submit_bio` (see [`crate::bio_based`]), not to requests.
    pub(crate) const BIO_BASED: u32 = 1 << 11;
}

/// What a bio-based context keeps of a bio it has at its driver, in one
/// entry per slot, so a bio's start and its end each index one array
/// once (Linux keeps the like in dm's per-bio `struct dm_io`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BioIo {
    /// When the bio went to the driver (`iostats`).
    pub(super) start_ns: u64,
    /// Where a routed bio was on this device (its offset before the
    /// route).
    pub(super) from_bytes: u64,
    /// The driver's cookie for a routed bio.
    pub(super) cookie: u64,
}

pub(super) struct CtxState {
    /// The stages that apply (bits of [`feat`]).
    pub(super) feat: u32,
    /// The common bio's checks in one pass (see `submit_node`).
    pub(super) fast: FastCheck,
    pub(super) shared: Arc<RqOwner>,
    /// The gate word as this context last saw it.
    pub(super) gate_seen: u64,
    pub(super) id: u32,
    pub(super) hwq: u16,
    pub(super) tags: Arc<Tags>,
    pub(super) hint: AllocHint,
    pub(super) tag_cache: TagCache,
    /// Requests the last plug flush carried: the next batch of tags is
    /// sized to it (Linux sizes `plug->cached_rqs` by the submitter's
    /// count), so a caller that unplugs each request takes one tag, not a
    /// plug's worth to give back.
    pub(super) plug_last: u32,
    pub(super) bioset: BioSet,
    pub(super) plug: Plug,
    pub(super) sw: SwQueue,
    pub(super) done: Vec<RqRef>,
    pub(super) ended: VecDeque<u32>,
    pub(super) resubmit: Vec<u32>,
    pub(super) freed_tags: Vec<u32>,
    pub(super) stats: Arc<CachePadded<StatShard>>,
    pub(super) hist: Histograms,
    pub(super) timeout_ms: u32,
    /// This context's copy of the queue limits (refreshed after a freeze).
    pub(super) limits: QueueLimits,
    /// Copy of the control plane's `async_depth` (0: no limit). The writes
    /// it limits are counted on the hardware queue (`async_writes`).
    pub(super) async_depth: u32,
    pub(super) bounce: BouncePool,
    pub(super) flush: FlushMachine,
    /// Scratch lists for the flush machine (sized once, never grown).
    pub(super) seq_scratch: Vec<u32>,
    pub(super) failed: Vec<(u32, crate::error::Status)>,
    /// Clock of the current batch (0: not read yet).
    pub(super) batch_ns: u64,
    /// When the driver finished the request whose bios end now (traced
    /// devices only; 0: not stamped).
    pub(super) done_ns: u64,
    /// Requests this context built that have not ended yet.
    pub(super) in_flight: u32,
    /// The completion fd, once asked for.
    pub(super) efd: Option<Arc<crate::sync::EventFd>>,
    /// What the caller waits on: the eventfd and the throttle's timer.
    pub(super) fd_timer: Option<crate::sync::FdTimer>,
    /// This context made the eventfd readable and has not polled since.
    pub(super) fd_signalled: bool,
    /// The caller's own calls may make the completion fd readable
    /// (`Context::set_completion_fd_enabled`).
    pub(super) fd_enabled: bool,
    /// The hardware queue's interrupt lines reach whoever waits on this
    /// context (its completion fd watches them, or they are forwarded to
    /// a stacked queue above): requests in flight on a polled driver need
    /// not keep the eventfd readable.
    pub(super) irq_in_fd: bool,
    /// The completion fd's epoll set watches the hardware queue's lines.
    pub(super) lines_watched: bool,
    /// The lines of the stacked queue above that this context's own fds
    /// and its queue's lines were put in ([`crate::Context::forward_irq_lines`]).
    pub(super) lent: Option<crate::irq::IrqLines>,
    /// This context has bounced a segment already (it is said once).
    pub(super) bounced_once: bool,
    /// This context's bio throttle, if the device has one.
    pub(super) throttle: Option<Box<dyn Throttle>>,
    /// Hardware queues of stacked devices told of this queue's notifies.
    pub(super) forwards: Vec<crate::sync::Arc<crate::sync::Notify>>,
    /// Bios the throttle holds back, with the time each may go, in order.
    pub(super) throttled: VecDeque<(u64, u32)>,
    /// The priority this context's requests carry, if set on the context
    /// (otherwise its group's).
    pub(super) ioprio: Option<crate::ioprio::IoPrio>,
    /// The group this context is in.
    pub(super) group: crate::blkcg::Membership,
    /// The window, for a context opened on a remapped view.
    pub(super) window: Option<Arc<crate::remap::View>>,
    /// Where the window starts on the lower device, in bytes (0 with no
    /// window): the one add of the shift, kept here so the hot path
    /// reads no `View`.
    pub(super) window_start_bytes: u64,
    /// The device's partitions, with this context's shards and last hit
    /// (`None`: the device has none).
    pub(super) parts: Option<crate::partition::CtxParts>,
    /// This context's blktrace recorder, while the device is traced.
    pub(super) trace: Option<crate::blktrace::Recorder>,
    /// The device and sector above that the bio being submitted comes
    /// from (`Context::submit_remapped`), for the trace's A event.
    pub(super) remap_from: Option<(crate::blktrace::DevNum, u64)>,
    /// A bio-based device's queue for this context (see
    /// [`crate::bio_based`]), opened with the context.
    pub(super) bio_q: Option<Box<dyn crate::bio_based::BioQueueOps>>,
    /// Bios the bio-based driver ended, to be ended here (sized to the
    /// bio set, never grown).
    pub(super) bio_ended: Vec<(u32, crate::error::Status)>,
    /// Bios the bio-based driver asked to be handed again later.
    pub(super) bio_requeued: Vec<u32>,
    /// Bios went to the bio-based driver since its last unplug.
    pub(super) bio_plugged: bool,
    /// What this context keeps of each bio it has at its bio-based driver,
    /// by slot.
    pub(super) bio_io: Box<[BioIo]>,
    /// The driver routes whole bios to lower contexts
    /// ([`crate::bio_based::BioDriver::route`]).
    pub(super) routes: bool,
    /// Bios of this context routed to lower contexts and not yet taken
    /// back up.
    pub(super) routed_out: u32,
    /// Routed bios taken back up, to end here (sized to the bio set).
    pub(super) routed_ended: Vec<(u32, crate::error::Status)>,
    /// Slots of bios routed here from a device above that have ended,
    /// for the context above to take back (sized to the bio set).
    pub(super) routed: Vec<u32>,
    /// Slots of a context above that went into requests here themselves
    /// (`CtxState::take_routed_node`), ended, with their status, for the
    /// context above to take back.
    pub(super) routed_nodes: Vec<(NonNull<crate::bioset::BioNode>, crate::error::Status)>,
    /// Clones (slots of a clone set above) that went into requests here
    /// (`Context::route_clone`), ended, with their status, for their set
    /// to take back (sized to the largest set that sent here).
    pub(super) clone_ends: Vec<(NonNull<crate::bioset::BioNode>, crate::error::Status)>,
}

impl CtxState {
    /// A context's state, sized once: the bio set, lists and scratch
    /// space never grow after this. Control plane.
    pub(super) fn new(
        dev: &DeviceInner,
        id: u32,
        window: Option<Arc<crate::remap::View>>,
        group: Arc<crate::blkcg::Group>,
    ) -> CtxState {
        // Linux blk_mq_map_queues: contexts round-robin over hardware queues.
        let hwq = (id as usize % dev.hw_queues.len()) as u16;
        let tags = dev.tags[hwq as usize].clone();
        let total = tags.total() as usize;
        let bioset_size = match dev.cfg.bioset_size {
            0 => (2 * total + dev.cfg.plug_max as usize).max(64),
            n => n as usize,
        };
        let stats = seen_stats(&window, dev).register();
        let mut st = CtxState {
            feat: 0,
            fast: FastCheck::default(),
            shared: Arc::new(RqOwner {
                remote: RemoteQueue::new(total),
                in_flight: CachePadded::new(std::sync::atomic::AtomicU32::new(0)),
            }),
            gate_seen: u64::MAX,
            id,
            hwq,
            hint: AllocHint::new(id),
            tag_cache: TagCache::default(),
            plug_last: 0,
            bioset: BioSet::new(bioset_size as u32),
            plug: Plug::new(dev.cfg.plug_max),
            sw: SwQueue::new(total),
            done: Vec::with_capacity(total),
            ended: VecDeque::with_capacity(bioset_size),
            resubmit: Vec::with_capacity(bioset_size),
            freed_tags: Vec::with_capacity(total),
            stats,
            hist: Histograms::new(),
            timeout_ms: dev.cfg.timeout_ms,
            limits: dev.info.limits,
            async_depth: 0,
            bounce: BouncePool::new(dev.buf_pool.align()),
            flush: FlushMachine::new(bioset_size),
            seq_scratch: Vec::with_capacity(bioset_size),
            failed: Vec::with_capacity(bioset_size),
            batch_ns: 0,
            done_ns: 0,
            in_flight: 0,
            efd: None,
            fd_timer: None,
            fd_signalled: false,
            fd_enabled: true,
            irq_in_fd: false,
            lines_watched: false,
            lent: None,
            bounced_once: false,
            throttle: dev.cfg.throttle.as_ref().map(|t| t.for_context(id)),
            forwards: Vec::new(),
            throttled: VecDeque::with_capacity(bioset_size),
            ioprio: None,
            group: crate::blkcg::Membership::join(group),
            window_start_bytes: window.as_ref().map_or(0, |w| w.start_bytes),
            window,
            // Filled in at the gate, which every context passes first.
            parts: None,
            trace: None,
            remap_from: None,
            bio_q: None,
            bio_ended: Vec::new(),
            bio_requeued: Vec::new(),
            bio_plugged: false,
            bio_io: Box::new([]),
            routes: false,
            routed_out: 0,
            routed_ended: Vec::new(),
            routed: Vec::with_capacity(bioset_size),
            routed_nodes: Vec::new(),
            clone_ends: Vec::new(),
            tags,
        };
        st.refresh(dev);
        // The first bio passes the gate all the same: the queue may be
        // frozen right now, and then it must wait there.
        st.gate_seen = u64::MAX;
        st
    }

    /// Take a fresh copy of the control plane's settings, and compute the
    /// feature word from them (at open, and at the gate after a freeze or
    /// a reconfiguration).
    pub(super) fn refresh(&mut self, dev: &DeviceInner) {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        let ctl = dev.ctl();
        self.gate_seen = dev.gate.load(Acquire);
        self.limits = ctl.limits;
        // On a view, the window's capacity and read-only flag: its bios
        // are checked against the window in the one fused pass.
        self.fast = FastCheck::new(seen_info(&self.window, dev), &self.limits);
        if dev.bio.is_some() {
            self.fast = self.fast.any_size();
        }
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
        self.refresh_trace(ctl.trace.as_ref());
        let on = |cond: bool, bit: u32| if cond { bit } else { 0 };
        // io.max limits set after this pass bump the gate, so the next
        // submission comes back here (see `IoMax::set_limits`).
        let admit = self.throttle.is_some() || dev.qos_active.load(Relaxed) != 0;
        self.feat = on(self.window.is_some(), feat::WINDOW)
            | on(self.parts.is_some(), feat::PARTS)
            | on(admit, feat::ADMIT)
            | on(ctl.elevator, feat::SCHED)
            | on(ctl.elevator && ctl.async_depth != 0, feat::ASYNC_DEPTH)
            | on(dev.cfg.iostats, feat::IOSTATS)
            | on(ctl.plug, feat::PLUG)
            | on(dev.cfg.bounce, feat::BOUNCE)
            | on(ctl.nomerges >= 2, feat::NOMERGES)
            | on(ctl.nomerges == 1, feat::MERGE_PLUG_ONLY)
            | on(self.trace.is_some(), feat::TRACE)
            | on(dev.bio.is_some(), feat::BIO_BASED);
    }

    /// Open this context's queue on a bio-based device (see
    /// [`crate::bio_based`]). Control plane.
    pub(super) fn open_bio_queue(&mut self, dev: &DeviceInner) -> crate::error::Result<()> {
        let Some(opener) = &dev.bio else {
            return Ok(());
        };
        let hq = &dev.hw_queues[self.hwq as usize];
        let slots = self.bioset.capacity() as u32;
        self.bio_q = Some(opener.open(crate::bio_based::BioQueueSetup {
            ctx: self.id,
            hwq: self.hwq,
            notifier: crate::completion::HwNotifier(hq.notify.clone()),
            irq_lines: hq.irq.clone().unwrap_or_default(),
            devnum: dev.devnum,
            slots,
        })?);
        self.bio_ended = Vec::with_capacity(slots as usize);
        self.bio_requeued = Vec::with_capacity(slots as usize);
        self.bio_io = vec![BioIo::default(); slots as usize].into_boxed_slice();
        self.routes = self.bio_q.as_ref().is_some_and(|q| q.routes());
        if self.routes {
            self.routed_ended = Vec::with_capacity(slots as usize);
        }
        Ok(())
    }

    /// Start or stop recording as the device's trace session says (a
    /// session started or stopped since the context last looked): a new
    /// session gets a recorder (its file and ring made here, off the
    /// I/O path); an old one's recorder writes out what it holds and
    /// closes its file.
    fn refresh_trace(&mut self, want: Option<&Arc<crate::blktrace::BlkTrace>>) {
        let same = match (&self.trace, want) {
            (Some(r), Some(t)) => t.owns(r),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        self.trace = None;
        if let Some(t) = want {
            match t.recorder() {
                Ok(r) => self.trace = Some(r),
                Err(e) => eprintln!(
                    "mqblk: blktrace: context {} cannot trace into {}: {e}; it runs untraced",
                    self.id,
                    t.dir().display()
                ),
            }
        }
    }

    /// True if stage `bit` (of [`feat`]) applies.
    #[inline(always)]
    pub(super) fn on(&self, bit: u32) -> bool {
        self.feat & bit != 0
    }

    /// What this context's bios are checked against and errors name: the
    /// device's, or its view's.
    #[inline]
    pub(super) fn info<'a>(&'a self, dev: &'a DeviceInner) -> &'a QueueInfo {
        seen_info(&self.window, dev)
    }

    /// The stats this context's requests go to: the device's, or its
    /// view's.
    #[inline]
    pub(super) fn dstats<'a>(&'a self, dev: &'a DeviceInner) -> &'a DeviceStats {
        seen_stats(&self.window, dev)
    }

    /// Linux blk_partition_remap, for a context on a remapped view: a user
    /// bio, once checked against the window, is aimed at the lower device
    /// (`back == false`, at submit); where every user bio ends, failed or
    /// not, it is aimed back (`back == true`). Flushes have no offset.
    /// One compare and one add: on the common path of a window.
    #[inline(always)]
    pub(super) fn shift(&mut self, idx: u32, back: bool) {
        let start = self.window_start_bytes;
        if let Some(b) = self.bioset.node_mut(idx).bio.as_mut() {
            if b.op() != Op::Flush {
                let off = if back {
                    b.offset_bytes().wrapping_sub(start)
                } else {
                    b.offset_bytes().wrapping_add(start)
                };
                b.set_offset_bytes(off);
            }
        }
    }

    #[inline]
    pub(super) fn shared_ptr(&self) -> NonNull<RqOwner> {
        NonNull::from(&*self.shared)
    }

    /// The clock of the current submission batch: read once per batch,
    /// when the batch's first request starts. That is also when the
    /// device's busy time is brought up to date (Linux `update_io_ticks`
    /// in `blk_account_io_start`): the batch's other requests start at the
    /// same millisecond, where it would do nothing.
    #[inline(always)]
    pub(super) fn batch_start(&mut self, dev: &DeviceInner) -> u64 {
        if self.batch_ns == 0 {
            self.batch_ns = clock::now_ns();
            self.dstats(dev)
                .update_io_ticks(self.batch_ns / 1_000_000, false);
        }
        self.batch_ns
    }

    /// Work this context owes that no request in flight will bring back:
    /// flush-sequence stages and throttled bios.
    #[inline]
    pub(super) fn has_deferred(&self) -> bool {
        self.flush.has_work() || !self.throttled.is_empty() || !self.bio_requeued.is_empty()
    }

    /// How long until the first throttled bio may go (None: none waits).
    pub(super) fn throttle_wait(&self) -> Option<std::time::Duration> {
        let &(at, _) = self.throttled.front()?;
        Some(std::time::Duration::from_nanos(
            at.saturating_sub(clock::now_ns()),
        ))
    }
}

/// The queue facts a context sees: its window's, or the device's.
#[inline]
pub(super) fn seen_info<'a>(
    window: &'a Option<Arc<crate::remap::View>>,
    dev: &'a DeviceInner,
) -> &'a QueueInfo {
    match window {
        None => &dev.info,
        Some(w) => &w.info,
    }
}

/// The stats a context's requests count in: its window's, or the device's.
#[inline]
pub(super) fn seen_stats<'a>(
    window: &'a Option<Arc<crate::remap::View>>,
    dev: &'a DeviceInner,
) -> &'a DeviceStats {
    match window {
        None => &dev.stats,
        Some(w) => &w.stats,
    }
}
