//! The sparse backing store of a memory-backed null device (Linux
//! null_blk's `memory_backed=1`, its radix tree of pages).
//!
//! Sits behind the driver's `queue_rq` when `memory_backed=1`: writes copy
//! into 4 KiB pages, reads copy out of them (a page never written reads as
//! zeros), and discard and write-zeroes drop pages. The store is shared by
//! every hardware queue, so it is split into shards by page number, each
//! behind its own lock: queues working on different pages rarely meet.
//! A page is allocated on its first write.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Size of one store page.
pub const PAGE_BYTES: usize = 4096;
const PAGE_SHIFT: u32 = PAGE_BYTES.trailing_zeros();

type Page = Box<[u8; PAGE_BYTES]>;
type Shard = HashMap<u64, Page>;

/// A sparse byte store addressed by device offset.
#[derive(Debug)]
pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    shard_mask: u64,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl Store {
    /// An empty store with enough shards for this machine's CPUs.
    pub fn new() -> Store {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Store::with_shards((cpus * 4).next_power_of_two().clamp(4, 1024))
    }

    /// An empty store with `shards` shards (rounded up to a power of two).
    pub fn with_shards(shards: usize) -> Store {
        let n = shards.max(1).next_power_of_two();
        Store {
            shards: (0..n).map(|_| Mutex::new(HashMap::new())).collect(),
            shard_mask: n as u64 - 1,
        }
    }

    #[inline]
    fn shard(&self, page: u64) -> MutexGuard<'_, Shard> {
        let i = (page & self.shard_mask) as usize;
        debug_assert!(i < self.shards.len());
        // A panic while holding a shard leaves its pages intact (every
        // update is a plain copy), so a poisoned lock is still usable.
        self.shards[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Page numbers in `[first_page, end_page)` that hold data, sorted.
    pub fn resident_in(&self, first_page: u64, end_page: u64) -> Vec<u64> {
        let mut pages: Vec<u64> = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            pages.extend(
                shard
                    .keys()
                    .copied()
                    .filter(|p| (first_page..end_page).contains(p)),
            );
        }
        pages.sort_unstable();
        pages
    }

    /// Copy `data` to the device at `offset_bytes`.
    pub fn write(&self, offset_bytes: u64, data: &[u8]) {
        for_each_page_chunk(offset_bytes, data.len(), |page, in_page, range| {
            let mut shard = self.shard(page);
            let p = shard.entry(page).or_insert_with(new_page);
            p[in_page..in_page + range.len()].copy_from_slice(&data[range]);
        });
    }

    /// Copy `out.len()` bytes at `offset_bytes` into `out`; bytes never
    /// written read as zeros.
    pub fn read(&self, offset_bytes: u64, out: &mut [u8]) {
        for_each_page_chunk(offset_bytes, out.len(), |page, in_page, range| {
            let shard = self.shard(page);
            let dst = &mut out[range];
            match shard.get(&page) {
                Some(p) => dst.copy_from_slice(&p[in_page..in_page + dst.len()]),
                None => dst.fill(0),
            }
        });
    }

    /// Make `len_bytes` at `offset_bytes` read as zeros: whole pages are
    /// freed, partly covered ones are zeroed in place.
    pub fn discard(&self, offset_bytes: u64, len_bytes: u64) {
        if len_bytes == 0 {
            return;
        }
        let end = offset_bytes.saturating_add(len_bytes);
        let first_full = offset_bytes.div_ceil(PAGE_BYTES as u64);
        let end_full = end >> PAGE_SHIFT;
        // The partly covered pages at either end.
        let head_end = end.min(first_full << PAGE_SHIFT);
        if offset_bytes < head_end {
            self.zero_within_page(offset_bytes, head_end - offset_bytes);
        }
        if end_full >= first_full {
            let tail_start = (end_full << PAGE_SHIFT).max(offset_bytes);
            if tail_start < end {
                self.zero_within_page(tail_start, end - tail_start);
            }
            self.drop_pages(first_full, end_full);
        }
    }

    /// Zero a range that lies inside one page.
    fn zero_within_page(&self, offset_bytes: u64, len_bytes: u64) {
        let page = offset_bytes >> PAGE_SHIFT;
        let in_page = (offset_bytes & (PAGE_BYTES as u64 - 1)) as usize;
        debug_assert!(in_page as u64 + len_bytes <= PAGE_BYTES as u64);
        if let Some(p) = self.shard(page).get_mut(&page) {
            p[in_page..in_page + len_bytes as usize].fill(0);
        }
    }

    /// Free pages `first..end`. A huge range (a whole-device discard) scans
    /// each shard's resident pages instead of every page number.
    fn drop_pages(&self, first: u64, end: u64) {
        if first >= end {
            return;
        }
        let nr_shards = self.shards.len() as u64;
        let per_shard = (end - first).div_ceil(nr_shards);
        for s in 0..nr_shards {
            let mut shard = self.shard(s);
            if per_shard > shard.len() as u64 {
                shard.retain(|&page, _| !(first..end).contains(&page));
            } else {
                // The first page of `first..end` that maps to shard `s`.
                let mut page = first + (s.wrapping_sub(first) & self.shard_mask);
                while page < end {
                    shard.remove(&page);
                    page += nr_shards;
                }
            }
        }
    }

    /// Pages currently held (for tests and reports).
    pub fn resident_pages(&self) -> usize {
        (0..self.shards.len() as u64)
            .map(|s| self.shard(s).len())
            .sum()
    }
}

/// A zeroed page, allocated zeroed rather than copied from the stack.
fn new_page() -> Page {
    vec![0u8; PAGE_BYTES]
        .into_boxed_slice()
        .try_into()
        .unwrap_or_else(|_| unreachable!("vec![0; PAGE_BYTES] has PAGE_BYTES bytes"))
}

/// Call `f(page, offset_in_page, buffer_range)` for each page-sized piece of
/// `len` bytes at device offset `offset_bytes`.
#[inline]
fn for_each_page_chunk(
    offset_bytes: u64,
    len: usize,
    mut f: impl FnMut(u64, usize, std::ops::Range<usize>),
) {
    let mut done = 0usize;
    while done < len {
        let pos = offset_bytes + done as u64;
        let page = pos >> PAGE_SHIFT;
        let in_page = (pos & (PAGE_BYTES as u64 - 1)) as usize;
        let n = (PAGE_BYTES - in_page).min(len - done);
        f(page, in_page, done..done + n);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
            .collect()
    }

    fn read(s: &Store, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0xAA; len];
        s.read(off, &mut v);
        v
    }

    #[test]
    fn write_then_read_returns_the_data() {
        let s = Store::with_shards(4);
        // Unaligned, spanning three pages.
        let data = pattern(9000, 7);
        s.write(1536, &data);
        assert_eq!(read(&s, 1536, 9000), data);
        assert_eq!(s.resident_pages(), 3);
        // A sub-range, and the bytes around it.
        assert_eq!(read(&s, 2048, 512), data[512..1024]);
        assert_eq!(read(&s, 1024, 512), vec![0; 512]);
        // Overwrite part of it.
        let patch = pattern(512, 99);
        s.write(4096, &patch);
        let mut expect = data.clone();
        expect[4096 - 1536..][..512].copy_from_slice(&patch);
        assert_eq!(read(&s, 1536, 9000), expect);
    }

    #[test]
    fn unwritten_reads_are_zeros() {
        let s = Store::new();
        assert_eq!(read(&s, 0, 8192), vec![0; 8192]);
        assert_eq!(read(&s, (250u64 << 30) - 512, 512), vec![0; 512]);
        assert_eq!(s.resident_pages(), 0, "reads allocate nothing");
    }

    #[test]
    fn discard_zeroes_and_frees() {
        let s = Store::with_shards(4);
        let data = pattern(8 * PAGE_BYTES, 3);
        s.write(0, &data);
        assert_eq!(s.resident_pages(), 8);

        // Whole pages 2 and 3 go away.
        s.discard(2 * 4096, 2 * 4096);
        assert_eq!(s.resident_pages(), 6);
        assert_eq!(read(&s, 2 * 4096, 2 * 4096), vec![0; 8192]);
        assert_eq!(read(&s, 4096, 4096), data[4096..8192]);

        // A 512-byte-granular range: partial head and tail are zeroed in
        // place, the page fully inside is freed.
        s.discard(4 * 4096 + 512, 2 * 4096 + 512);
        assert_eq!(s.resident_pages(), 5, "page 5 freed");
        assert_eq!(read(&s, 4 * 4096, 512), data[4 * 4096..][..512]);
        assert_eq!(read(&s, 4 * 4096 + 512, 4096 - 512), vec![0; 4096 - 512]);
        assert_eq!(read(&s, 5 * 4096, 4096), vec![0; 4096]);
        assert_eq!(read(&s, 6 * 4096, 1024), vec![0; 1024]);
        assert_eq!(
            read(&s, 6 * 4096 + 1024, 3072),
            data[6 * 4096 + 1024..][..3072]
        );

        // A range inside one page.
        s.discard(7 * 4096 + 1024, 512);
        assert_eq!(read(&s, 7 * 4096 + 1024, 512), vec![0; 512]);
        assert_eq!(read(&s, 7 * 4096, 1024), data[7 * 4096..][..1024]);
        assert_eq!(
            read(&s, 7 * 4096 + 1536, 512),
            data[7 * 4096 + 1536..][..512]
        );
        assert_eq!(s.resident_pages(), 5);

        // A whole-device discard takes the scan path and frees everything.
        s.discard(0, 250 << 30);
        assert_eq!(s.resident_pages(), 0);
        assert_eq!(read(&s, 0, 8 * 4096), vec![0; 8 * 4096]);
    }

    #[test]
    fn drop_pages_by_stride_hits_every_shard() {
        let s = Store::with_shards(8);
        for page in 0..64u64 {
            s.write(page * 4096, &[1]);
        }
        // Small range: the stride path, starting off a shard boundary.
        s.drop_pages(3, 21);
        assert_eq!(s.resident_pages(), 64 - 18);
        for page in 0..64u64 {
            let expect = if (3..21).contains(&page) { 0 } else { 1 };
            assert_eq!(read(&s, page * 4096, 1)[0], expect, "page {page}");
        }
    }
}
