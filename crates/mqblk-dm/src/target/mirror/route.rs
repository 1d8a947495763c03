//! A mirror's reads routed whole (`Target::route`): a read that stays in
//! one region goes to one live leg, the legs taking turns.

use std::sync::Arc;

use mqblk_core::driver::Op;

use super::state::Inner;
use crate::legs::LegId;

/// A mirror's routed reads (`Target::route`): a read that stays in one
/// region goes whole to one live leg, the legs taking turns. Kept by the
/// bio-based driver of a one-line mirror table to route inline
/// (`Mirror::reads`).
#[derive(Clone)]
pub struct MirrorReads {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for MirrorReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorReads")
            .field("line", &self.inner.line)
            .finish()
    }
}

impl MirrorReads {
    /// As `Target::route` of the mirror.
    #[inline(always)]
    pub fn route(
        &self,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
        hwq: u16,
    ) -> Option<(LegId, u64)> {
        route_read_whole(&self.inner, op, offset_bytes, len_bytes, hwq)
    }
}

/// Bytes from `offset_bytes` to the end of its region.
#[inline(always)]
pub(super) fn region_left(inner: &Inner, offset_bytes: u64) -> u64 {
    let region = 1u64 << inner.region_shift;
    region - (offset_bytes & (region - 1))
}

/// A read that stays in one region, to one live leg whole.
#[inline(always)]
pub(super) fn route_read_whole(
    inner: &Inner,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    hwq: u16,
) -> Option<(LegId, u64)> {
    if op != Op::Read || len_bytes > region_left(inner, offset_bytes) {
        return None;
    }
    inner.route_read(offset_bytes, hwq)
}
