//! Flush and FUA ordering (Linux `block/blk-flush.c`).
//!
//! A write with PREFLUSH, or with FUA on a device whose write cache has no
//! FUA, runs as a sequence: PREFLUSH → DATA → POSTFLUSH. A pure flush is one
//! flush stage. On a device without a volatile write cache, flushes complete
//! at once and the flags are dropped, as Linux does. Flush stages wait in a
//! flush queue: while one flush runs, every stage that arrives waits for the
//! next one, so concurrent flushes are combined into one (Linux keeps one
//! flush queue per hardware queue; mqblk keeps one per context, which is
//! finer and needs no lock).

use crate::bio::{BioFlags, Op};
use crate::error::Status;
use crate::limits::Features;

/// Stage bits of a sequence.
pub(crate) const PREFLUSH: u8 = 1;
/// The data stage.
pub(crate) const DATA: u8 = 2;
/// A flush after the data (FUA emulation).
pub(crate) const POSTFLUSH: u8 = 4;

/// What a bio needs from the flush machinery (Linux `blk_flush_policy`):
/// `0` means complete at once, `DATA` alone means an ordinary bio.
#[inline]
pub(crate) fn policy(op: Op, flags: BioFlags, features: &Features) -> u8 {
    if op == Op::Flush {
        return if features.write_cache { PREFLUSH } else { 0 };
    }
    if !features.write_cache {
        return DATA;
    }
    let mut p = DATA;
    if flags.contains(BioFlags::PREFLUSH) {
        p |= PREFLUSH;
    }
    if flags.contains(BioFlags::FUA) && !features.fua {
        p |= POSTFLUSH;
    }
    p
}

/// The flags a request keeps once the sequence is handled by the layer.
#[inline]
pub(crate) fn request_flags(flags: BioFlags, features: &Features) -> BioFlags {
    if flags.bits() == 0 {
        return flags;
    }
    let mut f = BioFlags::NONE;
    if flags.contains(BioFlags::NOMERGE) {
        f |= BioFlags::NOMERGE;
    }
    if flags.contains(BioFlags::FUA) && features.write_cache && features.fua {
        f |= BioFlags::FUA;
    }
    f
}

/// The next thing a flush sequence needs (see [`FlushMachine::next_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Wait for a device flush (PREFLUSH or POSTFLUSH).
    Flush,
    /// Send the data.
    Data,
    /// The sequence is over: end the bio.
    End,
}

/// A context's flush machinery (Linux `struct blk_flush_queue` and the
/// sequencing of `blk-flush.c`): the bios waiting on the running flush,
/// those waiting on the next one, and the sequences whose next stage is
/// ready to run. It decides; the context issues what it decides, from a
/// submitting path, never from the reap.
#[derive(Debug)]
pub(crate) struct FlushMachine {
    /// A flush request is in flight.
    running: bool,
    /// Sequences waiting for the running flush.
    waiting_running: Vec<u32>,
    /// Sequences that arrived while a flush ran: they wait for the next one.
    pending: Vec<u32>,
    /// Sequences whose next stage may run now.
    ready: Vec<u32>,
    /// The next flush must be issued.
    kick: bool,
    /// Flush requests issued (for tests and stats).
    pub(crate) issued: u64,
}

impl FlushMachine {
    pub(crate) fn new(capacity: usize) -> FlushMachine {
        FlushMachine {
            running: false,
            waiting_running: Vec::with_capacity(capacity),
            pending: Vec::with_capacity(capacity),
            ready: Vec::with_capacity(capacity),
            kick: false,
            issued: 0,
        }
    }

    /// Take the next stage off `stages` (PREFLUSH, then DATA, then
    /// POSTFLUSH, then the end).
    #[inline]
    pub(crate) fn next_step(stages: &mut u8) -> Step {
        for (bit, step) in [
            (PREFLUSH, Step::Flush),
            (DATA, Step::Data),
            (POSTFLUSH, Step::Flush),
        ] {
            if *stages & bit != 0 {
                *stages &= !bit;
                return step;
            }
        }
        Step::End
    }

    /// Sequence `idx` waits for a device flush, combined with any already
    /// waiting. Returns true if the caller must issue a flush request now
    /// (then call [`FlushMachine::issued`]). A flush that is due (the
    /// running one ended with sequences pending, and the submitting side
    /// has not issued the next yet) takes it too: it starts after this
    /// sequence's writes ended, so it covers them, and it is issued once.
    pub(crate) fn join(&mut self, idx: u32) -> bool {
        if self.running {
            debug_assert!(self.pending.len() < self.pending.capacity());
            self.pending.push(idx);
            false
        } else {
            debug_assert!(self.waiting_running.len() < self.waiting_running.capacity());
            self.waiting_running.push(idx);
            !self.kick
        }
    }

    /// A flush request was issued for the waiting sequences.
    pub(crate) fn issued(&mut self) {
        assert!(!self.running, "one flush at a time");
        self.running = true;
        self.issued += 1;
    }

    /// The running flush ended with `status`: its waiters go on to their
    /// next stage, or end with the error (through `fail`); the next flush
    /// is due if more sequences wait.
    pub(crate) fn flush_done(&mut self, status: Status, mut fail: impl FnMut(u32, Status)) {
        assert!(self.running);
        self.running = false;
        for idx in self.waiting_running.drain(..) {
            if status.is_ok() {
                debug_assert!(self.ready.len() < self.ready.capacity());
                self.ready.push(idx);
            } else {
                fail(idx, status);
            }
        }
        if !self.pending.is_empty() {
            std::mem::swap(&mut self.pending, &mut self.waiting_running);
            self.kick = true;
        }
    }

    /// A stage of sequence `idx` (its data) ended well and more remain.
    #[inline]
    pub(crate) fn stage_done(&mut self, idx: u32) {
        debug_assert!(self.ready.len() < self.ready.capacity());
        self.ready.push(idx);
    }

    /// Something waits to be run by [`FlushMachine::take_work`].
    #[inline]
    pub(crate) fn has_work(&self) -> bool {
        self.kick || !self.ready.is_empty()
    }

    /// What to run now: whether a flush must be issued, and the sequences
    /// whose next stage is ready (moved into `ready`, which must be empty).
    pub(crate) fn take_work(&mut self, ready: &mut Vec<u32>) -> bool {
        debug_assert!(ready.is_empty());
        std::mem::swap(&mut self.ready, ready);
        std::mem::take(&mut self.kick)
    }

    /// Forget every sequence (a context that leaks its slots).
    pub(crate) fn abandon(&mut self) {
        self.waiting_running.clear();
        self.pending.clear();
        self.ready.clear();
        self.kick = false;
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        let wc = Features {
            write_cache: true,
            ..Features::default()
        };
        let wc_fua = Features {
            write_cache: true,
            fua: true,
            ..Features::default()
        };
        let none = Features::default();
        assert_eq!(policy(Op::Flush, BioFlags::NONE, &none), 0);
        assert_eq!(policy(Op::Flush, BioFlags::NONE, &wc), PREFLUSH);
        assert_eq!(policy(Op::Write, BioFlags::FUA, &none), DATA);
        assert_eq!(policy(Op::Write, BioFlags::FUA, &wc), DATA | POSTFLUSH);
        assert_eq!(policy(Op::Write, BioFlags::FUA, &wc_fua), DATA);
        assert_eq!(
            policy(Op::Write, BioFlags::FUA | BioFlags::PREFLUSH, &wc),
            PREFLUSH | DATA | POSTFLUSH
        );
        assert!(request_flags(BioFlags::FUA, &wc_fua).contains(BioFlags::FUA));
        assert!(!request_flags(BioFlags::FUA, &wc).contains(BioFlags::FUA));
        assert!(!request_flags(BioFlags::PREFLUSH, &wc).contains(BioFlags::PREFLUSH));
    }

    #[test]
    fn a_sequence_runs_its_stages_in_order() {
        let mut stages = PREFLUSH | DATA | POSTFLUSH;
        let steps: Vec<Step> = (0..4)
            .map(|_| FlushMachine::next_step(&mut stages))
            .collect();
        assert_eq!(steps, [Step::Flush, Step::Data, Step::Flush, Step::End]);
        assert_eq!(stages, 0);
    }

    #[test]
    fn flushes_that_arrive_while_one_runs_share_the_next() {
        let mut m = FlushMachine::new(8);
        assert!(m.join(1), "the first waiter issues");
        m.issued();
        assert!(!m.join(2));
        assert!(!m.join(3));
        let mut failed = Vec::new();
        m.flush_done(Status::Ok, |i, s| failed.push((i, s)));
        assert!(failed.is_empty());
        let mut ready = Vec::new();
        assert!(m.take_work(&mut ready), "2 and 3 need the next flush");
        assert_eq!(ready, vec![1]);
        m.issued();
        m.flush_done(Status::IoError, |i, s| failed.push((i, s)));
        assert_eq!(failed, vec![(2, Status::IoError), (3, Status::IoError)]);
        assert!(!m.has_work());
        assert_eq!(m.issued, 2);
    }

    #[test]
    fn a_sequence_that_joins_while_a_flush_is_due_shares_it() {
        let mut m = FlushMachine::new(8);
        assert!(m.join(1));
        m.issued();
        assert!(!m.join(2), "waits for the next flush");
        m.flush_done(Status::Ok, |_, _| unreachable!());
        // The next flush is due but not issued yet: a sequence joining now
        // must not issue a second one beside it.
        assert!(!m.join(3), "the due flush covers it");
        // Sized as the context's scratch list is: the machine keeps it.
        let mut ready = Vec::with_capacity(8);
        assert!(m.take_work(&mut ready), "the due flush is issued once");
        m.issued();
        m.flush_done(Status::Ok, |_, _| unreachable!());
        ready.clear();
        assert!(!m.take_work(&mut ready));
        assert_eq!(ready, vec![2, 3]);
        assert_eq!(m.issued, 2);
    }
}
