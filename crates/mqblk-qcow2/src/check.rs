//! Checks on every offset read from the image before it is used: cluster
//! alignment, the file's bounds, and overlaps between pieces of metadata
//! (the header, the L1 table, the refcount table and blocks, the snapshot
//! table, the L2 tables). Pure: the regions are handed in.

use std::sync::Arc;

use crate::error::{Qcow2Error, Result};

/// A piece of metadata: its name and its bytes in the file.
#[derive(Clone, Debug)]
pub struct Region {
    /// What it is (`L2 table of L1 entry 3`).
    pub what: String,
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// Refuse any two regions that share a byte.
pub fn no_overlap(image: &Arc<str>, mut regions: Vec<Region>) -> Result<()> {
    regions.sort_by_key(|r| (r.start, r.end));
    for w in regions.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if b.start < a.end {
            return Err(Qcow2Error::Overlap {
                image: image.clone(),
                a: a.what.clone(),
                a_start: a.start,
                a_end: a.end,
                b: b.what.clone(),
                b_start: b.start,
                b_end: b.end,
            });
        }
    }
    Ok(())
}

/// Check a cluster offset read from `from`: non-zero, aligned to `cs`,
/// and with its `len` bytes below `limit`.
pub fn cluster_offset(
    image: &Arc<str>,
    what: &'static str,
    from: impl FnOnce() -> String,
    offset: u64,
    len: u64,
    cs: u64,
    limit: u64,
) -> Result<u64> {
    let bad = |from: String, limit: String| Qcow2Error::Offset {
        image: image.clone(),
        what,
        offset,
        from,
        limit,
    };
    if offset == 0 || !offset.is_multiple_of(cs) {
        return Err(bad(
            from(),
            format!("is not a non-zero multiple of the cluster size {cs}"),
        ));
    }
    match offset.checked_add(len) {
        Some(end) if end <= limit => Ok(offset),
        _ => Err(bad(
            from(),
            format!("with {len} bytes runs past the limit of {limit} bytes"),
        )),
    }
}

/// Check a byte range read from `from` (compressed data): below `limit`.
pub fn byte_range(
    image: &Arc<str>,
    what: &'static str,
    from: impl FnOnce() -> String,
    offset: u64,
    len: u64,
    limit: u64,
) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if offset > 0 && end <= limit => Ok(()),
        _ => Err(Qcow2Error::Offset {
            image: image.clone(),
            what,
            offset,
            from: from(),
            limit: format!("with {len} bytes is 0 or runs past the limit of {limit} bytes"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(what: &str, start: u64, end: u64) -> Region {
        Region {
            what: what.into(),
            start,
            end,
        }
    }

    #[test]
    fn overlapping_regions_are_named() {
        let img: Arc<str> = "x.qcow2".into();
        assert!(no_overlap(&img, vec![r("header", 0, 512), r("L1", 512, 1024)]).is_ok());
        let e = no_overlap(
            &img,
            vec![r("L1", 512, 1536), r("refcount table", 1024, 1536)],
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("L1") && e.contains("refcount table") && e.contains("x.qcow2"),
            "{e}"
        );
    }

    #[test]
    fn offsets_are_aligned_and_bounded() {
        let img: Arc<str> = "x.qcow2".into();
        let from = || "L1 entry 0".to_string();
        assert!(cluster_offset(&img, "L2 table", from, 4096, 4096, 4096, 8192).is_ok());
        let e = cluster_offset(&img, "L2 table", from, 4097, 4096, 4096, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("L1 entry 0"), "{e}");
        assert!(cluster_offset(&img, "L2 table", from, 8192, 4096, 4096, 8192).is_err());
        assert!(cluster_offset(&img, "L2 table", from, !4095, 4096, 4096, u64::MAX).is_err());
        assert!(byte_range(&img, "compressed data", from, 100, 50, 120).is_err());
    }
}
