//! Splitting a bio to the queue limits (Linux `bio_split_to_limits`,
//! `block/blk-merge.c`).
//!
//! Between the bio and the plug: a bio that breaks a limit (`max_sectors`,
//! `max_segments`, `max_segment_size`, the segment boundary, `chunk_sectors`,
//! the discard and write-zeroes maxima) is cut into pieces by reference:
//! each piece views the parent's memory, nothing is copied. A piece whose
//! segments break the DMA alignment is marked for bouncing ([`crate::bounce`]).
//! The common bio fits and pays one check.

use std::ptr::NonNull;

use smallvec::SmallVec;

use crate::bio::{Bio, Op};
use crate::bioset::BioNode;
use crate::buf::IoBuf;
use crate::error::{InvalidKind, Status};
use crate::limits::{QueueLimits, SECTOR_SHIFT, SECTOR_SIZE};

/// What a bio needs before it can become a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fit {
    /// It fits the limits as it is.
    Fits,
    /// It must be split, bounced, or both.
    Split,
}

/// Does `bio` fit `lim` as one request? Assumes the bio was validated.
#[inline]
pub(crate) fn fits(bio: &Bio, lim: &QueueLimits) -> Fit {
    let len = bio.len_bytes();
    let max = match bio.op() {
        Op::Read | Op::Write => u64::from(lim.max_sectors) << SECTOR_SHIFT,
        Op::Discard => u64::from(lim.max_discard_sectors) << SECTOR_SHIFT,
        Op::WriteZeroes => u64::from(lim.max_write_zeroes_sectors) << SECTOR_SHIFT,
        Op::Flush => return Fit::Fits,
    };
    if len > max {
        return Fit::Split;
    }
    if lim.chunk_sectors != 0 {
        let chunk = u64::from(lim.chunk_sectors);
        let first = bio.sector() / chunk;
        let last = (bio.sector() + bio.len_sectors() - 1) / chunk;
        if first != last {
            return Fit::Split;
        }
    }
    if bio.op().has_data() {
        let segs = bio.segments();
        if segs.len() > lim.max_segments as usize {
            return Fit::Split;
        }
        // DMA alignment masks are below 4 GiB: the low 32 bits decide.
        if bio.align_or() & lim.dma_alignment != 0 {
            return Fit::Split;
        }
        let seg_max = lim.max_segment_size;
        let boundary = lim.seg_boundary_mask;
        if seg_max != u32::MAX || boundary != u64::MAX {
            for s in segs {
                if s.len() > seg_max {
                    return Fit::Split;
                }
                if boundary != u64::MAX && crosses(s.addr() as u64, u64::from(s.len()), boundary) {
                    return Fit::Split;
                }
            }
        }
    }
    Fit::Fits
}

#[inline]
fn crosses(addr: u64, len: u64, mask: u64) -> bool {
    len > 0 && (addr | mask) != ((addr + len - 1) | mask)
}

/// Bytes from `addr` to the next segment boundary.
#[inline]
fn to_boundary(addr: u64, mask: u64) -> u64 {
    if mask == u64::MAX {
        u64::MAX
    } else {
        (addr | mask) - addr + 1
    }
}

/// One piece of a split bio.
#[derive(Debug)]
pub(crate) struct Piece {
    /// The child bio (borrowed segments; empty when `bounce` is set).
    pub(crate) bio: Bio,
    /// Byte offset of the piece within the parent.
    pub(crate) offset_in_parent: u64,
    /// The piece's segments break the DMA alignment: the caller must give it
    /// an aligned buffer (copying the data in for a write).
    pub(crate) bounce: bool,
}

/// Cuts a bio into pieces that fit, one at a time.
#[derive(Debug, Default)]
pub(crate) struct Splitter {
    seg: usize,
    seg_off: u32,
    done_bytes: u64,
}

/// Why a bio cannot be split at all.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Unsplittable;

impl Splitter {
    /// The next piece of `parent`, or None when all of it has been cut.
    /// `zero_buf` supplies the data of emulated write-zeroes.
    pub(crate) fn next(
        &mut self,
        parent: &Bio,
        lim: &QueueLimits,
        emulate_zeroes: Option<&IoBuf>,
    ) -> Result<Option<Piece>, Unsplittable> {
        let total = parent.len_bytes();
        if self.done_bytes >= total {
            return Ok(None);
        }
        let lbs = u64::from(lim.logical_block_size);
        let remaining = total - self.done_bytes;
        let sector = parent.sector() + (self.done_bytes >> SECTOR_SHIFT);
        let op = parent.op();
        let mut max = match op {
            Op::Discard => u64::from(lim.max_discard_sectors) << SECTOR_SHIFT,
            Op::WriteZeroes if emulate_zeroes.is_none() => {
                u64::from(lim.max_write_zeroes_sectors) << SECTOR_SHIFT
            }
            _ => u64::from(lim.max_sectors) << SECTOR_SHIFT,
        };
        if lim.chunk_sectors != 0 {
            let chunk = u64::from(lim.chunk_sectors);
            max = max.min((chunk - sector % chunk) << SECTOR_SHIFT);
        }
        // Pieces are whole logical blocks.
        let max = (max.min(remaining) / lbs * lbs).max(lbs.min(remaining));
        let mut child = Bio::at(
            if emulate_zeroes.is_some() {
                Op::Write
            } else {
                op
            },
            sector << SECTOR_SHIFT,
        );
        child.set_flags(parent.flags());
        let offset_in_parent = self.done_bytes;

        if let (Op::WriteZeroes, Some(zero)) = (op, emulate_zeroes) {
            // Emulated write-zeroes: writes of a shared zero buffer.
            let mut left = max;
            let mut segs = 0;
            while left > 0 && segs < lim.max_segments {
                let n = left
                    .min(zero.len() as u64)
                    .min(u64::from(lim.max_segment_size)) as u32;
                let n = (u64::from(n) / SECTOR_SIZE * SECTOR_SIZE) as u32;
                if n == 0 {
                    break;
                }
                // SAFETY: the zero page is the device's, outlives every
                // bio, and is read-only (never written by anyone).
                child.push_segment(unsafe { zero.view(0, zero.len()) }, 0, n);
                left -= u64::from(n);
                segs += 1;
            }
            let len = child.len_bytes() / lbs * lbs;
            if len == 0 {
                return Err(Unsplittable);
            }
            assert_eq!(len, child.len_bytes());
            self.done_bytes += len;
            return Ok(Some(Piece {
                bio: child,
                offset_in_parent,
                bounce: false,
            }));
        }

        if !op.has_data() {
            child.set_len_bytes(max);
            self.done_bytes += max;
            return Ok(Some(Piece {
                bio: child,
                offset_in_parent,
                bounce: false,
            }));
        }

        // Walk the parent's segments into at most max_segments views.
        let segs = parent.segments();
        let mut views: SmallVec<[(usize, u32, u32); 8]> = SmallVec::new();
        let mut bytes = 0u64;
        let (mut si, mut so) = (self.seg, self.seg_off);
        while bytes < max && views.len() < lim.max_segments as usize && si < segs.len() {
            let s = &segs[si];
            let avail = u64::from(s.len() - so);
            let addr = (s.addr() + so as usize) as u64;
            let take = avail
                .min(max - bytes)
                .min(u64::from(lim.max_segment_size))
                .min(to_boundary(addr, lim.seg_boundary_mask));
            views.push((si, so, take as u32));
            bytes += take;
            so += take as u32;
            if so == s.len() {
                si += 1;
                so = 0;
            }
        }
        // Trim the tail to a whole number of logical blocks.
        let mut excess = bytes % lbs;
        while excess > 0 {
            let Some(last) = views.last_mut() else { break };
            let cut = u64::from(last.2).min(excess);
            last.2 -= cut as u32;
            excess -= cut;
            bytes -= cut;
            if last.2 == 0 {
                views.pop();
            }
        }
        if bytes == 0 {
            return Err(Unsplittable);
        }
        // Where the next piece starts.
        let (lsi, lso, llen) = *views.last().expect("a piece has a segment");
        self.seg = lsi;
        self.seg_off = lso + llen;
        if self.seg_off == segs[lsi].len() {
            self.seg += 1;
            self.seg_off = 0;
        }
        self.done_bytes += bytes;
        let dma = lim.dma_alignment as usize;
        let mut bounce = false;
        for &(i, off, len) in &views {
            let s = &segs[i];
            let addr = s.addr() + off as usize;
            bounce |= (addr | len as usize) & dma != 0;
            if !bounce {
                // The segment views the parent's memory: no copy.
                // SAFETY: the view lies inside a segment of the parent bio,
                // whose memory the caller lent until the parent's completion
                // is reaped; the parent ends only after every piece has, and
                // pieces cover disjoint bytes.
                let view = unsafe {
                    s.buf()
                        .view(s.offset() as usize + off as usize, len as usize)
                };
                child.push_segment(view, 0, len);
            }
        }
        if bounce {
            child = Bio::at(op, sector << SECTOR_SHIFT);
            child.set_flags(parent.flags());
            child.set_len_bytes(bytes);
        }
        Ok(Some(Piece {
            bio: child,
            offset_in_parent,
            bounce,
        }))
    }
}

/// Cut the bio in slot `parent` into pieces that fit `lim` and hand each
/// to `issue`, in order (the loop of Linux `bio_split_to_limits` as
/// `submit_bio` runs it): the cutting lives here, the caller only queues
/// what it is given. Stops at the first piece `issue` fails. Returns how
/// many pieces were cut and the status the cutting ended with.
///
/// # Safety
///
/// `parent` must point to a live slot holding a bio, owned by the caller
/// for the whole call (in no request), and nothing may write its bio while
/// this runs: `issue` may end other slots, and may change the parent's
/// bookkeeping (`parent::add_piece`, `parent::piece_done`), but not its
/// bio. No reference derived from `parent` here lives across a call of
/// `issue`.
pub(crate) unsafe fn cut(
    parent: NonNull<BioNode>,
    lim: &QueueLimits,
    emulate_zeroes: Option<&IoBuf>,
    mut issue: impl FnMut(Piece) -> Status,
) -> (u32, Status) {
    let mut splitter = Splitter::default();
    let mut pieces = 0u32;
    loop {
        // SAFETY: the caller keeps the slot alive and its bio unwritten
        // for this call; the reference ends before `issue` runs.
        let bio = unsafe { parent.as_ref() }
            .bio
            .as_ref()
            .expect("a split parent holds its bio");
        let piece = match splitter.next(bio, lim, emulate_zeroes) {
            Ok(Some(p)) => p,
            Ok(None) => return (pieces, Status::Ok),
            Err(Unsplittable) => {
                return (pieces, Status::Invalid(InvalidKind::TooManySegments));
            }
        };
        pieces += 1;
        let status = issue(piece);
        if !status.is_ok() {
            return (pieces, status);
        }
    }
}

/// Parent and piece bookkeeping of a split bio (Linux `bio_chain` and the
/// parent's `__bi_remaining`): the parent counts its pieces in flight, plus
/// one for the submission that is still cutting it, so it cannot end while
/// pieces are still being made, however fast they complete; it ends once,
/// after the last, with the first error any piece had.
pub(crate) mod parent {
    use crate::bioset::BioNode;
    use crate::error::Status;

    /// `node` becomes a parent being cut.
    pub(crate) fn begin(node: &mut BioNode) {
        assert!(!node.parent, "a bio is split once");
        node.parent = true;
        node.aux = 1;
    }

    /// One more piece of `node` was sent.
    pub(crate) fn add_piece(node: &mut BioNode) {
        assert!(node.parent);
        node.aux += 1;
    }

    /// A piece (or the cutting) of `node` ended with `status`. Returns the
    /// parent's status when that was the last one.
    pub(crate) fn piece_done(node: &mut BioNode, status: Status) -> Option<Status> {
        assert!(node.parent);
        assert!(node.aux > 0);
        let bio = node.bio.as_mut().expect("a split parent holds its bio");
        if bio.status.is_ok() && !status.is_ok() {
            bio.status = status;
        }
        node.aux -= 1;
        if node.aux > 0 {
            return None;
        }
        node.parent = false;
        Some(bio.status)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lim() -> QueueLimits {
        QueueLimits::default()
    }

    fn split_all(bio: &Bio, lim: &QueueLimits) -> Vec<Piece> {
        let mut s = Splitter::default();
        let mut out = Vec::new();
        while let Some(p) = s.next(bio, lim, None).unwrap() {
            out.push(p);
        }
        out
    }

    #[test]
    fn a_fitting_bio_is_left_alone() {
        let bio = Bio::read_at(0, IoBuf::page_aligned(128 << 10));
        assert_eq!(fits(&bio, &lim()), Fit::Fits);
    }

    #[test]
    fn max_sectors_64_cuts_128k_into_4() {
        let l = QueueLimits {
            max_sectors: 64,
            ..lim()
        };
        let bio = Bio::read_at(4096, IoBuf::page_aligned(128 << 10));
        assert_eq!(fits(&bio, &l), Fit::Split);
        let p = split_all(&bio, &l);
        assert_eq!(p.len(), 4);
        for (i, piece) in p.iter().enumerate() {
            assert_eq!(piece.bio.len_bytes(), 32 << 10);
            assert_eq!(piece.bio.sector(), 8 + 64 * i as u64);
            assert_eq!(piece.offset_in_parent, (32 << 10) * i as u64);
            assert!(!piece.bounce);
        }
        // By reference: the first piece views the parent's first byte.
        assert_eq!(p[0].bio.segments()[0].addr(), bio.segments()[0].addr());
    }

    #[test]
    fn chunk_boundary_is_never_crossed() {
        let l = QueueLimits {
            chunk_sectors: 16,
            ..lim()
        };
        let bio = Bio::write_at(6144, IoBuf::page_aligned(16 << 10));
        let p = split_all(&bio, &l);
        let bounds: Vec<(u64, u64)> = p
            .iter()
            .map(|x| (x.bio.sector(), x.bio.len_sectors()))
            .collect();
        assert_eq!(bounds, vec![(12, 4), (16, 16), (32, 12)]);
    }

    #[test]
    fn misaligned_segment_is_marked_for_bounce() {
        let buf = IoBuf::page_aligned(8192);
        let mut bio = Bio::at(Op::Read, 0);
        bio.push_segment(buf, 1, 4096);
        assert_eq!(fits(&bio, &lim()), Fit::Split);
        let p = split_all(&bio, &lim());
        assert_eq!(p.len(), 1);
        assert!(p[0].bounce);
        assert_eq!(p[0].bio.len_bytes(), 4096);
    }

    #[test]
    fn discard_is_cut_to_max_discard_sectors() {
        let l = QueueLimits {
            max_discard_sectors: 100,
            logical_block_size: 512,
            ..lim()
        };
        let bio = Bio::discard_at(0, 250 * 512);
        let p = split_all(&bio, &l);
        let lens: Vec<u64> = p.iter().map(|x| x.bio.len_sectors()).collect();
        assert_eq!(lens, vec![100, 100, 50]);
    }

    proptest! {
        /// Pieces cover the parent exactly, in order, respect every limit,
        /// and view exactly the parent's bytes.
        #[test]
        fn pieces_cover_the_bio_and_respect_limits(
            seg_lens in proptest::collection::vec(1u32..=16, 1..10),
            max_sectors in 1u32..64,
            max_segments in 1u32..6,
            max_segment_kib in 1u32..20,
            chunk in prop_oneof![Just(0u32), 8u32..64],
            start in 0u64..64,
        ) {
            let lim = QueueLimits {
                max_sectors: max_sectors.max(1),
                max_segments,
                max_segment_size: max_segment_kib * 512,
                chunk_sectors: chunk,
                ..QueueLimits::default()
            };
            let mut bio = Bio::at(Op::Write, start * 512);
            let mut bytes = Vec::new();
            for (i, n) in seg_lens.iter().enumerate() {
                let mut b = IoBuf::page_aligned((*n as usize) * 512);
                for (j, x) in b.as_mut_slice().iter_mut().enumerate() {
                    *x = (i * 31 + j) as u8;
                }
                bytes.extend_from_slice(b.as_slice());
                bio.push_segment(b, 0, n * 512);
            }
            let pieces = split_all(&bio, &lim);
            let mut at = 0u64;
            let mut seen = Vec::new();
            for p in &pieces {
                prop_assert_eq!(p.offset_in_parent, at);
                prop_assert_eq!(p.bio.sector(), start + at / 512);
                prop_assert!(p.bio.len_sectors() <= u64::from(lim.max_sectors));
                prop_assert!(p.bio.segments().len() <= lim.max_segments as usize);
                prop_assert_eq!(p.bio.len_bytes() % 512, 0);
                if chunk != 0 {
                    let c = u64::from(chunk);
                    prop_assert_eq!(p.bio.sector() / c, (p.bio.sector() + p.bio.len_sectors() - 1) / c);
                }
                for s in p.bio.segments() {
                    prop_assert!(s.len() <= lim.max_segment_size);
                    seen.extend_from_slice(s.as_slice());
                }
                at += p.bio.len_bytes();
            }
            prop_assert_eq!(at, bio.len_bytes());
            prop_assert_eq!(seen, bytes);
        }
    }
}
