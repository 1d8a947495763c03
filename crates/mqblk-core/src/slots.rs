//! Preallocated descriptor slots: the memory that request and bio slots
//! live in for the life of a tag set or a context.
//!
//! Below the pipeline: the tag set ([`crate::tag`]) and the bio set
//! ([`crate::bioset`]) keep their slots here. Requests and bios point into
//! them by raw pointer while they move between contexts, so the slots are
//! taken out of their box once and never moved again.

use std::ptr::NonNull;

/// A boxed slice converted once to a raw pointer (as std's `Rc` keeps its
/// `NonNull`), freed in `Drop`. Pointers derived from it stay valid however
/// often its owner moves.
pub(crate) struct RawSlots<T> {
    ptr: NonNull<[T]>,
}

impl<T> RawSlots<T> {
    pub(crate) fn new(items: Box<[T]>) -> RawSlots<T> {
        // SAFETY: Box::into_raw never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(items)) };
        RawSlots { ptr }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.ptr.len()
    }

    /// The address of slot 0 (for turning a slot pointer back into its
    /// index).
    #[inline]
    pub(crate) fn base(&self) -> *const T {
        self.ptr.as_ptr().cast::<T>()
    }

    /// A stable pointer to slot `i`.
    #[inline]
    pub(crate) fn ptr(&self, i: usize) -> NonNull<T> {
        if i >= self.len() {
            out_of_bounds(i, self.len());
        }
        // SAFETY: i is in bounds (checked above), so the offset stays in the
        // allocation.
        unsafe { NonNull::new_unchecked(self.ptr.as_ptr().cast::<T>().add(i)) }
    }

    /// Shared access to slot `i`. Slots that are mutated while shared are
    /// `UnsafeCell`s or atomics.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &T {
        // SAFETY: the slot is live while self is, and only shared references
        // (or raw pointers into cells) are ever made from it.
        unsafe { self.ptr(i).as_ref() }
    }
}

/// The panic of a bad slot index, kept off the hot path (as slice indexing
/// keeps its own).
#[cold]
#[inline(never)]
#[track_caller]
fn out_of_bounds(i: usize, len: usize) -> ! {
    panic!("slot {i} out of {len}")
}

impl<T> RawSlots<T> {
    /// Never free the slots: something outside the owner (a driver that
    /// kept a request past every deadline) may still point into them.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }
}

impl<T> Drop for RawSlots<T> {
    fn drop(&mut self) {
        // SAFETY: ptr came from Box::into_raw in new and is freed once, here;
        // the owner outlives every pointer handed out (see Tags, BioSet).
        drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
    }
}

// SAFETY: RawSlots owns its items like a Box does.
unsafe impl<T: Send> Send for RawSlots<T> {}
// SAFETY: shared access only hands out &T, as a Box<[T]> would.
unsafe impl<T: Sync> Sync for RawSlots<T> {}

impl<T> std::fmt::Debug for RawSlots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSlots")
            .field("len", &self.len())
            .finish()
    }
}
