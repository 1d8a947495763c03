//! Merging bios into requests (Linux `block/blk-merge.c`: back and front
//! merges, `blk_attempt_plug_merge`, `blk_bio_list_merge`).
//!
//! Between the bio and the request: a bio contiguous with a request that is
//! still waiting (in the plug, or in the software queue) joins it instead of
//! taking a tag, as long as the operation and flags match and the merged
//! request still fits every limit. `nomerges` switches this off as in Linux:
//! 0 tries everything, 1 only the one most recent request, 2 nothing.

use std::ptr::NonNull;

use crate::bio::{Bio, BioFlags, Op};
use crate::bioset::{BioNode, SlotState};
use crate::limits::{QueueLimits, SECTOR_SHIFT};
use crate::request::Request;

/// Which side of a request a bio joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Merge {
    /// The bio follows the request.
    Back,
    /// The bio precedes the request.
    Front,
}

/// True if `bio` may ever merge.
#[inline]
pub(crate) fn mergeable(bio: &Bio) -> bool {
    matches!(bio.op(), Op::Read | Op::Write | Op::Discard)
        && !bio.flags().contains(BioFlags::NOMERGE)
        && !bio.flags().contains(BioFlags::PREFLUSH)
}

/// Where `bio` could join `rq`, if anywhere, without breaking a limit.
/// `flags` are the flags the bio's request would carry (see
/// `flush::request_flags`), which is what `rq.flags` holds.
#[inline(always)]
pub(crate) fn can_merge(
    rq: &Request,
    bio: &Bio,
    flags: BioFlags,
    lim: &QueueLimits,
) -> Option<Merge> {
    // Adjacency first: most candidates fail it (random I/O).
    let rq_sectors = rq.size_bytes >> SECTOR_SHIFT;
    let bio_sectors = bio.len_bytes() >> SECTOR_SHIFT;
    let side = if rq.sector + rq_sectors == bio.sector() {
        Merge::Back
    } else if bio.sector() + bio_sectors == rq.sector {
        Merge::Front
    } else {
        return None;
    };
    if rq.op != bio.op() || rq.flags != flags || rq.flags.contains(BioFlags::NOMERGE) {
        return None;
    }
    let max = match bio.op() {
        Op::Discard => u64::from(lim.max_discard_sectors),
        _ => u64::from(lim.max_sectors),
    };
    if rq_sectors + bio_sectors > max {
        return None;
    }
    if lim.chunk_sectors != 0 {
        let chunk = u64::from(lim.chunk_sectors);
        let start = rq.sector.min(bio.sector());
        if start / chunk != (start + rq_sectors + bio_sectors - 1) / chunk {
            return None;
        }
    }
    if bio.op().has_data()
        && usize::from(rq.nr_segs) + bio.segments().len() > lim.max_segments as usize
    {
        return None;
    }
    Some(side)
}

/// Join the bio in `node` to `rq` on `side` (checked by [`can_merge`]).
#[inline]
pub(crate) fn attach(
    rq: &mut Request,
    mut node: NonNull<BioNode>,
    bio_sector: u64,
    bio_bytes: u64,
    nr_segs: usize,
    side: Merge,
) {
    // SAFETY: `node` is a slot of the caller's context that no request
    // holds yet: this is the only access.
    unsafe {
        debug_assert_eq!(node.as_ref().state, SlotState::Owned);
        node.as_mut().state = SlotState::InFlight;
    }
    match side {
        Merge::Back => {
            let mut tail = rq.bio_tail.expect("a queued request has bios");
            // SAFETY: the request is owned by the caller (plug or software
            // queue, through its RqRef), so its bio chain is too; `node` is a
            // slot of the same context, not yet in any request.
            unsafe {
                tail.as_mut().next = Some(node);
                node.as_mut().next = None;
            }
            rq.bio_tail = Some(node);
        }
        Merge::Front => {
            // SAFETY: as above.
            unsafe { node.as_mut().next = rq.bio_head };
            rq.bio_head = Some(node);
            rq.sector = bio_sector;
        }
    }
    rq.size_bytes += bio_bytes;
    rq.nr_bios += 1;
    rq.nr_segs = rq.nr_segs.saturating_add(nr_segs as u16);
}
