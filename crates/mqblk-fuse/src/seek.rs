//! lseek(SEEK_DATA) and lseek(SEEK_HOLE) answered from the device's
//! extents (Linux's block status; qemu's `bdrv_block_status`): the first
//! data or hole at or after an offset, looked for one window at a time so
//! that a large, sparse device costs a bounded answer per step.

use mqblk_core::Extent;

/// Bytes of extents asked for at once.
pub const WINDOW_BYTES: u64 = 1 << 30;

/// What to look for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// The first byte that is data.
    Data,
    /// The first byte of a hole (the end of the file is one).
    Hole,
}

/// Where `seek` lands from `offset` on a file of `size_bytes`, given the
/// extents `extents(offset, len)` reports; `Err(ENXIO)` past the end (or
/// no data after `offset`), another errno if the extents cannot be had.
pub fn seek(
    seek: Seek,
    offset: u64,
    size_bytes: u64,
    mut extents: impl FnMut(u64, u64) -> Result<Vec<Extent>, i32>,
) -> Result<u64, i32> {
    if offset >= size_bytes {
        return Err(libc::ENXIO);
    }
    let mut at = offset;
    while at < size_bytes {
        let len = WINDOW_BYTES.min(size_bytes - at);
        let found = extents(at, len)?;
        let mut reached = at;
        for e in &found {
            let end = e.offset_bytes.saturating_add(e.len_bytes);
            if end <= at || e.len_bytes == 0 {
                continue;
            }
            let start = e.offset_bytes.max(at);
            if e.hole == (seek == Seek::Hole) {
                return Ok(start);
            }
            reached = reached.max(end);
        }
        // A window with no extent past `at` would not move: step over it.
        at = if reached > at { reached } else { at + len };
    }
    match seek {
        Seek::Data => Err(libc::ENXIO),
        Seek::Hole => Ok(size_bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ext(offset_bytes: u64, len_bytes: u64, hole: bool) -> Extent {
        Extent {
            offset_bytes,
            len_bytes,
            hole,
            zero: hole,
        }
    }

    /// A device of runs `(len, hole)`, answering extents like a driver.
    fn device(runs: &[(u64, bool)]) -> impl FnMut(u64, u64) -> Result<Vec<Extent>, i32> + '_ {
        move |off, len| {
            let mut out = Vec::new();
            let mut at = 0;
            for &(l, hole) in runs {
                let (s, e) = (at.max(off), (at + l).min(off + len));
                if s < e {
                    out.push(ext(s, e - s, hole));
                }
                at += l;
            }
            Ok(out)
        }
    }

    #[test]
    fn holes_and_data_are_found() {
        let runs = [(4096, false), (8192, true), (4096, false)];
        let size = 16384;
        assert_eq!(seek(Seek::Hole, 0, size, device(&runs)), Ok(4096));
        assert_eq!(seek(Seek::Data, 4096, size, device(&runs)), Ok(12288));
        assert_eq!(seek(Seek::Data, 100, size, device(&runs)), Ok(100));
        assert_eq!(seek(Seek::Hole, 12288, size, device(&runs)), Ok(size));
        assert_eq!(
            seek(Seek::Data, size, size, device(&runs)),
            Err(libc::ENXIO)
        );
    }

    #[test]
    fn no_data_after_the_offset_is_enxio() {
        let runs = [(4096, false), (1 << 31, true)];
        let size = 4096 + (1 << 31);
        assert_eq!(
            seek(Seek::Data, 4096, size, device(&runs)),
            Err(libc::ENXIO)
        );
    }

    #[test]
    fn an_error_from_the_device_is_passed_on() {
        assert_eq!(
            seek(Seek::Hole, 0, 4096, |_, _| Err(libc::EIO)),
            Err(libc::EIO)
        );
    }

    proptest! {
        /// The answer is the first byte at or after the offset of the
        /// kind asked for, as a byte-by-byte walk of the runs finds it.
        #[test]
        fn seek_matches_a_walk(
            runs in proptest::collection::vec((1u64..5000, any::<bool>()), 1..12),
            at in 0u64..70000,
            hole in any::<bool>(),
        ) {
            let size: u64 = runs.iter().map(|r| r.0).sum();
            let kind = if hole { Seek::Hole } else { Seek::Data };
            let mut want = None;
            let mut pos = 0;
            for &(l, h) in &runs {
                if want.is_none() && h == hole && pos + l > at {
                    want = Some(pos.max(at));
                }
                pos += l;
            }
            let want = match (want, kind) {
                _ if at >= size => Err(libc::ENXIO),
                (Some(w), _) => Ok(w),
                (None, Seek::Hole) => Ok(size),
                (None, Seek::Data) => Err(libc::ENXIO),
            };
            prop_assert_eq!(seek(kind, at, size, device(&runs)), want);
        }
    }
}
