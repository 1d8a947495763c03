//! What a verify job wrote, kept compact: runs of blocks, not a table of
//! every block of the device (fio keeps a list of its writes). A run of
//! blocks written one after another by consecutive writes is one entry,
//! because a block's generation is stored as its distance from the
//! block's number: a sequential job over a terabyte is a handful of
//! entries, a random one an entry per block it wrote. Past
//! [`RECORD_ENTRIES_MAX`] entries neighbouring runs are merged into loose
//! ones, whose blocks are checked for a valid header of their own offset
//! (or zeros) rather than for their exact generation: the record stays
//! bounded, whatever the device's size and the run's length.

use std::collections::BTreeMap;

/// Most entries one job's record holds before it merges runs.
pub const RECORD_ENTRIES_MAX: usize = 1 << 21;

/// What a run of blocks holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Written: block b's generation is `b as u32 + delta` (wrapping).
    Written(u32),
    /// Written with write-zeroes: zeros.
    Zeroed,
    /// Written, then discarded: zeros or that write.
    Trimmed(u32),
    /// A write failed: its content is not known.
    Unknown,
    /// Merged past the budget: a valid header for the block's offset, or
    /// zeros.
    Loose,
}

/// What a block read back should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The write of this generation.
    Generation(u32),
    /// Zeros.
    Zeros,
    /// Zeros, or the write of this generation (discarded).
    ZerosOr(u32),
    /// A valid header for its offset, from any write, or zeros.
    AnyOrZeros,
    /// Nothing known: not checked.
    Unchecked,
}

impl State {
    fn at(self, block: u64) -> Expect {
        match self {
            State::Written(d) => Expect::Generation((block as u32).wrapping_add(d)),
            State::Zeroed => Expect::Zeros,
            State::Trimmed(d) => Expect::ZerosOr((block as u32).wrapping_add(d)),
            State::Unknown => Expect::Unchecked,
            State::Loose => Expect::AnyOrZeros,
        }
    }
}

/// A completed I/O to one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A write of this generation.
    Write(u32),
    /// A write-zeroes.
    Zero,
    /// A discard.
    Trim,
    /// A write (of any kind) that failed.
    Failed,
}

/// The runs a job wrote: start block to (end block, state).
#[derive(Debug, Default)]
pub struct Record {
    runs: BTreeMap<u64, (u64, State)>,
    entries_max: usize,
    /// Blocks now in loose runs because the budget was reached.
    merged: bool,
}

impl Record {
    /// An empty record holding at most `entries_max` runs.
    pub fn new(entries_max: usize) -> Record {
        Record {
            runs: BTreeMap::new(),
            entries_max: entries_max.max(2),
            merged: false,
        }
    }

    /// Runs held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether the budget was reached (some blocks are checked loosely).
    pub fn merged(&self) -> bool {
        self.merged
    }

    /// The run holding `block`: (start, end, state).
    fn find(&self, block: u64) -> Option<(u64, u64, State)> {
        let (&start, &(end, state)) = self.runs.range(..=block).next_back()?;
        (block < end).then_some((start, end, state))
    }

    /// What `block` should hold, if it was written.
    pub fn expect(&self, block: u64) -> Option<Expect> {
        self.find(block).map(|(_, _, s)| s.at(block))
    }

    /// The first block at or after `block` with something to check, and
    /// what it should hold.
    pub fn next_checkable(&self, block: u64) -> Option<(u64, Expect)> {
        if let Some((_, end, s)) = self.find(block) {
            if s != State::Unknown {
                return Some((block, s.at(block)));
            }
            return self.next_checkable(end);
        }
        let (&start, &(end, s)) = self.runs.range(block..).next()?;
        if s == State::Unknown {
            return self.next_checkable(end);
        }
        Some((start, s.at(start)))
    }

    /// Record `event` on `block`.
    pub fn record(&mut self, block: u64, event: Event) {
        let old = self.find(block).map(|(_, _, s)| s);
        let state = match event {
            Event::Write(g) => State::Written(g.wrapping_sub(block as u32)),
            Event::Zero => State::Zeroed,
            Event::Failed => State::Unknown,
            Event::Trim => match old {
                Some(State::Written(d)) => State::Trimmed(d),
                Some(s) => s,
                // A discard of a block never written leaves nothing to
                // check.
                None => return,
            },
        };
        if old == Some(state) {
            return;
        }
        self.cut_out(block);
        let mut start = block;
        let mut end = block + 1;
        // Join the run on the left, and the one on the right, when they
        // hold the same (for a write: consecutive generations).
        if let Some((s, e, st)) = block.checked_sub(1).and_then(|b| self.find(b)) {
            if e == block && st == state {
                self.runs.remove(&s);
                start = s;
            }
        }
        if let Some(&(e, st)) = self.runs.get(&end) {
            if st == state {
                self.runs.remove(&end);
                end = e;
            }
        }
        self.runs.insert(start, (end, state));
        if self.runs.len() > self.entries_max {
            self.merge();
        }
    }

    /// Take `block` out of the run holding it, keeping the rest.
    fn cut_out(&mut self, block: u64) {
        let Some((start, end, state)) = self.find(block) else {
            return;
        };
        self.runs.remove(&start);
        if start < block {
            self.runs.insert(start, (block, state));
        }
        if block + 1 < end {
            self.runs.insert(block + 1, (end, state));
        }
    }

    /// Halve the runs: each pair of neighbours becomes one loose run over
    /// both (and the gap between them).
    fn merge(&mut self) {
        self.merged = true;
        let old = std::mem::take(&mut self.runs);
        let mut it = old.into_iter().peekable();
        while let Some((start, (end, state))) = it.next() {
            match it.next() {
                Some((_, (end2, _))) => {
                    self.runs.insert(start, (end2, State::Loose));
                }
                None => {
                    self.runs.insert(start, (end, state));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_writes_are_one_run() {
        let mut r = Record::new(1000);
        for b in 0..1_000_000u64 {
            r.record(1 << 40 | b, Event::Write(7 + b as u32));
        }
        assert_eq!(r.len(), 1);
        assert_eq!(r.expect(1 << 40 | 5), Some(Expect::Generation(12)));
        assert_eq!(r.expect(5), None);
        // Overwriting one block in the middle splits the run in three.
        r.record(1 << 40 | 10, Event::Write(99));
        assert_eq!(r.len(), 3);
        assert_eq!(r.expect(1 << 40 | 10), Some(Expect::Generation(99)));
        assert_eq!(r.expect(1 << 40 | 11), Some(Expect::Generation(18)));
    }

    #[test]
    fn trims_zeroes_and_failures_are_kept_per_block() {
        let mut r = Record::new(1000);
        r.record(3, Event::Write(1));
        r.record(3, Event::Trim);
        assert_eq!(r.expect(3), Some(Expect::ZerosOr(1)));
        r.record(4, Event::Zero);
        r.record(4, Event::Trim);
        assert_eq!(r.expect(4), Some(Expect::Zeros));
        r.record(9, Event::Trim);
        assert_eq!(r.expect(9), None);
        r.record(5, Event::Failed);
        assert_eq!(r.next_checkable(5), None);
        assert_eq!(r.next_checkable(0), Some((3, Expect::ZerosOr(1))));
    }

    #[test]
    fn the_record_stays_within_its_budget() {
        let mut r = Record::new(64);
        for i in 0..10_000u64 {
            r.record(i * 7 % 9973 * 3, Event::Write(i as u32));
            assert!(r.len() <= 64);
        }
        assert!(r.merged());
        // Every block written is still checked, loosely.
        let mut n = 0;
        let mut b = 0;
        while let Some((at, e)) = r.next_checkable(b) {
            assert_ne!(e, Expect::Unchecked);
            n += 1;
            b = at + 1;
        }
        assert!(n >= 9973, "{n}");
    }
}
