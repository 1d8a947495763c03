//! Aligned I/O buffers and the per-device buffer pool.
//!
//! Buffers travel from the caller to the driver untouched: a [`Segment`]
//! of a bio points into an [`IoBuf`], and the driver reads or writes that
//! memory directly. The layer itself never copies data. Buffers are
//! page-aligned by default and at least as aligned as the device's DMA
//! alignment, and they come from a [`BufPool`] that reuses them.
//!
//! [`Segment`]: crate::bio::Segment

use std::alloc::{self, Layout};
use std::ptr::NonNull;

use crate::sync::{lock, Mutex};

/// Default buffer alignment: one page.
pub const PAGE_SIZE: usize = 4096;

/// An aligned I/O buffer.
///
/// An owned buffer frees its memory on drop. A borrowed one
/// ([`IoBuf::from_raw`]) only points at memory that someone else owns.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: u32,
    align_log2: u8,
    owned: bool,
}

// SAFETY: an IoBuf is a unique handle to its bytes (owned) or a handle whose
// creator promised exclusive use for the life of the I/O (borrowed); moving
// it to another thread moves that exclusivity with it.
unsafe impl Send for IoBuf {}

impl IoBuf {
    /// Allocate a zeroed buffer of `len` bytes aligned to `align` (a power of
    /// two; raised to at least 512). Control-plane: this allocates.
    pub fn new(len: usize, align: usize) -> IoBuf {
        let align = align.max(512).next_power_of_two();
        assert!(len <= u32::MAX as usize, "IoBuf larger than 4 GiB");
        let layout = Layout::from_size_align(len.max(1), align).expect("IoBuf layout");
        // SAFETY: the layout has a non-zero size (len.max(1)).
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        IoBuf {
            ptr,
            len: len as u32,
            align_log2: align.trailing_zeros() as u8,
            owned: true,
        }
    }

    /// A page-aligned buffer.
    pub fn page_aligned(len: usize) -> IoBuf {
        IoBuf::new(len, PAGE_SIZE)
    }

    /// A non-owning view of memory owned elsewhere.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads and writes of `len` bytes, and nothing
    /// else may access those bytes from the moment the bio that carries this
    /// buffer is submitted until its completion has been reaped — even if a
    /// future that submitted it was dropped, and even if the device errors.
    /// The memory must outlive every copy of this handle.
    pub unsafe fn from_raw(ptr: NonNull<u8>, len: usize) -> IoBuf {
        assert!(len <= u32::MAX as usize, "IoBuf larger than 4 GiB");
        IoBuf {
            ptr,
            len: len as u32,
            align_log2: (ptr.as_ptr() as usize).trailing_zeros().min(63) as u8,
            owned: false,
        }
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True if the buffer has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start address.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The alignment this buffer was allocated with (or happens to have).
    #[inline]
    pub fn align(&self) -> usize {
        1usize << self.align_log2
    }

    /// True if this buffer frees its memory on drop.
    #[inline]
    pub fn is_owned(&self) -> bool {
        self.owned
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (allocation, or the from_raw
        // contract), and &self excludes writers through this handle.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len as usize) }
    }

    /// The bytes, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for as_slice, and &mut self makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len as usize) }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if self.owned {
            let layout = Layout::from_size_align((self.len as usize).max(1), self.align())
                .expect("IoBuf layout");
            // SAFETY: an owned buffer was allocated in IoBuf::new with exactly
            // this layout, and is freed once, here.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoBuf")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("align", &self.align())
            .field("owned", &self.owned)
            .finish()
    }
}

/// Number of size classes: 512 B .. 64 MiB.
const CLASSES: usize = 18;
/// Buffers kept per class once returned.
const KEEP_PER_CLASS: usize = 256;

/// A pool of aligned buffers for one device, in power-of-two size classes.
///
/// `get` and `put` are control-plane operations (they take a lock): a caller
/// takes its buffers before I/O starts and reuses them, so the per-I/O path
/// never touches the pool.
pub struct BufPool {
    align: usize,
    classes: Mutex<Vec<Vec<IoBuf>>>,
}

impl BufPool {
    /// A pool whose buffers are aligned to `align` bytes (at least a page).
    pub fn new(align: usize) -> BufPool {
        BufPool {
            align: align.max(PAGE_SIZE).next_power_of_two(),
            classes: Mutex::new((0..CLASSES).map(|_| Vec::new()).collect()),
        }
    }

    /// The alignment of every buffer from this pool.
    pub fn align(&self) -> usize {
        self.align
    }

    fn class_of(len: usize) -> Option<usize> {
        let c = len.max(512).next_power_of_two().trailing_zeros() as usize - 9;
        (c < CLASSES).then_some(c)
    }

    /// A buffer of at least `len` bytes (exactly `len` bytes long).
    pub fn get(&self, len: usize) -> IoBuf {
        if let Some(c) = Self::class_of(len) {
            let mut classes = lock(&self.classes);
            if let Some(pos) = classes[c].iter().rposition(|b| b.len() == len) {
                return classes[c].swap_remove(pos);
            }
        }
        IoBuf::new(len, self.align)
    }

    /// Return a buffer for reuse. Borrowed buffers are simply forgotten.
    pub fn put(&self, buf: IoBuf) {
        if !buf.is_owned() || buf.align() < self.align {
            return;
        }
        if let Some(c) = Self::class_of(buf.len()) {
            let mut classes = lock(&self.classes);
            if classes[c].len() < KEEP_PER_CLASS {
                classes[c].push(buf);
            }
        }
    }
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufPool")
            .field("align", &self.align)
            .finish()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_reused() {
        let pool = BufPool::new(4096);
        let mut b = pool.get(8192);
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.as_slice().iter().all(|&x| x == 0));
        b.as_mut_slice()[0] = 7;
        let addr = b.as_ptr();
        pool.put(b);
        let b2 = pool.get(8192);
        assert_eq!(b2.as_ptr(), addr, "pool must hand the same buffer back");
    }

    #[test]
    fn borrowed_buffers_are_not_freed() {
        let mut v = vec![0u8; 1024];
        // SAFETY: v outlives b and is not touched while b lives.
        let b = unsafe { IoBuf::from_raw(NonNull::new(v.as_mut_ptr()).unwrap(), v.len()) };
        assert!(!b.is_owned());
        drop(b);
        v[0] = 1;
        assert_eq!(v[0], 1);
    }
}
