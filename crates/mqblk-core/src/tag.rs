//! Tags: the bounded set of request slots of a hardware queue (Linux
//! `struct blk_mq_tags`, built on the sbitmap).
//!
//! Each tag owns one preallocated [`Request`]. Taking a tag is taking the
//! right to use that request; the number of tags bounds the requests in
//! flight. Tags `0..reserved` come from a separate reserved map, so internal
//! commands never starve behind normal I/O. A tag set is per hardware queue
//! by default, or shared by all hardware queues of a device.

use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::time::Duration;

use crate::request::{Request, RqAtomics, RqRef, RqState};
use crate::sbitmap::{AllocHint, SbitmapQueue};
use crate::slots::RawSlots;

/// Request slots and their allocator.
pub(crate) struct Tags {
    normal: SbitmapQueue,
    /// Normal tags taken out of service to lower the depth below what was
    /// allocated (control plane only).
    parked: std::sync::Mutex<Vec<u32>>,
    reserved: Option<SbitmapQueue>,
    nr_reserved: u32,
    /// The request slots. Held as a raw slice taken once from its box, so
    /// moving `Tags` never invalidates the pointers requests hand out.
    rqs: RawSlots<UnsafeCell<Request>>,
    /// Beside the requests: the atomics the timeout scan reads. Requests
    /// point into it, so it too is taken out of its box once.
    atoms: RawSlots<RqAtomics>,
}

// SAFETY: every request slot is touched only by the holder of its tag (the
// sbitmap hands each bit to one owner at a time, with acquire/release on the
// bit), except for the atomic `state` and `deadline_ms` fields, which the
// timeout scan reads concurrently; hence sharing Tags between threads is sound.
unsafe impl Sync for Tags {}
// SAFETY: Tags owns its slots; moving it moves them.
unsafe impl Send for Tags {}

impl Tags {
    /// `depth` usable normal tags out of `depth_max` allocated, so the depth
    /// can later be raised up to `depth_max` without reallocating.
    pub(crate) fn with_max(depth: u32, depth_max: u32, reserved: u32, hwq: u16) -> Tags {
        assert!(depth >= 1, "a tag set needs at least one tag");
        let depth_max = depth_max.max(depth);
        let total = depth_max + reserved;
        let atoms = RawSlots::new((0..total).map(|_| RqAtomics::default()).collect());
        let rqs = RawSlots::new(
            (0..total)
                .map(|t| UnsafeCell::new(Request::new(t, hwq, atoms.ptr(t as usize))))
                .collect(),
        );
        let tags = Tags {
            normal: SbitmapQueue::new(depth_max, None),
            parked: std::sync::Mutex::new(Vec::new()),
            reserved: (reserved > 0).then(|| SbitmapQueue::new(reserved, None)),
            nr_reserved: reserved,
            rqs,
            atoms,
        };
        tags.set_depth(depth).expect("a new tag set is idle");
        tags
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Normal tags allocated: the most `set_depth` accepts.
    pub(crate) fn depth_max(&self) -> u32 {
        self.normal.depth()
    }

    /// Change the number of normal tags in service (Linux
    /// `blk_mq_tag_update_depth`). Lowering takes free tags out of service, so
    /// it fails if too many are in use; call it with the queue frozen.
    pub(crate) fn set_depth(&self, depth: u32) -> Result<(), String> {
        if depth == 0 || depth > self.depth_max() {
            return Err(format!(
                "queue_depth {depth} is outside 1..={}",
                self.depth_max()
            ));
        }
        let mut parked = self.parked();
        let current = self.depth_max() - parked.len() as u32;
        if depth > current {
            for _ in current..depth {
                let bit = parked.pop().expect("fewer tags in service than allocated");
                self.normal.put(bit);
            }
        } else {
            let mut hint = AllocHint::new(0);
            let mut taken = Vec::new();
            for _ in depth..current {
                match self.normal.get(&mut hint) {
                    Some(bit) => taken.push(bit),
                    None => {
                        self.normal.put_batch(&taken);
                        return Err(format!(
                            "cannot lower queue_depth to {depth}: tags are in use"
                        ));
                    }
                }
            }
            parked.extend(taken);
        }
        Ok(())
    }

    /// All tags.
    pub(crate) fn total(&self) -> u32 {
        self.rqs.len() as u32
    }

    /// Tags in use (approximate while I/O runs).
    pub(crate) fn busy(&self) -> u32 {
        self.normal.weight() - self.parked().len() as u32
            + self.reserved.as_ref().map_or(0, |r| r.weight())
    }

    #[inline]
    fn claim(&self, tag: u32) -> RqRef {
        debug_assert!(tag < self.total());
        let rq = UnsafeCell::raw_get(self.rqs.ptr(tag as usize).as_ptr());
        // SAFETY: the caller just took `tag` from a bitmap, so it is the
        // slot's only owner; the slot lives as long as self, which outlives
        // every RqRef (the device keeps its Tags until all contexts are gone).
        let rq = unsafe { RqRef::from_slot(NonNull::new_unchecked(rq)) };
        debug_assert_eq!(
            rq.state(),
            RqState::Idle,
            "tag {tag} allocated while in use"
        );
        rq
    }

    /// True if `cache` holds a tag.
    #[inline]
    pub(crate) fn has_cached(&self, cache: &TagCache) -> bool {
        cache.mask != 0
    }

    /// True if a normal tag is free (approximate while I/O runs).
    pub(crate) fn has_free(&self) -> bool {
        self.normal.weight() < self.normal.depth()
    }

    /// Take one normal tag.
    #[inline]
    pub(crate) fn get(&self, hint: &mut AllocHint) -> Option<RqRef> {
        let bit = self.normal.get(hint)?;
        Some(self.claim(bit + self.nr_reserved))
    }

    /// Take up to `nr` normal tags at once; see [`TagCache`].
    #[inline]
    pub(crate) fn get_batch(&self, hint: &mut AllocHint, nr: u32, cache: &mut TagCache) {
        debug_assert_eq!(cache.mask, 0);
        let (mask, offset) = self.normal.get_batch(hint, nr);
        cache.mask = mask;
        cache.offset = offset + self.nr_reserved;
    }

    /// Wait up to `timeout` for a normal tag.
    pub(crate) fn get_wait(&self, hint: &mut AllocHint, timeout: Duration) -> Option<RqRef> {
        let bit = self.normal.get_wait(hint, timeout)?;
        Some(self.claim(bit + self.nr_reserved))
    }

    /// Take the tag out of the cache's lowest bit.
    #[inline(always)]
    pub(crate) fn take_cached(&self, cache: &mut TagCache) -> Option<RqRef> {
        if cache.mask == 0 {
            return None;
        }
        let bit = cache.mask.trailing_zeros();
        cache.mask &= cache.mask - 1;
        Some(self.claim(cache.offset + bit))
    }

    /// Return the cache's unused tags (one word's bits, in one go).
    #[inline]
    pub(crate) fn drain_cache(&self, cache: &mut TagCache) {
        if cache.mask != 0 {
            self.normal
                .put_run(cache.offset - self.nr_reserved, cache.mask);
            cache.mask = 0;
        }
    }

    #[inline]
    fn put_tag(&self, tag: u32) {
        if tag < self.nr_reserved {
            if let Some(r) = &self.reserved {
                r.put(tag);
            }
        } else {
            self.normal.put(tag - self.nr_reserved);
        }
    }

    /// Free a batch of normal tags gathered by [`Tags::retire`]: one atomic
    /// per bitmap word, one wake check.
    #[inline]
    pub(crate) fn put_batch(&self, bits: &mut Vec<u32>) {
        if !bits.is_empty() {
            self.normal.put_batch(bits);
            bits.clear();
        }
    }

    /// Mark a completed request idle and record its tag for a later
    /// [`Tags::put_batch`]; reserved tags are freed at once.
    #[inline]
    pub(crate) fn retire(&self, rq: RqRef, batch: &mut Vec<u32>) {
        let tag = rq.tag();
        rq.transition(RqState::Complete, RqState::Idle);
        // The RqRef ends here: the tag is free for the next owner.
        if tag < self.nr_reserved {
            self.put_tag(tag);
        } else {
            debug_assert!(batch.len() < batch.capacity(), "tag batch must not grow");
            batch.push(tag - self.nr_reserved);
        }
    }

    /// Visit requests that are in flight (timeout scan). Reads only atomics.
    pub(crate) fn for_each_in_flight(
        &self,
        hwq: u16,
        mut f: impl FnMut(u32, &std::sync::atomic::AtomicU64),
    ) {
        use std::sync::atomic::Ordering;
        let mut visit = |tag: u32| {
            let a = self.atoms.get(tag as usize);
            if a.state.load(Ordering::Acquire) == RqState::InFlight as u8
                && a.hwq.load(Ordering::Relaxed) == hwq
            {
                f(tag, &a.deadline_ms);
            }
        };
        self.normal.for_each_set(|b| visit(b + self.nr_reserved));
        if let Some(r) = &self.reserved {
            r.for_each_set(&mut visit);
        }
    }

    /// Push an in-flight request's deadline out (timeout reset).
    pub(crate) fn rearm(&self, tag: u32, deadline_ms: u64) {
        self.atoms
            .get(tag as usize)
            .deadline_ms
            .store(deadline_ms, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Drop for Tags {
    fn drop(&mut self) {
        use std::sync::atomic::Ordering;
        let held = (0..self.atoms.len())
            .filter(|&t| self.atoms.get(t).state.load(Ordering::Acquire) != RqState::Idle as u8)
            .count();
        if held > 0 {
            // A driver still holds requests (it never completed them, even
            // past the timeout): their memory must outlive it, so it is
            // leaked rather than freed under it.
            eprintln!(
                "mqblk: {held} requests were never given back by the driver; leaking their slots"
            );
            std::mem::replace(&mut self.rqs, RawSlots::new(Box::new([]))).leak();
            std::mem::replace(&mut self.atoms, RawSlots::new(Box::new([]))).leak();
        }
    }
}

/// A context's batch of pre-taken tags (Linux `plug->cached_rq`): one
/// atomic operation fills it, then tags are handed out with no atomics.
#[derive(Debug, Default)]
pub(crate) struct TagCache {
    mask: u64,
    offset: u32,
}
