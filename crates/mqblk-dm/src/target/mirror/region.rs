//! Region state of a mirror (Linux `dm-region-hash`), kept in atomics so
//! that the I/O path shares no lock: bitmaps of one bit per region, and a
//! count of write children in flight per region.
//!
//! Every bitmap is read by many hardware queues and written rarely; the
//! hot path tests bits and only writes one on a state change.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A bitmap of regions.
#[derive(Debug)]
pub(crate) struct Bits {
    words: Box<[AtomicU64]>,
    len: u64,
}

impl Bits {
    /// `len` bits, all clear.
    pub(crate) fn new(len: u64) -> Bits {
        Bits {
            words: (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            len,
        }
    }

    #[inline]
    fn at(&self, i: u64) -> (&AtomicU64, u64) {
        debug_assert!(i < self.len);
        (&self.words[(i >> 6) as usize], 1u64 << (i & 63))
    }

    /// Bit `i`.
    #[inline]
    pub(crate) fn test(&self, i: u64) -> bool {
        let (w, m) = self.at(i);
        w.load(Ordering::SeqCst) & m != 0
    }

    /// Set bit `i`; true if it was clear.
    #[inline]
    pub(crate) fn set(&self, i: u64) -> bool {
        let (w, m) = self.at(i);
        w.fetch_or(m, Ordering::SeqCst) & m == 0
    }

    /// Clear bit `i`.
    #[inline]
    pub(crate) fn clear(&self, i: u64) {
        let (w, m) = self.at(i);
        w.fetch_and(!m, Ordering::SeqCst);
    }

    /// Set every bit.
    pub(crate) fn set_all(&self) {
        for (n, w) in self.words.iter().enumerate() {
            w.store(self.mask(n), Ordering::SeqCst);
        }
    }

    /// The bits of word `n` that are regions (the last word is partial).
    pub(crate) fn mask(&self, n: usize) -> u64 {
        let rest = self.len - (n as u64) * 64;
        if rest >= 64 {
            u64::MAX
        } else {
            (1u64 << rest) - 1
        }
    }

    /// Bits set.
    pub(crate) fn count(&self) -> u64 {
        self.words
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// Word `n`.
    pub(crate) fn word(&self, n: usize) -> &AtomicU64 {
        &self.words[n]
    }

    /// Number of words.
    pub(crate) fn nr_words(&self) -> usize {
        self.words.len()
    }
}

/// Write children in flight per region.
#[derive(Debug)]
pub(crate) struct Pending {
    counts: Box<[AtomicU32]>,
}

impl Pending {
    pub(crate) fn new(len: u64) -> Pending {
        Pending {
            counts: (0..len).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// `n` more children for region `r`. Sequentially consistent: the
    /// increment is ordered before the caller's next look at the region's
    /// bits (the copier and the log cleaner look the other way round).
    #[inline]
    pub(crate) fn add(&self, r: u64, n: u32) {
        self.counts[r as usize].fetch_add(n, Ordering::SeqCst);
    }

    /// `n` children of region `r` ended (or were never sent).
    #[inline]
    pub(crate) fn sub(&self, r: u64, n: u32) {
        let before = self.counts[r as usize].fetch_sub(n, Ordering::SeqCst);
        debug_assert!(
            before >= n,
            "region {r}: {n} children end, {before} were in flight"
        );
    }

    /// Children in flight on region `r`.
    #[inline]
    pub(crate) fn get(&self, r: u64) -> u32 {
        self.counts[r as usize].load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_set_clear_count_and_the_partial_last_word() {
        let b = Bits::new(70);
        assert!(b.set(3));
        assert!(!b.set(3));
        assert!(b.test(3));
        b.clear(3);
        assert!(!b.test(3));
        b.set_all();
        assert_eq!(b.count(), 70);
        assert_eq!(b.mask(1), (1 << 6) - 1);
    }
}
