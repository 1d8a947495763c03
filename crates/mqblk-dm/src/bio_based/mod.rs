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
//! its leg contexts, the remaining count of each bio by slot, a slot per
//! clone in flight, and the clone set (`mqblk_core::clone_set`) whose
//! slots a one-line mirror's writes go into the legs' requests in. Nothing
//! is shared with another context, and nothing is allocated once warm.
//!
//! In this folder, by call order: this face (the driver's trait), then
//! `send` (submission), `end` (completion), `queue` (the state both work
//! on).

mod end;
mod queue;
mod send;

pub(crate) use queue::{BioStacked, FastRoute};

use crate::held::Held;
use crate::legs::LegId;
use crate::map::{end_action, Mapper};
use crate::target::target_type::{EndAction, Io};
use end::finish;
use mqblk_core::bio_based::{BioDriver, BioEnds, BioQueueSetup, BioRef, Lower, Routed};
use mqblk_core::clone_set::CloneSet;
use mqblk_core::driver::{Error, Features, Op, QueueLimits, Status};
use queue::{ClonedIo, DmQueue, LegCtx, Remaining};

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
