//! The chunk index of one shard of the page store (Linux brd keeps its
//! pages in an xarray): chunk number to chunk, in order.
//!
//! A shard holds every `2^shard_bits`-th chunk of the device (those whose
//! low bits are the shard's index), so the index works on the chunk's
//! number within the shard. It has two levels: an ordered map of leaves,
//! and in each leaf a flat array of [`LEAF_CHUNKS`] chunk slots. A lookup
//! is a search among the leaves (one node for a device of a few GiB: a
//! leaf covers 16 MiB of the shard) and an array index, instead of a walk
//! down a tree of every chunk, whose nodes miss the cache on a large
//! device. Leaves are allocated when their first chunk is, and freed with
//! their last, so a sparse device (1 TiB with a few pages written) stays
//! small, and ordered walks visit only the leaves that exist.

use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// log2 of the chunk slots in a leaf.
const LEAF_SHIFT: u32 = 8;
/// Chunk slots in a leaf.
pub(crate) const LEAF_CHUNKS: usize = 1 << LEAF_SHIFT;
const SLOT_MASK: u64 = LEAF_CHUNKS as u64 - 1;

struct Leaf<T> {
    slots: [Option<Box<T>>; LEAF_CHUNKS],
    used: u32,
}

impl<T> Leaf<T> {
    fn new() -> Box<Leaf<T>> {
        Box::new(Leaf {
            slots: std::array::from_fn(|_| None),
            used: 0,
        })
    }
}

/// The chunks of one shard by chunk number (see the module doc).
pub(crate) struct XArray<T> {
    shard_bits: u32,
    shard: u64,
    leaves: BTreeMap<u64, Box<Leaf<T>>>,
}

impl<T> XArray<T> {
    /// An empty index for shard `shard` of `2^shard_bits`.
    pub(crate) fn new(shard_bits: u32, shard: u64) -> XArray<T> {
        debug_assert!(shard < 1 << shard_bits);
        XArray {
            shard_bits,
            shard,
            leaves: BTreeMap::new(),
        }
    }

    /// (leaf number, slot) of chunk `chunk_no`, which must be this shard's.
    #[inline]
    fn place(&self, chunk_no: u64) -> (u64, usize) {
        debug_assert_eq!(
            chunk_no & ((1 << self.shard_bits) - 1),
            self.shard,
            "chunk {chunk_no} is not shard {}'s",
            self.shard
        );
        let local = chunk_no >> self.shard_bits;
        (local >> LEAF_SHIFT, (local & SLOT_MASK) as usize)
    }

    /// The chunk number of `slot` in leaf `leaf`.
    #[inline]
    fn chunk_no(&self, leaf: u64, slot: usize) -> u64 {
        ((leaf << LEAF_SHIFT | slot as u64) << self.shard_bits) | self.shard
    }

    /// The chunk `chunk_no`, if stored.
    #[inline]
    pub(crate) fn get(&self, chunk_no: u64) -> Option<&T> {
        let (leaf, slot) = self.place(chunk_no);
        self.leaves.get(&leaf)?.slots[slot].as_deref()
    }

    /// The chunk `chunk_no`, made with `make` if it is not stored (one
    /// search either way); None if it is not and `make` declines.
    #[inline]
    pub(crate) fn get_or_make(
        &mut self,
        chunk_no: u64,
        make: impl FnOnce() -> Option<Box<T>>,
    ) -> Option<&mut T> {
        use std::collections::btree_map::Entry;
        let (leaf, slot) = self.place(chunk_no);
        let l = match self.leaves.entry(leaf) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let c = make()?;
                let l = e.insert(Leaf::new());
                l.used = 1;
                return Some(l.slots[slot].insert(c));
            }
        };
        if l.slots[slot].is_none() {
            l.slots[slot] = Some(make()?);
            l.used += 1;
        }
        l.slots[slot].as_deref_mut()
    }

    /// Drop chunk `chunk_no`, if stored.
    pub(crate) fn remove(&mut self, chunk_no: u64) {
        let (leaf, slot) = self.place(chunk_no);
        if let Some(l) = self.leaves.get_mut(&leaf) {
            if l.slots[slot].take().is_some() {
                l.used -= 1;
                if l.used == 0 {
                    self.leaves.remove(&leaf);
                }
            }
        }
    }

    /// This shard's chunk numbers within `chunks`, as (first, last) local
    /// numbers; None if it has none there.
    fn local_range(&self, chunks: &RangeInclusive<u64>) -> Option<(u64, u64)> {
        let (a, b) = (*chunks.start(), *chunks.end());
        let mask = (1u64 << self.shard_bits) - 1;
        if b < self.shard || a > b {
            return None;
        }
        let first = if a <= self.shard {
            0
        } else {
            (a - self.shard).div_ceil(mask + 1)
        };
        let last = (b - self.shard) >> self.shard_bits;
        (first <= last).then_some((first, last))
    }

    /// Every stored chunk numbered within `chunks`, in order.
    pub(crate) fn for_each_in(&self, chunks: RangeInclusive<u64>, mut f: impl FnMut(u64, &T)) {
        let Some((first, last)) = self.local_range(&chunks) else {
            return;
        };
        for (&leaf, l) in self.leaves.range(first >> LEAF_SHIFT..=last >> LEAF_SHIFT) {
            for (slot, c) in l.slots.iter().enumerate() {
                let local = leaf << LEAF_SHIFT | slot as u64;
                if let Some(c) = c.as_deref().filter(|_| (first..=last).contains(&local)) {
                    f(self.chunk_no(leaf, slot), c);
                }
            }
        }
    }

    /// Call `f` on every stored chunk numbered within `chunks`, in order,
    /// and drop those for which it returns true.
    pub(crate) fn retain_in(
        &mut self,
        chunks: RangeInclusive<u64>,
        mut drop_it: impl FnMut(u64, &mut T) -> bool,
    ) {
        let Some((first, last)) = self.local_range(&chunks) else {
            return;
        };
        let (shard_bits, shard) = (self.shard_bits, self.shard);
        let mut emptied = Vec::new();
        for (&leaf, l) in self
            .leaves
            .range_mut(first >> LEAF_SHIFT..=last >> LEAF_SHIFT)
        {
            for slot in 0..LEAF_CHUNKS {
                let local = leaf << LEAF_SHIFT | slot as u64;
                if !(first..=last).contains(&local) {
                    continue;
                }
                let Some(c) = l.slots[slot].as_deref_mut() else {
                    continue;
                };
                if drop_it((local << shard_bits) | shard, c) {
                    l.slots[slot] = None;
                    l.used -= 1;
                }
            }
            if l.used == 0 {
                emptied.push(leaf);
            }
        }
        for leaf in emptied {
            self.leaves.remove(&leaf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_of_a_shard_round_trip_through_their_places() {
        let x: XArray<u8> = XArray::new(4, 5);
        for local in [0u64, 1, 255, 256, 1 << 30] {
            let no = local << 4 | 5;
            let (leaf, slot) = x.place(no);
            assert_eq!(x.chunk_no(leaf, slot), no);
        }
    }

    #[test]
    fn insert_get_remove_and_ordered_walks() {
        let mut x: XArray<u64> = XArray::new(2, 1);
        let nos: Vec<u64> = [0u64, 3, 255, 256, 257, 100_000]
            .iter()
            .map(|l| l << 2 | 1)
            .collect();
        for &no in nos.iter().rev() {
            assert_eq!(
                x.get_or_make(no, || Some(Box::new(no))),
                Some(&mut no.clone())
            );
            assert_eq!(
                x.get_or_make(no, || panic!("stored already")),
                Some(&mut no.clone())
            );
        }
        for &no in &nos {
            assert_eq!(x.get(no), Some(&no));
        }
        assert_eq!(x.get(1 << 2 | 1), None);
        assert_eq!(
            x.get_or_make(1 << 2 | 1, || None),
            None,
            "declined: nothing stored"
        );
        assert_eq!(x.get(1 << 2 | 1), None);
        let mut seen = Vec::new();
        x.for_each_in(0..=u64::MAX, |no, &v| {
            assert_eq!(no, v);
            seen.push(no);
        });
        assert_eq!(seen, nos, "in order");
        // A range that starts and ends between this shard's chunks.
        let mut seen = Vec::new();
        x.for_each_in(nos[1] + 1..=nos[4] - 1, |no, _| seen.push(no));
        assert_eq!(seen, &nos[2..4]);
        // Drop the even local numbers in a range; leaves left empty go.
        x.retain_in(nos[1]..=nos[4], |no, _| (no >> 2) % 2 == 0);
        let mut seen = Vec::new();
        x.for_each_in(0..=u64::MAX, |no, _| seen.push(no));
        assert_eq!(seen, vec![nos[0], nos[1], nos[2], nos[4], nos[5]]);
        for &no in &nos {
            x.remove(no);
        }
        assert!(x.leaves.is_empty());
    }

    #[test]
    fn ranges_outside_the_shard_are_empty() {
        let x: XArray<u8> = XArray::new(3, 6);
        assert_eq!(x.local_range(&(0..=5)), None);
        assert_eq!(x.local_range(&(0..=6)), Some((0, 0)));
        assert_eq!(x.local_range(&(7..=13)), None);
        assert_eq!(x.local_range(&(7..=14)), Some((1, 1)));
        let (from, to) = (9, 8);
        assert_eq!(x.local_range(&(from..=to)), None, "reversed");
    }
}
