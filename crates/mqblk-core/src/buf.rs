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

/// The buffer frees its memory on drop.
const OWNED: u8 = 1;
/// The buffer may be written (it was not lent as `&[u8]`).
const WRITABLE: u8 = 2;

/// Default buffer alignment: one page.
pub const PAGE_SIZE: usize = 4096;

/// An aligned I/O buffer.
///
/// An owned buffer frees its memory on drop. A borrowed one
/// ([`IoBuf::from_raw`]) only points at memory that someone else owns.
///
/// A buffer knows its direction: one made from a shared borrow (the data
/// of a write, or the layer's zero page) is read-only, and nothing ever
/// makes a `&mut` over it. Every buffer a caller can construct is writable.
pub struct IoBuf {
    ptr: NonNull<u8>,
    len: u32,
    align_log2: u8,
    /// `OWNED` (freed on drop) and `WRITABLE` (not a view of shared
    /// memory), in one byte so a buffer stays 16 bytes.
    flags: u8,
    /// Nonzero: the buffer is a slice of arena `arena - 1` and goes back to
    /// it on drop.
    arena: u16,
}

// SAFETY: an IoBuf is a unique handle to its bytes (owned) or a handle whose
// creator promised exclusive use for the life of the I/O (borrowed); moving
// it to another thread moves that exclusivity with it.
unsafe impl Send for IoBuf {}
// SAFETY: through &IoBuf the bytes can only be read (writing needs &mut), so
// sharing references across threads is as safe as sharing &[u8].
unsafe impl Sync for IoBuf {}

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
            flags: OWNED | WRITABLE,
            arena: 0,
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
            flags: WRITABLE,
            arena: 0,
        }
    }

    /// A non-owning, read-only view of memory that is only shared-borrowed
    /// (write data, the zero page): the layer and drivers only read it.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for reads of `len` bytes, and nothing may write
    /// those bytes from the moment the bio that carries this buffer is
    /// submitted until its completion has been reaped. The memory must
    /// outlive every copy of this handle.
    pub(crate) unsafe fn from_raw_readonly(ptr: NonNull<u8>, len: usize) -> IoBuf {
        // SAFETY: from_raw's promise is the caller's, minus writability,
        // which the flag takes away.
        let mut b = unsafe { IoBuf::from_raw(ptr, len) };
        b.flags &= !WRITABLE;
        b
    }

    /// A view of `len` bytes at `offset` of this buffer, with its direction
    /// (a piece of a split bio).
    ///
    /// # Safety
    ///
    /// The view must not outlive this buffer's memory, and while it is in
    /// use nothing else may touch those bytes in a conflicting way (the
    /// parent bio of a split waits for all its pieces).
    pub(crate) unsafe fn view(&self, offset: usize, len: usize) -> IoBuf {
        debug_assert!(offset + len <= self.len());
        // SAFETY: offset + len lies inside this buffer (asserted above), so
        // the pointer stays in its allocation.
        let p = unsafe { NonNull::new_unchecked(self.ptr.as_ptr().add(offset)) };
        // SAFETY: the caller's promise; the view keeps this buffer's
        // direction, so a read-only buffer yields a read-only view.
        unsafe {
            if self.is_writable() {
                IoBuf::from_raw(p, len)
            } else {
                IoBuf::from_raw_readonly(p, len)
            }
        }
    }

    /// The same buffer, never to be written again (the zero page).
    pub(crate) fn into_readonly(mut self) -> IoBuf {
        self.flags &= !WRITABLE;
        self
    }

    /// True unless this is a read-only view of shared memory.
    #[inline]
    pub fn is_writable(&self) -> bool {
        self.flags & WRITABLE != 0
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
        self.flags & OWNED != 0
    }

    /// The arena this buffer was carved from, if any: drivers that
    /// registered the arena's region (io_uring fixed buffers) can address the
    /// buffer by region and offset.
    #[inline]
    pub fn arena_id(&self) -> Option<u16> {
        (self.arena != 0).then(|| self.arena - 1)
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (allocation, or the from_raw
        // contract), and &self excludes writers through this handle.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len as usize) }
    }

    /// The bytes, mutably.
    ///
    /// # Panics
    ///
    /// On a read-only view. Callers cannot make one: they exist only inside
    /// the layer, for write data borrowed from `&[u8]`.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        assert!(
            self.is_writable(),
            "a read-only buffer (write data borrowed from a shared slice) is never written"
        );
        // SAFETY: as for as_slice, and &mut self makes this the only access;
        // the buffer is writable (asserted), so its memory was lent mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len as usize) }
    }

    /// Copy `src` into the buffer at `offset` through the raw pointer,
    /// without forming a reference to any other byte of the buffer (other
    /// pieces of the same buffer may be in flight).
    pub(crate) fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(self.is_writable(), "write into a read-only buffer");
        assert!(offset + src.len() <= self.len());
        // SAFETY: the range is inside the buffer (asserted); the buffer is
        // writable, and the caller owns this range exclusively (a bounced
        // read piece owns its part of the parent's memory until it ends).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len())
        };
    }
}

impl Drop for IoBuf {
    // Inline: a borrowed buffer (the C API's, a caller's slice) drops with
    // two tests; the rest is out of line.
    #[inline]
    fn drop(&mut self) {
        if self.arena == 0 && !self.is_owned() {
            return;
        }
        self.release();
    }
}

impl IoBuf {
    /// Give an arena buffer back, or free an owned one.
    #[inline(never)]
    fn release(&mut self) {
        if self.arena != 0 {
            arena_return(self.arena - 1, self.ptr, self.len as usize);
        } else if self.is_owned() {
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
            .field("owned", &self.is_owned())
            .field("writable", &self.is_writable())
            .finish()
    }
}

/// Number of size classes: 512 B .. 64 MiB.
const CLASSES: usize = 18;
/// Buffers kept per class once returned.
const KEEP_PER_CLASS: usize = 256;

fn class_of(len: usize) -> Option<usize> {
    let c = len.max(512).next_power_of_two().trailing_zeros() as usize - 9;
    (c < CLASSES).then_some(c)
}

/// A contiguous region of buffer memory a driver may register with its
/// hardware (io_uring fixed buffers): every pool buffer carved from it lies
/// inside `[addr, addr + len)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufRegion {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
    /// The arena's id, as [`IoBuf::arena_id`] reports it.
    pub arena_id: u16,
}

/// One fixed region carved into power-of-two buffers. It lives in a global
/// table so that a buffer dropped anywhere finds its way back, and its
/// memory is freed only when the pool is gone and no buffer is out.
struct Arena {
    base: NonNull<u8>,
    layout: Layout,
    align: usize,
    state: std::sync::Mutex<ArenaState>,
}

struct ArenaState {
    bump: usize,
    free: Vec<Vec<usize>>,
    outstanding: usize,
    pool_alive: bool,
}

// SAFETY: the arena's memory is only reached through IoBufs, each of which
// owns a disjoint slice of it; the bookkeeping is behind a mutex.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: base was allocated in BufPool::with_arena with this layout;
        // the arena is dropped once, after its last buffer came back.
        unsafe { alloc::dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// Arenas by id. Touched when a pool is made or dropped and when an arena
/// buffer is dropped: never per I/O (buffers are reused, not dropped).
static ARENAS: std::sync::Mutex<Vec<Option<std::sync::Arc<Arena>>>> =
    std::sync::Mutex::new(Vec::new());

fn arenas() -> std::sync::MutexGuard<'static, Vec<Option<std::sync::Arc<Arena>>>> {
    ARENAS.lock().unwrap_or_else(|e| e.into_inner())
}

fn arena_return(id: u16, ptr: NonNull<u8>, len: usize) {
    let mut table = arenas();
    let Some(Some(arena)) = table.get(id as usize) else {
        debug_assert!(false, "buffer of unknown arena {id}");
        return;
    };
    let mut st = arena.state.lock().unwrap_or_else(|e| e.into_inner());
    let offset = ptr.as_ptr() as usize - arena.base.as_ptr() as usize;
    if let Some(c) = class_of(len.max(arena.align)) {
        st.free[c].push(offset);
    }
    assert!(st.outstanding > 0);
    st.outstanding -= 1;
    if st.outstanding == 0 && !st.pool_alive {
        drop(st);
        table[id as usize] = None;
    }
}

/// A pool of aligned buffers for one device, in power-of-two size classes,
/// optionally carved from one fixed arena that drivers can register.
///
/// `get` and `put` are control-plane operations (they take a lock): a caller
/// takes its buffers before I/O starts and reuses them, so the per-I/O path
/// never touches the pool.
pub struct BufPool {
    align: usize,
    classes: Mutex<Vec<Vec<IoBuf>>>,
    arena: Option<(u16, std::sync::Arc<Arena>)>,
}

impl BufPool {
    /// A pool whose buffers are aligned to `align` bytes (at least a page).
    pub fn new(align: usize) -> BufPool {
        BufPool {
            align: align.max(PAGE_SIZE).next_power_of_two(),
            classes: Mutex::new((0..CLASSES).map(|_| Vec::new()).collect()),
            arena: None,
        }
    }

    /// A pool that carves buffers from one `arena_bytes` region first (and
    /// falls back to the heap when it is used up).
    pub fn with_arena(align: usize, arena_bytes: usize) -> BufPool {
        let mut pool = BufPool::new(align);
        if arena_bytes == 0 {
            return pool;
        }
        let layout = Layout::from_size_align(arena_bytes, pool.align).expect("arena layout");
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        let arena = std::sync::Arc::new(Arena {
            base,
            layout,
            align: pool.align,
            state: std::sync::Mutex::new(ArenaState {
                bump: 0,
                free: (0..CLASSES).map(|_| Vec::new()).collect(),
                outstanding: 0,
                pool_alive: true,
            }),
        });
        let mut table = arenas();
        let id = match table.iter().position(|a| a.is_none()) {
            Some(i) => i,
            None => {
                table.push(None);
                table.len() - 1
            }
        };
        if id >= u16::MAX as usize {
            return pool;
        }
        table[id] = Some(arena.clone());
        pool.arena = Some((id as u16, arena));
        pool
    }

    /// The alignment of every buffer from this pool.
    pub fn align(&self) -> usize {
        self.align
    }

    /// The registrable regions of this pool (its arena, if it has one).
    pub fn regions(&self) -> Vec<BufRegion> {
        self.arena
            .iter()
            .map(|(id, a)| BufRegion {
                addr: a.base.as_ptr() as usize,
                len: a.layout.size(),
                arena_id: *id,
            })
            .collect()
    }

    fn carve(&self, len: usize) -> Option<IoBuf> {
        let (id, arena) = self.arena.as_ref()?;
        let class_len = len.max(self.align).next_power_of_two();
        let c = class_of(class_len)?;
        let mut st = arena.state.lock().unwrap_or_else(|e| e.into_inner());
        let offset = match st.free[c].pop() {
            Some(o) => o,
            None => {
                let o = st.bump.next_multiple_of(self.align);
                if o + class_len > arena.layout.size() {
                    return None;
                }
                st.bump = o + class_len;
                o
            }
        };
        st.outstanding += 1;
        // SAFETY: offset + class_len lies inside the arena (checked when the
        // slice was carved), so the pointer stays in the allocation.
        let ptr = unsafe { NonNull::new_unchecked(arena.base.as_ptr().add(offset)) };
        Some(IoBuf {
            ptr,
            len: len as u32,
            align_log2: self.align.trailing_zeros() as u8,
            flags: WRITABLE,
            arena: id + 1,
        })
    }

    /// A buffer of exactly `len` bytes, zeroed when first handed out.
    pub fn get(&self, len: usize) -> IoBuf {
        if let Some(b) = self.carve(len) {
            return b;
        }
        if let Some(c) = class_of(len) {
            let mut classes = lock(&self.classes);
            if let Some(pos) = classes[c].iter().rposition(|b| b.len() == len) {
                return classes[c].swap_remove(pos);
            }
        }
        IoBuf::new(len, self.align)
    }

    /// Return a buffer for reuse. Arena buffers go back to their arena;
    /// borrowed buffers are simply forgotten.
    pub fn put(&self, buf: IoBuf) {
        if buf.arena != 0 || !buf.is_owned() || buf.align() < self.align {
            return;
        }
        if let Some(c) = class_of(buf.len()) {
            let mut classes = lock(&self.classes);
            if classes[c].len() < KEEP_PER_CLASS {
                classes[c].push(buf);
            }
        }
    }
}

impl Drop for BufPool {
    fn drop(&mut self) {
        if let Some((id, arena)) = self.arena.take() {
            let mut table = arenas();
            let mut st = arena.state.lock().unwrap_or_else(|e| e.into_inner());
            st.pool_alive = false;
            if st.outstanding == 0 {
                drop(st);
                table[id as usize] = None;
            }
        }
    }
}

impl std::fmt::Debug for BufPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufPool")
            .field("align", &self.align)
            .field("regions", &self.regions())
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
    fn arena_buffers_come_from_the_region_and_outlive_the_pool() {
        let pool = BufPool::with_arena(4096, 1 << 20);
        let r = pool.regions();
        assert_eq!(r.len(), 1);
        let a = pool.get(4096);
        let b = pool.get(8192);
        for buf in [&a, &b] {
            let addr = buf.as_ptr() as usize;
            assert!(addr >= r[0].addr && addr + buf.len() <= r[0].addr + r[0].len);
            assert_eq!(addr % 4096, 0);
            assert_eq!(buf.arena_id(), Some(r[0].arena_id));
        }
        let a_addr = a.as_ptr();
        drop(a);
        let a2 = pool.get(4096);
        assert_eq!(a2.as_ptr(), a_addr, "a dropped arena buffer is reused");
        // Exhausting the arena falls back to the heap.
        let big = pool.get(2 << 20);
        assert!(big.arena_id().is_none());
        drop(pool);
        // Buffers outlive the pool; the arena goes when the last one does.
        let mut b = b;
        b.as_mut_slice().fill(3);
        assert!(b.as_slice().iter().all(|&x| x == 3));
        drop(b);
        drop(a2);
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
