//! The sparse page store behind the ram driver (Linux brd's xarray of
//! pages, `brd->brd_pages`).
//!
//! Sits behind the ram driver's `queue_rq` ([`crate::driver::RamDriver`]):
//! writes copy into 4 KiB pages, reads copy out of them, and discard and
//! write-zeroes free them. A page is allocated on its first write of
//! non-zero data; a page never written (or discarded since) is a hole that
//! reads as zeros and takes no memory. Pages come from the store's 2 MiB
//! slabs (`slab.rs`), which the kernel can back with huge pages.
//!
//! The store is shared by every hardware queue, so it is split into shards,
//! each behind its own lock and on its own cache line. Pages are grouped in
//! chunks of [`CHUNK_PAGES`] (64 KiB): one lock acquisition and one index
//! lookup serve a whole chunk, and chunk numbers pick the shard, so two
//! queues working on different places of the device rarely take the same
//! lock. Each shard keeps its chunks in order in an [`XArray`] (a flat
//! array per 16 MiB leaf, so a lookup is an index, not a tree walk), so
//! that a discard of any size (a whole 1 TiB device) and the extent walk
//! visit only what is stored, never every page number of the range.

use std::ops::Range;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crossbeam_utils::CachePadded;

use crate::slab::{Page, Slabs};
use crate::xarray::XArray;

/// Size of one store page, in bytes.
pub use crate::slab::PAGE_BYTES;
const PAGE_SHIFT: u32 = PAGE_BYTES.trailing_zeros();

/// Pages per chunk: the unit one lock acquisition covers.
pub const CHUNK_PAGES: usize = 16;
const CHUNK_BYTES: usize = CHUNK_PAGES * PAGE_BYTES;
const CHUNK_SHIFT: u32 = CHUNK_BYTES.trailing_zeros();

/// Fewest shards a store gets, whatever the machine.
pub const MIN_SHARDS: usize = 16;
/// Most shards a store gets.
pub const MAX_SHARDS: usize = 1024;

/// A page could not be allocated: the process is out of memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("out of memory allocating the page at byte {offset_bytes}; discard unused ranges or make the device smaller")]
pub struct OutOfMemory {
    /// Device offset of the page that could not be allocated.
    pub offset_bytes: u64,
}

/// Up to [`CHUNK_PAGES`] consecutive pages; absent ones are holes.
#[derive(Default)]
struct Chunk {
    pages: [Option<Page>; CHUNK_PAGES],
    resident: u32,
}

impl Chunk {
    /// Bit `i` set: page `i` of the chunk is stored.
    fn resident_mask(&self) -> u32 {
        self.pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.is_some())
            .fold(0, |m, (i, _)| m | 1 << i)
    }

    /// Make bytes `range` of the chunk read as zeros: whole pages are freed,
    /// partly covered ones zeroed in place (and freed if that leaves them
    /// all zeros). Returns the pages freed.
    fn zero(&mut self, range: Range<usize>, slabs: &Slabs) -> u32 {
        debug_assert!(range.end <= CHUNK_BYTES);
        let mut freed = 0;
        let mut at = range.start;
        while at < range.end {
            let i = at / PAGE_BYTES;
            let in_page = at % PAGE_BYTES;
            let n = (PAGE_BYTES - in_page).min(range.end - at);
            debug_assert!(i < CHUNK_PAGES);
            let slot = &mut self.pages[i];
            if let Some(page) = slot {
                let whole = n == PAGE_BYTES;
                if !whole {
                    page.bytes_mut()[in_page..in_page + n].fill(0);
                }
                if whole || is_zero(&page.bytes()[..]) {
                    if let Some(page) = slot.take() {
                        slabs.free(page);
                    }
                    freed += 1;
                }
            }
            at += n;
        }
        debug_assert!(freed <= self.resident);
        self.resident -= freed;
        freed
    }
}

/// The chunks whose number maps to one shard, in order.
struct Shard {
    chunks: XArray<Chunk>,
    resident_pages: u64,
}

impl Shard {
    fn new(shard_bits: u32, index: u64) -> Shard {
        Shard {
            chunks: XArray::new(shard_bits, index),
            resident_pages: 0,
        }
    }

    /// Copy `src` into chunk `chunk_no` from byte `in_chunk` on. Holes
    /// written with zeros stay holes.
    fn write(
        &mut self,
        chunk_no: u64,
        in_chunk: usize,
        src: &[u8],
        slabs: &Slabs,
    ) -> Result<(), OutOfMemory> {
        debug_assert!(in_chunk + src.len() <= CHUNK_BYTES);
        // Zeros landing on a hole leave it a hole.
        let Some(chunk) = self
            .chunks
            .get_or_make(chunk_no, || (!is_zero(src)).then(Box::default))
        else {
            return Ok(());
        };
        let mut result = Ok(());
        let mut done = 0;
        while done < src.len() {
            let at = in_chunk + done;
            let (i, in_page) = (at / PAGE_BYTES, at % PAGE_BYTES);
            let n = (PAGE_BYTES - in_page).min(src.len() - done);
            let piece = &src[done..done + n];
            debug_assert!(i < CHUNK_PAGES);
            match &mut chunk.pages[i] {
                Some(page) => page.bytes_mut()[in_page..in_page + n].copy_from_slice(piece),
                None if is_zero(piece) => {}
                slot @ None => match slabs.alloc(in_page, piece) {
                    Some(page) => {
                        *slot = Some(page);
                        chunk.resident += 1;
                        self.resident_pages += 1;
                    }
                    None => {
                        let offset_bytes = (chunk_no << CHUNK_SHIFT) + (i * PAGE_BYTES) as u64;
                        result = Err(OutOfMemory { offset_bytes });
                        break;
                    }
                },
            }
            done += n;
        }
        if chunk.resident == 0 {
            // Only zeros reached a new chunk, or its first page failed.
            self.chunks.remove(chunk_no);
        }
        result
    }

    /// Copy chunk `chunk_no` from byte `in_chunk` on into `out`.
    fn read(&self, chunk_no: u64, in_chunk: usize, out: &mut [u8]) {
        copy_out(self.chunks.get(chunk_no), in_chunk, out);
    }

    /// Zero device bytes `[start_bytes, end_bytes)` within the stored
    /// chunks numbered `chunks`, dropping chunks left empty.
    fn zero(
        &mut self,
        chunks: std::ops::RangeInclusive<u64>,
        start_bytes: u64,
        end_bytes: u64,
        slabs: &Slabs,
    ) {
        let mut freed = 0u64;
        self.chunks.retain_in(chunks, |chunk_no, chunk| {
            freed += u64::from(chunk.zero(chunk_bytes(chunk_no, start_bytes, end_bytes), slabs));
            chunk.resident == 0
        });
        debug_assert!(freed <= self.resident_pages);
        self.resident_pages -= freed;
    }
}

/// The bytes of chunk `chunk_no` that device bytes `[start_bytes,
/// end_bytes)` cover, relative to the chunk.
#[inline]
fn chunk_bytes(chunk_no: u64, start_bytes: u64, end_bytes: u64) -> Range<usize> {
    let base = chunk_no << CHUNK_SHIFT;
    let from = start_bytes.max(base) - base;
    let to = end_bytes.min(base.saturating_add(CHUNK_BYTES as u64)) - base;
    debug_assert!(from <= to);
    debug_assert!(to <= CHUNK_BYTES as u64);
    from as usize..to as usize
}

/// True if every byte is zero. Folds 64 bytes at a time, which the compiler
/// turns into vector ORs, and stops at the first non-zero block.
#[inline]
fn is_zero(b: &[u8]) -> bool {
    let blocks = b.chunks_exact(64);
    let tail = blocks.remainder();
    blocks
        .into_iter()
        .all(|c| c.iter().fold(0u8, |a, &x| a | x) == 0)
        && tail.iter().all(|&x| x == 0)
}

/// A sparse byte store addressed by device offset, shared by every hardware
/// queue of a ram device.
pub struct Store {
    shards: Box<[CachePadded<RwLock<Shard>>]>,
    shard_mask: u64,
    /// The pages' memory. Declared after `shards`, so that it is dropped
    /// after every page in them.
    slabs: Slabs,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("shards", &self.shards.len())
            .field("resident_pages", &self.resident_pages())
            .finish()
    }
}

impl Store {
    /// An empty store with enough shards that `nr_hw_queues` queues (or this
    /// machine's CPUs, if more) rarely meet on one lock: four per queue,
    /// from [`MIN_SHARDS`] to [`MAX_SHARDS`].
    pub fn for_queues(nr_hw_queues: usize) -> Store {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Store::with_shards(nr_hw_queues.max(cpus).saturating_mul(4))
    }

    /// An empty store with `shards` shards (rounded up to a power of two
    /// and clamped to [`MIN_SHARDS`]..=[`MAX_SHARDS`]).
    pub fn with_shards(shards: usize) -> Store {
        let n = shards.clamp(MIN_SHARDS, MAX_SHARDS).next_power_of_two();
        Store {
            shards: (0..n)
                .map(|i| CachePadded::new(RwLock::new(Shard::new(n.trailing_zeros(), i as u64))))
                .collect(),
            shard_mask: n as u64 - 1,
            slabs: Slabs::default(),
        }
    }

    /// Number of shards (locks).
    pub fn nr_shards(&self) -> usize {
        self.shards.len()
    }

    // A panic while holding a shard leaves its pages and counts consistent
    // (every update is a copy or a whole-page swap, counted right after), so
    // a poisoned lock is still usable.
    #[inline]
    fn shard(&self, chunk_no: u64) -> RwLockReadGuard<'_, Shard> {
        let i = (chunk_no & self.shard_mask) as usize;
        debug_assert!(i < self.shards.len());
        self.shards[i].read().unwrap_or_else(|e| e.into_inner())
    }

    #[inline]
    fn shard_mut(&self, chunk_no: u64) -> RwLockWriteGuard<'_, Shard> {
        let i = (chunk_no & self.shard_mask) as usize;
        debug_assert!(i < self.shards.len());
        self.shards[i].write().unwrap_or_else(|e| e.into_inner())
    }

    /// Copy `data` to the device at `offset_bytes`, allocating pages as
    /// needed. All-zero data landing on a hole leaves the hole.
    ///
    /// On [`OutOfMemory`], the bytes before the failed page are written and
    /// the rest are not (a torn write, as a failed disk write may be).
    pub fn write(&self, offset_bytes: u64, data: &[u8]) -> Result<(), OutOfMemory> {
        for_each_chunk_piece(offset_bytes, data.len(), |chunk_no, in_chunk, range| {
            self.shard_mut(chunk_no)
                .write(chunk_no, in_chunk, &data[range], &self.slabs)
        })
    }

    /// Copy `out.len()` bytes at `offset_bytes` into `out`. Holes read as
    /// zeros, and reading allocates nothing.
    pub fn read(&self, offset_bytes: u64, out: &mut [u8]) {
        let _ = for_each_chunk_piece(offset_bytes, out.len(), |chunk_no, in_chunk, range| {
            self.shard(chunk_no)
                .read(chunk_no, in_chunk, &mut out[range]);
            Ok::<(), std::convert::Infallible>(())
        });
    }

    /// Read consecutive device bytes from `offset_bytes` into `bufs` in
    /// turn, taking each chunk's shard lock once for all the buffers that
    /// fall into it (a 16-segment request costs one lookup, not sixteen).
    pub fn read_vectored<'a>(
        &self,
        offset_bytes: u64,
        bufs: impl IntoIterator<Item = &'a mut [u8]>,
    ) {
        let mut bufs = bufs.into_iter();
        let mut cur = bufs.next();
        let mut off = 0usize;
        let mut pos = offset_bytes;
        while cur.is_some() {
            // One lock and one lookup per chunk, for every buffer in it.
            let chunk_no = pos >> CHUNK_SHIFT;
            let shard = self.shard(chunk_no);
            let chunk = shard.chunks.get(chunk_no);
            while let Some(buf) = cur.as_mut() {
                let in_chunk = (pos & (CHUNK_BYTES as u64 - 1)) as usize;
                let n = (buf.len() - off).min(CHUNK_BYTES - in_chunk);
                copy_out(chunk, in_chunk, &mut buf[off..off + n]);
                off += n;
                pos += n as u64;
                if off == buf.len() {
                    cur = bufs.next();
                    off = 0;
                }
                if pos & (CHUNK_BYTES as u64 - 1) == 0 {
                    break;
                }
            }
        }
    }

    /// Write consecutive device bytes from `bufs` in turn at `offset_bytes`,
    /// one shard lock per chunk (see `read_vectored`).
    pub fn write_vectored<'a>(
        &self,
        offset_bytes: u64,
        bufs: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), OutOfMemory> {
        let mut pos = offset_bytes;
        let mut held: Option<(u64, RwLockWriteGuard<'_, Shard>)> = None;
        for buf in bufs {
            let mut off = 0usize;
            while off < buf.len() {
                let chunk_no = pos >> CHUNK_SHIFT;
                let in_chunk = (pos & (CHUNK_BYTES as u64 - 1)) as usize;
                let n = (buf.len() - off).min(CHUNK_BYTES - in_chunk);
                if held.as_ref().map(|h| h.0) != Some(chunk_no) {
                    // Release the old shard before taking the next: never
                    // two shard locks at once.
                    drop(held.take());
                    held = Some((chunk_no, self.shard_mut(chunk_no)));
                }
                let (_, shard) = held.as_mut().expect("shard held");
                shard.write(chunk_no, in_chunk, &buf[off..off + n], &self.slabs)?;
                off += n;
                pos += n as u64;
            }
        }
        Ok(())
    }

    /// Make `len_bytes` at `offset_bytes` read as zeros (discard and
    /// write-zeroes): whole pages are freed, partly covered ones are zeroed
    /// in place. A short range visits its chunks one by one; a long one (up
    /// to the whole device) visits each shard once and only the chunks it
    /// stores in the range.
    pub fn discard(&self, offset_bytes: u64, len_bytes: u64) {
        let end = offset_bytes.saturating_add(len_bytes);
        if offset_bytes >= end {
            return;
        }
        let first_chunk = offset_bytes >> CHUNK_SHIFT;
        let last_chunk = (end - 1) >> CHUNK_SHIFT;
        if last_chunk - first_chunk < self.shards.len() as u64 {
            for chunk_no in first_chunk..=last_chunk {
                self.shard_mut(chunk_no)
                    .zero(chunk_no..=chunk_no, offset_bytes, end, &self.slabs);
            }
        } else {
            for shard in self.shards.iter() {
                let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
                shard.zero(first_chunk..=last_chunk, offset_bytes, end, &self.slabs);
            }
        }
    }

    /// The stored pages in `[first_page, end_page)`, as sorted runs of
    /// consecutive page numbers (the data extents; the gaps are holes).
    /// Control plane: locks each shard in turn and allocates.
    pub fn resident_runs(&self, first_page: u64, end_page: u64) -> Vec<Range<u64>> {
        let mut runs: Vec<Range<u64>> = Vec::new();
        if first_page >= end_page {
            return runs;
        }
        let shift = CHUNK_SHIFT - PAGE_SHIFT;
        let (first_chunk, last_chunk) = (first_page >> shift, (end_page - 1) >> shift);
        let mut masks: Vec<(u64, u32)> = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            shard.chunks.for_each_in(first_chunk..=last_chunk, |no, c| {
                masks.push((no, c.resident_mask()))
            });
        }
        masks.sort_unstable_by_key(|&(no, _)| no);
        for (chunk_no, mask) in masks {
            for i in 0..CHUNK_PAGES as u64 {
                let page = (chunk_no << shift) + i;
                if mask & (1 << i) == 0 || !(first_page..end_page).contains(&page) {
                    continue;
                }
                match runs.last_mut() {
                    Some(r) if r.end == page => r.end += 1,
                    _ => runs.push(page..page + 1),
                }
            }
        }
        runs
    }

    /// Pages currently stored.
    pub fn resident_pages(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).resident_pages)
            .sum()
    }

    /// Bytes of page memory currently held: [`Store::resident_pages`] times
    /// [`PAGE_BYTES`] (the chunk and map bookkeeping, about 2% on top, is
    /// not counted).
    pub fn resident_bytes(&self) -> u64 {
        self.resident_pages() * PAGE_BYTES as u64
    }
}

/// Copy from a chunk (None: a hole) at byte `in_chunk` into `out`.
#[inline]
fn copy_out(chunk: Option<&Chunk>, in_chunk: usize, out: &mut [u8]) {
    debug_assert!(in_chunk + out.len() <= CHUNK_BYTES);
    let Some(chunk) = chunk else {
        out.fill(0);
        return;
    };
    let mut done = 0;
    while done < out.len() {
        let at = in_chunk + done;
        let (i, in_page) = (at / PAGE_BYTES, at % PAGE_BYTES);
        let n = (PAGE_BYTES - in_page).min(out.len() - done);
        let dst = &mut out[done..done + n];
        debug_assert!(i < CHUNK_PAGES);
        match &chunk.pages[i] {
            Some(page) => dst.copy_from_slice(&page.bytes()[in_page..in_page + n]),
            None => dst.fill(0),
        }
        done += n;
    }
}

/// Call `f(chunk_no, offset_in_chunk, buffer_range)` for each chunk-sized
/// piece of `len` bytes at device offset `offset_bytes`, stopping at the
/// first error.
fn for_each_chunk_piece<E>(
    offset_bytes: u64,
    len: usize,
    mut f: impl FnMut(u64, usize, Range<usize>) -> Result<(), E>,
) -> Result<(), E> {
    let mut done = 0usize;
    while done < len {
        let pos = offset_bytes + done as u64;
        let chunk_no = pos >> CHUNK_SHIFT;
        let in_chunk = (pos & (CHUNK_BYTES as u64 - 1)) as usize;
        let n = (CHUNK_BYTES - in_chunk).min(len - done);
        f(chunk_no, in_chunk, done..done + n)?;
        done += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
