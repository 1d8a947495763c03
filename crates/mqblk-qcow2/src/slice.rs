//! A hardware queue's L2 slices: the data path's lookup, without the
//! image's lock (QEMU's L2 cache is made of slices too, its
//! `l2-cache-entry-size`). Each queue keeps copies of slices of 512 L2
//! entries (4 KiB of table) in a direct-mapped array sized like the
//! image's L2 cache, each tagged with the mapping's generation
//! ([`crate::file::Mapped`]) at the time it was copied under the lock.
//! An entry is kept decoded: the host offset of a plain data cluster
//! written in place (allocated, not compressed, not zero, COPIED, inside
//! the file device), else 0. A read or an overwrite of such a cluster
//! finds its host offset here with one atomic load of the generation;
//! anything else (a miss, an older generation, a 0) goes the locked way,
//! which refreshes the slices it went through.
//!
//! Why copies per queue, and not a seqlock or a `RwLock` over the image's
//! own cache: a reader of shared tables would either take a lock word
//! shared by every queue (a `RwLock`'s read side bounces its cache line
//! between cores on every I/O) or read memory a writer changes under it
//! (a seqlock in Rust needs every table word to be an atomic, and a
//! retry loop). A copy per queue is read by its queue alone: nothing on
//! the hot path is written by another core but the generation, which
//! changes only when a plain data cluster stops being one (a discard, a
//! zeroing, a copy-on-write of a table), which is rare; allocations do not
//! change it, since a slice that still says "unallocated" only costs one
//! locked lookup. The price is memory (each queue holds its own copies)
//! and a copy of 4 KiB when a slice comes in. Pure: no I/O.

/// log2 of the entries of a slice (fewer if a table has fewer).
pub const SLICE_BITS: u32 = 9;

/// A queue's slices.
#[derive(Debug)]
pub struct Slices {
    /// The slice number each way holds (`u64::MAX`: none).
    keys: Box<[u64]>,
    /// The generation each way was copied at.
    gens: Box<[u64]>,
    /// `ways << bits` decoded entries.
    hosts: Box<[u64]>,
    /// log2 of the entries of a slice.
    bits: u32,
    /// Off for images whose entries the lookup does not decode (extended
    /// L2 entries).
    enabled: bool,
    /// Lookups of a whole request answered here.
    pub hits: u64,
    /// Requests that went the locked way.
    pub misses: u64,
}

impl Slices {
    /// Slices for `bytes` bytes of table (4 KiB slices; 2 at least), for
    /// an image whose L2 tables hold `1 << l2_bits` entries.
    pub fn new(bytes: u64, l2_bits: u32, enabled: bool) -> Self {
        let bits = SLICE_BITS.min(l2_bits);
        let ways = ((bytes >> (bits + 3)).max(2))
            .next_power_of_two()
            .min(1 << 16) as usize;
        Slices {
            keys: vec![u64::MAX; ways].into_boxed_slice(),
            gens: vec![0; ways].into_boxed_slice(),
            hosts: vec![0; ways << bits].into_boxed_slice(),
            bits,
            enabled,
            hits: 0,
            misses: 0,
        }
    }

    /// Entries in a slice.
    pub fn slice_len(&self) -> usize {
        1 << self.bits
    }

    /// Bytes the copies take.
    pub fn memory_bytes(&self) -> u64 {
        self.hosts.len() as u64 * 8
    }

    /// The way guest cluster `gc`'s slice goes to, and its slice number.
    #[inline]
    fn way(&self, gc: u64) -> (usize, u64) {
        let key = gc >> self.bits;
        ((key as usize) & (self.keys.len() - 1), key)
    }

    /// The host offset of guest cluster `gc`, if a slice of generation
    /// `gen` holds it as a plain data cluster written in place.
    #[inline]
    pub fn host(&self, gc: u64, gen: u64) -> Option<u64> {
        let (w, key) = self.way(gc);
        debug_assert!(w < self.keys.len());
        if !self.enabled || self.keys[w] != key || self.gens[w] != gen {
            return None;
        }
        let i = (w << self.bits) | (gc as usize & (self.slice_len() - 1));
        debug_assert!(i < self.hosts.len());
        match self.hosts[i] {
            0 => None,
            h => Some(h),
        }
    }

    /// Whether the way of `gc`'s slice holds it at generation `gen`.
    pub fn holds(&self, gc: u64, gen: u64) -> bool {
        let (w, key) = self.way(gc);
        self.enabled && self.keys[w] == key && self.gens[w] == gen
    }

    /// Copy in the slice of guest cluster `gc` at generation `gen`: `fill`
    /// writes the decoded entries of the slice's clusters, from its first.
    /// The way is emptied first, so an error leaves no half slice.
    pub fn fill<E>(
        &mut self,
        gc: u64,
        gen: u64,
        fill: impl FnOnce(u64, &mut [u64]) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.enabled {
            return Ok(());
        }
        let (w, key) = self.way(gc);
        self.keys[w] = u64::MAX;
        let n = self.slice_len();
        fill(key << self.bits, &mut self.hosts[w * n..(w + 1) * n])?;
        self.keys[w] = key;
        self.gens[w] = gen;
        Ok(())
    }

    /// Set the decoded entry of `gc`, if its slice is held at `gen`.
    pub fn patch(&mut self, gc: u64, gen: u64, host: u64) {
        if self.holds(gc, gen) {
            let (w, _) = self.way(gc);
            let i = (w << self.bits) | (gc as usize & (self.slice_len() - 1));
            self.hosts[i] = host;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_answers_only_at_its_generation_and_only_for_data() {
        // 64 KiB of slices of 512 entries: 16 ways.
        let mut s = Slices::new(64 << 10, 13, true);
        assert_eq!(s.slice_len(), 512);
        assert_eq!(s.host(5, 0), None);
        s.fill(5, 7, |first, out| {
            assert_eq!(first, 0);
            for (k, h) in out.iter_mut().enumerate() {
                *h = if k % 2 == 1 { (k as u64 + 1) << 16 } else { 0 };
            }
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(s.host(5, 7), Some(6 << 16));
        assert_eq!(s.host(4, 7), None, "0: not plain data");
        assert_eq!(s.host(5, 8), None, "a newer generation");
        // Another slice in the same way (16 ways apart) evicts it.
        assert!(s.holds(5, 7));
        s.fill(16 * 512 + 5, 7, |_, out| {
            out.fill(0);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert!(!s.holds(5, 7));
        assert_eq!(s.host(5, 7), None);
        // A patch lands only in a held slice.
        s.patch(16 * 512 + 9, 7, 1 << 20);
        assert_eq!(s.host(16 * 512 + 9, 7), Some(1 << 20));
        s.patch(9, 7, 1 << 20);
        assert_eq!(s.host(9, 7), None);
        // A failed fill leaves the way empty.
        assert_eq!(s.fill(16 * 512 + 5, 8, |_, _| Err(())), Err(()));
        assert!(!s.holds(16 * 512 + 5, 7));
    }

    #[test]
    fn small_tables_make_small_slices_and_extended_entries_none() {
        let s = Slices::new(1 << 20, 6, true);
        assert_eq!(s.slice_len(), 64);
        let mut s = Slices::new(1 << 20, 13, false);
        s.fill(0, 0, |_, out| {
            out.fill(1 << 16);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(s.host(0, 0), None);
    }
}
