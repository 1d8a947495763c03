//! The stacked driver, bio-based (Linux dm core's `dm_submit_bio`, the
//! default for linear, striped and mirror): a bio of the stacked device is
//! mapped in the submitting context, and its pieces go to the legs as
//! clone bios that view its memory, submitted to this context's own
//! context on each leg (opened on first use). Requests form only on the
//! legs: the stacked device has no tags, software or hardware queue of its
//! own in the path. The bio ends when its last clone has (a remaining
//! count, as Linux's `bio_inc_remaining` and `bio_chain` keep).
//!
//! State per context of the stacked device, reached only through `&mut`:
//! its leg contexts, the remaining count of each bio by slot, and a slot
//! per clone in flight. Nothing is shared with another context, and
//! nothing is allocated once warm.

use mqblk_core::bio_based::{BioDriver, BioEnds, BioQueueSetup, BioRef, Lower, Routed};
use mqblk_core::clone_set::CloneSet;
use mqblk_core::driver::{Error, Features, HwNotifier, IrqLines, Op, QueueLimits, Status};
use mqblk_core::{Bio, Context};

use crate::held::Held;
use crate::legs::LegId;
use crate::map::{end_action, fold, Line, Mapper, Plan};
use crate::stacked::Stacked;
use crate::target::target_type::{EndAction, Io, Target};
use crate::target::{Mirror, MirrorReads, MirrorWrites, StripeMap, Striped, WriteLegs};

/// The bio-based driver of a stacked device: the table, legs and limits
/// the request-based driver has, mapped per bio instead of per request.
pub(crate) struct BioStacked {
    pub(crate) stack: Stacked,
    /// A leg has interrupt lines (a polled device a context sleeps on).
    pub(crate) lines_below: bool,
    /// A line may route a write ([`Target::route`]: not a mirror's).
    pub(crate) routes_writes: bool,
    /// The table is one line from sector 0 whose target routes by
    /// arithmetic on data it can hand out (a stripe's geometry, a
    /// mirror's read turns): kept here, so a bio is routed inline, with
    /// no call through the target.
    pub(crate) fast: Option<FastRoute>,
    /// The table is one mirror line from sector 0: its writes are mapped
    /// inline, and its write children ended inline.
    pub(crate) fast_writes: Option<MirrorWrites>,
}

/// The route of a one-line table whose target routes by arithmetic on
/// data it can hand out, kept by the driver to route inline, with no call
/// through the target: the same code the target's own
/// [`Target::route`](crate::target::Target::route) runs.
#[derive(Clone, Debug)]
pub(crate) enum FastRoute {
    /// A stripe's chunks (`striped`).
    Stripe(StripeMap),
    /// A mirror's reads, each to one live leg in turn (`mirror`).
    MirrorRead(MirrorReads),
}

impl FastRoute {
    /// The inline writes of `target`, if it is a mirror.
    pub(crate) fn writes_of(target: &dyn Target) -> Option<MirrorWrites> {
        let m = target.as_any()?.downcast_ref::<Mirror>()?;
        Some(m.writes())
    }

    /// The fast route of `target`, if it has one.
    pub(crate) fn of(target: &dyn Target) -> Option<FastRoute> {
        let any = target.as_any()?;
        if let Some(s) = any.downcast_ref::<Striped>() {
            return Some(FastRoute::Stripe(s.geometry().clone()));
        }
        any.downcast_ref::<Mirror>()
            .map(|m| FastRoute::MirrorRead(m.reads()))
    }

    /// As [`Target::route`](crate::target::Target::route).
    #[inline(always)]
    fn route(&self, op: Op, offset_bytes: u64, len_bytes: u64, hwq: u16) -> Option<(LegId, u64)> {
        match self {
            FastRoute::Stripe(m) => m.route(offset_bytes, len_bytes),
            FastRoute::MirrorRead(m) => m.route(op, offset_bytes, len_bytes, hwq),
        }
    }
}

/// A context on a leg, opened on first use.
// One per leg, in a vector: a box would cost an indirection per clone.
#[allow(clippy::large_enum_variant)]
enum LegCtx {
    /// Not sent to yet from this context.
    Closed,
    Open(Context),
    /// The leg is out of the table, or its context could not be opened.
    Out,
}

/// What a bio waits for: its clones in flight (plus one while they are
/// being sent), and the first error among them.
#[derive(Clone, Copy)]
struct Remaining {
    pending: u32,
    status: Status,
}

/// A clone in flight.
#[derive(Clone, Copy)]
struct ClonedIo {
    /// The bio's slot on the stacked device.
    tag: u32,
    line: u32,
    leg: LegId,
    io: Io,
}

/// One context's state on a bio-based stacked device.
pub(crate) struct DmQueue {
    /// The hardware queue of the context, which targets that balance
    /// (a mirror's reads) are told.
    who: u16,
    /// The stacked device's number, which the legs' traces name as where
    /// a clone came from.
    devnum: mqblk_core::DevNum,
    notifier: HwNotifier,
    /// The lines the context's completion fd watches: a leg context on a
    /// polled device forwards its own here.
    irq: IrqLines,
    generation: u64,
    legs: Vec<LegCtx>,
    /// Legs sent to since the last unplug.
    touched: Vec<bool>,
    /// By the bio's slot.
    remaining: Box<[Remaining]>,
    clones: Vec<ClonedIo>,
    free: Vec<u32>,
    mapper: Mapper,
    /// Clones to send again, to another leg.
    retry: Vec<(u32, Bio)>,
    held: Held,
    /// Leg contexts taken out of the table (a leg replaced) that still
    /// hold routed bios the context above has not taken back up.
    retired: Vec<Context>,
    /// Slots for clones put into the legs' requests themselves (a
    /// mirror's writes), each naming its entry in `clones`. After the
    /// leg contexts: dropped once they have drained.
    clone_set: CloneSet,
}

impl BioStacked {
    /// The context on `leg`, opened now if this is the first use.
    #[inline(always)]
    fn leg_ctx<'q>(&self, q: &'q mut DmQueue, leg: usize) -> Option<&'q mut Context> {
        if !matches!(q.legs.get(leg), Some(LegCtx::Open(_))) {
            self.open_closed_leg(q, leg);
        }
        match q.legs.get_mut(leg) {
            Some(LegCtx::Open(c)) => Some(c),
            _ => None,
        }
    }

    /// Open the context on `leg` if this context has not sent to it yet.
    #[cold]
    #[inline(never)]
    fn open_closed_leg(&self, q: &mut DmQueue, leg: usize) {
        if matches!(q.legs.get(leg), Some(LegCtx::Closed)) {
            q.legs[leg] = self.open_leg(leg, &q.notifier, &q.irq);
        }
    }

    #[cold]
    fn open_leg(&self, leg: usize, notifier: &HwNotifier, irq: &IrqLines) -> LegCtx {
        let Some(dev) = self.stack.legs.get(leg as LegId) else {
            return LegCtx::Out;
        };
        let open = || -> Result<Context, Error> {
            let mut ctx = dev.context()?;
            ctx.forward_completions(notifier);
            if dev.has_irq_lines() {
                ctx.forward_irq_lines(irq)?;
            }
            Ok(ctx)
        };
        match open() {
            Ok(c) => LegCtx::Open(c),
            Err(e) => {
                eprintln!("mqblk: {}: leg {leg}: {e}", self.stack.name);
                LegCtx::Out
            }
        }
    }

    /// Pick up legs added, replaced or taken out since this context last
    /// looked. An old leg context is drained first, so no clone is lost.
    #[cold]
    fn refresh(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) {
        q.generation = self.stack.legs.generation();
        let now = self.stack.legs.all();
        for (i, dev) in now.iter().enumerate() {
            if i >= q.legs.len() {
                q.legs.push(LegCtx::Closed);
                q.touched.push(false);
            }
            let same = match (&q.legs[i], dev) {
                (LegCtx::Open(c), Some(d)) => c.device().same(d),
                (LegCtx::Open(_), None) => false,
                (_, Some(_)) => matches!(q.legs[i], LegCtx::Closed),
                (_, None) => matches!(q.legs[i], LegCtx::Out),
            };
            if same {
                continue;
            }
            if let LegCtx::Open(mut old) = std::mem::replace(&mut q.legs[i], LegCtx::Closed) {
                // Clones still plugged, in flight, or ended and not yet
                // polled: all end here.
                old.unplug();
                loop {
                    let DmQueue {
                        clones,
                        free,
                        remaining,
                        retry,
                        ..
                    } = &mut *q;
                    old.poll_wait(1, |c| {
                        end_clone(
                            &self.stack.lines,
                            self.fast_writes.as_ref(),
                            clones,
                            free,
                            remaining,
                            retry,
                            ends,
                            c,
                        );
                    });
                    if old.in_flight() == 0 && old.ready() == 0 {
                        break;
                    }
                }
                // Clones put into its requests have ended too: back to
                // the set before it goes.
                self.take_clones(q, i, Some(&mut old), ends);
                // Bios routed whole to the old leg have ended too; they
                // wait there for the context above to take them up.
                if old.routed_ready() > 0 {
                    q.retired.push(old);
                }
            }
            q.legs[i] = if dev.is_some() {
                LegCtx::Closed
            } else {
                LegCtx::Out
            };
        }
        self.send_retries(q, ends);
    }

    /// Where clone `c` comes from on this device, for the leg's trace.
    #[inline]
    fn sector_above(&self, c: &ClonedIo) -> u64 {
        match c.io.op {
            Op::Flush => 0,
            _ => (self.stack.lines[c.line as usize].start + c.io.offset_bytes) >> 9,
        }
    }

    /// Send a new clone (slot `slot`, planned as `p`) of `parent` to its
    /// leg, built in place in a slot of the leg's context; a clone that
    /// cannot be sent ends with an error, which its target hears of (a
    /// mirror tries another leg).
    #[inline]
    fn send_clone(
        &self,
        q: &mut DmQueue,
        slot: u32,
        parent: &BioRef<'_>,
        p: &Plan,
        ends: &mut BioEnds<'_>,
    ) {
        let c = q.clones[slot as usize];
        let leg = c.leg as usize;
        let from = self.sector_above(&c);
        let devnum = q.devnum;
        let fill = |b: &mut Bio| {
            // SAFETY: the bio is ended only through `finish`, when its
            // remaining count reaches zero: after every clone has ended
            // (`end_clone` runs inside a leg context's poll, which lets go
            // of the clone right after) or failed to be sent (dropped in
            // `clone_failed`), and `submit_bio` holds one count until all
            // are sent. The pieces of one bio are disjoint, except a
            // mirror's copies of a write, which only read the memory;
            // zeros were filled when it was mapped, before any clone.
            unsafe { parent.clone_range_into(b, p.io_offset, p.io.len_bytes, p.leg_offset) };
            b.private = u64::from(slot);
        };
        let Some(ctx) = self.leg_ctx(q, leg) else {
            let mut bio = Bio::at(Op::Read, 0);
            fill(&mut bio);
            self.clone_failed(q, slot, bio, ends);
            return;
        };
        match ctx.submit_remapped_with(fill, devnum, from) {
            Ok(()) => q.touched[leg] = true,
            Err(fill) => {
                let mut bio = Bio::at(Op::Read, 0);
                fill(&mut bio);
                self.send_again(q, slot, bio, ends);
            }
        }
    }

    /// Send `bio` (clone slot `slot`: one held back, or retried on another
    /// leg) to its leg; a clone that cannot be sent ends with an error,
    /// which its target hears of.
    fn send(&self, q: &mut DmQueue, slot: u32, bio: Bio, ends: &mut BioEnds<'_>) {
        let c = q.clones[slot as usize];
        let leg = c.leg as usize;
        let from = self.sector_above(&c);
        let devnum = q.devnum;
        let Some(ctx) = self.leg_ctx(q, leg) else {
            self.clone_failed(q, slot, bio, ends);
            return;
        };
        match ctx.submit_remapped(bio, devnum, from) {
            Ok(()) => q.touched[leg] = true,
            Err(e) => self.send_again(q, slot, e.into_bio(), ends),
        }
    }

    /// The leg's context is full of completions nobody polled: reap them
    /// here and try once more.
    #[cold]
    fn send_again(&self, q: &mut DmQueue, slot: u32, bio: Bio, ends: &mut BioEnds<'_>) {
        let c = q.clones[slot as usize];
        let leg = c.leg as usize;
        let from = self.sector_above(&c);
        let devnum = q.devnum;
        self.reap_leg(q, leg, ends);
        let Some(ctx) = self.leg_ctx(q, leg) else {
            self.clone_failed(q, slot, bio, ends);
            return;
        };
        match ctx.submit_remapped(bio, devnum, from) {
            Ok(()) => q.touched[leg] = true,
            Err(e) => self.clone_failed(q, slot, e.into_bio(), ends),
        }
    }

    /// A clone that could not be sent: its target decides, as for a clone
    /// that ended with an I/O error.
    fn clone_failed(&self, q: &mut DmQueue, slot: u32, mut bio: Bio, ends: &mut BioEnds<'_>) {
        let c = q.clones[slot as usize];
        match end_action(&self.stack.lines, c.line, c.leg, &c.io, Status::IoError) {
            EndAction::Done(s) => {
                drop(bio);
                q.free.push(slot);
                finish(&mut q.remaining, c.tag, s, ends);
            }
            EndAction::Retry { leg, offset_bytes } => {
                bio.set_offset_bytes(offset_bytes);
                q.clones[slot as usize].leg = leg;
                q.retry.push((slot, bio));
            }
        }
    }

    fn reap_leg(&self, q: &mut DmQueue, leg: usize, ends: &mut BioEnds<'_>) -> usize {
        let DmQueue {
            legs,
            clones,
            free,
            remaining,
            retry,
            ..
        } = q;
        let mut n = 0;
        if let Some(LegCtx::Open(ctx)) = legs.get_mut(leg) {
            let fast_writes = self.fast_writes.as_ref();
            ctx.poll(|c| {
                n += end_clone(
                    &self.stack.lines,
                    fast_writes,
                    clones,
                    free,
                    remaining,
                    retry,
                    ends,
                    c,
                )
            });
        }
        n
    }

    fn send_retries(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) {
        while let Some((slot, bio)) = q.retry.pop() {
            self.send(q, slot, bio, ends);
        }
    }

    /// Send the held clones that are due, and unplug what they went to.
    fn send_due(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) {
        if q.held.is_empty() {
            return;
        }
        let now = mqblk_core::clock::now_ns();
        let mut sent = false;
        while let Some((slot, bio)) = q.held.take_due(now) {
            self.send(q, slot, bio, ends);
            sent = true;
        }
        if sent {
            self.unplug_legs(q);
        }
    }

    fn unplug_legs(&self, q: &mut DmQueue) {
        for (ctx, t) in q.legs.iter_mut().zip(q.touched.iter_mut()) {
            if std::mem::take(t) {
                if let LegCtx::Open(c) = ctx {
                    c.unplug();
                }
            }
        }
    }

    /// A one-line mirror's write mapped inline ([`MirrorWrites::map`]):
    /// a clone to each live leg, as the generic map would plan them. False,
    /// with nothing sent, for a write the generic map must take.
    #[inline]
    fn submit_write_inline(
        &self,
        w: &MirrorWrites,
        q: &mut DmQueue,
        bio: &BioRef<'_>,
        ends: &mut BioEnds<'_>,
    ) -> bool {
        let b = bio.bio();
        let io = Io {
            op: Op::Write,
            flags: b.flags(),
            offset_bytes: b.offset_bytes(),
            len_bytes: b.len_bytes(),
        };
        let mut to = WriteLegs::default();
        if !w.map(io.offset_bytes, io.len_bytes, &mut to) {
            return false;
        }
        let tag = bio.tag();
        // One count per clone, plus this call's own (as `submit_bio`).
        q.remaining[tag as usize] = Remaining {
            pending: to.n as u32 + 1,
            status: Status::Ok,
        };
        for &(leg, leg_offset) in &to.legs[..to.n] {
            let slot = Self::alloc_clone(
                q,
                ClonedIo {
                    tag,
                    line: 0,
                    leg,
                    io,
                },
            );
            if self.send_clone_node(q, slot, bio, leg_offset, io.len_bytes) {
                continue;
            }
            let p = Plan {
                line: 0,
                leg,
                leg_offset,
                io_offset: 0,
                io,
                delay_ns: 0,
            };
            self.send_clone(q, slot, bio, &p, ends);
        }
        finish(&mut q.remaining, tag, Status::Ok, ends);
        if !q.retry.is_empty() {
            self.send_retries(q, ends);
        }
        true
    }

    /// Send clone `slot` (the whole of `parent`, `len_bytes`, at
    /// `leg_offset` of its leg, which this context has open) in a slot of
    /// the clone set, into a request of the leg itself. False, with
    /// nothing sent, if the leg is not open yet, the set is full or the
    /// leg cannot take it so: send it the usual way then.
    #[inline]
    fn send_clone_node(
        &self,
        q: &mut DmQueue,
        slot: u32,
        parent: &BioRef<'_>,
        leg_offset: u64,
        len_bytes: u64,
    ) -> bool {
        let leg = q.clones[slot as usize].leg as usize;
        let DmQueue {
            legs,
            touched,
            clone_set,
            ..
        } = q;
        let Some(LegCtx::Open(ctx)) = legs.get_mut(leg) else {
            return false;
        };
        // SAFETY: as in `send_clone`: the bio ends only once its remaining
        // count is zero, after this clone is taken back from the set
        // (`take_clones`, from a poll, or the refresh that drains a leg
        // before it lets go of it); a mirror's copies of a write only
        // read the memory. The leg context is kept until it has drained,
        // and the set is dropped after the leg contexts.
        let sent =
            unsafe { clone_set.send(parent, 0, len_bytes, leg_offset, u64::from(slot), ctx) };
        if sent {
            touched[leg] = true;
        }
        sent
    }

    /// Take back the clones of the set that ended on `leg` (or on `ctx`,
    /// a leg context being let go), and end them. Returns how many bios
    /// that ended.
    fn take_clones(
        &self,
        q: &mut DmQueue,
        leg: usize,
        old: Option<&mut Context>,
        ends: &mut BioEnds<'_>,
    ) -> usize {
        let DmQueue {
            legs,
            clones,
            free,
            remaining,
            clone_set,
            ..
        } = q;
        if clone_set.in_flight() == 0 {
            return 0;
        }
        let ctx = match old {
            Some(c) => c,
            None => match legs.get_mut(leg) {
                Some(LegCtx::Open(c)) => c,
                _ => return 0,
            },
        };
        let mut n = 0;
        let fast_writes = self.fast_writes.as_ref();
        clone_set.take_ended(ctx, |private, status| {
            let slot = private as u32;
            let clone = &clones[slot as usize];
            let tag = clone.tag;
            // Only writes go in the set, and a write child's end is never
            // a retry: should one be, the bio ends with the child's error.
            let s = match clone_action(&self.stack.lines, fast_writes, clone, status) {
                EndAction::Done(s) => s,
                EndAction::Retry { .. } => status,
            };
            free.push(slot);
            n += finish(remaining, tag, s, ends);
        });
        n
    }

    fn alloc_clone(q: &mut DmQueue, c: ClonedIo) -> u32 {
        match q.free.pop() {
            Some(s) => {
                q.clones[s as usize] = c;
                s
            }
            None => {
                q.clones.push(c);
                (q.clones.len() - 1) as u32
            }
        }
    }
}

/// A clone's completion: ask its target, then end the clone or queue it
/// for another leg. Returns 1 if it ended its bio.
#[allow(clippy::too_many_arguments)]
fn end_clone(
    lines: &[Line],
    fast_writes: Option<&MirrorWrites>,
    clones: &mut [ClonedIo],
    free: &mut Vec<u32>,
    remaining: &mut [Remaining],
    retry: &mut Vec<(u32, Bio)>,
    ends: &mut BioEnds<'_>,
    c: mqblk_core::Completion<'_>,
) -> usize {
    let slot = c.private() as u32;
    let clone = &clones[slot as usize];
    let tag = clone.tag;
    match clone_action(lines, fast_writes, clone, c.status()) {
        EndAction::Done(s) => {
            // The clone stays in the leg context's slot, which lets go of
            // it as soon as this returns; the bio is ended later, once
            // the driver's call returns to the core.
            let _ = c;
            free.push(slot);
            finish(remaining, tag, s, ends)
        }
        EndAction::Retry { leg, offset_bytes } => {
            let mut bio = c.into_bio();
            bio.set_offset_bytes(offset_bytes);
            clones[slot as usize].leg = leg;
            retry.push((slot, bio));
            0
        }
    }
}

/// What the target says of `clone`, ended with `status`.
#[inline(always)]
fn clone_action(
    lines: &[Line],
    fast_writes: Option<&MirrorWrites>,
    clone: &ClonedIo,
    status: Status,
) -> EndAction {
    match fast_writes {
        // A one-line mirror: a write child's end is the mirror's, inline.
        Some(w) if !matches!(clone.io.op, Op::Read | Op::Flush) => {
            EndAction::Done(w.child_ended(clone.io.offset_bytes, clone.leg, status))
        }
        _ => end_action(lines, clone.line, clone.leg, &clone.io, status),
    }
}

/// One clone of bio `tag` ended with `status`. Returns 1 if it was the
/// last.
#[inline]
fn finish(remaining: &mut [Remaining], tag: u32, status: Status, ends: &mut BioEnds<'_>) -> usize {
    let r = &mut remaining[tag as usize];
    fold(&mut r.status, status);
    debug_assert!(r.pending > 0, "a clone of a bio that is not waiting");
    r.pending -= 1;
    if r.pending > 0 {
        return 0;
    }
    ends.end(tag, r.status);
    1
}

impl BioDriver for BioStacked {
    type Queue = DmQueue;

    fn open_queue(&self, setup: BioQueueSetup) -> Result<DmQueue, Error> {
        let legs = self.stack.legs.all();
        let slots = setup.slots as usize;
        let held = Held::new(
            &self.stack.name,
            self.lines_below.then_some(&setup.irq_lines),
        )?;
        Ok(DmQueue {
            who: setup.hwq,
            devnum: setup.devnum,
            notifier: setup.notifier,
            irq: setup.irq_lines,
            generation: self.stack.legs.generation(),
            legs: legs
                .iter()
                .map(|d| match d {
                    Some(_) => LegCtx::Closed,
                    None => LegCtx::Out,
                })
                .collect(),
            touched: vec![false; legs.len()],
            remaining: vec![
                Remaining {
                    pending: 0,
                    status: Status::Ok,
                };
                slots
            ]
            .into_boxed_slice(),
            clones: Vec::with_capacity(slots * 2),
            free: Vec::with_capacity(slots * 2),
            mapper: Mapper::with_capacity(8),
            retry: Vec::with_capacity(slots),
            held,
            retired: Vec::new(),
            clone_set: CloneSet::new(setup.slots * 2),
        })
    }

    fn submit_bio(&self, q: &mut DmQueue, mut bio: BioRef<'_>, ends: &mut BioEnds<'_>) {
        if self.stack.legs.generation() != q.generation {
            self.refresh(q, ends);
        }
        let tag = bio.tag();
        let (op, flags) = (bio.bio().op(), bio.bio().flags());
        if op == Op::Write {
            if let Some(w) = &self.fast_writes {
                if self.submit_write_inline(w, q, &bio, ends) {
                    return;
                }
            }
        }
        let status = if op == Op::Flush {
            // A flush goes to every leg that is there.
            let legs = q
                .legs
                .iter()
                .enumerate()
                .filter(|(_, l)| !matches!(l, LegCtx::Out))
                .map(|(leg, _)| leg as LegId);
            q.mapper.map_flush(
                &self.stack.lines,
                &self.stack.flush_lines,
                flags,
                q.who,
                legs,
            )
        } else {
            let (off, len) = (bio.bio().offset_bytes(), bio.bio().len_bytes());
            let zero = |at, n| {
                bio.zero_range(at, n);
            };
            match q
                .mapper
                .map(&self.stack.lines, op, flags, off, len, q.who, zero)
            {
                Some(s) => s,
                None => {
                    ends.requeue(tag);
                    return;
                }
            }
        };
        if q.mapper.plan.is_empty() {
            ends.end(tag, status);
            return;
        }
        // One count per clone, plus this loop's own, so the bio cannot end
        // while its clones are still being sent.
        q.remaining[tag as usize] = Remaining {
            pending: q.mapper.plan.len() as u32 + 1,
            status,
        };
        let mut now = 0;
        for k in 0..q.mapper.plan.len() {
            let p = q.mapper.plan[k];
            let slot = Self::alloc_clone(
                q,
                ClonedIo {
                    tag,
                    line: p.line,
                    leg: p.leg,
                    io: p.io,
                },
            );
            if p.delay_ns == 0 {
                self.send_clone(q, slot, &bio, &p, ends);
            } else {
                // SAFETY: as in `send_clone`: the clone ends before the
                // bio, which `finish` ends only at a remaining count of
                // zero, and it views a range no other clone writes.
                let mut clone =
                    unsafe { bio.clone_range(p.io_offset, p.io.len_bytes, p.leg_offset) };
                clone.private = u64::from(slot);
                if now == 0 {
                    now = mqblk_core::clock::now_ns();
                }
                q.held.hold(now + p.delay_ns, slot, clone);
            }
        }
        finish(&mut q.remaining, tag, Status::Ok, ends);
        if !q.retry.is_empty() {
            self.send_retries(q, ends);
        }
    }

    fn routes(&self) -> bool {
        self.stack.lines.iter().any(|l| l.target.routes())
    }

    #[inline]
    fn route<'q>(
        &self,
        q: &'q mut DmQueue,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Option<Routed<'q>> {
        if self.stack.legs.generation() != q.generation {
            // Legs changed: `submit_bio` picks the change up first.
            return None;
        }
        let (i, (leg, at)) = match &self.fast {
            // One line covering the device, whose capacity the core
            // checked the bio against: its route alone places it.
            Some(f) => (0, f.route(op, offset_bytes, len_bytes, q.who)?),
            None => {
                if op == Op::Write && !self.routes_writes {
                    return None;
                }
                let lines = &self.stack.lines;
                let i = if lines.len() == 1 {
                    0
                } else {
                    lines.partition_point(|l| l.end <= offset_bytes)
                };
                let line = lines.get(i)?;
                if offset_bytes + len_bytes > line.end {
                    return None;
                }
                let to = line
                    .target
                    .route(op, offset_bytes - line.start, len_bytes, q.who)?;
                (i, to)
            }
        };
        let cookie = (i as u64) << 16 | u64::from(leg);
        let l = leg as usize;
        *q.touched.get_mut(l)? = true;
        let lower = self.leg_ctx(q, l)?;
        Some(Routed {
            lower,
            offset_bytes: at,
            cookie,
        })
    }

    #[cold]
    fn routed_error(
        &self,
        _q: &mut DmQueue,
        cookie: u64,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        status: Status,
    ) -> bool {
        let (line, leg) = ((cookie >> 16) as u32, cookie as LegId);
        let Some(l) = self.stack.lines.get(line as usize) else {
            return false;
        };
        let io = Io {
            op,
            flags: mqblk_core::driver::BioFlags::NONE,
            offset_bytes: offset_bytes - l.start,
            len_bytes,
        };
        matches!(
            end_action(&self.stack.lines, line, leg, &io, status),
            EndAction::Retry { .. }
        )
    }

    fn lower_contexts(&self, q: &mut DmQueue, f: &mut dyn FnMut(&mut dyn Lower)) {
        for l in q.legs.iter_mut() {
            if let LegCtx::Open(c) = l {
                f(c);
            }
        }
        if !q.retired.is_empty() {
            for c in q.retired.iter_mut() {
                f(c);
            }
            q.retired.retain(|c| c.routed_ready() > 0);
        }
    }

    fn unplug(&self, q: &mut DmQueue) {
        self.unplug_legs(q);
    }

    fn poll(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) -> usize {
        if self.stack.legs.generation() != q.generation {
            self.refresh(q, ends);
        }
        self.send_due(q, ends);
        let mut n = 0;
        for leg in 0..q.legs.len() {
            n += self.reap_leg(q, leg, ends);
        }
        if q.clone_set.in_flight() > 0 {
            for leg in 0..q.legs.len() {
                n += self.take_clones(q, leg, None, ends);
            }
        }
        if !q.retry.is_empty() {
            self.send_retries(q, ends);
            self.unplug_legs(q);
        }
        n
    }

    fn limits(&self) -> QueueLimits {
        self.stack.limits
    }

    fn features(&self) -> Features {
        self.stack.features
    }

    fn completes_async(&self) -> bool {
        self.stack.all_async
    }

    fn has_irq_lines(&self) -> bool {
        self.lines_below
    }
}
