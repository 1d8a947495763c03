//! Crash consistency: the null device's volatile write cache and its power
//! switch check the layer's flush and FUA ordering against an in-memory
//! model.
//!
//! Every block a test writes carries, in each of its 8-byte words, the id
//! of the write and the block's number, so a block read back after a power
//! cut names the one write it came from, and a torn or misplaced block
//! shows. The model keeps, per block, the last durable value (set by a
//! flush for every write completed before it, and by a FUA write when it
//! completes) and the values written since. After `power_cut()` every block
//! must hold its durable value or one written after it: never anything
//! else, and never a mix.

use std::io::IoSlice;

use mqblk_core::bio::{Bio, BioFlags};
use mqblk_core::buf::IoBuf;
use mqblk_core::context::Context;
use mqblk_core::error::Error;
use mqblk_core::queue::Device;
use mqblk_core::spec;
use mqblk_null::NullHandle;

fn open(s: &str) -> (Device, NullHandle) {
    let spec = spec::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    mqblk_null::open_with_handle(spec.options).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// splitmix64: small, seeded, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The word every 8 bytes of `block` hold after write `id` (0: zeros, the
/// value of a block never written, discarded or zeroed).
fn word(id: u64, block: u64) -> u64 {
    if id == 0 {
        0
    } else {
        (id << 32) | (block & 0xffff_ffff)
    }
}

/// Fill `buf` (whole blocks from `first`) with write `id`'s pattern.
fn fill(buf: &mut [u8], block_bytes: usize, first: u64, id: u64) {
    for (i, blk) in buf.chunks_mut(block_bytes).enumerate() {
        // One copy of the repeated word (a word loop costs Miri about a
        // thousand times more).
        blk.copy_from_slice(
            &word(id, first + i as u64)
                .to_le_bytes()
                .repeat(blk.len() / 8),
        );
    }
}

/// The write id block `block`'s bytes came from, or why they are wrong.
fn decode(blk: &[u8], block: u64) -> Result<u64, String> {
    let first = u64::from_le_bytes(blk[..8].try_into().expect("8 bytes"));
    // One comparison in the common case; the word loop only to name a
    // torn word.
    let torn = blk != first.to_le_bytes().repeat(blk.len() / 8).as_slice();
    if let Some(i) = torn
        .then(|| {
            blk.chunks(8)
                .position(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) != first)
        })
        .flatten()
    {
        return Err(format!(
            "torn: word 0 is {first:#x}, word {i} is {:#x}",
            u64::from_le_bytes(blk[i * 8..][..8].try_into().expect("8 bytes"))
        ));
    }
    let id = first >> 32;
    if word(id, block) != first {
        return Err(format!("misplaced: {first:#x} belongs to another block"));
    }
    Ok(id)
}

/// Per block: what a power cut may leave.
struct Model {
    /// Last durable write id.
    durable: Vec<u64>,
    /// Write ids since the durable one, oldest first.
    since: Vec<Vec<u64>>,
}

impl Model {
    fn new(blocks: usize) -> Model {
        Model {
            durable: vec![0; blocks],
            since: vec![Vec::new(); blocks],
        }
    }

    /// What a read returns now: the newest write.
    fn latest(&self, b: usize) -> u64 {
        self.since[b].last().copied().unwrap_or(self.durable[b])
    }

    /// A write (or discard: id 0) completed, not yet durable.
    fn written(&mut self, first: u64, n: u64, id: u64) {
        for b in first..first + n {
            self.since[b as usize].push(id);
        }
    }

    /// A FUA write completed: durable at once.
    fn durable_write(&mut self, first: u64, n: u64, id: u64) {
        for b in first..first + n {
            self.durable[b as usize] = id;
            self.since[b as usize].clear();
        }
    }

    /// A flush completed: everything completed before it is durable.
    fn flushed(&mut self) {
        for b in 0..self.durable.len() {
            self.durable[b] = self.latest(b);
            self.since[b].clear();
        }
    }
}

/// What a power cut left, over a whole run.
#[derive(Debug, Default)]
struct Outcome {
    /// Blocks whose unflushed writes were all lost.
    lost: u64,
    /// Blocks that kept an unflushed write (the cache evicted it).
    kept_unflushed: u64,
    /// Blocks with nothing unflushed.
    clean: u64,
}

/// One configuration of the randomised run.
#[derive(Clone, Copy, Debug)]
struct Case {
    block_bytes: usize,
    fua: bool,
    completion: &'static str,
    seed: u64,
}

const BLOCKS: u64 = 96;
const CACHE_BLOCKS: u64 = 12;
// Miri runs a round of 250 operations in minutes: one short round there.
const ROUNDS: usize = if cfg!(miri) { 1 } else { 4 };
const OPS_PER_ROUND: usize = if cfg!(miri) { 120 } else { 250 };
const TAIL_OPS: usize = 8;

/// A page-aligned buffer holding write `id` over `n` blocks from `first`.
fn pattern(bs: usize, first: u64, n: u64, id: u64) -> IoBuf {
    let mut buf = IoBuf::page_aligned(n as usize * bs);
    fill(buf.as_mut_slice(), bs, first, id);
    buf
}

/// Submit one write bio with `flags` and wait for it.
fn write_bio(c: &mut Context, bs: usize, first: u64, n: u64, id: u64, flags: BioFlags) {
    let sector = first * bs as u64 / 512;
    let mut bio = Bio::write_at(sector * 512, pattern(bs, first, n, id));
    bio.set_flags(flags);
    let (_, r) = c.submit_wait(bio);
    r.unwrap_or_else(|e| panic!("write {id} with {flags:?} at block {first}: {e}"));
}

/// Read the whole device through `c` and check every block against the
/// model after a power cut; then the model starts again from what is there.
fn check_after_power_cut(c: &mut Context, bs: usize, m: &mut Model, out: &mut Outcome, what: &str) {
    let chunk_blocks = 16u64;
    let mut buf = IoBuf::page_aligned(chunk_blocks as usize * bs);
    for first in (0..BLOCKS).step_by(chunk_blocks as usize) {
        buf.as_mut_slice().fill(0xA5);
        c.read_at(buf.as_mut_slice(), first * bs as u64)
            .expect("read back");
        for (i, blk) in buf.as_slice().chunks(bs).enumerate() {
            let b = first + i as u64;
            let bi = b as usize;
            let id = decode(blk, b).unwrap_or_else(|e| panic!("{what}: block {b}: {e}"));
            let durable = m.durable[bi];
            let allowed = id == durable || m.since[bi].contains(&id);
            assert!(
                allowed,
                "{what}: block {b} holds write {id}; durable is {durable}, written since: {:?}",
                m.since[bi]
            );
            if m.since[bi].iter().all(|&s| s == durable) {
                out.clean += 1;
            } else if id == durable && !m.since[bi].contains(&id) {
                out.lost += 1;
            } else {
                out.kept_unflushed += 1;
            }
            m.durable[bi] = id;
            m.since[bi].clear();
        }
    }
}

/// Counts of what the run asked for, to check what the driver saw.
#[derive(Debug, Default)]
struct Issued {
    flushes: u64,
    preflush_writes: u64,
    fua_writes: u64,
}

fn run(case: Case) -> Outcome {
    let bs = case.block_bytes;
    let what = format!("{case:?}");
    let (dev, power) = open(&format!(
        "null,size={},block_size={bs},memory_backed=1,cache_size={},fua={},completion={},\
         hw_queues=2",
        BLOCKS * bs as u64,
        CACHE_BLOCKS * bs as u64,
        u8::from(case.fua),
        case.completion,
    ));
    let f = dev.info().features;
    assert!(f.write_cache, "{what}");
    assert_eq!(f.fua, case.fua, "{what}");
    // Two contexts on two hardware queues: a flush on one must cover
    // writes completed on the other, because the cache is device-wide.
    let mut ctxs = [
        dev.context().expect("context"),
        dev.context().expect("context"),
    ];
    assert_ne!(ctxs[0].hw_queue(), ctxs[1].hw_queue());
    let mut rng = Rng(case.seed);
    let mut m = Model::new(BLOCKS as usize);
    let mut out = Outcome::default();
    let mut issued = Issued::default();
    let mut next_id = 1u64;

    for round in 0..ROUNDS {
        for op in 0..OPS_PER_ROUND + TAIL_OPS {
            let c = &mut ctxs[rng.below(2) as usize];
            // The tail of a round never flushes. It alternates FUA writes
            // (so only FUA makes those durable, not a later flush or
            // eviction) and small plain writes, ending with one (so
            // something is unflushed at the cut, even where FUA is emulated
            // with a flush, without evicting the whole cache).
            let tail = op >= OPS_PER_ROUND;
            let dice = match (tail, op % 2) {
                (false, _) => rng.below(100),
                (true, 0) => 52,
                (true, _) => 0,
            };
            let n = if tail && dice == 0 {
                1 + rng.below(2)
            } else {
                1 + rng.below(16)
            };
            let first = rng.below(BLOCKS - n + 1);
            let offset = first * bs as u64;
            let id = next_id;
            match dice {
                // Plain write.
                0..=44 => {
                    next_id += 1;
                    let buf = pattern(bs, first, n, id);
                    c.write_at(buf.as_slice(), offset).expect("write");
                    m.written(first, n, id);
                }
                // Vectored write: a block may straddle two segments.
                45..=51 => {
                    next_id += 1;
                    let buf = pattern(bs, first, n, id);
                    let total = buf.len();
                    let cut = (512 * (1 + rng.below(total as u64 / 512))) as usize;
                    let (a, b) = buf.as_slice().split_at(cut.min(total));
                    let mut iov = vec![IoSlice::new(a)];
                    if !b.is_empty() {
                        iov.push(IoSlice::new(b));
                    }
                    c.writev_at(&iov, offset).expect("writev");
                    m.written(first, n, id);
                }
                // FUA write.
                52..=61 => {
                    next_id += 1;
                    write_bio(c, bs, first, n, id, BioFlags::FUA);
                    issued.fua_writes += 1;
                    m.durable_write(first, n, id);
                }
                // PREFLUSH write, sometimes FUA too.
                62..=67 => {
                    next_id += 1;
                    let fua = rng.below(3) == 0;
                    let flags = if fua {
                        BioFlags::PREFLUSH | BioFlags::FUA
                    } else {
                        BioFlags::PREFLUSH
                    };
                    write_bio(c, bs, first, n, id, flags);
                    issued.preflush_writes += 1;
                    m.flushed();
                    if fua {
                        issued.fua_writes += 1;
                        m.durable_write(first, n, id);
                    } else {
                        m.written(first, n, id);
                    }
                }
                // Flush.
                68..=77 => {
                    c.flush().expect("flush");
                    issued.flushes += 1;
                    m.flushed();
                }
                // Discard or write-zeroes: the blocks read as zeros.
                78..=82 => {
                    if rng.below(2) == 0 {
                        c.discard(offset, n * bs as u64).expect("discard");
                    } else {
                        c.write_zeroes(offset, n * bs as u64).expect("write zeroes");
                    }
                    m.written(first, n, 0);
                }
                // Read: the newest write of each block, through the cache.
                _ => {
                    let mut buf = IoBuf::page_aligned(n as usize * bs);
                    c.read_at(buf.as_mut_slice(), offset).expect("read");
                    for (i, blk) in buf.as_slice().chunks(bs).enumerate() {
                        let b = first + i as u64;
                        let got = decode(blk, b)
                            .unwrap_or_else(|e| panic!("{what} round {round}: block {b}: {e}"));
                        assert_eq!(got, m.latest(b as usize), "{what}: read of block {b}");
                    }
                }
            }
            assert!(
                power.cached_bytes() <= CACHE_BLOCKS * bs as u64,
                "{what}: the cache stays within its size between requests"
            );
        }
        power.power_cut();
        assert_eq!(power.cached_bytes(), 0, "{what}");
        let c = &mut ctxs[rng.below(2) as usize];
        check_after_power_cut(c, bs, &mut m, &mut out, &format!("{what} round {round}"));
    }

    // What reached the driver: flushes are not combined here (each blocking
    // call ends before the next starts), so every flush the layer owes is
    // one flush request; FUA reaches the driver only if declared.
    let expect_flushes =
        issued.flushes + issued.preflush_writes + if case.fua { 0 } else { issued.fua_writes };
    assert_eq!(power.flushes(), expect_flushes, "{what}: {issued:?}");
    let expect_fua = if case.fua { issued.fua_writes } else { 0 };
    assert_eq!(power.fua_writes(), expect_fua, "{what}: {issued:?}");
    assert_eq!(
        dev.stats().snapshot().ios[3],
        power.flushes(),
        "{what}: the flush group counts the flush requests"
    );
    assert!(power.evicted_bytes() > 0, "{what}: the cache evicted");
    out
}

#[test]
fn random_writes_survive_a_power_cut_as_the_model_allows() {
    // Miri runs a case in about a minute: one seed and one block size
    // there, the small one (most of its time goes to filling and checking
    // the blocks' bytes, and the driver's paths are the same), and two of
    // the four pairings of FUA and completion, which still take each of
    // the four paths once (declared FUA inline, emulated FUA deferred).
    let (block_sizes, seeds): (&[usize], &[u64]) = if cfg!(miri) {
        (&[512], &[1])
    } else {
        (&[512, 4096], &[1, 7, 0x5eed])
    };
    for fua in [true, false] {
        for &block_bytes in block_sizes {
            for completion in ["inline", "deferred"] {
                if cfg!(miri) && fua != (completion == "inline") {
                    continue;
                }
                for &seed in seeds {
                    let case = Case {
                        block_bytes,
                        fua,
                        completion,
                        seed,
                    };
                    let out = run(case);
                    // Not trivially durable, nor trivially lost: some
                    // unflushed writes died with the cache, and some
                    // survived because the cache evicted them.
                    assert!(out.lost > 0, "{case:?}: {out:?}");
                    assert!(out.kept_unflushed > 0, "{case:?}: {out:?}");
                    assert!(out.clean > 0, "{case:?}: {out:?}");
                }
            }
        }
    }
}

fn read_block(c: &mut Context, bs: usize, b: u64) -> u64 {
    let mut buf = IoBuf::page_aligned(bs);
    c.read_at(buf.as_mut_slice(), b * bs as u64).expect("read");
    decode(buf.as_slice(), b).unwrap_or_else(|e| panic!("block {b}: {e}"))
}

#[test]
fn without_a_flush_a_power_cut_loses_recent_writes() {
    let bs = 4096;
    let (dev, power) = open("null,size=1M,block_size=4k,memory_backed=1,cache_size=64k");
    let mut c = dev.context().expect("context");
    for b in 0..4u64 {
        c.write_at(pattern(bs, b, 1, 1).as_slice(), b * bs as u64)
            .expect("write");
    }
    c.flush().expect("flush");
    for b in 2..6u64 {
        c.write_at(pattern(bs, b, 1, 2).as_slice(), b * bs as u64)
            .expect("write");
    }
    assert_eq!(power.cached_bytes(), 4 * bs as u64);
    let before: Vec<u64> = (0..6).map(|b| read_block(&mut c, bs, b)).collect();
    assert_eq!(before, [1, 1, 2, 2, 2, 2], "reads see the cache");
    assert_eq!(power.power_cut(), 4 * bs as u64);
    let after: Vec<u64> = (0..6).map(|b| read_block(&mut c, bs, b)).collect();
    assert_eq!(after, [1, 1, 1, 1, 0, 0], "the unflushed writes are gone");
    assert_eq!(power.evicted_bytes(), 0);
}

#[test]
fn flushed_and_fua_writes_survive() {
    let bs = 512;
    for fua in [1, 0] {
        let (dev, power) = open(&format!(
            "null,size=1M,memory_backed=1,cache_size=64k,fua={fua}"
        ));
        let mut c = dev.context().expect("context");
        c.write_at(pattern(bs, 0, 1, 1).as_slice(), 0)
            .expect("write");
        c.flush().expect("flush");
        c.write_at(pattern(bs, 2, 1, 3).as_slice(), 2 * bs as u64)
            .expect("write");
        // The PREFLUSH makes write 3 durable; write 4 itself is not.
        write_bio(&mut c, bs, 3, 1, 4, BioFlags::PREFLUSH);
        // Nothing flushes after this: only FUA makes write 2 durable.
        write_bio(&mut c, bs, 1, 1, 2, BioFlags::FUA);
        c.write_at(pattern(bs, 4, 1, 5).as_slice(), 4 * bs as u64)
            .expect("write");
        power.power_cut();
        let got: Vec<u64> = (0..5).map(|b| read_block(&mut c, bs, b)).collect();
        // Emulated FUA flushes the whole cache after the write, so write 4
        // happens to be durable too; native FUA touches only its block.
        let block3 = if fua == 1 { 0 } else { 4 };
        assert_eq!(got, [1, 2, 3, block3, 0], "fua={fua}");
        assert_eq!(power.fua_writes(), if fua == 1 { 1 } else { 0 });
        // flush, PREFLUSH, and with fua=0 the FUA emulation's POSTFLUSH.
        assert_eq!(power.flushes(), if fua == 1 { 2 } else { 3 }, "fua={fua}");
    }
}

#[test]
fn a_flush_on_one_queue_covers_writes_completed_on_another() {
    let bs = 512;
    let (dev, power) = open("null,size=1M,memory_backed=1,cache_size=64k,hw_queues=2");
    let mut a = dev.context().expect("context");
    let mut b = dev.context().expect("context");
    assert_ne!(a.hw_queue(), b.hw_queue());
    a.write_at(pattern(bs, 0, 8, 1).as_slice(), 0)
        .expect("write");
    b.flush().expect("flush");
    assert_eq!(power.cached_bytes(), 0);
    power.power_cut();
    for blk in 0..8 {
        assert_eq!(read_block(&mut a, bs, blk), 1, "block {blk}");
    }
}

/// Submit 32 flushes at once through the callback API; the core combines
/// them into far fewer flush requests. With `one_wait`, a single
/// `poll_wait(32)` must deliver all of them; otherwise up to a few waits
/// may.
fn combined_flushes(spec: &str, one_wait: bool) {
    let bs = 512;
    let (dev, power) = open(spec);
    let mut c = dev.context().expect("context");
    c.write_at(pattern(bs, 0, 4, 1).as_slice(), 0)
        .expect("write");
    assert!(power.cached_bytes() > 0);
    for i in 0..32 {
        if c.submit(Bio::flush()).is_err() {
            panic!("{spec}: flush {i} refused");
        }
    }
    let mut ok = 0;
    let mut n = c.poll_wait(32, |cpl| {
        cpl.result().expect("flush");
        ok += 1;
    });
    if !one_wait {
        for _ in 0..4 {
            if n >= 32 {
                break;
            }
            n += c.poll_wait(32 - n, |cpl| {
                cpl.result().expect("flush");
                ok += 1;
            });
        }
    }
    assert_eq!(n, 32, "{spec}: completions delivered");
    assert_eq!(ok, 32, "{spec}");
    let flushes = power.flushes();
    assert!(
        (1..=2).contains(&flushes),
        "{spec}: 32 flush bios became {flushes} flush requests"
    );
    assert_eq!(dev.stats().snapshot().ios[3], flushes, "{spec}");
    assert_eq!(power.cached_bytes(), 0, "{spec}");
    power.power_cut();
    assert_eq!(
        read_block(&mut c, bs, 3),
        1,
        "{spec}: the flushes made it durable"
    );
}

const COMBINE_SPECS: [&str; 3] = [
    "null,size=1M,memory_backed=1,cache_size=64k,hw_queues=1",
    "null,size=1M,memory_backed=1,cache_size=64k,hw_queues=1,completion=deferred",
    "null,size=1M,memory_backed=1,cache_size=64k,hw_queues=1,completion=deferred,plug=off",
];

#[test]
fn concurrent_flushes_are_combined() {
    for spec in COMBINE_SPECS {
        combined_flushes(spec, false);
    }
}

/// `poll_wait(32)` after 32 flush bios must deliver 32. The core's
/// `process_deferred` ends with a plug flush that can complete the second,
/// combined flush inline; its 31 waiters then sit in `seq_ready` with no
/// request in flight, and `poll_wait` (which waits only while requests are
/// in flight) returns after 1. The next `poll` delivers the 31.
#[test]
fn one_poll_wait_delivers_every_combined_flush() {
    for spec in COMBINE_SPECS {
        combined_flushes(spec, true);
    }
}

#[test]
fn without_a_cache_flushes_never_reach_the_driver() {
    let bs = 512;
    let (dev, power) = open("null,size=1M,memory_backed=1");
    let f = dev.info().features;
    assert!(!f.write_cache);
    assert!(!f.fua);
    assert!(!power.has_write_cache());
    let mut c = dev.context().expect("context");
    c.write_at(pattern(bs, 0, 1, 1).as_slice(), 0)
        .expect("write");
    write_bio(&mut c, bs, 1, 1, 2, BioFlags::FUA | BioFlags::PREFLUSH);
    c.flush().expect("flush");
    assert_eq!(power.flushes(), 0);
    assert_eq!(power.fua_writes(), 0, "no write cache: the core drops FUA");
    assert_eq!(dev.stats().snapshot().ios[3], 0);
    assert_eq!(power.power_cut(), 0);
    assert_eq!(read_block(&mut c, bs, 0), 1, "every write was durable");
    assert_eq!(read_block(&mut c, bs, 1), 2);
}

#[test]
fn a_cache_needs_memory() {
    let opts = spec::parse("null,size=1M,cache_size=64k")
        .expect("spec")
        .options;
    match mqblk_null::open_with_handle(opts) {
        Err(e @ Error::Spec { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("cache_size"), "{msg}");
            assert!(msg.contains("memory_backed=1"), "{msg}");
        }
        other => panic!("expected a spec error, got {other:?}"),
    }
}
