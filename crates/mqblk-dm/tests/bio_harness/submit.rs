//! Bios: random steps placed on a device, cut into batches that may be
//! in flight together, submitted and reaped, each counted as it ends.

use mqblk_core::{Bio, Context, IoBuf, Op, Status};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::table::{Built, Role};
use super::{BIO_MAX, STEPS_MAX};

#[derive(Clone, Debug)]
pub enum Step {
    Read {
        at: u64,
        len: u64,
        segs: u64,
    },
    Write {
        at: u64,
        len: u64,
        segs: u64,
        seed: u8,
    },
    Flush,
    Discard {
        at: u64,
        len: u64,
    },
    WriteZeroes {
        at: u64,
        len: u64,
    },
}

pub fn step() -> impl Strategy<Value = Step> {
    let at = 0u64..4096;
    let len = 1u64..=BIO_MAX;
    prop_oneof![
        4 => (at.clone(), len.clone(), 1u64..=3).prop_map(|(at, len, segs)| Step::Read { at, len, segs }),
        4 => (at.clone(), len.clone(), 1u64..=3, any::<u8>())
            .prop_map(|(at, len, segs, seed)| Step::Write { at, len, segs, seed }),
        1 => Just(Step::Flush),
        1 => (at.clone(), len.clone()).prop_map(|(at, len)| Step::Discard { at, len }),
        1 => (at, len).prop_map(|(at, len)| Step::WriteZeroes { at, len }),
    ]
}

pub fn steps() -> impl Strategy<Value = Vec<Step>> {
    proptest::collection::vec(step(), 1..=STEPS_MAX)
}

/// A bio, placed on a device of `cap` sectors: `sector..sector + sectors`
/// (both 0 for a flush), in `segs` segments.
#[derive(Clone, Copy, Debug)]
pub struct Io {
    pub op: Op,
    pub sector: u64,
    pub sectors: u64,
    pub segs: u64,
    pub seed: u8,
}

impl Io {
    pub fn place(step: &Step, cap: u64) -> Io {
        let (op, at, len, segs, seed) = match *step {
            Step::Read { at, len, segs } => (Op::Read, at, len, segs, 0),
            Step::Write {
                at,
                len,
                segs,
                seed,
            } => (Op::Write, at, len, segs, seed),
            Step::Flush => {
                return Io {
                    op: Op::Flush,
                    sector: 0,
                    sectors: 0,
                    segs: 0,
                    seed: 0,
                }
            }
            Step::Discard { at, len } => (Op::Discard, at, len, 0, 0),
            Step::WriteZeroes { at, len } => (Op::WriteZeroes, at, len, 0, 0),
        };
        let sector = at % cap;
        Io {
            op,
            sector,
            sectors: 1 + (len - 1) % (cap - sector),
            segs,
            seed,
        }
    }

    pub fn read(sector: u64, sectors: u64) -> Io {
        Io {
            op: Op::Read,
            sector,
            sectors,
            segs: 1,
            seed: 0,
        }
    }

    pub fn modifies(&self) -> bool {
        matches!(self.op, Op::Write | Op::Discard | Op::WriteZeroes)
    }

    pub fn range(&self) -> (usize, usize) {
        (
            self.sector as usize * 512,
            (self.sector + self.sectors) as usize * 512,
        )
    }

    /// Two bios whose order would change the outcome.
    pub fn conflicts(&self, o: &Io) -> bool {
        (self.modifies() || o.modifies())
            && self.sector < o.sector + o.sectors
            && o.sector < self.sector + self.sectors
    }

    /// The bytes a write carries: each sector starts with its number and
    /// the write's seed, and the rest is a byte of both, so that a piece
    /// that lands in the wrong place, or a stale one, shows. Whole slices
    /// are filled, not bytes one by one: Miri runs this too.
    pub fn data(&self) -> Vec<u8> {
        let mut data = vec![0u8; self.sectors as usize * 512];
        for (i, s) in data.chunks_mut(512).enumerate() {
            let sector = self.sector + i as u64;
            s.fill((sector as u8).wrapping_mul(37) ^ self.seed);
            s[..8].copy_from_slice(&sector.to_le_bytes());
            s[8] = self.seed;
        }
        data
    }

    /// Byte lengths of its segments: whole sectors, the last takes the rest.
    pub fn seg_lens(&self) -> Vec<usize> {
        let segs = self.segs.clamp(1, self.sectors);
        let each = self.sectors / segs;
        (0..segs)
            .map(|i| {
                let n = if i + 1 == segs {
                    self.sectors - each * (segs - 1)
                } else {
                    each
                };
                n as usize * 512
            })
            .collect()
    }

    pub fn bio(&self, id: u64) -> Bio {
        let off = self.sector * 512;
        let mut bio = match self.op {
            Op::Read => {
                let mut bio = Bio::at(Op::Read, off);
                for n in self.seg_lens() {
                    let mut buf = IoBuf::new(n, 512);
                    // Not zeros: a zero line must fill them.
                    buf.as_mut_slice().fill(0xa5);
                    bio.push_segment(buf, 0, n as u32);
                }
                bio
            }
            Op::Write => {
                let mut bio = Bio::at(Op::Write, off);
                let data = self.data();
                let mut at = 0;
                for n in self.seg_lens() {
                    let mut buf = IoBuf::new(n, 512);
                    buf.as_mut_slice().copy_from_slice(&data[at..at + n]);
                    at += n;
                    bio.push_segment(buf, 0, n as u32);
                }
                bio
            }
            Op::Flush => Bio::flush(),
            Op::Discard => Bio::discard_at(off, self.sectors * 512),
            Op::WriteZeroes => Bio::write_zeroes_at(off, self.sectors * 512),
        };
        bio.private = id;
        bio
    }
}

/// Cut the bios into batches of at most `max` that may be in flight
/// together: none of a batch overlaps a write, discard or write-zeroes of
/// the same batch, so the model need not guess an order. With `apart`,
/// no two bios of a batch touch end to end either (so that none merge).
pub fn batches(ios: &[Io], max: usize, apart: bool) -> Vec<std::ops::Range<usize>> {
    let touch = |a: &Io, b: &Io| {
        a.op != Op::Flush
            && b.op != Op::Flush
            && (a.sector + a.sectors == b.sector || b.sector + b.sectors == a.sector)
    };
    let mut out = Vec::new();
    let mut start = 0;
    for i in 0..ios.len() {
        let clash = |o: &Io| o.conflicts(&ios[i]) || (apart && touch(o, &ios[i]));
        if i - start == max || ios[start..i].iter().any(clash) {
            out.push(start..i);
            start = i;
        }
    }
    if start < ios.len() {
        out.push(start..ios.len());
    }
    out
}

/// How one bio ended: its status, and for a read that succeeded, its data.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub status: Status,
    pub data: Option<Vec<u8>>,
}

/// Submit `ios` on `ctx` in batches of at most `max` ([`batches`]).
pub fn run(
    ctx: &mut Context,
    ios: &[Io],
    max: usize,
) -> std::result::Result<Vec<Outcome>, TestCaseError> {
    run_in(ctx, ios, batches(ios, max, false))
}

/// Submit `ios` on `ctx`, a batch at a time, and reap each batch with
/// `poll_wait`. Fails unless every bio completed exactly once, and
/// nothing more was delivered after.
pub fn run_in(
    ctx: &mut Context,
    ios: &[Io],
    batches: Vec<std::ops::Range<usize>>,
) -> std::result::Result<Vec<Outcome>, TestCaseError> {
    let mut seen = vec![0u32; ios.len()];
    let mut out: Vec<Option<Outcome>> = vec![None; ios.len()];
    for batch in batches {
        for id in batch.clone() {
            if let Err(e) = ctx.submit(ios[id].bio(id as u64)) {
                return Err(TestCaseError::fail(format!(
                    "bio {id} not taken: {}",
                    e.error()
                )));
            }
        }
        let mut rounds = 0;
        loop {
            let left = batch.clone().filter(|&i| seen[i] == 0).count();
            if left == 0 {
                break;
            }
            rounds += 1;
            let n = ctx.poll_wait(left, |c| {
                let id = c.private() as usize;
                seen[id] += 1;
                let status = c.status();
                let data = (ios[id].op == Op::Read && status.is_ok()).then(|| {
                    let mut data = Vec::with_capacity(ios[id].sectors as usize * 512);
                    for b in c.into_bio().into_buffers() {
                        data.extend_from_slice(b.as_slice());
                    }
                    data
                });
                out[id] = Some(Outcome { status, data });
            });
            // Nothing came and nothing is in flight: a bio was lost.
            prop_assert!(
                (n > 0 || ctx.in_flight() > 0) && rounds < 1000,
                "batch {batch:?}: {left} bios never completed (in flight {}, {rounds} waits)",
                ctx.in_flight()
            );
        }
        for i in batch {
            prop_assert_eq!(
                seen[i],
                1,
                "bio {} ({:?}) completed {} times",
                i,
                ios[i],
                seen[i]
            );
        }
    }
    let late = ctx.poll(|c| seen[c.private() as usize] += 1);
    prop_assert_eq!(late, 0, "completions after every bio had ended: {:?}", seen);
    prop_assert_eq!(ctx.in_flight(), 0);
    Ok(out.into_iter().map(|o| o.expect("seen once")).collect())
}

pub fn place(steps: &[Step], cap: u64) -> Vec<Io> {
    steps.iter().map(|s| Io::place(s, cap)).collect()
}

/// As [`place`], without discards when no line has legs: such a table
/// refuses them (see `a_table_without_legs_discards_what_its_lines_say`).
pub fn place_on(t: &Built, steps: &[Step]) -> Vec<Io> {
    let legs = t.roles.iter().any(|r| r.2 == Role::Data);
    place(steps, t.sectors())
        .into_iter()
        .filter(|io| legs || io.op != Op::Discard)
        .collect()
}
