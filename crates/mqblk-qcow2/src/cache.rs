//! The L2 cache (QEMU's `l2-cache-size`): a fixed number of L2 tables held
//! in memory, least recently used out first. A dirty table leaves only
//! through its owner, which writes it back in the right order first
//! ([`crate::image`]). Counts its hits and misses. Pure: no I/O.

use std::collections::HashMap;

/// Default size of the cache: 1 MiB of tables (QEMU's default on Linux
/// is up to 32 MiB, sized to the image; this one is stated, not guessed).
pub const DEFAULT_BYTES: u64 = 1 << 20;

/// One cached table.
#[derive(Debug)]
pub struct Slot {
    /// File offset of the table.
    pub offset: u64,
    /// The table, as on disk (big-endian entries).
    pub data: Vec<u8>,
    /// Changed since read or last written.
    pub dirty: bool,
    used: u64,
}

/// The cache.
#[derive(Debug)]
pub struct L2Cache {
    slots: Vec<Slot>,
    index: HashMap<u64, usize>,
    cap: usize,
    tick: u64,
    /// Lookups that found their table.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
}

impl L2Cache {
    /// A cache of `bytes` bytes of `table_bytes`-byte tables (two at least).
    pub fn new(bytes: u64, table_bytes: u64) -> Self {
        let cap = (bytes / table_bytes).max(2) as usize;
        L2Cache {
            slots: Vec::with_capacity(cap.min(1024)),
            index: HashMap::with_capacity(cap.min(1024)),
            cap,
            tick: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// Tables it holds at most.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The slot of the table at `offset`, if cached (counted).
    pub fn lookup(&mut self, offset: u64) -> Option<usize> {
        self.tick += 1;
        match self.index.get(&offset) {
            Some(&i) => {
                self.hits += 1;
                self.slots[i].used = self.tick;
                Some(i)
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// The slot of the table at `offset`, if cached (not counted, and not
    /// made more recent: for a second look at a table just looked up).
    pub fn peek(&self, offset: u64) -> Option<usize> {
        self.index.get(&offset).copied()
    }

    /// The slot at `i`.
    pub fn slot(&mut self, i: usize) -> &mut Slot {
        &mut self.slots[i]
    }

    /// If the cache is full, the least recently used slot, which
    /// [`L2Cache::insert`] would replace (its owner writes it back first
    /// if it is dirty).
    pub fn victim(&self) -> Option<usize> {
        if self.slots.len() < self.cap {
            return None;
        }
        self.slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| s.used)
            .map(|(i, _)| i)
    }

    /// Put a table in, replacing the victim if full; its slot index. The
    /// victim must be clean.
    pub fn insert(&mut self, offset: u64, data: Vec<u8>, dirty: bool) -> usize {
        self.tick += 1;
        let slot = Slot {
            offset,
            data,
            dirty,
            used: self.tick,
        };
        let i = match self.victim() {
            Some(v) => {
                assert!(!self.slots[v].dirty, "a dirty L2 table evicted unwritten");
                self.index.remove(&self.slots[v].offset);
                self.slots[v] = slot;
                v
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        };
        self.index.insert(offset, i);
        i
    }

    /// Every slot, for writing back the dirty ones.
    pub fn slots_mut(&mut self) -> impl Iterator<Item = &mut Slot> {
        self.slots.iter_mut()
    }

    /// Bytes the cached tables take.
    pub fn memory_bytes(&self) -> u64 {
        self.slots.iter().map(|s| s.data.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_table_goes_first() {
        let mut c = L2Cache::new(3 * 512, 512);
        for off in [512u64, 1024, 1536] {
            c.insert(off, vec![0; 512], false);
        }
        assert_eq!(c.lookup(512), Some(0));
        assert_eq!(c.victim(), Some(1));
        let i = c.insert(2048, vec![1; 512], false);
        assert_eq!(i, 1);
        assert_eq!(c.lookup(1024), None);
        assert_eq!((c.hits, c.misses), (1, 1));
        assert_eq!(c.memory_bytes(), 3 * 512);
    }
}
