//! A mirror's plain writes mapped inline: the bio-based driver of a
//! one-line mirror table sends a write that stays in one region to every
//! live leg without the generic map (no call through the target, no
//! route or plan to fill), and ends its children the same way. Anything
//! rarer (a recovery running, a leg being rebuilt, a region whose bit a
//! disk log must write first, no live leg) takes `Target::map`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use mqblk_core::driver::Status;

use super::route::region_left;
use super::state::{Inner, LIVE, MAX_LEGS, REBUILD, RECOVERING};
use crate::legs::LegId;

/// A mirror's plain writes, mapped inline (`Mirror::writes`).
#[derive(Clone)]
pub struct MirrorWrites {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for MirrorWrites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorWrites")
            .field("line", &self.inner.line)
            .finish()
    }
}

/// Where a write goes: the first `n` of `legs`, each a leg and the
/// offset there.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteLegs {
    /// The legs, and the write's offset on each.
    pub legs: [(LegId, u64); MAX_LEGS],
    /// How many of `legs` the write goes to.
    pub n: usize,
}

impl MirrorWrites {
    /// The live legs a write of `len_bytes` at `offset_bytes` (within the
    /// mirror) goes to, counted in flight on its region as `Target::map`
    /// counts them (one child per leg, each ended through
    /// [`MirrorWrites::child_ended`]); false, with nothing counted, for a
    /// write the generic map must take.
    #[inline(always)]
    pub fn map(&self, offset_bytes: u64, len_bytes: u64, out: &mut WriteLegs) -> bool {
        let m = &*self.inner;
        if len_bytes > region_left(m, offset_bytes) {
            return false;
        }
        let r = m.region(offset_bytes);
        let n = m.legs.len() as u32;
        // Counted before the region is looked at, as `map_write` does: the
        // copier and the cleaner look the other way round.
        m.pending.add(r, n);
        let s = m.state.load(Ordering::SeqCst);
        let live = s & LIVE;
        if s & (RECOVERING | REBUILD) != 0 || live == 0 || !(m.log.is_core() || m.dirty.test(r)) {
            m.pending.sub(r, n);
            return false;
        }
        if !m.log.is_core() && !m.recent.test(r) {
            m.recent.set(r);
        }
        let mut k = 0;
        for (i, l) in m.legs.iter().enumerate() {
            if live & (1 << i) != 0 {
                out.legs[k] = (l.id, l.offset_bytes + offset_bytes);
                k += 1;
            }
        }
        out.n = k;
        if (k as u32) < n {
            m.pending.sub(r, n - k as u32);
        }
        true
    }

    /// A write child (of a write, discard or write-zeroes at
    /// `offset_bytes` within the mirror, mapped either way) ended on
    /// `leg` with `status`: what the write takes from it, as the target's
    /// `end_io` says.
    #[inline(always)]
    pub fn child_ended(&self, offset_bytes: u64, leg: LegId, status: Status) -> Status {
        self.inner.write_child_ended(offset_bytes, leg, status)
    }
}
