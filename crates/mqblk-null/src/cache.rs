//! The volatile write cache of a memory-backed null device (Linux
//! null_blk's `cache_size`, its `nullb->dev->cache` tree): the
//! crash-consistency test bed.
//!
//! Sits between the driver's `queue_rq` and the durable [`Store`]. A plain
//! write lands here, one whole logical block per entry; a read sees the
//! cache first and the store behind it; a flush writes every cached block
//! back; a FUA write goes to the store and drops any cached copy; discard
//! and write-zeroes reach the store at once and drop cached copies too (as
//! null_blk's do). When more than the cache's size is held, the least
//! recently written blocks are written back, as a drive evicts, so some
//! unflushed writes survive a power cut, whole blocks at a time. A power
//! cut ([`WriteCache::power_cut`]) drops everything still cached.
//!
//! The cache is device-wide: a flush from any hardware queue must cover
//! writes completed on every other one. So, unlike the store's shards, it
//! is one lock, held for a whole request, which also keeps a request's
//! blocks from being seen (or evicted) half-written. This is a model for
//! tests, off the null device's fast path.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use crate::store::Store;

/// One cached block.
#[derive(Debug)]
struct Cached {
    /// Position in the eviction order (larger: written more recently).
    age: u64,
    data: Box<[u8]>,
}

/// What the lock protects.
#[derive(Debug, Default)]
struct CacheState {
    /// Cached blocks by block number.
    blocks: HashMap<u64, Cached>,
    /// Block numbers by age, oldest first: the eviction order.
    by_age: BTreeMap<u64, u64>,
    next_age: u64,
    /// Buffers of blocks that left the cache, reused by the next writes so
    /// the steady state does not allocate one per block.
    free: Vec<Box<[u8]>>,
    /// Blocks written back because the cache was over its size.
    evicted_blocks: u64,
}

/// A device-wide volatile write cache of whole logical blocks.
#[derive(Debug)]
pub(crate) struct WriteCache {
    block_bytes: usize,
    /// The most blocks held once a request is done.
    capacity_blocks: usize,
    state: Mutex<CacheState>,
}

impl WriteCache {
    /// A cache of `capacity_bytes` (whole blocks of `block_bytes`).
    pub(crate) fn new(block_bytes: u32, capacity_bytes: u64) -> WriteCache {
        let block_bytes = block_bytes as usize;
        debug_assert!(block_bytes.is_power_of_two());
        let capacity_blocks =
            usize::try_from(capacity_bytes / block_bytes as u64).unwrap_or(usize::MAX);
        let state = CacheState {
            blocks: HashMap::with_capacity(capacity_blocks.min(1 << 16)),
            ..CacheState::default()
        };
        WriteCache {
            block_bytes,
            capacity_blocks,
            state: Mutex::new(state),
        }
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        // Every update leaves the maps consistent between statements that
        // can panic, so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take the cache for one request against `store`. Dropping the guard
    /// writes back the oldest blocks while more than the cache's size is
    /// held.
    pub(crate) fn lock<'a>(&'a self, store: &'a Store) -> CacheGuard<'a> {
        CacheGuard {
            cache: self,
            store,
            st: self.state(),
        }
    }

    /// Bytes held and not yet written back.
    pub(crate) fn cached_bytes(&self) -> u64 {
        (self.state().blocks.len() * self.block_bytes) as u64
    }

    /// Bytes written back because the cache was full.
    pub(crate) fn evicted_bytes(&self) -> u64 {
        self.state().evicted_blocks * self.block_bytes as u64
    }

    /// Numbers of the `page_bytes` pages in `[first_page, end_page)` that
    /// hold a cached block, sorted and without repeats (for extents).
    pub(crate) fn pages_in(&self, first_page: u64, end_page: u64, page_bytes: u64) -> Vec<u64> {
        let bs = self.block_bytes as u64;
        let mut pages: Vec<u64> = self
            .state()
            .blocks
            .keys()
            .map(|&b| b * bs / page_bytes)
            .filter(|p| (first_page..end_page).contains(p))
            .collect();
        pages.sort_unstable();
        pages.dedup();
        pages
    }

    /// Lose power: drop every cached block. Returns the bytes lost.
    pub(crate) fn power_cut(&self) -> u64 {
        let mut st = self.state();
        let lost = (st.blocks.len() * self.block_bytes) as u64;
        let CacheState {
            blocks,
            by_age,
            free,
            ..
        } = &mut *st;
        by_age.clear();
        for (_, c) in blocks.drain() {
            recycle(free, self.capacity_blocks, c.data);
        }
        lost
    }
}

/// Keep a block buffer for reuse, up to one cache's worth.
fn recycle(free: &mut Vec<Box<[u8]>>, capacity_blocks: usize, data: Box<[u8]>) {
    if free.len() < capacity_blocks {
        free.push(data);
    }
}

/// The cache, locked for one request.
pub(crate) struct CacheGuard<'a> {
    cache: &'a WriteCache,
    store: &'a Store,
    st: MutexGuard<'a, CacheState>,
}

/// Call `f(block, offset_in_block, range_in_buffer)` for each piece of
/// `len` bytes at `offset_bytes` that lies in one block of `block_bytes`.
#[inline]
fn for_each_block(
    block_bytes: usize,
    offset_bytes: u64,
    len: usize,
    mut f: impl FnMut(u64, usize, std::ops::Range<usize>),
) {
    let bs = block_bytes as u64;
    let mut done = 0usize;
    while done < len {
        let pos = offset_bytes + done as u64;
        let block = pos / bs;
        let in_block = (pos % bs) as usize;
        let n = (block_bytes - in_block).min(len - done);
        f(block, in_block, done..done + n);
        done += n;
    }
}

impl CacheGuard<'_> {
    /// Cache `data` at `offset_bytes`. A block of which only a part is
    /// given keeps its other bytes from the cache or, if it was not cached,
    /// from the store, so a block is always whole; the core only sends
    /// whole blocks, possibly across several segments of one request.
    pub(crate) fn write(&mut self, offset_bytes: u64, data: &[u8]) {
        let bs = self.cache.block_bytes;
        let store = self.store;
        let st = &mut *self.st;
        for_each_block(bs, offset_bytes, data.len(), |block, in_block, range| {
            let age = st.next_age;
            st.next_age += 1;
            let entry = match st.blocks.entry(block) {
                Entry::Occupied(o) => {
                    let c = o.into_mut();
                    let removed = st.by_age.remove(&c.age);
                    debug_assert_eq!(removed, Some(block));
                    c.age = age;
                    c
                }
                Entry::Vacant(v) => {
                    let mut buf = st
                        .free
                        .pop()
                        .unwrap_or_else(|| vec![0u8; bs].into_boxed_slice());
                    debug_assert_eq!(buf.len(), bs);
                    if range.len() < bs {
                        store.read(block * bs as u64, &mut buf);
                    }
                    v.insert(Cached { age, data: buf })
                }
            };
            entry.data[in_block..in_block + range.len()].copy_from_slice(&data[range]);
            st.by_age.insert(age, block);
        });
    }

    /// Write `data` at `offset_bytes` straight to the store (FUA), dropping
    /// any cached copy of the blocks it covers so a later flush or eviction
    /// cannot bring an older value back.
    pub(crate) fn write_through(&mut self, offset_bytes: u64, data: &[u8]) {
        let bs = self.cache.block_bytes as u64;
        let first = offset_bytes / bs;
        let end = (offset_bytes + data.len() as u64).div_ceil(bs);
        // A partly covered block's cached bytes are newer than the store's:
        // write them back first so the block stays whole.
        let partial_head = !offset_bytes.is_multiple_of(bs);
        let partial_tail = !(offset_bytes + data.len() as u64).is_multiple_of(bs);
        for block in first..end {
            let partial = (block == first && partial_head) || (block + 1 == end && partial_tail);
            if partial {
                self.write_back(block);
            } else {
                self.drop_block(block);
            }
        }
        self.store.write(offset_bytes, data);
    }

    /// Copy `out.len()` bytes at `offset_bytes` into `out`: cached blocks
    /// first, the store for the rest.
    pub(crate) fn read(&mut self, offset_bytes: u64, out: &mut [u8]) {
        if self.st.blocks.is_empty() {
            self.store.read(offset_bytes, out);
            return;
        }
        let store = self.store;
        let bs = self.cache.block_bytes;
        let st = &*self.st;
        for_each_block(bs, offset_bytes, out.len(), |block, in_block, range| {
            let dst = &mut out[range];
            match st.blocks.get(&block) {
                Some(c) => dst.copy_from_slice(&c.data[in_block..in_block + dst.len()]),
                None => store.read(block * bs as u64 + in_block as u64, dst),
            }
        });
    }

    /// Make `len_bytes` at `offset_bytes` read as zeros in both layers:
    /// cached copies of whole blocks are dropped, partly covered ones are
    /// zeroed in place, and the store is discarded (durable at once).
    pub(crate) fn discard(&mut self, offset_bytes: u64, len_bytes: u64) {
        if len_bytes == 0 {
            return;
        }
        let bs = self.cache.block_bytes as u64;
        let end_bytes = offset_bytes.saturating_add(len_bytes);
        let first_full = offset_bytes.div_ceil(bs);
        let end_full = end_bytes / bs;
        // Partly covered blocks at either end.
        let zero_part = |st: &mut CacheState, from: u64, to: u64| {
            if from >= to {
                return;
            }
            let block = from / bs;
            if let Some(c) = st.blocks.get_mut(&block) {
                let a = (from - block * bs) as usize;
                let b = (to - block * bs) as usize;
                c.data[a..b].fill(0);
            }
        };
        let st = &mut *self.st;
        if end_full < first_full {
            // Inside one block.
            zero_part(st, offset_bytes, end_bytes);
        } else {
            zero_part(st, offset_bytes, first_full * bs);
            zero_part(st, end_full * bs, end_bytes);
            let full = first_full..end_full;
            if (end_full - first_full) > st.blocks.len() as u64 {
                // A huge range (a whole-device discard): scan the cache
                // instead of every block number.
                let doomed: Vec<u64> = st
                    .blocks
                    .keys()
                    .copied()
                    .filter(|b| full.contains(b))
                    .collect();
                for block in doomed {
                    self.drop_block(block);
                }
            } else {
                for block in full {
                    self.drop_block(block);
                }
            }
        }
        self.store.discard(offset_bytes, len_bytes);
    }

    /// Write every cached block back to the store, oldest first.
    pub(crate) fn flush(&mut self) {
        while self.evict_oldest() {}
    }

    /// Write the oldest cached block back; false if the cache is empty.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, block)) = self.st.by_age.pop_first() else {
            debug_assert!(self.st.blocks.is_empty());
            return false;
        };
        let c = self
            .st
            .blocks
            .remove(&block)
            .expect("every aged block is cached");
        self.store
            .write(block * self.cache.block_bytes as u64, &c.data);
        recycle(&mut self.st.free, self.cache.capacity_blocks, c.data);
        true
    }

    /// Write `block` back if it is cached.
    fn write_back(&mut self, block: u64) {
        if let Some(c) = self.st.blocks.remove(&block) {
            let removed = self.st.by_age.remove(&c.age);
            debug_assert_eq!(removed, Some(block));
            self.store
                .write(block * self.cache.block_bytes as u64, &c.data);
            recycle(&mut self.st.free, self.cache.capacity_blocks, c.data);
        }
    }

    /// Forget `block`'s cached copy, if any.
    fn drop_block(&mut self, block: u64) {
        if let Some(c) = self.st.blocks.remove(&block) {
            let removed = self.st.by_age.remove(&c.age);
            debug_assert_eq!(removed, Some(block));
            recycle(&mut self.st.free, self.cache.capacity_blocks, c.data);
        }
    }
}

impl Drop for CacheGuard<'_> {
    /// A request is done: evict down to the cache's size, oldest first.
    fn drop(&mut self) {
        while self.st.blocks.len() > self.cache.capacity_blocks {
            self.st.evicted_blocks += 1;
            self.evict_oldest();
        }
        debug_assert_eq!(self.st.blocks.len(), self.st.by_age.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BS: usize = 512;

    /// A block whose every byte is `v`.
    fn block(v: u8) -> Vec<u8> {
        vec![v; BS]
    }

    fn blocks(vals: &[u8]) -> Vec<u8> {
        vals.iter().flat_map(|&v| block(v)).collect()
    }

    /// The first byte of each of `n` blocks from block `first`, through the
    /// cache.
    fn seen(c: &WriteCache, s: &Store, first: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0xEE; n * BS];
        c.lock(s).read(first * BS as u64, &mut out);
        for (i, b) in out.chunks(BS).enumerate() {
            assert!(b.iter().all(|&x| x == b[0]), "block {i} is torn: {b:?}");
        }
        out.chunks(BS).map(|b| b[0]).collect()
    }

    /// The same, from the durable store only.
    fn durable(s: &Store, first: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0xEE; n * BS];
        s.read(first * BS as u64, &mut out);
        out.chunks(BS).map(|b| b[0]).collect()
    }

    #[test]
    fn writes_stay_cached_until_a_flush_moves_everything() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 16 * BS as u64);
        c.lock(&s).write(0, &blocks(&[1, 2, 3]));
        c.lock(&s).write(10 * BS as u64, &block(4));
        assert_eq!(c.cached_bytes(), 4 * BS as u64);
        assert_eq!(seen(&c, &s, 0, 4), [1, 2, 3, 0]);
        assert_eq!(seen(&c, &s, 10, 1), [4]);
        assert_eq!(durable(&s, 0, 11), [0; 11], "nothing is durable yet");

        c.lock(&s).flush();
        assert_eq!(c.cached_bytes(), 0);
        assert_eq!(durable(&s, 0, 4), [1, 2, 3, 0]);
        assert_eq!(durable(&s, 10, 1), [4]);
        assert_eq!(c.power_cut(), 0, "nothing left to lose");
        assert_eq!(seen(&c, &s, 0, 4), [1, 2, 3, 0]);
        assert_eq!(c.evicted_bytes(), 0);
    }

    #[test]
    fn power_cut_drops_exactly_the_unflushed_blocks() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 16 * BS as u64);
        c.lock(&s).write(0, &blocks(&[1, 1]));
        c.lock(&s).flush();
        c.lock(&s).write(BS as u64, &blocks(&[2, 2]));
        assert_eq!(seen(&c, &s, 0, 3), [1, 2, 2]);
        assert_eq!(c.power_cut(), 2 * BS as u64);
        assert_eq!(c.cached_bytes(), 0);
        assert_eq!(seen(&c, &s, 0, 3), [1, 1, 0]);
    }

    #[test]
    fn eviction_writes_back_the_least_recently_written_first() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 3 * BS as u64);
        for b in 0..3u8 {
            c.lock(&s).write(u64::from(b) * BS as u64, &block(b + 1));
        }
        // Rewriting block 0 makes block 1 the oldest.
        c.lock(&s).write(0, &block(9));
        assert_eq!(durable(&s, 0, 4), [0, 0, 0, 0]);
        c.lock(&s).write(3 * BS as u64, &block(4));
        assert_eq!(durable(&s, 0, 4), [0, 2, 0, 0], "block 1 went first");
        assert_eq!(c.cached_bytes(), 3 * BS as u64);
        assert_eq!(c.evicted_bytes(), BS as u64);
        // One request larger than the cache pushes out everything older,
        // then its own oldest blocks.
        c.lock(&s).write(8 * BS as u64, &blocks(&[5, 6, 7, 8]));
        assert_eq!(durable(&s, 0, 12), [9, 2, 3, 4, 0, 0, 0, 0, 5, 0, 0, 0]);
        assert_eq!(c.cached_bytes(), 3 * BS as u64);
        assert_eq!(c.evicted_bytes(), 5 * BS as u64);
        assert_eq!(c.power_cut(), 3 * BS as u64);
        assert_eq!(seen(&c, &s, 0, 12), [9, 2, 3, 4, 0, 0, 0, 0, 5, 0, 0, 0]);
    }

    #[test]
    fn fua_bypasses_the_cache_and_drops_stale_copies() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 16 * BS as u64);
        c.lock(&s).write(0, &blocks(&[1, 1, 1]));
        c.lock(&s).write_through(BS as u64, &block(2));
        assert_eq!(durable(&s, 0, 3), [0, 2, 0]);
        assert_eq!(c.cached_bytes(), 2 * BS as u64, "block 1's copy dropped");
        // A later flush must not bring the older cached value back.
        c.lock(&s).flush();
        assert_eq!(durable(&s, 0, 3), [1, 2, 1]);

        c.lock(&s).write(0, &block(3));
        c.lock(&s).write_through(0, &block(4));
        c.power_cut();
        assert_eq!(seen(&c, &s, 0, 3), [4, 2, 1]);
    }

    #[test]
    fn discard_and_zeroes_apply_to_both_layers() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 16 * BS as u64);
        c.lock(&s).write(0, &blocks(&[1, 1, 1, 1]));
        c.lock(&s).flush();
        c.lock(&s).write(0, &blocks(&[2, 2, 2, 2]));
        c.lock(&s).discard(BS as u64, 2 * BS as u64);
        assert_eq!(seen(&c, &s, 0, 4), [2, 0, 0, 2]);
        assert_eq!(c.cached_bytes(), 2 * BS as u64);
        // Durable at once, like null_blk's: a power cut loses only the
        // cached writes, never brings the discarded data back.
        c.power_cut();
        assert_eq!(seen(&c, &s, 0, 4), [1, 0, 0, 1]);

        // A partly covered cached block is zeroed in place, not dropped.
        c.lock(&s).write(8 * BS as u64, &block(5));
        c.lock(&s).discard(8 * BS as u64 + 128, 128);
        let mut out = vec![0xEE; BS];
        c.lock(&s).read(8 * BS as u64, &mut out);
        assert!(out[..128].iter().all(|&x| x == 5));
        assert!(out[128..256].iter().all(|&x| x == 0));
        assert!(out[256..].iter().all(|&x| x == 5));

        // A whole-device discard takes the scan path.
        c.lock(&s).write(100 * BS as u64, &block(6));
        c.lock(&s).discard(0, 1 << 40);
        assert_eq!(c.cached_bytes(), 0);
        assert_eq!(seen(&c, &s, 0, 10), [0; 10]);
        assert_eq!(seen(&c, &s, 100, 1), [0]);
    }

    #[test]
    fn a_block_written_across_segments_is_whole() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 16 * BS as u64);
        s.write(0, &block(1));
        {
            // One request, two segments splitting block 0.
            let mut g = c.lock(&s);
            g.write(0, &[2; 100]);
            g.write(100, &[2; BS - 100]);
        }
        assert_eq!(seen(&c, &s, 0, 1), [2]);
        // A part of a block alone keeps the rest of the block's bytes.
        c.lock(&s).write(BS as u64 + 10, &[3; 10]);
        let mut out = vec![0xEE; BS];
        c.lock(&s).read(BS as u64, &mut out);
        assert!(out[..10].iter().all(|&x| x == 0));
        assert!(out[10..20].iter().all(|&x| x == 3));
        c.lock(&s).flush();
        assert_eq!(durable(&s, 0, 1), [2]);
    }

    #[test]
    fn buffers_are_reused() {
        let s = Store::with_shards(4);
        let c = WriteCache::new(BS as u32, 4 * BS as u64);
        for round in 0..10u8 {
            c.lock(&s).write(0, &blocks(&[round; 4]));
            c.lock(&s).flush();
        }
        assert_eq!(c.state().free.len(), 4);
        assert_eq!(durable(&s, 0, 4), [9; 4]);
    }
}
