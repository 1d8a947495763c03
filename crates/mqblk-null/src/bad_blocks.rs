//! Bad-block ranges of the null device (Linux null_blk's `badblocks`,
//! block/badblocks.c): reads and writes that touch one complete with a
//! medium error.
//!
//! Sits inside the driver's `queue_rq`, after fault injection. The ranges
//! are fixed when the device is created and only read afterwards, so the
//! lookup takes no lock: a binary search over sorted, merged ranges.

use mqblk_core::limits::SECTOR_SIZE;

/// An inclusive range of 512-byte sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SectorRange {
    /// First bad sector.
    pub start: u64,
    /// Last bad sector (inclusive).
    pub end: u64,
}

/// A set of bad sector ranges, sorted and merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BadBlocks {
    ranges: Box<[SectorRange]>,
}

impl BadBlocks {
    /// Parse `START-END[:START-END...]` (inclusive sectors; `N` alone is
    /// the single sector `N-N`). Every range must lie below
    /// `capacity_sectors`. Overlapping and adjacent ranges are merged.
    pub fn parse(s: &str, capacity_sectors: u64) -> Result<BadBlocks, String> {
        let mut ranges = Vec::new();
        for part in s.split(':') {
            let part = part.trim();
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            let num = |x: &str| {
                x.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("`{part}` is not START-END with unsigned sector numbers"))
            };
            let (start, end) = (num(a)?, num(b)?);
            if start > end {
                return Err(format!("range `{part}` ends before it starts"));
            }
            if end >= capacity_sectors {
                return Err(format!(
                    "range `{part}` runs past the last sector {}",
                    capacity_sectors.saturating_sub(1)
                ));
            }
            ranges.push(SectorRange { start, end });
        }
        Ok(BadBlocks::from_ranges(ranges))
    }

    /// Build from ranges in any order (they are sorted and merged).
    pub fn from_ranges(mut ranges: Vec<SectorRange>) -> BadBlocks {
        ranges.sort_unstable();
        let mut merged: Vec<SectorRange> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end.saturating_add(1) => {
                    last.end = last.end.max(r.end)
                }
                _ => merged.push(r),
            }
        }
        BadBlocks {
            ranges: merged.into_boxed_slice(),
        }
    }

    /// True if there are no bad blocks.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The merged ranges.
    pub fn ranges(&self) -> &[SectorRange] {
        &self.ranges
    }

    /// True if `len_sectors` sectors from `sector` touch a bad range.
    #[inline]
    pub fn hits(&self, sector: u64, len_sectors: u64) -> bool {
        if len_sectors == 0 {
            return false;
        }
        let last = sector.saturating_add(len_sectors - 1);
        // The first range that ends at or after `sector` is the only candidate.
        let i = self.ranges.partition_point(|r| r.end < sector);
        self.ranges.get(i).is_some_and(|r| r.start <= last)
    }

    /// As [`BadBlocks::hits`], for a byte range.
    #[inline]
    pub fn hits_bytes(&self, offset_bytes: u64, len_bytes: u64) -> bool {
        self.hits(offset_bytes / SECTOR_SIZE, len_bytes.div_ceil(SECTOR_SIZE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_merge_and_lookup() {
        let b = BadBlocks::parse("100-199:5:150-300:301-301", 1000).unwrap();
        assert_eq!(
            b.ranges(),
            [
                SectorRange { start: 5, end: 5 },
                SectorRange {
                    start: 100,
                    end: 301
                }
            ]
        );
        assert!(!b.hits(0, 5));
        assert!(b.hits(0, 6));
        assert!(b.hits(5, 1));
        assert!(!b.hits(6, 94));
        assert!(b.hits(6, 95));
        assert!(b.hits(301, 1));
        assert!(!b.hits(302, 100));
        assert!(!b.hits(5, 0));
        assert!(b.hits_bytes(100 * 512, 512));
        assert!(!b.hits_bytes(302 * 512, 4096));
    }

    #[test]
    fn parse_errors() {
        assert!(BadBlocks::parse("9-3", 100).is_err());
        assert!(BadBlocks::parse("a-b", 100).is_err());
        assert!(BadBlocks::parse("1-2:", 100).is_err());
        assert!(BadBlocks::parse("50-100", 100).is_err());
        assert!(BadBlocks::parse("50-99", 100).is_ok());
        assert!(BadBlocks::default().is_empty());
    }
}
