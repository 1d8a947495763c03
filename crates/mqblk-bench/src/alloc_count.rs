//! A counting global allocator, so the bench can report heap allocations
//! per I/O (`allocs_per_io`). Threads that are not part of the I/O path
//! (the bench's own supervisor and progress line) mark themselves excluded.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed, by every thread (excluded or not):
/// `mqblk repro descriptor` measures a device's memory with it.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static EXCLUDED: Cell<bool> = const { Cell::new(false) };
}

/// Forwards to the system allocator, counting allocations and reallocations.
pub struct CountingAlloc;

#[inline]
fn count() {
    // try_with: during thread teardown the TLS slot may be gone.
    if !EXCLUDED.try_with(|e| e.get()).unwrap_or(false) {
        ALLOCS.fetch_add(1, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so System's guarantees are ours; counting touches only an atomic
// and a const-initialised thread-local, neither of which allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        LIVE_BYTES.fetch_add(layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract (layout has non-zero size per GlobalAlloc).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        LIVE_BYTES.fetch_add(layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract: ptr came from this allocator (System).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Allocations counted so far (all counted threads).
pub fn allocations() -> u64 {
    ALLOCS.load(Relaxed)
}

/// Heap bytes allocated and not freed so far, by all threads.
pub fn live_bytes() -> i64 {
    LIVE_BYTES.load(Relaxed)
}

/// Stop counting the calling thread's allocations.
pub fn exclude_this_thread() {
    EXCLUDED.with(|e| e.set(true));
}
