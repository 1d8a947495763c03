//! A bio checked against its queue, before it enters the pipeline (Linux
//! `submit_bio_noacct`'s checks and `bio_check_eod`). Above `bio` and
//! `limits`, so neither needs the other; the typed error a failed bio is
//! reported with is the bio's own ([`Bio::error`], beside the completion
//! that reports it).

use crate::bio::Bio;
use crate::error::{InvalidKind, Status};
use crate::limits::QueueInfo;
use crate::op::{Op, SECTOR_SHIFT};

impl QueueInfo {
    /// Check a bio against capacity, limits and features. Returns the
    /// status to complete it with; the typed error is built from it later.
    #[inline]
    pub(crate) fn validate(&self, bio: &Bio, bounce: bool) -> Status {
        let op = bio.op();
        if op == Op::Flush {
            return Status::Ok;
        }
        let lim = &self.limits;
        let len = bio.len_bytes();
        if len == 0 {
            return Status::Invalid(InvalidKind::ZeroLength);
        }
        let lbs_mask = u64::from(lim.logical_block_size) - 1;
        if (bio.offset_bytes() | len) & lbs_mask != 0 {
            return Status::Invalid(InvalidKind::BadLength);
        }
        let end = bio.sector().checked_add(len >> SECTOR_SHIFT);
        if end.is_none_or(|e| e > self.capacity_sectors) {
            return Status::Invalid(InvalidKind::OutOfRange);
        }
        if op.is_write() && self.features.read_only {
            return Status::Invalid(InvalidKind::ReadOnly);
        }
        match op {
            // Misaligned segments are bounced; refused only with bounce off.
            Op::Read | Op::Write if !bounce => {
                let dma = lim.dma_alignment as usize;
                for s in bio.segments() {
                    if (s.addr() | s.len() as usize) & dma != 0 {
                        return Status::Invalid(InvalidKind::Misaligned);
                    }
                }
            }
            Op::Discard if !self.features.discard || lim.max_discard_sectors == 0 => {
                return Status::Invalid(InvalidKind::Unsupported);
            }
            // Write-zeroes without device support is emulated with writes.
            _ => {}
        }
        Status::Ok
    }
}

/// The common bio's checks, fused into one pass (what `validate` and
/// `split::fits` would say of it together): a read or write with no flags,
/// of whole logical blocks inside the device, within one request's size
/// and segment count, with segments aligned for the device. Built from the
/// queue's facts when a context opens and at every pass of its gate (on a
/// remapped view, from the window's: its capacity and read-only flag, so
/// the window's bounds check is the capacity compare); a bio it does not
/// admit takes the full checks, which decide.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FastCheck {
    lbs_mask: u64,
    max_bytes: u64,
    max_segments: usize,
    dma_mask: u32,
    capacity_sectors: u64,
    read_only: bool,
}

impl FastCheck {
    /// The fused check for bios on `info` split to `lim` (the context's
    /// copy of the limits). Limits the fused check cannot say in one pass
    /// (chunks, segment sizes or boundaries) leave it admitting nothing.
    pub(crate) fn new(info: &QueueInfo, lim: &crate::limits::QueueLimits) -> FastCheck {
        let simple = lim.chunk_sectors == 0
            && lim.max_segment_size == u32::MAX
            && lim.seg_boundary_mask == u64::MAX;
        FastCheck {
            lbs_mask: u64::from(info.limits.logical_block_size.max(lim.logical_block_size)) - 1,
            max_bytes: if simple {
                u64::from(lim.max_sectors) << SECTOR_SHIFT
            } else {
                0
            },
            max_segments: lim.max_segments as usize,
            dma_mask: info.limits.dma_alignment | lim.dma_alignment,
            capacity_sectors: info.capacity_sectors,
            read_only: info.features.read_only,
        }
    }

    /// The fused check for a bio-based device, which builds no request of
    /// its own (its lower devices split what they must): validity only,
    /// at any size and segment count.
    pub(crate) fn any_size(mut self) -> FastCheck {
        self.max_bytes = u64::MAX;
        self.max_segments = usize::MAX;
        self
    }

    /// True if `bio` is valid and fits as one request as it is.
    #[inline(always)]
    pub(crate) fn admits(&self, bio: &Bio) -> bool {
        let len = bio.len_bytes();
        let op = bio.op() as u8;
        // Read is 0 and write 1: one compare takes both and nothing else.
        op < 2
            && bio.flags().bits() == 0
            && len.wrapping_sub(1) < self.max_bytes
            && (bio.offset_bytes() | len) & self.lbs_mask == 0
            && bio.align_or() & self.dma_mask == 0
            && bio.segments().len() <= self.max_segments
            && bio.sector() + (len >> SECTOR_SHIFT) <= self.capacity_sectors
            && !(op == 1 && self.read_only)
    }
}
