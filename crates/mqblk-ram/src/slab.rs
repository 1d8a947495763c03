//! The page allocator under the page store (Linux brd takes each page from
//! the kernel's page allocator with `alloc_page`): 4 KiB pages carved out
//! of 2 MiB slabs.
//!
//! Below the store ([`crate::store`]), which asks for a page when a write
//! reaches a hole and gives it back when a discard frees it. A slab is
//! aligned to 2 MiB and advised `MADV_HUGEPAGE`, so the kernel can back it
//! with one transparent huge page: a random read of a large device then
//! walks one TLB entry per 2 MiB instead of one per page, which is most
//! of what a read of a filled device costs on a virtual machine (its page
//! walks are two-dimensional). Pages are handed out slab by slab, so a
//! device's memory stays in as few slabs as it needs.
//!
//! A slab goes back to the system when its last page is freed; a free
//! page inside a slab still in use is kept for the next write (the store
//! counts only the pages it holds, [`crate::Store::resident_bytes`]).
//!
//! Taken only on the paths that allocate or free pages (a write to a hole,
//! a discard), under the store's shard lock, never on a read.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::Mutex;

/// Size of one page, in bytes.
pub const PAGE_BYTES: usize = 4096;

/// Pages per slab: 2 MiB, the size of an x86-64 or arm64 huge page. Under
/// Miri, which runs a thousand times slower, 64 KiB.
const SLAB_PAGES: usize = if cfg!(miri) { 16 } else { 512 };
const SLAB_BYTES: usize = SLAB_PAGES * PAGE_BYTES;
const MASK_WORDS: usize = SLAB_PAGES.div_ceil(64);

/// One page from a slab, owned by whoever holds it (a chunk of the store)
/// as a `Box<[u8; PAGE_BYTES]>` would be. It is given back with
/// [`Slabs::free`]; dropped without that, its slab keeps it until the
/// [`Slabs`] are dropped.
pub(crate) struct Page(NonNull<[u8; PAGE_BYTES]>);

// SAFETY: a `Page` is the only handle to its 4 KiB (as a Box is), and
// gives `&` or `&mut` access only through `&self` or `&mut self`.
unsafe impl Send for Page {}
// SAFETY: as for Send: shared access to a `Page` only reads.
unsafe impl Sync for Page {}

impl Page {
    /// The page's bytes.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8; PAGE_BYTES] {
        // SAFETY: 1. the pointer is to PAGE_BYTES inside a live slab: a
        // slab is freed only when all its pages came back (`Slabs::free`
        // takes the Page by value) or when the `Slabs` drop, which the
        // store does only after its chunks (and so its pages) are gone.
        // 2. The bytes were initialized by `Slabs::alloc`. 3. No other
        // handle reaches these bytes (each page is handed out once until
        // freed), and `&self` excludes `&mut self` for this lifetime.
        unsafe { self.0.as_ref() }
    }

    /// The page's bytes, to write.
    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8; PAGE_BYTES] {
        // SAFETY: as in `bytes`; `&mut self` makes the access exclusive.
        unsafe { self.0.as_mut() }
    }
}

/// The slabs of one store.
pub(crate) struct Slabs {
    inner: Mutex<Pool>,
}

struct Pool {
    /// Every slab, by its base address.
    slabs: HashMap<usize, Slab>,
    /// The base addresses of the slabs with a free page; the last is
    /// allocated from.
    partial: Vec<usize>,
}

struct Slab {
    base: NonNull<u8>,
    /// Bit set: page free.
    free: [u64; MASK_WORDS],
    used: usize,
}

// SAFETY: the slab's memory is owned by the pool (behind its mutex), and
// reached through it only to hand pages out and to free it.
unsafe impl Send for Slab {}

fn layout() -> Layout {
    Layout::from_size_align(SLAB_BYTES, SLAB_BYTES).expect("a power of two below isize::MAX")
}

impl Slab {
    /// A new slab with every page free; None if the allocator refuses.
    fn new() -> Option<Slab> {
        // SAFETY: the layout's size is not zero.
        let base = NonNull::new(unsafe { std::alloc::alloc(layout()) })?;
        advise_huge(base);
        let mut free = [u64::MAX; MASK_WORDS];
        if !SLAB_PAGES.is_multiple_of(64) {
            free[MASK_WORDS - 1] = (1 << (SLAB_PAGES % 64)) - 1;
        }
        Some(Slab {
            base,
            free,
            used: 0,
        })
    }

    fn take(&mut self) -> Option<usize> {
        let w = self.free.iter().position(|&w| w != 0)?;
        let bit = self.free[w].trailing_zeros() as usize;
        self.free[w] &= !(1 << bit);
        self.used += 1;
        let i = w * 64 + bit;
        debug_assert!(i < SLAB_PAGES);
        Some(i)
    }
}

/// Ask the kernel for a transparent huge page behind the slab. Only
/// advice: without it (THP off, or Miri) the slab works with small pages.
#[cfg(all(target_os = "linux", not(miri)))]
fn advise_huge(base: NonNull<u8>) {
    // SAFETY: MADV_HUGEPAGE changes how the range is backed, never its
    // contents, and the range is the slab just allocated.
    let _ = unsafe {
        rustix::mm::madvise(
            base.as_ptr().cast(),
            SLAB_BYTES,
            rustix::mm::Advice::LinuxHugepage,
        )
    };
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn advise_huge(_base: NonNull<u8>) {}

impl Default for Slabs {
    fn default() -> Self {
        Slabs {
            inner: Mutex::new(Pool {
                slabs: HashMap::new(),
                partial: Vec::new(),
            }),
        }
    }
}

impl Slabs {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        // Every update below is finished before anything can panic, so a
        // poisoned pool is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A page holding `piece` at byte `in_page` and zeros elsewhere; None
    /// if the allocator refuses a new slab.
    pub(crate) fn alloc(&self, in_page: usize, piece: &[u8]) -> Option<Page> {
        assert!(in_page + piece.len() <= PAGE_BYTES);
        let at = {
            let mut pool = self.pool();
            let pool = &mut *pool;
            let base = match pool.partial.last() {
                Some(&b) => b,
                None => {
                    let slab = Slab::new()?;
                    let b = slab.base.as_ptr() as usize;
                    pool.slabs.insert(b, slab);
                    pool.partial.push(b);
                    b
                }
            };
            let slab = pool.slabs.get_mut(&base).expect("partial slabs are slabs");
            let i = slab.take().expect("a partial slab has a free page");
            if slab.used == SLAB_PAGES {
                pool.partial.pop();
            }
            // SAFETY: i < SLAB_PAGES, so the page lies inside the slab.
            unsafe { slab.base.add(i * PAGE_BYTES) }
        };
        let p = at.as_ptr();
        // SAFETY: the page at `p` is PAGE_BYTES inside a live slab, handed
        // to no one else (its free bit was just cleared), and written here
        // through the raw pointer only; `in_page + piece.len() <=
        // PAGE_BYTES` was asserted, and `piece` cannot overlap a free page.
        unsafe {
            p.write_bytes(0, in_page);
            p.add(in_page)
                .copy_from_nonoverlapping(piece.as_ptr(), piece.len());
            let end = in_page + piece.len();
            p.add(end).write_bytes(0, PAGE_BYTES - end);
        }
        Some(Page(at.cast()))
    }

    /// Give `page` back; its slab goes back to the system if it was the
    /// slab's last page in use.
    pub(crate) fn free(&self, page: Page) {
        let addr = page.0.as_ptr() as usize;
        let base = addr & !(SLAB_BYTES - 1);
        let i = (addr - base) / PAGE_BYTES;
        let mut pool = self.pool();
        let pool = &mut *pool;
        let slab = pool
            .slabs
            .get_mut(&base)
            .expect("a page comes from one of its store's slabs");
        debug_assert!(i < SLAB_PAGES);
        let (w, bit) = (i / 64, i % 64);
        debug_assert!(slab.free[w] & (1 << bit) == 0, "page freed twice");
        slab.free[w] |= 1 << bit;
        let was_full = slab.used == SLAB_PAGES;
        slab.used -= 1;
        if slab.used == 0 {
            let slab = pool.slabs.remove(&base).expect("looked up above");
            if let Some(at) = pool.partial.iter().position(|&b| b == base) {
                pool.partial.swap_remove(at);
            }
            // SAFETY: allocated in `Slab::new` with this layout, and no
            // page of it is held any more (used is 0).
            unsafe { std::alloc::dealloc(slab.base.as_ptr(), layout()) };
        } else if was_full {
            pool.partial.push(base);
        }
    }

    /// Slabs held (each [`SLAB_BYTES`]).
    #[cfg(test)]
    fn nr_slabs(&self) -> usize {
        self.pool().slabs.len()
    }
}

impl Drop for Slabs {
    fn drop(&mut self) {
        let pool = self.inner.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, slab) in pool.slabs.drain() {
            // SAFETY: allocated in `Slab::new` with this layout; the store
            // drops its pages before its slabs (its field order), and a
            // page never leaves the store.
            unsafe { std::alloc::dealloc(slab.base.as_ptr(), layout()) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_filled_distinct_and_their_slab_goes_when_the_last_is_freed() {
        let s = Slabs::default();
        let mut pages: Vec<Page> = (0..SLAB_PAGES + 3)
            .map(|i| s.alloc(i % 100, &[i as u8 | 1; 7]).unwrap())
            .collect();
        assert_eq!(s.nr_slabs(), 2);
        for (i, p) in pages.iter().enumerate() {
            let b = p.bytes();
            assert!(b[..i % 100].iter().all(|&x| x == 0));
            assert!(b[i % 100..i % 100 + 7].iter().all(|&x| x == i as u8 | 1));
            assert!(b[i % 100 + 7..].iter().all(|&x| x == 0));
        }
        let mut addrs: Vec<usize> = pages.iter().map(|p| p.bytes().as_ptr() as usize).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), pages.len(), "no page handed out twice");
        pages[5].bytes_mut()[0] = 0xEE;
        assert_eq!(pages[6].bytes()[0], 0);
        // The second slab's 3 pages: freeing them frees it.
        for p in pages.drain(SLAB_PAGES..) {
            s.free(p);
        }
        assert_eq!(s.nr_slabs(), 1);
        // A freed page of a full slab is handed out again, zeroed.
        let p = pages.swap_remove(5);
        s.free(p);
        let p = s.alloc(0, &[]).unwrap();
        assert!(p.bytes().iter().all(|&x| x == 0));
        assert_eq!(s.nr_slabs(), 1);
        pages.push(p);
        for p in pages {
            s.free(p);
        }
        assert_eq!(s.nr_slabs(), 0);
    }
}
