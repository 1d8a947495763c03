//! Guest memory as the data path reads and writes it: the driver's memory
//! table, its regions resolved to host addresses once (when the table is
//! taken), so that a ring index, a descriptor, a header or a status byte
//! costs a compare or two and a load, not a walk through vm-memory's
//! layers per field (QEMU's `vhost_user_blk` server and libblkio keep the
//! same flat table).
//!
//! Every access is volatile or atomic: the driver shares this memory and
//! writes it whenever it likes (its own buffers) or when the virtio
//! protocol lets it (the rings).

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use vm_memory::{GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress};

use crate::request::ReadGuest;

/// One region of guest physical memory and where it is mapped here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region {
    /// Guest physical address of the first byte.
    pub(crate) gpa: u64,
    /// Bytes in the region (never 0).
    pub(crate) len: u64,
    /// The first byte, mapped in this process.
    pub(crate) host: NonNull<u8>,
}

/// A memory table, resolved: its regions in guest-address order, and the
/// owner that keeps their mappings alive as long as this lives.
pub(crate) struct Guest {
    regions: Box<[Region]>,
    /// The region the last lookup found (nearly every access of a batch
    /// falls in the region of the one before).
    last: AtomicUsize,
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the host pointers point into mappings that `_owner` keeps alive
// for as long as the `Guest` lives; they are only read and written through
// volatile or atomic accesses (shared memory that the driver writes too),
// from whichever thread holds the `Guest`. Nothing here is tied to a
// thread.
unsafe impl Send for Guest {}
// SAFETY: as for `Send`: `&Guest` gives no access but volatile or atomic
// ones, and the lookup hint is an atomic.
unsafe impl Sync for Guest {}

impl Guest {
    /// The table `mem`, resolved. Regions without a host mapping are left
    /// out: an address in them is outside guest memory, as far as the data
    /// path goes.
    pub(crate) fn of<M>(mem: Arc<M>) -> Guest
    where
        M: GuestMemoryBackend + Send + Sync + 'static,
    {
        let mut regions: Vec<Region> = mem
            .iter()
            .filter_map(|r| {
                let len = r.len();
                let host = r.get_host_address(MemoryRegionAddress(0)).ok()?;
                Some(Region {
                    gpa: r.start_addr().0,
                    len,
                    host: NonNull::new(host)?,
                })
            })
            .filter(|r| r.len > 0)
            .collect();
        regions.sort_by_key(|r| r.gpa);
        // SAFETY: each region's host range is the mapping `mem` holds for
        // it; `mem` (a memory table is immutable: its regions are never
        // unmapped while it lives) is the owner.
        unsafe { Guest::from_raw(regions, mem) }
    }

    /// A table from regions the caller resolved.
    ///
    /// # Safety
    ///
    /// For as long as `owner` lives, each region's `len` bytes from `host`
    /// must stay mapped, readable and writable, and no two regions may
    /// share guest addresses. Rust references into those bytes must not be
    /// used while the `Guest` (or anything borrowed from it) lives: every
    /// access this type makes is volatile or atomic.
    pub(crate) unsafe fn from_raw(
        mut regions: Vec<Region>,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Guest {
        regions.sort_by_key(|r| r.gpa);
        Guest {
            regions: regions.into_boxed_slice(),
            last: AtomicUsize::new(0),
            _owner: owner,
        }
    }

    /// The region holding `addr`.
    #[inline]
    fn region_of(&self, addr: u64) -> Option<&Region> {
        let hint = self.last.load(Ordering::Relaxed);
        if let Some(r) = self.regions.get(hint) {
            if addr.wrapping_sub(r.gpa) < r.len {
                return Some(r);
            }
        }
        let i = self.regions.partition_point(|r| r.gpa <= addr);
        let r = self.regions.get(i.checked_sub(1)?)?;
        if addr - r.gpa >= r.len {
            return None;
        }
        self.last.store(i - 1, Ordering::Relaxed);
        Some(r)
    }

    /// The host address of `len` bytes at `addr`, if they lie in one
    /// region (`len` 0: `addr` must still be inside one).
    #[inline]
    pub(crate) fn resolve(&self, addr: u64, len: u64) -> Option<NonNull<u8>> {
        let r = self.region_of(addr)?;
        let off = addr - r.gpa;
        if len > r.len - off {
            return None;
        }
        // SAFETY: `off < r.len`, so the result stays inside the region's
        // mapping (an allocation of `r.len` bytes).
        Some(unsafe { r.host.add(off as usize) })
    }

    /// The host pieces of `len` bytes at `addr`, region by region, pushed
    /// onto `out`; false if a byte of them is outside guest memory.
    pub(crate) fn pieces(&self, addr: u64, len: u32, out: &mut Vec<(NonNull<u8>, u32)>) -> bool {
        let mut at = addr;
        let mut left = u64::from(len);
        while left > 0 {
            let Some(r) = self.region_of(at) else {
                return false;
            };
            let off = at - r.gpa;
            let n = left.min(r.len - off);
            // SAFETY: `off < r.len`: inside the region's mapping.
            out.push((unsafe { r.host.add(off as usize) }, n as u32));
            left -= n;
            match at.checked_add(n) {
                Some(next) => at = next,
                None if left == 0 => {}
                None => return false,
            }
        }
        true
    }

    /// True if every byte of `len` at `addr` is guest memory.
    fn spans(&self, addr: u64, len: u64) -> bool {
        let mut at = addr;
        let mut left = len;
        while left > 0 {
            let Some(r) = self.region_of(at) else {
                return false;
            };
            let n = left.min(r.len - (at - r.gpa));
            left -= n;
            match at.checked_add(n) {
                Some(next) => at = next,
                None => return left == 0,
            }
        }
        true
    }

    /// Run `each(host, done, n)` over the host pieces of `len` bytes at
    /// `addr` (`done`: bytes before this piece); false, with `each` never
    /// run, if a byte is outside guest memory.
    fn copy(&self, addr: u64, len: usize, mut each: impl FnMut(NonNull<u8>, usize, usize)) -> bool {
        if !self.spans(addr, len as u64) {
            return false;
        }
        let mut at = addr;
        let mut done = 0usize;
        while done < len {
            let Some(r) = self.region_of(at) else {
                return false;
            };
            let off = at - r.gpa;
            let n = ((len - done) as u64).min(r.len - off) as usize;
            // SAFETY: `off < r.len`: inside the region's mapping.
            each(unsafe { r.host.add(off as usize) }, done, n);
            done += n;
            at = at.wrapping_add(n as u64);
        }
        true
    }

    /// Write `buf` at guest address `addr`; false (nothing written) if a
    /// byte of it is outside guest memory.
    pub(crate) fn write(&self, addr: u64, buf: &[u8]) -> bool {
        self.copy(addr, buf.len(), |p, from, n| {
            for (i, &b) in buf[from..from + n].iter().enumerate() {
                // SAFETY: `copy` gives `n` bytes at `p` inside one region.
                unsafe { p.add(i).write_volatile(b) };
            }
        })
    }

    /// Write one byte through a pointer that [`Guest::resolve`] gave.
    ///
    /// # Safety
    ///
    /// `at` came from `resolve` on this `Guest` (or on one whose owner
    /// still lives, which keeps the same mapping): the byte is mapped for
    /// as long as that owner lives.
    #[inline]
    pub(crate) unsafe fn write_byte(&self, at: NonNull<u8>, b: u8) {
        debug_assert!(self.holds(at));
        // SAFETY: mapped, by the caller's promise.
        unsafe { at.write_volatile(b) };
    }

    /// True if `at` points into one of this table's mappings.
    pub(crate) fn holds(&self, at: NonNull<u8>) -> bool {
        let a = at.as_ptr() as usize;
        self.regions.iter().any(|r| {
            let base = r.host.as_ptr() as usize;
            a >= base && a - base < r.len as usize
        })
    }
}

impl ReadGuest for Guest {
    #[inline]
    fn read(&self, addr: u64, buf: &mut [u8]) -> bool {
        // One region (a header, a range, a status byte): one lookup.
        if let Some(p) = self.resolve(addr, buf.len() as u64) {
            // SAFETY: `resolve` checked that `buf.len()` bytes at `p` lie
            // in one live mapping.
            unsafe { read_volatile_into(p, buf) };
            return true;
        }
        let len = buf.len();
        self.copy(addr, len, |p, from, n| {
            // SAFETY: `copy` gives `n` bytes at `p` inside one region.
            unsafe { read_volatile_into(p, &mut buf[from..from + n]) };
        })
    }
}

/// Fill `buf` from `buf.len()` bytes at `p`, each load as wide as the
/// address's alignment and the bytes left allow (as vm-memory copies).
///
/// # Safety
///
/// `buf.len()` bytes at `p` are mapped and readable for the whole call.
#[inline]
unsafe fn read_volatile_into(p: NonNull<u8>, buf: &mut [u8]) {
    let mut i = 0;
    while i < buf.len() {
        let left = buf.len() - i;
        // SAFETY: `i < len`: `p + i` is inside the caller's bytes.
        let q = unsafe { p.as_ptr().add(i) };
        let at = q as usize;
        // Each load below reads `n <= left` bytes at `q`, the caller's,
        // and `q` is aligned for the integer loaded.
        let n = if at.is_multiple_of(8) && left >= 8 {
            // SAFETY: as said above the `if`.
            let v = unsafe { q.cast::<u64>().read_volatile() };
            buf[i..i + 8].copy_from_slice(&v.to_ne_bytes());
            8
        } else if at.is_multiple_of(4) && left >= 4 {
            // SAFETY: as said above the `if`.
            let v = unsafe { q.cast::<u32>().read_volatile() };
            buf[i..i + 4].copy_from_slice(&v.to_ne_bytes());
            4
        } else if at.is_multiple_of(2) && left >= 2 {
            // SAFETY: as said above the `if`.
            let v = unsafe { q.cast::<u16>().read_volatile() };
            buf[i..i + 2].copy_from_slice(&v.to_ne_bytes());
            2
        } else {
            // SAFETY: as said above the `if`.
            buf[i] = unsafe { q.read_volatile() };
            1
        };
        i += n;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Memory for tests: a heap buffer, its address taken once, freed on
    /// drop (the owner of a `Guest` made from it).
    pub(crate) struct Buf {
        ptr: NonNull<u8>,
        len: usize,
    }
    // SAFETY: a plain heap buffer, only reached through its pointer.
    unsafe impl Send for Buf {}
    // SAFETY: as for `Send`.
    unsafe impl Sync for Buf {}
    impl Buf {
        pub(crate) fn new(len: usize) -> Arc<Buf> {
            // u64s: 8-byte aligned, as guest pages are.
            let words = vec![0u64; len.div_ceil(8)].into_boxed_slice();
            let ptr = NonNull::new(Box::into_raw(words).cast::<u8>()).expect("a box");
            Arc::new(Buf { ptr, len })
        }
        pub(crate) fn ptr(&self) -> NonNull<u8> {
            self.ptr
        }
    }
    impl Drop for Buf {
        fn drop(&mut self) {
            let words = std::ptr::slice_from_raw_parts_mut(
                self.ptr.as_ptr().cast::<u64>(),
                self.len.div_ceil(8),
            );
            // SAFETY: made by `Box::into_raw` in `new`, freed once here.
            drop(unsafe { Box::from_raw(words) });
        }
    }

    /// A guest of `regions` (guest address, length), each backed by a
    /// buffer of its own.
    pub(crate) fn guest(regions: &[(u64, usize)]) -> Guest {
        let bufs: Vec<Arc<Buf>> = regions.iter().map(|&(_, len)| Buf::new(len)).collect();
        let table = regions
            .iter()
            .zip(&bufs)
            .map(|(&(gpa, len), b)| Region {
                gpa,
                len: len as u64,
                host: b.ptr(),
            })
            .collect();
        // SAFETY: each region is its own live buffer, kept by the owner.
        unsafe { Guest::from_raw(table, Arc::new(bufs)) }
    }

    #[test]
    fn reads_and_writes_cross_regions_and_stop_at_holes() {
        // Two adjacent regions, then a hole, then a third.
        let g = guest(&[(0x1000, 0x1000), (0x2000, 0x1000), (0x8000, 0x100)]);
        let data: Vec<u8> = (0..32).collect();
        assert!(g.write(0x2000 - 16, &data));
        let mut back = [0u8; 32];
        assert!(g.read(0x2000 - 16, &mut back));
        assert_eq!(&back[..], &data[..]);
        // Inside one region, aligned and not, whole words and a tail.
        for at in [0x2000 - 16, 0x2000 - 15, 0x1000] {
            let mut b = [0u8; 13];
            assert!(g.read(at, &mut b));
            let want: Vec<u8> = (0..13)
                .map(|i| {
                    (at + i)
                        .checked_sub(0x2000 - 16)
                        .and_then(|o| data.get(o as usize).copied())
                        .unwrap_or(0)
                })
                .collect();
            assert_eq!(&b[..], &want[..]);
        }
        // Across the hole: refused, and nothing written.
        assert!(!g.write(0x3000 - 4, &data[..8]));
        let mut four = [0xffu8; 4];
        assert!(g.read(0x3000 - 4, &mut four));
        assert_eq!(four, [0; 4]);
        assert!(!g.read(0x7fff, &mut four));
        assert!(!g.read(u64::MAX - 1, &mut four));
        assert!(g.read(0x8000, &mut four));
        // One region only for `resolve`; pieces split at the border.
        assert!(g.resolve(0x1ff0, 16).is_some());
        assert!(g.resolve(0x1ff0, 17).is_none());
        assert!(g.resolve(0x80ff, 1).is_some());
        assert!(g.resolve(0x8100, 0).is_none());
        let mut out = Vec::new();
        assert!(g.pieces(0x1ff0, 32, &mut out));
        assert_eq!(out.iter().map(|p| p.1).collect::<Vec<_>>(), vec![16, 16]);
        out.clear();
        assert!(!g.pieces(0x2ff0, 32, &mut out));
        // A byte through a resolved pointer.
        let p = g.resolve(0x8010, 1).expect("mapped");
        // SAFETY: resolved on `g`, which lives.
        unsafe { g.write_byte(p, 7) };
        let mut one = [0u8];
        assert!(g.read(0x8010, &mut one));
        assert_eq!(one, [7]);
    }
}
