//! Tag bitmap: tags bound the requests in flight; hardware queues allocate
//! request slots from here, and completion gives them back here.
//!
//! Pipeline position: bio → plug → software queue → scheduler →
//! **hardware queue takes a tag** → driver → **completion frees the tag**.
//!
//! Kernel concept: `struct sbitmap_queue` (`lib/sbitmap.c`,
//! `include/linux/sbitmap.h`), the allocator under blk-mq's tags
//! (`block/blk-mq-tag.c`). Glossary, ours → Linux:
//!
//! | ours                    | Linux                                   |
//! | ----------------------- | --------------------------------------- |
//! | `SbitmapQueue`          | `struct sbitmap_queue`                  |
//! | `Word::taken`           | `sbitmap_word.word`                     |
//! | `Word::cleared`         | `sbitmap_word.cleared`                  |
//! | `fold_cleared`          | `sbitmap_deferred_clear`                |
//! | `AllocHint`             | `sb->alloc_hint` (per cpu)              |
//! | `get_batch`             | `__sbitmap_queue_get_batch`             |
//! | `put` / `put_batch`     | `sbitmap_queue_clear` / `_clear_batch`  |
//! | `get_wait`              | `blk_mq_get_tag`'s sleep loop           |
//!
//! # Layout
//!
//! The `depth` bits are split over words of `1 << shift` bits. Each word's
//! `taken` and `cleared` masks sit on cache lines of their own, so that
//! allocators (which write `taken`) and completions (which write `cleared`)
//! of different words, and even of the same word, do not bounce one line.
//!
//! # Deferred clear
//!
//! `put` does not touch `taken`: it ORs the bit into `cleared`. An allocator
//! that finds a word full moves `cleared` back into `taken` in two steps:
//! swap `cleared` to zero, then clear those bits in `taken`. A bit is never
//! in `cleared` while it is free in `taken` (`cleared ⊆ taken`), so it can
//! never be handed out twice. Between the two steps the folded bits look
//! taken to everyone else; Linux closes that window with a per-word spin
//! lock (`swap_lock`, because a getter that saw the window could sleep with a
//! free bit in the map). We take no lock: the folder runs the wake check
//! after its second step instead, exactly like a freer, so a waiter that was
//! misled by the window is woken.
//!
//! # Sleeping: why no wakeup is lost
//!
//! A waiter registers (`waiters += 1`), issues `fence(SeqCst)` (F2), reads
//! the wake generation, and retries `get`. A freer (a `put`, a `put_batch`,
//! or a fold) changes the bitmap, issues `fence(SeqCst)` (F1), and if
//! `waiters > 0` bumps the generation under the mutex and notifies.
//! The two fences are totally ordered:
//!
//! 1. F1 before F2: the retry, which reads after F2, sees the freed bit (or
//!    sees it re-taken by someone whose own free comes later, case 2).
//! 2. F2 before F1: the freer's load of `waiters`, after F1, sees the
//!    registration, so it bumps the generation. The bump is either before
//!    the waiter's read of the generation (then the mutex orders the free
//!    before the retry: case 1 again), or after it, and the waiter finds the
//!    generation changed and does not sleep (or is notified).
//!
//! The retry gives up on a word only when the word looks full, or when its
//! bounded attempts lost races to other allocators; every bit it missed is
//! then held by a thread whose `put` comes after F2 (case 2), or is in a
//! fold's window, whose fold runs the wake check after F2 (case 2).
//! The loom models in `tests/loom_sbitmap.rs` check this (removing either
//! fence, or the fold's wake check, makes them deadlock).
//!
//! The waiter reads the generation and then drops the mutex before its
//! retry: a fold inside that retry runs the wake check, which takes the
//! mutex itself.
//!
//! Tag handover is a separate edge: `put` (Release on `cleared`), the fold
//! (Acquire, then Release on `taken`) and the claim (Acquire on `taken`) make
//! the previous holder's writes to the request slot happen before the next
//! holder's. Loom checks this with per-tag cells, except that loom does not
//! preempt between an atomic op and the fence after it, so it would not
//! notice `put`'s Release being weakened: keep it.
//!
//! Every `put`/fold runs one wake check and every `put_batch` runs one for
//! the whole batch, so a completion batch wakes waiters once.
//!
//! # Bounds
//!
//! `get`, `get_batch`, `put` and `put_batch` never lock and never allocate.
//! Per word, `get` makes at most `CLAIM_ATTEMPTS_MAX` claims and
//! `FOLD_RETRIES_MAX` folds before moving to the next word, and it visits
//! each word once. `get_wait` sleeps at most until its timeout.
#![forbid(unsafe_code)]

use crossbeam_utils::CachePadded;

use crate::sync::{fence, lock, AtomicU32, AtomicU64, Condvar, Mutex, Ordering};

/// Largest supported map: 1 Mi tags.
pub const DEPTH_MAX: u32 = 1 << 20;
/// Words hold at most 64 bits (`1 << 6`).
pub const SHIFT_MAX: u32 = 6;
/// When `new` picks the shift, a word holds at least `1 << 3` bits...
const SHIFT_MIN_AUTO: u32 = 3;
/// ...and small maps are spread over at least this many words
/// (Linux `sbitmap_calculate_shift` uses 4).
const WORDS_SPREAD_MIN: u32 = 4;
/// Claims `get` makes in one word before moving on. Each failed claim means
/// another allocator won that bit, so this bounds contention, not progress.
const CLAIM_ATTEMPTS_MAX: u32 = 64;
/// Folds of `cleared` into `taken` one word gets in one scan.
const FOLD_RETRIES_MAX: u32 = 4;
/// Distinct words one `put_batch` gathers masks for before it flushes; a
/// completion batch rarely spans more.
const PUT_BATCH_WORDS_MAX: usize = 8;
/// Fibonacci hashing multiplier (2^32 / golden ratio): spreads seeds
/// 0, 1, 2, ... as far apart as possible over `0..depth`.
const SEED_SPREAD_MULTIPLIER: u32 = 0x9E37_79B9;
/// How long one condvar sleep lasts when the caller's timeout overflows
/// `Instant` (effectively "wait forever", still in bounded slices).
#[cfg(not(loom))]
const WAIT_SLICE_MAX: std::time::Duration = std::time::Duration::from_secs(3600);

/// Per-context allocation hint (Linux: `sb->alloc_hint`, per cpu). Not shared:
/// each submitting context owns one, so updating it costs no atomics.
///
/// The hint picks the word where a search starts (the context's home word),
/// so contexts seeded differently start in different words and do not
/// contend. Within a word the lowest free bit wins, as in Linux's default
/// (non-round-robin) mode, so a context cycles through a small, cache-hot
/// set of request slots. The home follows the last bit handed out, so a
/// context whose home filled up settles where it found room.
#[derive(Debug, Default, Clone)]
pub struct AllocHint {
    /// Spreads this context's first search over the map.
    seed: u32,
    /// The last bit this context was handed; `>= depth` means "not yet
    /// placed: derive from `seed`".
    home_bit: u32,
}

impl AllocHint {
    /// A hint whose first search starts at a place derived from `seed`
    /// (pass e.g. the context or cpu index); distinct small seeds land far
    /// apart.
    pub fn new(seed: u32) -> Self {
        Self {
            seed,
            home_bit: u32::MAX,
        }
    }
}

/// One word of the map. `taken` and `cleared` each fill a cache line.
#[derive(Debug)]
struct Word {
    /// 1 = bit handed out (Linux `word`). Set by allocators; cleared by folds
    /// and by `put_batch`.
    taken: CachePadded<AtomicU64>,
    /// 1 = freed by `put` but still set in `taken` (Linux `cleared`).
    /// Invariant: `cleared ⊆ taken` for every bit.
    cleared: CachePadded<AtomicU64>,
}

/// A scalable tag allocator with sleeping waiters (Linux `sbitmap_queue`).
///
/// `Send + Sync`; share it behind an `Arc`.
pub struct SbitmapQueue {
    words: Box<[Word]>,
    depth: u32,
    shift: u32,
    /// Valid bits of every word but the last.
    full_word_mask: u64,
    /// Valid bits of the last word (`depth` need not fill it).
    last_word_mask: u64,
    /// Sleepers in `get_wait`; read by every free, written only by waiters.
    waiters: CachePadded<AtomicU32>,
    /// Wake generation: bumped by every wake; a sleeper waits for a change.
    wake_gen: Mutex<u64>,
    wake_cv: Condvar,
}

impl std::fmt::Debug for SbitmapQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SbitmapQueue")
            .field("depth", &self.depth)
            .field("shift", &self.shift)
            .field("words", &self.words.len())
            .field("weight", &self.weight())
            .field("waiters", &self.waiters.load(Ordering::Relaxed))
            .finish()
    }
}

/// Linux `sbitmap_calculate_shift`, with a floor of 8 bits per word: small
/// maps are spread over several cache lines so contexts do not all hammer
/// one word, but a word never shrinks below 8 bits.
fn calculate_shift(depth: u32) -> u32 {
    let mut shift = SHIFT_MAX;
    if depth >= WORDS_SPREAD_MIN {
        while shift > SHIFT_MIN_AUTO && (WORDS_SPREAD_MIN << shift) > depth {
            shift -= 1;
        }
    }
    shift
}

/// Mask of the low `bits` bits (`bits` in 1..=64).
fn low_mask(bits: u32) -> u64 {
    debug_assert!(bits >= 1);
    debug_assert!(bits <= 64);
    u64::MAX >> (64 - bits)
}

/// The lowest `nr` set bits of `free` (all of them if fewer). At most 64
/// iterations.
fn lowest_bits(free: u64, nr: u32) -> u64 {
    if free.count_ones() <= nr {
        return free;
    }
    let mut rest = free;
    let mut picked = 0u64;
    for _ in 0..nr {
        let lowest = rest & rest.wrapping_neg();
        picked |= lowest;
        rest ^= lowest;
    }
    picked
}

/// Deregisters a `get_wait` sleeper on every exit path, panics included.
struct WaiterRegistration<'a> {
    waiters: &'a AtomicU32,
}

impl<'a> WaiterRegistration<'a> {
    fn new(waiters: &'a AtomicU32) -> Self {
        let waiters_before = waiters.fetch_add(1, Ordering::SeqCst);
        debug_assert!(waiters_before < u32::MAX);
        Self { waiters }
    }
}

impl Drop for WaiterRegistration<'_> {
    fn drop(&mut self) {
        let waiters_before = self.waiters.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(waiters_before > 0);
    }
}

impl SbitmapQueue {
    /// A map of `depth` bits, each word holding `1 << shift` bits, each word
    /// on its own cache lines. `shift: None` picks one like Linux
    /// `sbitmap_calculate_shift` (small depths spread over four words, at
    /// least 8 bits per word unless the whole depth is smaller).
    ///
    /// Control plane: allocates.
    ///
    /// # Panics
    ///
    /// If `depth` is 0 or above [`DEPTH_MAX`], or `shift` is above
    /// [`SHIFT_MAX`].
    pub fn new(depth: u32, shift: Option<u32>) -> Self {
        assert!(depth >= 1, "sbitmap depth must be at least 1");
        assert!(
            depth <= DEPTH_MAX,
            "sbitmap depth {depth} exceeds the limit {DEPTH_MAX}"
        );
        let shift = shift.unwrap_or_else(|| calculate_shift(depth));
        assert!(
            shift <= SHIFT_MAX,
            "sbitmap shift {shift} exceeds the limit {SHIFT_MAX} (64 bits per word)"
        );
        let bits_per_word = 1u32 << shift;
        let nr_words = depth.div_ceil(bits_per_word);
        let last_word_bits = depth - (nr_words - 1) * bits_per_word;
        let words: Box<[Word]> = (0..nr_words)
            .map(|_| Word {
                taken: CachePadded::new(AtomicU64::new(0)),
                cleared: CachePadded::new(AtomicU64::new(0)),
            })
            .collect();
        Self {
            words,
            depth,
            shift,
            full_word_mask: low_mask(bits_per_word),
            last_word_mask: low_mask(last_word_bits),
            waiters: CachePadded::new(AtomicU32::new(0)),
            wake_gen: Mutex::new(0),
            wake_cv: Condvar::new(),
        }
    }

    /// Number of bits (tags) in the map.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Bits of word `index` that lie inside `depth`.
    #[inline]
    fn word_depth_mask(&self, index: usize) -> u64 {
        debug_assert!(index < self.words.len());
        if index + 1 == self.words.len() {
            self.last_word_mask
        } else {
            self.full_word_mask
        }
    }

    /// Word index and in-word mask of `bit`.
    #[inline]
    fn locate(&self, bit: u32) -> (usize, u64) {
        let index = (bit >> self.shift) as usize;
        let offset = bit & ((1u32 << self.shift) - 1);
        (index, 1u64 << offset)
    }

    /// The word this context searches first; places a fresh hint by its
    /// seed (Linux re-randomises a hint that is out of range).
    #[inline]
    fn hint_home_index(&self, hint: &mut AllocHint) -> usize {
        if hint.home_bit >= self.depth {
            let spread = hint.seed.wrapping_mul(SEED_SPREAD_MULTIPLIER);
            // Scale the 32-bit hash onto 0..depth (multiply-shift range
            // reduction): uses the well-mixed high bits of the hash.
            let home_bit = (u64::from(spread) * u64::from(self.depth)) >> 32;
            hint.home_bit = home_bit as u32;
        }
        debug_assert!(hint.home_bit < self.depth);
        (hint.home_bit >> self.shift) as usize
    }

    /// Records that this context was just handed `bit`.
    #[inline]
    fn hint_record(&self, hint: &mut AllocHint, bit: u32) {
        debug_assert!(bit < self.depth);
        hint.home_bit = bit;
    }

    /// Take one free bit, starting the search at the hint; `None` if every
    /// bit is taken. Lock-free, allocation-free.
    pub fn get(&self, hint: &mut AllocHint) -> Option<u32> {
        let home_index = self.hint_home_index(hint);
        let nr_words = self.words.len();
        for step in 0..nr_words {
            let mut index = home_index + step;
            if index >= nr_words {
                index -= nr_words;
            }
            if let Some(offset) = self.claim_in_word(index) {
                let bit = ((index as u32) << self.shift) | offset;
                debug_assert!(bit < self.depth);
                self.hint_record(hint, bit);
                return Some(bit);
            }
        }
        None
    }

    /// Claim the lowest free bit of word `index` (Linux
    /// `sbitmap_find_bit_in_word`).
    fn claim_in_word(&self, index: usize) -> Option<u32> {
        debug_assert!(index < self.words.len());
        let word = &self.words[index];
        let depth_mask = self.word_depth_mask(index);
        let mut taken = word.taken.load(Ordering::Relaxed);
        let mut folds = 0u32;
        let mut attempts = 0u32;
        loop {
            let free = !taken & depth_mask;
            if free == 0 {
                // Looks full: bring deferred frees back, then look again.
                if folds == FOLD_RETRIES_MAX {
                    return None;
                }
                folds += 1;
                self.fold_cleared(word);
                taken = word.taken.load(Ordering::Relaxed);
                if !taken & depth_mask == 0 {
                    return None;
                }
                continue;
            }
            if attempts == CLAIM_ATTEMPTS_MAX {
                return None;
            }
            attempts += 1;
            let offset = free.trailing_zeros();
            let mask = 1u64 << offset;
            // Acquire: pairs with the Release of the `put`/fold/`put_batch`
            // that freed this bit, so the previous holder's writes to the
            // slot happen before ours.
            let taken_before = word.taken.fetch_or(mask, Ordering::AcqRel);
            if taken_before & mask == 0 {
                debug_assert_ne!(mask & depth_mask, 0, "claimed a bit beyond depth");
                debug_assert_eq!(
                    word.cleared.load(Ordering::Relaxed) & mask,
                    0,
                    "handed out a bit that is still in `cleared`"
                );
                return Some(offset);
            }
            // Another allocator won this bit; its later put will run the wake
            // check, so giving up after the attempt bound loses no wakeup.
            taken = taken_before;
        }
    }

    /// Move `cleared` back into `taken` (Linux `sbitmap_deferred_clear`,
    /// without its `swap_lock`: see the module doc). Returns whether any bit
    /// was freed.
    fn fold_cleared(&self, word: &Word) -> bool {
        if word.cleared.load(Ordering::Relaxed) == 0 {
            return false;
        }
        // Acquire: pairs with each `put`'s Release.
        let freed = word.cleared.swap(0, Ordering::AcqRel);
        if freed == 0 {
            return false;
        }
        // Release: pairs with the next claimer's Acquire.
        let taken_before = word.taken.fetch_and(!freed, Ordering::AcqRel);
        debug_assert_eq!(
            taken_before & freed,
            freed,
            "a bit in `cleared` was not taken"
        );
        // The folded bits looked taken until now; a waiter may have seen that.
        self.wake_after_free();
        true
    }

    /// Batch allocation (Linux `__sbitmap_queue_get_batch`): take up to `nr`
    /// (1..=64) free bits from one word with one atomic op. Returns
    /// `(mask, offset)`: bit `i` of `mask` set means tag `offset + i` was
    /// taken; `mask == 0` means none (then `offset` is 0). The mask is
    /// shifted so that bit 0 is set whenever any is. `nr == 0` takes nothing
    /// and `nr > 64` is treated as 64 (both are caller bugs, asserted in debug
    /// builds).
    pub fn get_batch(&self, hint: &mut AllocHint, nr: u32) -> (u64, u32) {
        debug_assert!(nr >= 1, "get_batch of zero bits");
        debug_assert!(nr <= 64, "get_batch of more than 64 bits");
        if nr == 0 {
            return (0, 0);
        }
        let nr = nr.min(64);
        let home_index = self.hint_home_index(hint);
        let nr_words = self.words.len();
        for step in 0..nr_words {
            let mut index = home_index + step;
            if index >= nr_words {
                index -= nr_words;
            }
            let got = self.claim_many_in_word(index, nr);
            if got != 0 {
                let first_offset = got.trailing_zeros();
                let mask = got >> first_offset;
                let offset = ((index as u32) << self.shift) + first_offset;
                let last_bit = offset + (63 - mask.leading_zeros());
                debug_assert!(mask.count_ones() <= nr);
                debug_assert!(last_bit < self.depth);
                self.hint_record(hint, last_bit);
                return (mask, offset);
            }
        }
        (0, 0)
    }

    /// Claim up to `nr` bits of word `index`; returns the in-word mask won.
    fn claim_many_in_word(&self, index: usize, nr: u32) -> u64 {
        debug_assert!(index < self.words.len());
        let word = &self.words[index];
        let depth_mask = self.word_depth_mask(index);
        let mut taken = word.taken.load(Ordering::Relaxed);
        let mut folds = 0u32;
        let mut attempts = 0u32;
        loop {
            let free = !taken & depth_mask;
            if free == 0 {
                if folds == FOLD_RETRIES_MAX {
                    return 0;
                }
                folds += 1;
                self.fold_cleared(word);
                taken = word.taken.load(Ordering::Relaxed);
                if !taken & depth_mask == 0 {
                    return 0;
                }
                continue;
            }
            if attempts == CLAIM_ATTEMPTS_MAX {
                return 0;
            }
            attempts += 1;
            let want = lowest_bits(free, nr);
            // Acquire: as in `claim_in_word`.
            let taken_before = word.taken.fetch_or(want, Ordering::AcqRel);
            let got = want & !taken_before;
            if got != 0 {
                debug_assert_eq!(got & !depth_mask, 0, "claimed bits beyond depth");
                debug_assert_eq!(
                    word.cleared.load(Ordering::Relaxed) & got,
                    0,
                    "handed out bits that are still in `cleared`"
                );
                return got;
            }
            taken = taken_before;
        }
    }

    /// Free one bit (Linux `sbitmap_queue_clear`). Deferred clear: the bit
    /// goes into its word's `cleared` mask with one atomic OR; allocators
    /// fold it back when the word looks full. Then wakes waiters, if any.
    pub fn put(&self, bit: u32) {
        debug_assert!(
            bit < self.depth,
            "put of tag {bit} beyond depth {}",
            self.depth
        );
        let (index, mask) = self.locate(bit);
        debug_assert!(index < self.words.len());
        let word = &self.words[index];
        debug_assert_ne!(
            word.taken.load(Ordering::Relaxed) & mask,
            0,
            "put of tag {bit}, which is not taken"
        );
        // Release: the holder's writes to the slot happen before the next
        // holder's (via the fold's Acquire and the claim's Acquire).
        let cleared_before = word.cleared.fetch_or(mask, Ordering::Release);
        debug_assert_eq!(cleared_before & mask, 0, "double put of tag {bit}");
        self.wake_after_free();
    }

    /// Free the bits of `mask` counted from bit `first` (all in the word
    /// of `first`, as [`SbitmapQueue::get_batch`] hands them out), with
    /// one atomic op and one wake check, as [`SbitmapQueue::put`] frees
    /// one.
    pub fn put_run(&self, first: u32, mask: u64) {
        debug_assert_ne!(mask, 0);
        let (index, low) = self.locate(first);
        let shift = low.trailing_zeros();
        debug_assert!(
            u64::from(mask.leading_zeros()) >= u64::from(shift),
            "put_run of bits beyond the word of bit {first}"
        );
        let in_word = mask << shift;
        debug_assert!(index < self.words.len());
        let word = &self.words[index];
        debug_assert_eq!(
            word.taken.load(Ordering::Relaxed) & in_word,
            in_word,
            "put_run of tags not taken"
        );
        // Release: as in `put`.
        let cleared_before = word.cleared.fetch_or(in_word, Ordering::Release);
        debug_assert_eq!(cleared_before & in_word, 0, "double put_run");
        self.wake_after_free();
    }

    /// Free many bits (Linux `sbitmap_queue_clear_batch`), in any order:
    /// straight into `taken` (a batch needs no deferral), one atomic op per
    /// word touched, then one wake check for the whole batch.
    ///
    /// Masks are gathered on the stack for up to `PUT_BATCH_WORDS_MAX`
    /// distinct words at once; a batch spread over more words than that
    /// flushes early and may touch a word twice (still correct, and still no
    /// allocation).
    pub fn put_batch(&self, bits: &[u32]) {
        if bits.is_empty() {
            return;
        }
        let mut pending = [(0usize, 0u64); PUT_BATCH_WORDS_MAX];
        let mut pending_len = 0usize;
        for &bit in bits {
            debug_assert!(
                bit < self.depth,
                "put of tag {bit} beyond depth {}",
                self.depth
            );
            let (index, mask) = self.locate(bit);
            let slot = pending[..pending_len]
                .iter()
                .position(|&(pending_index, _)| pending_index == index);
            let slot = match slot {
                Some(slot) => slot,
                None => {
                    if pending_len == PUT_BATCH_WORDS_MAX {
                        for &(pending_index, pending_mask) in &pending {
                            self.release_mask(pending_index, pending_mask);
                        }
                        pending_len = 0;
                    }
                    debug_assert!(pending_len < PUT_BATCH_WORDS_MAX);
                    pending[pending_len] = (index, 0);
                    pending_len += 1;
                    pending_len - 1
                }
            };
            debug_assert!(slot < pending_len);
            debug_assert_eq!(
                pending[slot].1 & mask,
                0,
                "tag {bit} twice in one put_batch"
            );
            pending[slot].1 |= mask;
        }
        for &(index, mask) in &pending[..pending_len] {
            self.release_mask(index, mask);
        }
        self.wake_after_free();
    }

    /// Clear `mask` in word `index`'s `taken` with one atomic op.
    fn release_mask(&self, index: usize, mask: u64) {
        debug_assert!(index < self.words.len());
        debug_assert_ne!(mask, 0);
        let word = &self.words[index];
        debug_assert_eq!(
            word.cleared.load(Ordering::Relaxed) & mask,
            0,
            "put_batch of a tag that was already put"
        );
        // Release: pairs with the next claimer's Acquire.
        let taken_before = word.taken.fetch_and(!mask, Ordering::Release);
        debug_assert_eq!(
            taken_before & mask,
            mask,
            "put_batch of a tag that is not taken"
        );
    }

    /// The freer's half of the wake protocol (module doc): fence, and if
    /// anyone sleeps, bump the generation and wake them.
    #[inline]
    fn wake_after_free(&self) {
        fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.wake_all();
    }

    /// Number of bits currently taken, not counting deferred frees.
    /// Approximate while others run; exact when quiescent.
    pub fn weight(&self) -> u32 {
        let mut weight = 0u32;
        for index in 0..self.words.len() {
            weight += self.word_held(index).count_ones();
        }
        weight
    }

    /// Bits of word `index` held by someone: taken and not deferred-freed.
    fn word_held(&self, index: usize) -> u64 {
        debug_assert!(index < self.words.len());
        let word = &self.words[index];
        // `cleared` first: a bit put and folded between the two loads then
        // reads as free; the other order would count it as still held.
        let cleared = word.cleared.load(Ordering::Acquire);
        let taken = word.taken.load(Ordering::Acquire);
        taken & !cleared & self.word_depth_mask(index)
    }

    /// Call `f(bit)` for every taken bit, in increasing order, not counting
    /// deferred frees. Used by timeout scanning and drain. Approximate while
    /// others run; exact when quiescent.
    pub fn for_each_set(&self, mut f: impl FnMut(u32)) {
        for index in 0..self.words.len() {
            let base = (index as u32) << self.shift;
            let mut held = self.word_held(index);
            while held != 0 {
                let offset = held.trailing_zeros();
                held &= held - 1;
                f(base + offset);
            }
        }
    }

    /// Sleep until a bit is free and take it; `None` once `timeout` has
    /// passed. Free of lost wakeups: see the module doc.
    ///
    /// Under loom the wait ignores `timeout` (loom 0.7's `wait_timeout` never
    /// times out), so a lost wakeup shows up as a loom deadlock.
    pub fn get_wait(&self, hint: &mut AllocHint, timeout: std::time::Duration) -> Option<u32> {
        if let Some(bit) = self.get(hint) {
            return Some(bit);
        }
        #[cfg(not(loom))]
        let deadline = std::time::Instant::now().checked_add(timeout);
        #[cfg(loom)]
        let _ = timeout;

        let _registration = WaiterRegistration::new(&self.waiters);
        loop {
            // F2 of the module doc: orders the registration before the retry.
            fence(Ordering::SeqCst);
            let gen_seen = *lock(&self.wake_gen);
            if let Some(bit) = self.get(hint) {
                return Some(bit);
            }
            let mut gen = lock(&self.wake_gen);
            while *gen == gen_seen {
                #[cfg(not(loom))]
                {
                    let remaining = match deadline {
                        Some(deadline) => {
                            deadline.saturating_duration_since(std::time::Instant::now())
                        }
                        None => WAIT_SLICE_MAX,
                    };
                    if remaining.is_zero() {
                        drop(gen);
                        // A free may have landed just as time ran out.
                        return self.get(hint);
                    }
                    gen = match self.wake_cv.wait_timeout(gen, remaining) {
                        Ok((gen, _)) => gen,
                        Err(poisoned) => poisoned.into_inner().0,
                    };
                }
                #[cfg(loom)]
                {
                    gen = self.wake_cv.wait(gen).unwrap();
                }
            }
        }
    }

    /// Wake every sleeper in `get_wait` (queue freeze/teardown). Each one
    /// retries `get` and sleeps again if the map is still full.
    pub fn wake_all(&self) {
        {
            let mut gen = lock(&self.wake_gen);
            *gen = gen.wrapping_add(1);
        }
        self.wake_cv.notify_all();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::sync::Arc;
    use std::time::Duration;

    /// Generous: the tests assert results, never how long they took.
    const WAIT_GENEROUS: Duration = Duration::from_secs(10);

    fn take_all(q: &SbitmapQueue, hint: &mut AllocHint) -> Vec<u32> {
        let mut bits = Vec::new();
        for _ in 0..q.depth() {
            bits.push(q.get(hint).expect("a free bit while under depth"));
        }
        bits
    }

    #[test]
    fn sbitmap_calculate_shift_spreads_small_depths() {
        assert_eq!(calculate_shift(1), 6);
        assert_eq!(calculate_shift(3), 6);
        assert_eq!(calculate_shift(4), 3);
        assert_eq!(calculate_shift(32), 3);
        assert_eq!(calculate_shift(64), 4);
        assert_eq!(calculate_shift(128), 5);
        assert_eq!(calculate_shift(256), 6);
        assert_eq!(calculate_shift(DEPTH_MAX), 6);
        let q = SbitmapQueue::new(64, None);
        assert_eq!(q.words.len(), 4);
    }

    #[test]
    #[should_panic(expected = "at least 1")]
    fn sbitmap_depth_zero_panics() {
        let _ = SbitmapQueue::new(0, None);
    }

    #[test]
    #[should_panic(expected = "shift")]
    fn sbitmap_shift_above_max_panics() {
        let _ = SbitmapQueue::new(8, Some(7));
    }

    #[test]
    fn sbitmap_depth_not_multiple_of_word_exhausts_then_none() {
        let q = SbitmapQueue::new(100, Some(6));
        assert_eq!(q.words.len(), 2);
        let mut hint = AllocHint::new(3);
        let mut bits = take_all(&q, &mut hint);
        assert_eq!(q.get(&mut hint), None);
        assert_eq!(q.get_batch(&mut hint, 8), (0, 0));
        bits.sort_unstable();
        assert_eq!(bits, (0..100).collect::<Vec<_>>());
        assert_eq!(q.weight(), 100);
    }

    #[test]
    fn sbitmap_put_then_get_succeeds() {
        let q = SbitmapQueue::new(10, Some(3));
        let mut hint = AllocHint::default();
        let bits = take_all(&q, &mut hint);
        assert_eq!(q.get(&mut hint), None);
        q.put(bits[7]);
        assert_eq!(q.get(&mut hint), Some(bits[7]));
        assert_eq!(q.get(&mut hint), None);
    }

    #[test]
    fn sbitmap_deferred_clear_folds_when_word_looks_full() {
        let q = SbitmapQueue::new(8, Some(3));
        let mut hint = AllocHint::default();
        let _bits = take_all(&q, &mut hint);
        q.put(2);
        q.put(5);
        q.put(6);
        // Deferred: `taken` still full, the frees wait in `cleared`.
        assert_eq!(q.words[0].taken.load(Ordering::Relaxed), 0xff);
        assert_eq!(q.words[0].cleared.load(Ordering::Relaxed), 0b0110_0100);
        assert_eq!(q.weight(), 5);
        let bit = q.get(&mut hint).expect("a deferred-free bit");
        assert!([2, 5, 6].contains(&bit));
        // The fold moved all three back at once.
        assert_eq!(q.words[0].cleared.load(Ordering::Relaxed), 0);
        assert_eq!(q.words[0].taken.load(Ordering::Relaxed).count_ones(), 6);
        assert_eq!(q.weight(), 6);
        let mut rest = vec![q.get(&mut hint).unwrap(), q.get(&mut hint).unwrap()];
        rest.push(bit);
        rest.sort_unstable();
        assert_eq!(rest, vec![2, 5, 6]);
        assert_eq!(q.get(&mut hint), None);
    }

    #[test]
    fn sbitmap_get_batch_distinct_and_at_most_nr() {
        let q = SbitmapQueue::new(200, Some(6));
        let mut hint = AllocHint::new(1);
        let mut owned = [false; 200];
        let mut total = 0u32;
        for nr in [1u32, 5, 64, 13, 64, 64, 64] {
            let (mask, offset) = q.get_batch(&mut hint, nr);
            assert!(mask.count_ones() <= nr);
            if mask != 0 {
                assert_eq!(mask & 1, 1, "mask is normalised to start at offset");
            }
            let mut m = mask;
            while m != 0 {
                let bit = offset + m.trailing_zeros();
                m &= m - 1;
                assert!(bit < 200);
                assert!(!owned[bit as usize], "bit {bit} handed out twice");
                owned[bit as usize] = true;
                total += 1;
            }
            // One word per batch.
            if mask != 0 {
                let last = offset + 63 - mask.leading_zeros();
                assert_eq!(offset >> 6, last >> 6);
            }
        }
        assert_eq!(q.weight(), total);
        // Drain the rest one by one: exactly the complement remains.
        while let Some(bit) = q.get(&mut hint) {
            assert!(!owned[bit as usize]);
            owned[bit as usize] = true;
        }
        assert!(owned.iter().all(|&o| o));
    }

    #[test]
    fn sbitmap_get_batch_fills_up_to_nr_from_one_word() {
        let q = SbitmapQueue::new(64, Some(6));
        let mut hint = AllocHint::default();
        let (mask, offset) = q.get_batch(&mut hint, 16);
        assert_eq!(mask, 0xffff);
        assert_eq!(offset, 0);
        let (mask, offset) = q.get_batch(&mut hint, 64);
        assert_eq!(mask, u64::MAX >> 16);
        assert_eq!(offset, 16);
        assert_eq!(q.get_batch(&mut hint, 1), (0, 0));
    }

    #[test]
    fn sbitmap_put_run_frees_what_a_batch_left_in_one_go() {
        let q = SbitmapQueue::new(64, Some(3));
        let mut hint = AllocHint::default();
        let (mask, offset) = q.get_batch(&mut hint, 6);
        assert_eq!(mask.count_ones(), 6);
        // Keep the lowest bit, give the rest back.
        q.put_run(offset, mask & (mask - 1));
        assert_eq!(q.weight(), 1);
        let mut got = Vec::new();
        while let Some(bit) = q.get(&mut hint) {
            got.push(bit);
        }
        assert_eq!(got.len(), 63);
        assert!(!got.contains(&offset));
    }

    #[test]
    fn sbitmap_put_batch_frees_them() {
        let q = SbitmapQueue::new(100, Some(4));
        let mut hint = AllocHint::default();
        let mut bits = take_all(&q, &mut hint);
        bits.sort_unstable();
        let (freed, kept) = bits.split_at(60);
        q.put_batch(freed);
        assert_eq!(q.weight(), 40);
        let mut seen = Vec::new();
        q.for_each_set(|bit| seen.push(bit));
        assert_eq!(seen, kept);
        let mut again = Vec::new();
        while let Some(bit) = q.get(&mut hint) {
            again.push(bit);
        }
        again.sort_unstable();
        assert_eq!(again, freed);
        q.put_batch(&[]);
        assert_eq!(q.weight(), 100);
    }

    #[test]
    fn sbitmap_put_batch_accepts_any_order_and_many_words() {
        let q = SbitmapQueue::new(1024, Some(3));
        let mut hint = AllocHint::default();
        let _all = take_all(&q, &mut hint);
        // 37 is odd, so i * 37 mod 1024 is 200 distinct tags over ~all 128
        // words, interleaved: exercises the stack table and its flush.
        let freed: Vec<u32> = (0..200u32).map(|i| (i * 37) % 1024).collect();
        q.put_batch(&freed);
        assert_eq!(q.weight(), 1024 - 200);
        let mut held = Vec::new();
        q.for_each_set(|bit| held.push(bit));
        assert_eq!(held.len(), 1024 - 200);
        assert!(held.iter().all(|bit| !freed.contains(bit)));
        // A few words, out of order: one op per word, then all reusable.
        let second = [9, 1, 17, 3, 13, 19];
        assert!(second.iter().all(|bit| held.contains(bit)));
        q.put_batch(&second);
        let mut again = Vec::new();
        while let Some(bit) = q.get(&mut hint) {
            again.push(bit);
        }
        again.sort_unstable();
        let mut expect = freed.clone();
        expect.extend(second);
        expect.sort_unstable();
        assert_eq!(again, expect);
    }

    #[test]
    fn sbitmap_for_each_set_and_weight_account_for_deferred_clears() {
        let q = SbitmapQueue::new(70, None);
        let mut hint = AllocHint::new(7);
        let bits = take_all(&q, &mut hint);
        let mut expect: Vec<u32> = Vec::new();
        for (i, &bit) in bits.iter().enumerate() {
            if i % 3 == 0 {
                q.put(bit);
            } else {
                expect.push(bit);
            }
        }
        expect.sort_unstable();
        let mut seen = Vec::new();
        q.for_each_set(|bit| seen.push(bit));
        assert_eq!(seen, expect);
        assert_eq!(q.weight() as usize, expect.len());
        for &bit in &expect {
            q.put(bit);
        }
        assert_eq!(q.weight(), 0);
        let mut none = 0;
        q.for_each_set(|_| none += 1);
        assert_eq!(none, 0);
    }

    #[test]
    fn sbitmap_hints_spread_contexts_over_words() {
        let q = SbitmapQueue::new(256, None);
        let words: Vec<u32> = (0..4)
            .map(|seed| q.get(&mut AllocHint::new(seed)).unwrap() >> q.shift)
            .collect();
        let mut distinct = words.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() >= 3, "seeds 0..4 landed in words {words:?}");
    }

    #[test]
    fn sbitmap_two_threads_never_share_a_bit() {
        // Miri runs each step about a thousand times slower.
        const OPS_PER_THREAD: usize = if cfg!(miri) { 500 } else { 100_000 };
        let q = Arc::new(SbitmapQueue::new(10, Some(3)));
        let owned: Arc<Vec<AtomicBool>> =
            Arc::new((0..10).map(|_| AtomicBool::new(false)).collect());
        let handed_out = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2u32)
            .map(|seed| {
                let q = Arc::clone(&q);
                let owned = Arc::clone(&owned);
                let handed_out = Arc::clone(&handed_out);
                std::thread::spawn(move || {
                    let mut hint = AllocHint::new(seed);
                    let mut held: Vec<u32> = Vec::with_capacity(16);
                    for op in 0..OPS_PER_THREAD {
                        let fresh_from = held.len();
                        if op % 7 == 0 {
                            let (mut mask, offset) = q.get_batch(&mut hint, 3);
                            while mask != 0 {
                                held.push(offset + mask.trailing_zeros());
                                mask &= mask - 1;
                            }
                        } else if let Some(bit) = q.get(&mut hint) {
                            held.push(bit);
                        }
                        for &bit in &held[fresh_from..] {
                            let was_owned = owned[bit as usize].swap(true, Ordering::AcqRel);
                            assert!(!was_owned, "bit {bit} held by two threads");
                            handed_out.fetch_add(1, Ordering::Relaxed);
                        }
                        if held.len() >= 4 || op % 5 == 0 {
                            for &bit in &held {
                                let was_owned = owned[bit as usize].swap(false, Ordering::AcqRel);
                                assert!(was_owned);
                            }
                            if op % 2 == 0 {
                                held.sort_unstable();
                                q.put_batch(&held);
                            } else {
                                for &bit in &held {
                                    q.put(bit);
                                }
                            }
                            held.clear();
                        }
                    }
                    for &bit in &held {
                        assert!(owned[bit as usize].swap(false, Ordering::AcqRel));
                        q.put(bit);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("stress thread panicked");
        }
        assert_eq!(q.weight(), 0);
        assert!(handed_out.load(Ordering::Relaxed) > 0);
        // Every bit is still obtainable once everyone is done.
        let mut hint = AllocHint::default();
        assert_eq!(take_all(&q, &mut hint).len(), 10);
        assert_eq!(q.get(&mut hint), None);
    }

    /// Spins (bounded) until `q` has a registered sleeper.
    fn wait_for_sleeper(q: &SbitmapQueue) {
        for _ in 0..10_000 {
            if q.waiters.load(Ordering::SeqCst) > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        panic!("the waiter never registered");
    }

    #[test]
    fn sbitmap_get_wait_wakes_on_put() {
        let q = Arc::new(SbitmapQueue::new(1, None));
        let mut hint = AllocHint::default();
        let held = q.get(&mut hint).unwrap();
        let waiter = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || q.get_wait(&mut AllocHint::new(1), WAIT_GENEROUS))
        };
        wait_for_sleeper(&q);
        q.put(held);
        assert_eq!(waiter.join().unwrap(), Some(0));
        assert_eq!(q.waiters.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn sbitmap_get_wait_wakes_on_put_batch() {
        let q = Arc::new(SbitmapQueue::new(4, Some(3)));
        let mut hint = AllocHint::default();
        let held = take_all(&q, &mut hint);
        let waiters: Vec<_> = (0..2)
            .map(|seed| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || q.get_wait(&mut AllocHint::new(seed), WAIT_GENEROUS))
            })
            .collect();
        wait_for_sleeper(&q);
        q.put_batch(&held[..2]);
        let mut got: Vec<u32> = waiters
            .into_iter()
            .map(|w| w.join().unwrap().expect("woken waiter gets a bit"))
            .collect();
        got.sort_unstable();
        let mut freed = held[..2].to_vec();
        freed.sort_unstable();
        assert_eq!(got, freed);
    }

    #[test]
    fn sbitmap_get_wait_times_out_when_full() {
        let q = SbitmapQueue::new(2, None);
        let mut hint = AllocHint::default();
        let _held = take_all(&q, &mut hint);
        assert_eq!(q.get_wait(&mut hint, Duration::from_millis(1)), None);
        assert_eq!(q.get_wait(&mut hint, Duration::ZERO), None);
        assert_eq!(q.waiters.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn sbitmap_get_wait_returns_at_once_when_free() {
        let q = SbitmapQueue::new(2, None);
        let mut hint = AllocHint::default();
        assert!(q.get_wait(&mut hint, Duration::ZERO).is_some());
        q.wake_all();
        assert!(q.get_wait(&mut hint, Duration::MAX).is_some());
    }
}
