#![cfg(loom)]
//! Loom models of the tag bitmap (`mqblk_core::sbitmap`): no tag is held
//! twice, a freed tag's slot is handed over with a happens-before edge, and a
//! sleeper in `get_wait` is never left asleep while a tag is free.
//!
//! Run (release keeps the exploration fast; add `-C debug-assertions` to
//! RUSTFLAGS to also check the module's own paired assertions):
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p mqblk-core --release --test loom_sbitmap
//! ```
//!
//! Each model sets its own preemption bound (`PREEMPTIONS_MAX`); the
//! `LOOM_MAX_PREEMPTIONS` environment variable is not needed.

use std::time::Duration;

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use mqblk_core::sbitmap::{AllocHint, SbitmapQueue};

/// Bound on preemptions per execution: keeps every model well under a minute
/// on two cores while covering the interleavings these protocols depend on.
const PREEMPTIONS_MAX: usize = 3;

/// Under loom `get_wait` ignores its timeout, so a lost wakeup is a deadlock
/// that loom reports; the value only matters outside loom.
const WAIT_UNBOUNDED_UNDER_LOOM: Duration = Duration::from_secs(3600);

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(PREEMPTIONS_MAX);
    builder.check(f);
}

/// Per-tag request slots. Whoever holds tag `t` may write `slots[t]`; loom
/// flags any two accesses to one slot that are not ordered by
/// happens-before, so a tag handed out twice, or handed over without the
/// put → get Release/Acquire edge, fails the model.
struct Slots {
    slots: Vec<UnsafeCell<u32>>,
}

impl Slots {
    fn new(depth: u32) -> Self {
        Self {
            slots: (0..depth).map(|_| UnsafeCell::new(0)).collect(),
        }
    }

    /// Record `owner` in the slot of `tag`, which the caller holds.
    fn stamp(&self, tag: u32, owner: u32) {
        self.slots[tag as usize].with_mut(|slot| {
            // SAFETY: the caller holds `tag`: the allocator handed it out and
            // it has not been put since, so no other thread accesses this
            // slot. That claim is exactly what loom checks here: a conflicting
            // access not ordered by happens-before panics the model.
            unsafe { *slot = owner };
        });
    }
}

/// Model 1: two threads each take a tag, use its slot, and put it back
/// (one with `put`, one with `put_batch`), on a map with fewer tags than
/// would let them never meet (depth 1) and with exactly one each (depth 2).
#[test]
fn sbitmap_two_threads_get_put_never_share_a_tag() {
    for depth in [1u32, 2] {
        model(move || {
            let q = Arc::new(SbitmapQueue::new(depth, None));
            let slots = Arc::new(Slots::new(depth));
            let threads: Vec<_> = (0..2u32)
                .map(|owner| {
                    let q = Arc::clone(&q);
                    let slots = Arc::clone(&slots);
                    thread::spawn(move || {
                        let mut hint = AllocHint::new(owner);
                        if let Some(tag) = q.get(&mut hint) {
                            assert!(tag < depth);
                            slots.stamp(tag, owner);
                            if owner == 0 {
                                q.put(tag);
                            } else {
                                q.put_batch(&[tag]);
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
            assert_eq!(q.weight(), 0);
        });
    }
}

/// Model 1b: deferred clear meets a concurrent allocator. The main thread
/// holds the only tag; one thread puts it (into `cleared`) while another
/// allocates (and must fold `cleared` to see it). The allocator may find
/// the tag or not, but never while the putter still uses the slot.
#[test]
fn sbitmap_put_races_get_through_deferred_clear() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(1, None));
        let slots = Arc::new(Slots::new(1));
        let tag = q.get(&mut AllocHint::default()).unwrap();
        let putter = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                slots.stamp(tag, 1);
                q.put(tag);
            })
        };
        let getter = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let got = q.get(&mut AllocHint::new(2));
                if let Some(tag) = got {
                    slots.stamp(tag, 2);
                }
                got
            })
        };
        putter.join().unwrap();
        let got = getter.join().unwrap();
        let held_expected = u32::from(got.is_some());
        assert_eq!(q.weight(), held_expected);
    });
}

/// Model 2: the lost-wakeup model. Depth 1; the main thread holds the tag,
/// a waiter sleeps in `get_wait`, the main thread puts the tag. The waiter
/// must get it: with no timeout under loom, a lost wakeup is a deadlock.
#[test]
fn sbitmap_get_wait_is_woken_by_put() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(1, None));
        let slots = Arc::new(Slots::new(1));
        let tag = q.get(&mut AllocHint::default()).unwrap();
        slots.stamp(tag, 0);
        let waiter = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let got = q.get_wait(&mut AllocHint::new(1), WAIT_UNBOUNDED_UNDER_LOOM);
                if let Some(tag) = got {
                    slots.stamp(tag, 1);
                }
                got
            })
        };
        q.put(tag);
        assert_eq!(waiter.join().unwrap(), Some(0));
        assert_eq!(q.weight(), 1);
    });
}

/// Model 2b: as model 2, but the tag comes back through `put_batch` (which
/// clears `taken` directly and wakes once for the batch).
#[test]
fn sbitmap_get_wait_is_woken_by_put_batch() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(1, None));
        let tag = q.get(&mut AllocHint::default()).unwrap();
        let waiter = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.get_wait(&mut AllocHint::new(1), WAIT_UNBOUNDED_UNDER_LOOM))
        };
        q.put_batch(&[tag]);
        assert_eq!(waiter.join().unwrap(), Some(0));
    });
}

/// Model 2c: the fold window. Depth 1; while the tag is put, a third thread
/// allocates (folding `cleared`, which makes the tag look taken for a
/// moment) and puts back whatever it got. The sleeper must still end up with
/// the tag: either the put, the fold or the third thread's put wakes it.
#[test]
fn sbitmap_get_wait_survives_a_concurrent_fold() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(1, None));
        let tag = q.get(&mut AllocHint::default()).unwrap();
        let waiter = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.get_wait(&mut AllocHint::new(1), WAIT_UNBOUNDED_UNDER_LOOM))
        };
        let folder = {
            let q = Arc::clone(&q);
            thread::spawn(move || {
                if let Some(tag) = q.get(&mut AllocHint::new(2)) {
                    q.put(tag);
                }
            })
        };
        q.put(tag);
        folder.join().unwrap();
        assert_eq!(waiter.join().unwrap(), Some(0));
    });
}

/// Model 2d: a fold that hides a tag from the sleeper and keeps another.
/// Depth 2; the main thread holds both tags and puts both (deferred); a
/// second allocator folds them back and keeps one tag for good. The tag it
/// leaves free was hidden from the sleeper during the fold, and no later put
/// will come, so only the fold's own wake check can rouse the sleeper.
#[test]
fn sbitmap_get_wait_is_woken_by_a_fold_that_keeps_a_tag() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(2, None));
        let (mask, offset) = q.get_batch(&mut AllocHint::default(), 2);
        assert_eq!((mask, offset), (0b11, 0));
        let waiter = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.get_wait(&mut AllocHint::new(1), WAIT_UNBOUNDED_UNDER_LOOM))
        };
        let keeper = {
            let q = Arc::clone(&q);
            thread::spawn(move || q.get(&mut AllocHint::new(2)))
        };
        q.put(0);
        q.put(1);
        let kept = keeper.join().unwrap();
        let got = waiter.join().unwrap().expect("the sleeper gets a tag");
        assert_ne!(Some(got), kept);
        assert_eq!(q.weight(), 1 + u32::from(kept.is_some()));
    });
}

/// Model 3: batch get against put on the same word. The main thread holds
/// all four tags of a one-word map; one thread puts two of them (one by one,
/// deferred) while another takes up to two with `get_batch`. The batch
/// never contains a tag that was not put, never a tag twice, and the slot
/// handover is ordered.
#[test]
fn sbitmap_get_batch_races_put_on_one_word() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(4, Some(3)));
        let slots = Arc::new(Slots::new(4));
        let (mask, offset) = q.get_batch(&mut AllocHint::default(), 4);
        assert_eq!((mask, offset), (0b1111, 0));
        let putter = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                for tag in [1u32, 2] {
                    slots.stamp(tag, 1);
                    q.put(tag);
                }
            })
        };
        let batcher = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let (mask, offset) = q.get_batch(&mut AllocHint::new(3), 2);
                let mut rest = mask;
                while rest != 0 {
                    let tag = offset + rest.trailing_zeros();
                    rest &= rest - 1;
                    slots.stamp(tag, 2);
                }
                (mask, offset)
            })
        };
        putter.join().unwrap();
        let (mask, offset) = batcher.join().unwrap();
        let taken_tags = if mask == 0 { 0 } else { mask << offset };
        assert_eq!(
            taken_tags & !0b0110,
            0,
            "batch took a tag that was never put"
        );
        assert_eq!(q.weight(), 2 + taken_tags.count_ones());
    });
}

/// Model 3b: `put_batch` against `get_batch` on the same word: the batch
/// free is one atomic op, so the batch get sees none, some or all of it.
#[test]
fn sbitmap_get_batch_races_put_batch_on_one_word() {
    model(|| {
        let q = Arc::new(SbitmapQueue::new(4, Some(3)));
        let slots = Arc::new(Slots::new(4));
        let (mask, _) = q.get_batch(&mut AllocHint::default(), 3);
        assert_eq!(mask, 0b111);
        let putter = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                slots.stamp(0, 1);
                slots.stamp(2, 1);
                q.put_batch(&[0, 2]);
            })
        };
        let batcher = {
            let q = Arc::clone(&q);
            let slots = Arc::clone(&slots);
            thread::spawn(move || {
                let (mask, offset) = q.get_batch(&mut AllocHint::new(3), 4);
                let mut rest = mask;
                while rest != 0 {
                    let tag = offset + rest.trailing_zeros();
                    rest &= rest - 1;
                    slots.stamp(tag, 2);
                }
                (mask, offset)
            })
        };
        putter.join().unwrap();
        let (mask, offset) = batcher.join().unwrap();
        let taken_tags = if mask == 0 { 0 } else { mask << offset };
        // Tag 3 was always free; tags 0 and 2 only after the batch free.
        assert_eq!(taken_tags & 0b1000, 0b1000);
        assert_eq!(taken_tags & 0b0010, 0);
        assert_eq!(q.weight(), 1 + taken_tags.count_ones());
    });
}
