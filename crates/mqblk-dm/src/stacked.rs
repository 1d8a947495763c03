//! The stacked driver (Linux dm core, request-based): each request is cut
//! at target boundaries, each piece is mapped by its target, and the pieces
//! go to the legs as clone bios that view the request's memory. Children
//! are submitted to this hardware queue's own context on each leg, without
//! blocking; their completions are reaped in `poll` and the parent request
//! completes when its last child has ended.
//!
//! State per hardware queue, reached only through `&mut`: a context per
//! leg, the parents by tag, and a slot per child in flight. No lock is
//! shared between hardware queues; nothing is allocated once warm.

use std::sync::Arc;

use mqblk_core::driver::{
    Completions, Driver, Error, Features, HwNotifier, HwQueueSetup, IrqLines, Op, QueueLimits,
    QueueRq, Request, RqRef, Status,
};
use mqblk_core::{Bio, Context, Device};

use crate::held::Held;
use crate::legs::{LegId, Legs};
use crate::map::{end_action, fold, Line, Mapper};
use crate::target::target_type::{EndAction, Io};

/// The driver of a stacked device.
pub(crate) struct Stacked {
    pub(crate) name: String,
    pub(crate) lines: Vec<Line>,
    pub(crate) legs: Arc<Legs>,
    pub(crate) limits: QueueLimits,
    pub(crate) features: Features,
    pub(crate) all_async: bool,
    /// Lines whose target has a say in flushes (`delay`, `flakey`).
    pub(crate) flush_lines: Vec<u32>,
    /// Keeps the control handle alive while the device is.
    pub(crate) _handle: Arc<crate::handle::Handle>,
}

/// A request waiting for its children.
struct Parent {
    rq: RqRef,
    pending: u32,
    status: Status,
}

/// A child in flight.
#[derive(Clone, Copy)]
struct Child {
    tag: u32,
    line: u32,
    leg: LegId,
    io: Io,
}

pub(crate) struct StackedQueue {
    index: u16,
    /// The stacked device's number, which the legs' traces name as where
    /// a child came from.
    devnum: mqblk_core::DevNum,
    notifier: HwNotifier,
    /// The queue's interrupt lines, which the core watches from every
    /// completion fd on this queue. When a leg is a polled device with
    /// interrupt lines (an NBD client, a ring), this queue's context on
    /// it forwards its leaf fds here, so that they stay one level deep
    /// however deep the stack: no epoll set of ours holds another.
    irq: IrqLines,
    generation: u64,
    /// A context on each leg (`None`: the leg is out).
    ctxs: Vec<Option<Context>>,
    /// Legs sent to since the last unplug.
    touched: Vec<bool>,
    parents: Vec<Option<Parent>>,
    children: Vec<Child>,
    free: FreeChildren,
    mapper: Mapper,
    /// Children to send again, to another leg.
    retry: Vec<(u32, Bio)>,
    /// Children held back until their time (the `delay` target), with a
    /// timer among the lines when a leg has some, so a queue that sleeps
    /// on its lines wakes to send them on time.
    held: Held,
}

/// Child slots not in use, and the bios of ended children kept for the
/// next clones: a clone's segment list keeps the room it grew to, so a
/// merged request of many segments allocates once, not per I/O.
struct FreeChildren {
    slots: Vec<u32>,
    bios: Vec<Bio>,
}

impl FreeChildren {
    fn with_capacity(n: usize) -> FreeChildren {
        FreeChildren {
            slots: Vec::with_capacity(n),
            bios: Vec::with_capacity(n),
        }
    }

    /// Child slot `slot` ended; `bio`, its clone, is kept for another. Its
    /// views of the parent's memory are dropped here, before the parent
    /// can be given back.
    fn put(&mut self, slot: u32, mut bio: Bio) {
        self.slots.push(slot);
        bio.reuse_at(Op::Read, 0);
        if self.bios.len() < self.bios.capacity() {
            self.bios.push(bio);
        }
    }

    /// A bio to clone into.
    fn bio(&mut self) -> Bio {
        self.bios.pop().unwrap_or_else(|| Bio::at(Op::Read, 0))
    }
}

impl Stacked {
    fn open_ctx(
        &self,
        leg: usize,
        notifier: &HwNotifier,
        irq: &IrqLines,
    ) -> Result<Option<Context>, Error> {
        match self.legs.get(leg as LegId) {
            Some(dev) => {
                let mut ctx = dev.context()?;
                ctx.forward_completions(notifier);
                if dev.has_irq_lines() {
                    // The leg's replies wake this queue's waiters: its
                    // leaf fds join this queue's lines (also when the leg
                    // is opened after a completion fd on top was made),
                    // and leave them when the context is dropped.
                    ctx.forward_irq_lines(irq)?;
                }
                Ok(Some(ctx))
            }
            None => Ok(None),
        }
    }

    /// Pick up legs added, replaced or taken out since this queue last
    /// looked. An old context is drained first, so no child is lost.
    #[cold]
    fn refresh(&self, hq: &mut StackedQueue, done: &mut Completions<'_>) {
        hq.generation = self.legs.generation();
        let now = self.legs.all();
        for (i, dev) in now.iter().enumerate() {
            if i >= hq.ctxs.len() {
                hq.ctxs.push(None);
                hq.touched.push(false);
            }
            let same = match (&hq.ctxs[i], dev) {
                (Some(c), Some(d)) => c.device().same(d),
                (None, None) => true,
                _ => false,
            };
            if same {
                continue;
            }
            if let Some(mut old) = hq.ctxs[i].take() {
                // Children still plugged, in flight, or ended and not yet
                // polled (a leg that completes inline): all end here.
                old.unplug();
                loop {
                    let q = &mut *hq;
                    old.poll_wait(1, |c| {
                        end_child(
                            &self.lines,
                            &mut q.children,
                            &mut q.free,
                            &mut q.parents,
                            &mut q.retry,
                            done,
                            c,
                        );
                    });
                    if old.in_flight() == 0 && old.ready() == 0 {
                        break;
                    }
                }
            }
            hq.ctxs[i] = match self.open_ctx(i, &hq.notifier, &hq.irq) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!(
                        "mqblk: {}: leg {i} on hardware queue {}: {e}",
                        self.name, hq.index
                    );
                    None
                }
            };
        }
        self.send_retries(hq, done);
    }

    /// Send `bio` (child slot `slot`) to its leg; a child that cannot be
    /// sent ends with an error, which its target hears of (a mirror tries
    /// another leg).
    fn send(&self, hq: &mut StackedQueue, slot: u32, bio: Bio, done: &mut Completions<'_>) {
        let c = hq.children[slot as usize];
        let leg = c.leg as usize;
        // Where the child comes from on this device, for the leg's trace.
        let from = match (c.io.op, self.lines.get(c.line as usize)) {
            (Op::Flush, _) | (_, None) => 0,
            (_, Some(l)) => (l.start + c.io.offset_bytes) >> 9,
        };
        let devnum = hq.devnum;
        let Some(ctx) = hq.ctxs.get_mut(leg).and_then(Option::as_mut) else {
            self.child_failed(hq, slot, bio, done);
            return;
        };
        let bio = match ctx.submit_remapped(bio, devnum, from) {
            Ok(()) => {
                hq.touched[leg] = true;
                return;
            }
            Err(e) => e.into_bio(),
        };
        // The leg's context is full of completions nobody polled: reap them
        // here and try once more.
        self.reap_leg(hq, leg, done);
        let ctx = hq.ctxs[leg].as_mut().expect("checked above");
        match ctx.submit_remapped(bio, devnum, from) {
            Ok(()) => hq.touched[leg] = true,
            Err(e) => self.child_failed(hq, slot, e.into_bio(), done),
        }
    }

    /// A child that could not be sent: its target decides, as for a child
    /// that ended with an I/O error.
    fn child_failed(
        &self,
        hq: &mut StackedQueue,
        slot: u32,
        mut bio: Bio,
        done: &mut Completions<'_>,
    ) {
        let c = hq.children[slot as usize];
        let action = end_action(&self.lines, c.line, c.leg, &c.io, Status::IoError);
        match action {
            EndAction::Done(s) => {
                hq.free.put(slot, bio);
                finish(&mut hq.parents, c.tag, s, done);
            }
            EndAction::Retry { leg, offset_bytes } => {
                bio.set_offset_bytes(offset_bytes);
                hq.children[slot as usize].leg = leg;
                hq.retry.push((slot, bio));
            }
        }
    }

    fn reap_leg(&self, hq: &mut StackedQueue, leg: usize, done: &mut Completions<'_>) -> usize {
        let StackedQueue {
            ctxs,
            children,
            free,
            parents,
            retry,
            ..
        } = hq;
        let mut n = 0;
        if let Some(ctx) = ctxs[leg].as_mut() {
            ctx.poll(|c| n += end_child(&self.lines, children, free, parents, retry, done, c));
        }
        n
    }

    fn send_retries(&self, hq: &mut StackedQueue, done: &mut Completions<'_>) {
        while let Some((slot, bio)) = hq.retry.pop() {
            self.send(hq, slot, bio, done);
        }
    }

    /// Send the held children that are due, and unplug what they went
    /// to.
    fn send_due(&self, hq: &mut StackedQueue, done: &mut Completions<'_>) {
        if hq.held.is_empty() {
            return;
        }
        let now = mqblk_core::clock::now_ns();
        let mut sent = false;
        while let Some((slot, bio)) = hq.held.take_due(now) {
            self.send(hq, slot, bio, done);
            sent = true;
        }
        if sent {
            self.unplug(hq);
        }
    }

    fn unplug(&self, hq: &mut StackedQueue) {
        for (ctx, t) in hq.ctxs.iter_mut().zip(hq.touched.iter_mut()) {
            if std::mem::take(t) {
                if let Some(c) = ctx.as_mut() {
                    c.unplug();
                }
            }
        }
    }

    fn alloc_child(hq: &mut StackedQueue, c: Child) -> u32 {
        match hq.free.slots.pop() {
            Some(s) => {
                hq.children[s as usize] = c;
                s
            }
            None => {
                hq.children.push(c);
                (hq.children.len() - 1) as u32
            }
        }
    }
}

/// A child's completion: ask its target, then end the child or queue it
/// for another leg. Returns 1 if it completed its parent.
fn end_child(
    lines: &[Line],
    children: &mut [Child],
    free: &mut FreeChildren,
    parents: &mut [Option<Parent>],
    retry: &mut Vec<(u32, Bio)>,
    done: &mut Completions<'_>,
    c: mqblk_core::Completion<'_>,
) -> usize {
    let slot = c.private() as u32;
    let child = children[slot as usize];
    let action = end_action(lines, child.line, child.leg, &child.io, c.status());
    match action {
        EndAction::Done(s) => {
            // The clone is kept for another, its views dropped now; the
            // parent is given back later, when the stacked driver's poll
            // returns.
            free.put(slot, c.into_bio());
            finish(parents, child.tag, s, done)
        }
        EndAction::Retry { leg, offset_bytes } => {
            let mut bio = c.into_bio();
            bio.set_offset_bytes(offset_bytes);
            children[slot as usize].leg = leg;
            retry.push((slot, bio));
            0
        }
    }
}

/// One child of parent `tag` ended with `status`.
fn finish(
    parents: &mut [Option<Parent>],
    tag: u32,
    status: Status,
    done: &mut Completions<'_>,
) -> usize {
    let p = parents[tag as usize]
        .as_mut()
        .expect("a child's parent waits for it");
    fold(&mut p.status, status);
    p.pending -= 1;
    if p.pending > 0 {
        return 0;
    }
    let p = parents[tag as usize].take().expect("checked above");
    done.complete(p.rq, p.status);
    1
}

impl Driver for Stacked {
    type HwQueue = StackedQueue;

    fn init_hw_queue(&self, setup: HwQueueSetup<'_>) -> Result<StackedQueue, Error> {
        let n = self.legs.len();
        let depth = (setup.queue_depth + setup.reserved_tags) as usize;
        let irq = setup.irq_lines;
        let lines = self.legs.all().iter().flatten().any(Device::has_irq_lines);
        let held = Held::new(&self.name, lines.then_some(&irq))?;
        let mut hq = StackedQueue {
            index: setup.index,
            devnum: setup.devnum,
            notifier: setup.notifier,
            irq,
            generation: self.legs.generation(),
            ctxs: Vec::with_capacity(n),
            touched: vec![false; n],
            parents: (0..depth).map(|_| None).collect(),
            children: Vec::with_capacity(depth * 2),
            free: FreeChildren::with_capacity(depth * 2),
            mapper: Mapper::with_capacity(8),
            retry: Vec::with_capacity(depth),
            held,
        };
        for i in 0..n {
            let c = self.open_ctx(i, &hq.notifier, &hq.irq)?;
            hq.ctxs.push(c);
        }
        Ok(hq)
    }

    fn queue_rq(
        &self,
        hq: &mut StackedQueue,
        mut rq: RqRef,
        last: bool,
        done: &mut Completions<'_>,
    ) -> QueueRq {
        if self.legs.generation() != hq.generation {
            self.refresh(hq, done);
        }
        let status = if rq.op() == Op::Flush {
            // A flush goes to every leg that is there.
            let legs = hq
                .ctxs
                .iter()
                .enumerate()
                .filter(|(_, c)| c.is_some())
                .map(|(leg, _)| leg as LegId);
            hq.mapper
                .map_flush(&self.lines, &self.flush_lines, rq.flags(), hq.index, legs)
        } else {
            let (op, flags, off, len) = (rq.op(), rq.flags(), rq.offset_bytes(), rq.len_bytes());
            let zero = |at, n| {
                rq.zero_range(at, n);
            };
            match hq
                .mapper
                .map(&self.lines, op, flags, off, len, hq.index, zero)
            {
                Some(s) => s,
                None => return QueueRq::Busy(rq),
            }
        };
        if hq.mapper.plan.is_empty() {
            done.complete(rq, status);
        } else {
            let tag = rq.tag();
            let req: *const Request = &*rq;
            // One reference per child, plus this loop's own, so the parent
            // cannot complete while its children are still being sent.
            hq.parents[tag as usize] = Some(Parent {
                rq,
                pending: hq.mapper.plan.len() as u32 + 1,
                status,
            });
            let mut now = 0;
            for k in 0..hq.mapper.plan.len() {
                let p = hq.mapper.plan[k];
                let mut bio = hq.free.bio();
                // SAFETY: `req` points at the request `parents[tag]` owns,
                // which stays there (not given back) until its last
                // reference is dropped, and this loop holds one. The clone
                // ends before the parent is given back: `end_child` (or
                // `child_failed`) takes the clone back and drops its views
                // (`FreeChildren::put`) before it counts the child done, and
                // `done.complete` hands the parent to the core only when
                // this driver's `poll` or `queue_rq` returns. The
                // pieces of one request are disjoint, except a mirror's
                // copies of a write, which only read the memory; zeros were
                // filled in `map`, before any child is sent.
                unsafe {
                    (*req).clone_bio_range_into(
                        &mut bio,
                        p.io_offset,
                        p.io.len_bytes,
                        p.leg_offset,
                    );
                }
                let slot = Self::alloc_child(
                    hq,
                    Child {
                        tag,
                        line: p.line,
                        leg: p.leg,
                        io: p.io,
                    },
                );
                bio.private = u64::from(slot);
                if p.delay_ns == 0 {
                    self.send(hq, slot, bio, done);
                } else {
                    if now == 0 {
                        now = mqblk_core::clock::now_ns();
                    }
                    hq.held.hold(now + p.delay_ns, slot, bio);
                }
            }
            finish(&mut hq.parents, tag, Status::Ok, done);
        }
        if last {
            self.unplug(hq);
            if !self.all_async {
                self.poll(hq, done);
            }
        }
        QueueRq::Issued
    }

    fn commit_rqs(&self, hq: &mut StackedQueue) {
        self.unplug(hq);
    }

    fn poll(&self, hq: &mut StackedQueue, done: &mut Completions<'_>) -> usize {
        if self.legs.generation() != hq.generation {
            self.refresh(hq, done);
        }
        self.send_due(hq, done);
        let mut n = 0;
        for leg in 0..hq.ctxs.len() {
            n += self.reap_leg(hq, leg, done);
        }
        if !hq.retry.is_empty() {
            self.send_retries(hq, done);
            self.unplug(hq);
        }
        n
    }

    fn limits(&self) -> QueueLimits {
        self.limits
    }

    fn features(&self) -> Features {
        self.features
    }

    fn completes_async(&self) -> bool {
        self.all_async
    }
}
