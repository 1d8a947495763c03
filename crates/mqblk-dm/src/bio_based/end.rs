//! Completion: a leg context's clones reaped, each clone's end put to its
//! target (a mirror's write to the mirror, inline), and a bio ended once
//! its last clone has (its remaining count at zero). Below submission,
//! which reaps a full leg here; never submits.

use super::queue::{BioStacked, ClonedIo, DmQueue, LegCtx, Remaining};
use crate::map::{end_action, fold, Line};
use crate::target::target_type::EndAction;
use crate::target::MirrorWrites;
use mqblk_core::bio_based::BioEnds;
use mqblk_core::driver::{Op, Status};
use mqblk_core::{Bio, Context};

impl BioStacked {
    pub(super) fn reap_leg(&self, q: &mut DmQueue, leg: usize, ends: &mut BioEnds<'_>) -> usize {
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

    /// Take back the clones of the set that ended on `leg` (or on `ctx`,
    /// a leg context being let go), and end them. Returns how many bios
    /// that ended.
    pub(super) fn take_clones(
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
}

/// A clone's completion: ask its target, then end the clone or queue it
/// for another leg. Returns 1 if it ended its bio.
#[allow(clippy::too_many_arguments)]
pub(super) fn end_clone(
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
pub(super) fn clone_action(
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
pub(super) fn finish(
    remaining: &mut [Remaining],
    tag: u32,
    status: Status,
    ends: &mut BioEnds<'_>,
) -> usize {
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
