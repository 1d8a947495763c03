//! Limits of a stacked device from its legs' (Linux `blk_stack_limits`):
//! the strictest size limits, the largest block and alignment, and the
//! features every leg (or any leg, for the write cache) has.

use mqblk_core::{Features, QueueLimits};

/// Combine `legs` into the limits and features of the device above them.
pub fn stack(legs: &[(QueueLimits, Features)]) -> (QueueLimits, Features) {
    let mut lim = QueueLimits::default();
    let mut feat = Features {
        discard: true,
        write_zeroes: true,
        ..Features::default()
    };
    let min_nz = |a: u32, b: u32| match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    };
    let mut first = true;
    for (l, f) in legs {
        if first {
            lim = *l;
            lim.chunk_sectors = 0;
            first = false;
        } else {
            lim.logical_block_size = lim.logical_block_size.max(l.logical_block_size);
            lim.physical_block_size = lim.physical_block_size.max(l.physical_block_size);
            lim.max_sectors = min_nz(lim.max_sectors, l.max_sectors);
            lim.max_segments = min_nz(lim.max_segments, l.max_segments);
            lim.max_segment_size = min_nz(lim.max_segment_size, l.max_segment_size);
            lim.seg_boundary_mask &= l.seg_boundary_mask;
            lim.dma_alignment = lim.dma_alignment.max(l.dma_alignment);
            lim.max_discard_sectors = min_nz(lim.max_discard_sectors, l.max_discard_sectors);
            lim.max_write_zeroes_sectors =
                min_nz(lim.max_write_zeroes_sectors, l.max_write_zeroes_sectors);
        }
        feat.write_cache |= f.write_cache;
        feat.fua |= f.fua;
        feat.rotational |= f.rotational;
        feat.read_only |= f.read_only;
        feat.discard &= f.discard;
        feat.write_zeroes &= f.write_zeroes;
    }
    if legs.is_empty() {
        // Only zero and error lines: nothing below to limit anything, and
        // a discard or write-zeroes of any size is theirs to answer.
        feat.discard = true;
        feat.write_zeroes = true;
        lim.max_discard_sectors = u32::MAX;
        lim.max_write_zeroes_sectors = u32::MAX;
    }
    lim.physical_block_size = lim.physical_block_size.max(lim.logical_block_size);
    (lim, feat)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strictest_limit_and_the_largest_block_win() {
        let a = QueueLimits {
            max_sectors: 256,
            ..QueueLimits::with_block_size(512)
        };
        let b = QueueLimits {
            max_sectors: 128,
            dma_alignment: 4095,
            ..QueueLimits::with_block_size(4096)
        };
        let fa = Features {
            write_cache: true,
            fua: true,
            discard: true,
            ..Features::default()
        };
        let fb = Features::default();
        let (l, f) = stack(&[(a, fa), (b, fb)]);
        assert_eq!(l.logical_block_size, 4096);
        assert_eq!(l.max_sectors, 128);
        assert_eq!(l.dma_alignment, 4095);
        assert!(f.write_cache && f.fua && !f.discard);
    }

    #[test]
    fn a_table_without_legs_discards_and_zeroes_any_size() {
        let (l, f) = stack(&[]);
        assert!(f.discard && f.write_zeroes);
        assert_eq!(l.max_discard_sectors, u32::MAX);
        assert_eq!(l.max_write_zeroes_sectors, u32::MAX);
    }
}
