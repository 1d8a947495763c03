//! Submission: clones built and sent to the legs (in a leg context's
//! slot, or in the driver's clone set straight into a leg's request), a
//! one-line mirror's writes mapped inline, clones held back or sent again
//! to another leg, and the legs picked up anew when the table's legs
//! change. Above completion, which it calls to reap a leg.

use super::end::{end_clone, finish};
use super::queue::{BioStacked, ClonedIo, DmQueue, LegCtx, Remaining};
use crate::map::{end_action, Plan};
use crate::target::target_type::{EndAction, Io};
use crate::target::{MirrorWrites, WriteLegs};
use mqblk_core::bio_based::{BioEnds, BioRef};
use mqblk_core::driver::{Op, Status};
use mqblk_core::Bio;

impl BioStacked {
    /// Pick up legs added, replaced or taken out since this context last
    /// looked. An old leg context is drained first, so no clone is lost.
    #[cold]
    pub(super) fn refresh(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) {
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
    pub(super) fn sector_above(&self, c: &ClonedIo) -> u64 {
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
    pub(super) fn send_clone(
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
    pub(super) fn send(&self, q: &mut DmQueue, slot: u32, bio: Bio, ends: &mut BioEnds<'_>) {
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
    pub(super) fn send_again(&self, q: &mut DmQueue, slot: u32, bio: Bio, ends: &mut BioEnds<'_>) {
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
    pub(super) fn clone_failed(
        &self,
        q: &mut DmQueue,
        slot: u32,
        mut bio: Bio,
        ends: &mut BioEnds<'_>,
    ) {
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

    pub(super) fn send_retries(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) {
        while let Some((slot, bio)) = q.retry.pop() {
            self.send(q, slot, bio, ends);
        }
    }

    /// Send the held clones that are due, and unplug what they went to.
    pub(super) fn send_due(&self, q: &mut DmQueue, ends: &mut BioEnds<'_>) {
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

    pub(super) fn unplug_legs(&self, q: &mut DmQueue) {
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
    pub(super) fn submit_write_inline(
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
    pub(super) fn send_clone_node(
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

    pub(super) fn alloc_clone(q: &mut DmQueue, c: ClonedIo) -> u32 {
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
