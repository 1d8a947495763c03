//! Property test: any sequence of reads, writes (plain, FUA, PREFLUSH),
//! discards, write-zeroes and flushes, with random sizes, offsets and
//! segment counts (some segments misaligned, so they bounce), run through
//! splitting and merging on the ram device, matches a plain byte vector —
//! under every queue mode.

use mqblk::{Bio, BioFlags, IoBuf, Op};
use proptest::prelude::*;

const DEV_BYTES: usize = 512 << 10;
const SECTOR: usize = 512;

#[derive(Clone, Debug)]
enum Kind {
    Read,
    Write { flags: u8 },
    Discard,
    Zeroes,
    Flush,
}

#[derive(Clone, Debug)]
struct OpSpec {
    kind: Kind,
    sector: usize,
    sectors: usize,
    /// Segment lengths (in sectors) and whether each is misaligned.
    segs: Vec<(usize, bool)>,
    seed: u8,
}

fn op_strategy() -> impl Strategy<Value = OpSpec> {
    let kind = prop_oneof![
        4 => Just(Kind::Read),
        4 => (0u8..4).prop_map(|flags| Kind::Write { flags }),
        1 => Just(Kind::Discard),
        1 => Just(Kind::Zeroes),
        1 => Just(Kind::Flush),
    ];
    // Block-aligned neighbours are common, so merges happen; long ones
    // exceed max_sectors, so splits happen.
    let sector = prop_oneof![
        0usize..(DEV_BYTES / SECTOR),
        (0usize..(DEV_BYTES / SECTOR / 8)).prop_map(|b| b * 8)
    ];
    let sectors = prop_oneof![1usize..64, Just(8usize), Just(16usize)];
    (
        kind,
        sector,
        sectors,
        proptest::collection::vec((1usize..8, proptest::bool::weighted(0.15)), 1..6),
        any::<u8>(),
    )
        .prop_map(|(kind, sector, sectors, segs, seed)| {
            let sectors = sectors.min(DEV_BYTES / SECTOR - sector).max(1);
            let sector = sector.min(DEV_BYTES / SECTOR - sectors);
            OpSpec {
                kind,
                sector,
                sectors,
                segs,
                seed,
            }
        })
}

/// Cut `sectors` into segments following `plan` (the last one takes the rest).
fn seg_lens(sectors: usize, plan: &[(usize, bool)]) -> Vec<(usize, bool)> {
    let mut left = sectors;
    let mut out = Vec::new();
    for (i, &(n, mis)) in plan.iter().enumerate() {
        if left == 0 {
            break;
        }
        let take = if i + 1 == plan.len() {
            left
        } else {
            n.min(left)
        };
        out.push((take * SECTOR, mis));
        left -= take;
    }
    out
}

fn fill(seed: u8, len: usize, at: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (seed as usize)
                .wrapping_mul(31)
                .wrapping_add(at + i)
                .wrapping_mul(7) as u8
        })
        .collect()
}

/// Build the bio of `op`; misaligned segments sit 1 byte into a buffer.
fn build(dev: &mqblk::Device, op: &OpSpec) -> Bio {
    let mut bio = match op.kind {
        Kind::Read => Bio::at(Op::Read, (op.sector as u64) * 512),
        Kind::Write { .. } => Bio::at(Op::Write, (op.sector as u64) * 512),
        Kind::Discard => {
            return Bio::discard_at((op.sector as u64) * 512, (op.sectors * SECTOR) as u64)
        }
        Kind::Zeroes => {
            return Bio::write_zeroes_at((op.sector as u64) * 512, (op.sectors * SECTOR) as u64)
        }
        Kind::Flush => return Bio::flush(),
    };
    let mut at = op.sector * SECTOR;
    for (len, mis) in seg_lens(op.sectors, &op.segs) {
        let off = usize::from(mis);
        let mut buf = if mis {
            IoBuf::page_aligned(len + 1)
        } else {
            dev.alloc_buf(len)
        };
        if let Kind::Write { .. } = op.kind {
            buf.as_mut_slice()[off..off + len].copy_from_slice(&fill(op.seed, len, at));
        }
        bio.push_segment(buf, off as u32, len as u32);
        at += len;
    }
    if let Kind::Write { flags } = op.kind {
        let mut f = BioFlags::NONE;
        if flags & 1 != 0 {
            f |= BioFlags::FUA;
        }
        if flags & 2 != 0 {
            f |= BioFlags::PREFLUSH;
        }
        bio.set_flags(f);
    }
    bio
}

fn range(op: &OpSpec) -> Option<std::ops::Range<usize>> {
    match op.kind {
        Kind::Flush => None,
        _ => Some(op.sector * SECTOR..(op.sector + op.sectors) * SECTOR),
    }
}

fn check(mode: &str, batches: Vec<Vec<OpSpec>>) -> Result<(), TestCaseError> {
    let dev = mqblk::open(&format!(
        "ram,size={DEV_BYTES},hw_queues=1,queue_mode={mode},max_sectors=16,max_segments=3,max_segment_size=2048"
    ))
    .unwrap();
    let mut ctx = dev.context().unwrap();
    let mut model = vec![0u8; DEV_BYTES];
    for batch in batches {
        // Ops in flight together touch disjoint ranges: their order is free.
        let mut taken: Vec<std::ops::Range<usize>> = Vec::new();
        let mut ops = Vec::new();
        for op in batch {
            if let Some(r) = range(&op) {
                if taken.iter().any(|t| t.start < r.end && r.start < t.end) {
                    continue;
                }
                taken.push(r);
            }
            ops.push(op);
        }
        for (i, op) in ops.iter().enumerate() {
            let mut bio = build(&dev, op);
            bio.private = i as u64;
            ctx.submit(bio)
                .map_err(|_| TestCaseError::fail("back-pressure in a small batch"))?;
        }
        let mut done = vec![false; ops.len()];
        let mut failure = None;
        let mut got = 0;
        while got < ops.len() {
            got += ctx.poll_wait(ops.len() - got, |c| {
                let i = c.private() as usize;
                if done[i] {
                    failure = Some(format!("op {i} completed twice"));
                }
                done[i] = true;
                if let Err(e) = c.result() {
                    failure = Some(format!("{:?}: {e}", ops[i]));
                    return;
                }
                if let Kind::Read = ops[i].kind {
                    let mut at = ops[i].sector * SECTOR;
                    for s in c.bio().segments() {
                        let want = &model[at..at + s.len() as usize];
                        if s.as_slice() != want {
                            failure = Some(format!(
                                "{mode}: read mismatch at byte {at} in {:?}",
                                ops[i]
                            ));
                        }
                        at += s.len() as usize;
                    }
                }
            });
        }
        if let Some(f) = failure {
            return Err(TestCaseError::fail(f));
        }
        for op in &ops {
            let Some(r) = range(op) else { continue };
            match op.kind {
                Kind::Write { .. } => {
                    let data = fill(op.seed, r.len(), r.start);
                    model[r.clone()].copy_from_slice(&data);
                }
                Kind::Discard | Kind::Zeroes => model[r].fill(0),
                _ => {}
            }
        }
    }
    // The whole device, at the end.
    let mut all = dev.alloc_buf(DEV_BYTES);
    ctx.read_at(all.as_mut_slice(), 0).unwrap();
    prop_assert!(
        all.as_slice() == &model[..],
        "{}: final contents differ",
        mode
    );
    let s = ctx.stats();
    prop_assert!(s.requests >= s.bios.saturating_sub(s.merges.iter().sum::<u64>()) || s.splits > 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn ram_matches_a_byte_vector_in_every_mode(
        batches in proptest::collection::vec(proptest::collection::vec(op_strategy(), 1..10), 1..12)
    ) {
        for mode in ["mq", "device-lock", "global-lock"] {
            check(mode, batches.clone())?;
        }
    }
}

#[test]
fn the_model_test_exercises_splits_merges_and_bounces() {
    // The machinery the property test runs must really split, merge and
    // bounce, or it proves little.
    let dev = mqblk::open(&format!(
        "ram,size={DEV_BYTES},hw_queues=1,max_sectors=16,max_segments=3,max_segment_size=2048"
    ))
    .unwrap();
    let mut ctx = dev.context().unwrap();
    let write = |sector: usize, sectors: usize, segs: Vec<(usize, bool)>, seed: u8| OpSpec {
        kind: Kind::Write { flags: 0 },
        sector,
        sectors,
        segs,
        seed,
    };
    // Single-segment 2 KiB writes back to back: the plug merges them.
    for i in 0..8 {
        ctx.submit(build(&dev, &write(i * 4, 4, vec![(4, false)], i as u8)))
            .unwrap();
    }
    // 12 KiB writes over an 8 KiB max_sectors, one segment misaligned:
    // split, and the misaligned piece bounced.
    for i in 0..4 {
        ctx.submit(build(
            &dev,
            &write(
                256 + i * 24,
                24,
                vec![(4, i == 0), (4, false), (16, false)],
                9,
            ),
        ))
        .unwrap();
    }
    ctx.poll_wait(12, |c| assert!(c.result().is_ok(), "{:?}", c.result()));
    let s = ctx.stats();
    assert!(s.merges[1] > 0, "{s:?}");
    assert!(s.splits > 0, "{s:?}");
    assert!(s.bytes_copied > 0, "{s:?}");
}
