//! Verified data (fio's `verify=`, `do_verify=`, `verify_fatal=`,
//! `verify_interval=`, `verify_pattern=`, `verify_backlog=`): every
//! interval of every block a job writes carries a header naming it
//! ([`header`]), and is checked when it is read back.
//!
//! The seed of a block's data is a function of (job, block, generation),
//! so the expected content of a block is known from the generation of its
//! last completed write alone; the [`record`] keeps those compactly, as
//! runs, so any device size can be verified. A write-only job (`rw=write`,
//! `randwrite`) with `do_verify=1` reads every block it wrote back after
//! the measured phase (fio's verify phase), or every `verify_backlog`
//! writes as it goes; `randrw`/`rw` also check each read of a block this
//! job has written against its last write; a read-only job checks that
//! every block it reads carries a valid header for its offset (data
//! written by an earlier job or run; zeros, never written, are counted
//! apart). I/O to a block that has I/O in flight is moved to the next free
//! block (fio's `serialize_overlap`), so the expected content is never
//! ambiguous. Writing jobs that run at once on one device verify disjoint
//! slices of their region.
//!
//! Data-less writes join the mix with `trim_percentage=N` (that share of
//! the job's writes become discards of the block) and
//! `write_zeroes_percentage=N` (write-zeroes instead). A zeroed block must
//! read back as zeros. A discarded block may read as zeros or as what it
//! held before (a device may ignore a discard, as librbd does below its
//! object's granularity), unless `trim_verify_zero=1` asks for zeros.
//!
//! The engine is generic over [`Hook`]: with verify off it runs with
//! [`NoVerify`], which only stamps 8 bytes per 4 KiB of each write (fio's
//! `scramble_buffers`); reads cost nothing extra.

pub mod header;

pub mod pattern;

pub mod record;

use std::collections::VecDeque;
use std::fmt::Write as _;

use mqblk::{Bio, Completion, Context, Device, Op};

use super::content::Content;
use super::job::{JobSpec, VerifyKind};
use header::{fill_data, hex, splitmix, Header, HEADER_BYTES, MAGIC};
use pattern::VerifyPattern;
use record::{Event, Expect, Record, RECORD_ENTRIES_MAX};

/// Mismatches kept in detail per job (all are counted).
pub const MISMATCHES_KEPT: usize = 16;

/// One mismatch, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// Device offset of the block.
    pub offset: u64,
    /// What is wrong.
    pub reason: &'static str,
    /// The header the block should carry (generation and seed are 0 when
    /// the job did not write the block itself: a read-only check).
    pub expected: Header,
    /// The header read.
    pub actual: Header,
    /// The checksum computed over what was read: its name and hex value.
    pub computed: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "verify: {} at offset {}: expected {}, got {} (computed {})",
            self.reason, self.offset, self.expected, self.actual, self.computed
        )
    }
}

/// What a job's verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyResult {
    /// `verify=` name.
    pub kind: &'static str,
    /// Writes completed with a header (a block written twice counts twice).
    pub blocks_written: u64,
    /// Discards completed (`trim_percentage=`).
    pub blocks_trimmed: u64,
    /// Write-zeroes completed (`write_zeroes_percentage=`).
    pub blocks_zeroed: u64,
    /// Reads checked, during the run and in the verify phase (the verify
    /// phase reads each block written once).
    pub blocks_verified: u64,
    /// Mismatches found.
    pub errors: u64,
    /// The first [`MISMATCHES_KEPT`] mismatches.
    pub mismatches: Vec<Mismatch>,
    /// `verify_fatal=1` stopped the job at the first mismatch.
    pub stopped: bool,
    /// Blocks a read-only check found never written (zeros).
    pub blocks_unwritten: u64,
    /// The record of what was written outgrew its budget: some blocks
    /// were checked for a valid header of their offset, not their exact
    /// generation.
    pub loose: bool,
}

impl VerifyResult {
    /// fio-style lines for the normal report.
    pub fn describe(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  verify       : {}, {} blocks written{}, {} verified{}{}, {} errors{}",
            self.kind,
            self.blocks_written,
            if self.blocks_trimmed + self.blocks_zeroed > 0 {
                format!(
                    " ({} trimmed, {} zeroed)",
                    self.blocks_trimmed, self.blocks_zeroed
                )
            } else {
                String::new()
            },
            self.blocks_verified,
            if self.blocks_unwritten > 0 {
                format!(" ({} never written)", self.blocks_unwritten)
            } else {
                String::new()
            },
            if self.loose {
                " (some by header only: the record reached its budget)"
            } else {
                ""
            },
            self.errors,
            if self.stopped {
                " (stopped at the first: verify_fatal=1)"
            } else {
                ""
            }
        );
        for m in &self.mismatches {
            let _ = writeln!(out, "    {m}");
        }
        if self.errors > self.mismatches.len() as u64 {
            let _ = writeln!(
                out,
                "    ... and {} more",
                self.errors - self.mismatches.len() as u64
            );
        }
    }
}

/// The bits of [`Bio::private`] a [`Hook`] may use. The engine keeps its
/// own word for the I/O (a timing slot) in the high half, and sets it after
/// [`Hook::prepare`].
pub const HOOK_PRIVATE_MASK: u64 = 0xffff_ffff;

/// What the bench engine calls around every I/O. [`NoVerify`] stamps
/// write buffers; [`Verifier`] writes and checks headers.
pub trait Hook {
    /// Restrict the job to its slice of `blocks`: returns how many blocks
    /// the offset generator should draw from.
    fn blocks(&self, blocks: u64) -> u64 {
        blocks
    }
    /// The generator drew `op`: the op to issue instead (a verify job turns
    /// some writes into discards or write-zeroes).
    fn retarget(&mut self, op: Op) -> Op {
        op
    }
    /// The bio has its op and sector for the next I/O: move it off a busy
    /// block, into the job's slice, and write the header of a write. Only
    /// the [`HOOK_PRIVATE_MASK`] bits of `private` are the hook's.
    fn prepare(&mut self, _bio: &mut Bio) {}
    /// The bio could not be submitted after `prepare`.
    fn cancel(&mut self, _bio: &Bio) {}
    /// The bio completed: record a write, check a read.
    fn complete(&mut self, _c: &Completion<'_>) {}
    /// `verify_fatal=1` hit a mismatch: the job should stop.
    fn stopped(&self) -> bool {
        false
    }
    /// After the measured phase, with nothing in flight: read back and
    /// check what was written (`do_verify=1`).
    fn verify_phase(&mut self, _ctx: &mut Context, _free: &mut Vec<Bio>) {}
    /// The result, if verifying.
    fn result(&mut self) -> Option<VerifyResult> {
        None
    }
}

/// Verify off. As fio's default `scramble_buffers=1` does, every write
/// buffer gets a fresh stamp (8 bytes at the start of every 4 KiB), so a
/// device that keeps all-zero or repeated blocks specially (ram keeps
/// all-zero writes as holes) stores real data and reads copy real data.
/// A job with fio's dedupe or compress options gets its buffers from
/// [`Content`] instead.
#[derive(Default)]
pub struct NoVerify {
    stamp: u64,
    content: Option<Content>,
}

impl NoVerify {
    /// Write buffers made by `content` (fio's dedupe and compress
    /// options), not stamped.
    pub fn with_content(content: Content) -> NoVerify {
        NoVerify {
            stamp: 0,
            content: Some(content),
        }
    }
}

impl Hook for NoVerify {
    #[inline]
    fn prepare(&mut self, bio: &mut Bio) {
        if bio.op() == mqblk::Op::Write {
            if let Some(c) = &mut self.content {
                c.fill(bio);
                return;
            }
            self.stamp = self.stamp.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let v = (self.stamp | 1).to_le_bytes();
            for s in bio.segments_mut() {
                for page in s.as_mut_slice().chunks_mut(4096) {
                    let n = page.len().min(8);
                    page[..n].copy_from_slice(&v[..n]);
                }
            }
        }
    }
}

/// Where a verifier works and what it writes.
#[derive(Clone, Debug)]
pub struct VerifySpec {
    /// `verify=`.
    pub kind: VerifyKind,
    /// Block (I/O) size.
    pub bs: u64,
    /// `verify_interval=` (a header every this many bytes; default `bs`).
    pub interval: u64,
    /// `verify_pattern=`.
    pub pattern: Option<VerifyPattern>,
    /// Device offset where the offset generator's draws start (`offset=`).
    pub draw_base: u64,
    /// Device offset of the first block of this job's slice.
    pub slice_base: u64,
    /// Blocks in the slice.
    pub blocks: u64,
    /// The writing job's number (in its headers).
    pub job: u16,
    /// The job's seed.
    pub job_seed: u64,
    /// `do_verify=`.
    pub do_verify: bool,
    /// `verify_fatal=`.
    pub fatal: bool,
    /// The job only reads: it checks headers for their offset.
    pub read_only: bool,
    /// `verify_backlog=` (0: verify after the writes).
    pub backlog: u64,
    /// `verify_backlog_batch=` (default the backlog).
    pub backlog_batch: u64,
    /// Most runs the record of what was written may hold.
    pub record_entries_max: usize,
}

/// Verify on: one job's view of its slice of the device.
pub struct Verifier {
    spec: VerifySpec,
    record: Record,
    /// Blocks with I/O in flight (at most the job's iodepth).
    busy: Vec<u64>,
    next_generation: u32,
    /// Percent of writes that become discards, then write-zeroes.
    trim_pct: u8,
    zero_pct: u8,
    /// `trim_verify_zero=1`: a discarded block must read as zeros.
    trim_verify_zero: bool,
    /// Draws for the mix (xorshift64).
    mix_rng: u64,
    /// `verify_backlog`: blocks written since the last read-back, and the
    /// blocks to read back now.
    written: VecDeque<u64>,
    to_read: VecDeque<u64>,
    /// The op `retarget` just gave is a read-back of `to_read`'s front.
    reading_back: bool,
    scratch: Vec<u8>,
    result: VerifyResult,
}

impl Verifier {
    /// A verifier for `spec`.
    pub fn new(spec: VerifySpec) -> Verifier {
        let bs = spec.bs as usize;
        let backlog = spec.backlog as usize;
        Verifier {
            record: Record::new(spec.record_entries_max),
            busy: Vec::new(),
            next_generation: 1,
            trim_pct: 0,
            zero_pct: 0,
            trim_verify_zero: false,
            mix_rng: splitmix(spec.job_seed ^ 0x006d_6978),
            written: VecDeque::with_capacity(backlog),
            to_read: VecDeque::with_capacity(spec.backlog_batch as usize),
            reading_back: false,
            scratch: vec![0; bs],
            result: VerifyResult {
                kind: spec.kind.name(),
                ..VerifyResult::default()
            },
            spec,
        }
    }

    /// Turn `trim_pct` percent of the writes into discards and `zero_pct`
    /// percent into write-zeroes; `trim_verify_zero` asks discarded blocks
    /// to read as zeros.
    pub fn with_mix(mut self, trim_pct: u8, zero_pct: u8, trim_verify_zero: bool) -> Verifier {
        debug_assert!(u32::from(trim_pct) + u32::from(zero_pct) <= 100);
        self.trim_pct = trim_pct;
        self.zero_pct = zero_pct;
        self.trim_verify_zero = trim_verify_zero;
        self
    }

    fn is_busy(&self, b: u64) -> bool {
        self.busy.contains(&b)
    }

    fn set_busy(&mut self, b: u64, on: bool) {
        if on {
            self.busy.push(b);
        } else if let Some(i) = self.busy.iter().position(|&x| x == b) {
            self.busy.swap_remove(i);
        }
    }

    fn offset_of(&self, block: u64) -> u64 {
        self.spec.slice_base + block * self.spec.bs
    }

    fn seed_of(&self, block: u64, generation: u32, interval: u64) -> u64 {
        let abs = self.offset_of(block) / self.spec.bs;
        splitmix(
            self.spec.job_seed
                ^ abs.wrapping_mul(0x9e37_79b9)
                ^ u64::from(generation) << 40
                ^ interval.wrapping_mul(0xd6e8_feb8_6659_fd93),
        )
    }

    fn expected(&self, block: u64, generation: u32, interval: u64) -> Header {
        Header {
            magic: MAGIC,
            kind: self.spec.kind.code(),
            len: self.spec.interval as u32,
            offset: self.offset_of(block) + interval * self.spec.interval,
            seed: self.seed_of(block, generation, interval),
            generation,
            job: self.spec.job,
            crc: 0,
        }
    }

    /// Fill `buf` (one block) with what `block` holds at `generation`.
    fn fill_block(&self, buf: &mut [u8], block: u64, generation: u32) {
        let kind = self.spec.kind;
        let offset = self.offset_of(block);
        if let Some(p) = &self.spec.pattern {
            p.fill(buf, 0, offset);
        }
        if !kind.has_header() {
            return;
        }
        let iv = self.spec.interval as usize;
        for (i, chunk) in buf.chunks_mut(iv).enumerate() {
            let mut h = self.expected(block, generation, i as u64);
            if self.spec.pattern.is_none() {
                fill_data(&mut chunk[kind.data_start()..], h.seed);
            }
            chunk[HEADER_BYTES..kind.data_start()].fill(0);
            h.encode(&mut chunk[..HEADER_BYTES]);
            kind.seal(chunk, &mut h);
        }
    }

    /// Write `block` at `generation` into the bio.
    fn fill(&mut self, bio: &mut Bio, block: u64, generation: u32) {
        if bio.segments().len() == 1 {
            self.fill_block(bio.segments_mut()[0].as_mut_slice(), block, generation);
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        self.fill_block(&mut scratch, block, generation);
        let mut at = 0;
        for s in bio.segments_mut() {
            let d = s.as_mut_slice();
            d.copy_from_slice(&scratch[at..at + d.len()]);
            at += d.len();
        }
        self.scratch = scratch;
    }

    /// Check a block read into `bio` against what it should hold.
    fn check(&mut self, bio: &Bio, block: u64, expect: Expect) {
        if expect == Expect::Unchecked {
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let data: &[u8] = if bio.segments().len() == 1 {
            bio.segments()[0].as_slice()
        } else {
            let mut at = 0;
            for s in bio.segments() {
                let d = s.as_slice();
                scratch[at..at + d.len()].copy_from_slice(d);
                at += d.len();
            }
            &scratch
        };
        self.result.blocks_verified += 1;
        let zeros = data.iter().all(|&b| b == 0);
        let fault = match expect {
            _ if zeros => match expect {
                Expect::Zeros => None,
                Expect::ZerosOr(_) if !self.trim_verify_zero => None,
                Expect::AnyOrZeros => {
                    if self.spec.read_only {
                        self.result.blocks_unwritten += 1;
                    }
                    None
                }
                Expect::ZerosOr(_) => None,
                _ => Some(self.block_fault(data, block, expect)),
            },
            Expect::Zeros => Some((
                0,
                "not zeros (the block was written with write-zeroes)",
                Header::default(),
            )),
            Expect::ZerosOr(_) if self.trim_verify_zero => Some((
                0,
                "not zeros (the block was discarded, and trim_verify_zero=1)",
                Header::default(),
            )),
            _ => Some(self.block_fault(data, block, expect)),
        };
        if let Some((interval, reason, expected)) = fault.filter(|f| !f.1.is_empty()) {
            let kind = self.spec.kind;
            let iv = self.spec.interval as usize;
            let chunk = &data[interval as usize * iv..(interval as usize + 1) * iv];
            let actual = if kind.has_header() {
                Header::decode(chunk)
            } else {
                Header::default()
            };
            let mut sum = [0u8; 32];
            let n = kind.sum(chunk, &mut sum);
            let expected = self.sealed(block, interval, expected);
            self.result.errors += 1;
            if self.result.mismatches.len() < MISMATCHES_KEPT {
                self.result.mismatches.push(Mismatch {
                    offset: self.offset_of(block) + interval * self.spec.interval,
                    reason,
                    expected,
                    actual,
                    computed: format!("{} {}", kind.name(), hex(kind, &sum[..n])),
                });
            }
            if self.spec.fatal {
                self.result.stopped = true;
            }
        }
        self.scratch = scratch;
    }

    /// `expected` with the checksum the interval it names would carry:
    /// its header and data written again, and sealed (a mismatch shows the
    /// checksum it should have found).
    fn sealed(&self, block: u64, interval: u64, mut expected: Header) -> Header {
        let kind = self.spec.kind;
        if expected.magic != MAGIC || kind != VerifyKind::Crc32c {
            return expected;
        }
        let iv = self.spec.interval as usize;
        let mut want = vec![0u8; iv];
        if let Some(p) = &self.spec.pattern {
            // The pattern runs on from the block's start.
            let mut whole = vec![0u8; (interval as usize + 1) * iv];
            p.fill(&mut whole, 0, self.offset_of(block));
            want.copy_from_slice(&whole[interval as usize * iv..]);
        } else {
            fill_data(&mut want[kind.data_start()..], expected.seed);
        }
        expected.crc = 0;
        expected.encode(&mut want[..HEADER_BYTES]);
        kind.seal(&mut want, &mut expected);
        expected
    }

    /// The first fault of a block that is not zeros: (interval, reason,
    /// expected header); an empty reason when it is sound.
    fn block_fault(&self, data: &[u8], block: u64, expect: Expect) -> (u64, &'static str, Header) {
        let kind = self.spec.kind;
        let iv = self.spec.interval as usize;
        let offset = self.offset_of(block);
        if let (Some(p), false) = (&self.spec.pattern, kind.has_header()) {
            if let Some(at) = p.first_difference(data, 0, offset) {
                return (
                    (at / iv) as u64,
                    "pattern mismatch (verify_pattern)",
                    Header::default(),
                );
            }
            return (0, "", Header::default());
        }
        let generation = match expect {
            Expect::Generation(g) | Expect::ZerosOr(g) => Some(g),
            _ => None,
        };
        for (i, chunk) in data.chunks(iv).enumerate() {
            let i = i as u64;
            let actual = Header::decode(chunk);
            let mut expected = self.expected(block, generation.unwrap_or(0), i);
            if generation.is_none() {
                // Whoever wrote it, it must be a valid block for this
                // offset.
                expected.seed = actual.seed;
                expected.generation = actual.generation;
                expected.job = actual.job;
            }
            let mut sum = [0u8; 32];
            let n = kind.sum(chunk, &mut sum);
            let mut crc = [0u8; 4];
            let sum_ok = kind.stored(chunk, &actual, &mut crc) == &sum[..n];
            let reason = if actual.magic != MAGIC {
                "bad magic (no verify header)"
            } else if actual.offset != expected.offset {
                "wrong offset (data from another block)"
            } else if actual.len != expected.len || actual.kind != expected.kind {
                "wrong length or verify type"
            } else if actual.generation != expected.generation
                || actual.job != expected.job
                || actual.seed != expected.seed
            {
                "stale data (not the last write)"
            } else if !sum_ok {
                match kind {
                    VerifyKind::Md5 => "bad md5 (data corrupted)",
                    VerifyKind::Sha256 => "bad sha256 (data corrupted)",
                    _ => "bad crc32c (data corrupted)",
                }
            } else if let Some(p) = &self.spec.pattern {
                let from = i as usize * iv;
                let within = &data[..from + chunk.len()];
                if p.first_difference(within, from + kind.data_start(), offset)
                    .is_some()
                {
                    "pattern mismatch (verify_pattern)"
                } else {
                    ""
                }
            } else {
                ""
            };
            if !reason.is_empty() {
                return (i, reason, expected);
            }
        }
        (0, "", Header::default())
    }

    /// The block of the slice a prepared bio is aimed at (`offset_of`
    /// inverted); a bio outside the slice gives a block past its end.
    fn block_of(&self, bio: &Bio) -> u64 {
        (bio.offset_bytes().wrapping_sub(self.spec.slice_base) / self.spec.bs).min(self.spec.blocks)
    }

    /// The generation a prepared write carries (0 for other I/O).
    fn generation_of(bio: &Bio) -> u32 {
        (bio.private & HOOK_PRIVATE_MASK) as u32
    }

    /// What a block should hold now.
    fn expect(&self, block: u64) -> Expect {
        if self.spec.read_only {
            return Expect::AnyOrZeros;
        }
        self.record.expect(block).unwrap_or(Expect::Unchecked)
    }
}

impl Hook for Verifier {
    fn blocks(&self, _blocks: u64) -> u64 {
        self.spec.blocks
    }

    fn retarget(&mut self, op: Op) -> Op {
        if self.to_read.front().is_some_and(|&b| !self.is_busy(b)) {
            self.reading_back = true;
            return Op::Read;
        }
        if op != Op::Write || self.trim_pct == 0 && self.zero_pct == 0 {
            return op;
        }
        let mut x = self.mix_rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.mix_rng = x;
        let draw = (x % 100) as u8;
        if draw < self.trim_pct {
            Op::Discard
        } else if draw < self.trim_pct + self.zero_pct {
            Op::WriteZeroes
        } else {
            Op::Write
        }
    }

    fn prepare(&mut self, bio: &mut Bio) {
        let mut block = if std::mem::take(&mut self.reading_back) && bio.op() == Op::Read {
            self.to_read.pop_front().unwrap_or(0)
        } else {
            // The generator drew a block of the slice.
            (bio.offset_bytes().saturating_sub(self.spec.draw_base) / self.spec.bs)
                % self.spec.blocks
        };
        // Step past busy blocks (at most iodepth are busy, and the slice
        // is larger).
        let mut tries = 0u64;
        while self.is_busy(block) && tries < self.spec.blocks {
            block = if block + 1 == self.spec.blocks {
                0
            } else {
                block + 1
            };
            tries += 1;
        }
        self.set_busy(block, true);
        bio.set_offset_bytes(self.offset_of(block));
        let generation = if bio.op() == Op::Write {
            let g = self.next_generation;
            self.next_generation = g.wrapping_add(1).max(1);
            self.fill(bio, block, g);
            g
        } else {
            0
        };
        bio.private = (bio.private & !HOOK_PRIVATE_MASK) | u64::from(generation);
    }

    fn cancel(&mut self, bio: &Bio) {
        let block = self.block_of(bio);
        self.set_busy(block, false);
    }

    fn complete(&mut self, c: &Completion<'_>) {
        let bio = c.bio();
        let block = self.block_of(bio);
        if block >= self.spec.blocks {
            return;
        }
        self.set_busy(block, false);
        let ok = c.status().is_ok();
        let event = match bio.op() {
            Op::Write if ok => {
                self.result.blocks_written += 1;
                if self.spec.backlog > 0 {
                    self.written.push_back(block);
                    if self.written.len() as u64 >= self.spec.backlog {
                        // Read back the batch (oldest first); a batch
                        // larger than the backlog reads some twice.
                        let batch = self.spec.backlog_batch as usize;
                        for i in 0..batch {
                            let b = self.written[i % self.written.len()];
                            self.to_read.push_back(b);
                        }
                        self.written.clear();
                    }
                }
                Event::Write(Self::generation_of(bio))
            }
            Op::WriteZeroes if ok => {
                self.result.blocks_zeroed += 1;
                Event::Zero
            }
            Op::Discard if ok => {
                self.result.blocks_trimmed += 1;
                Event::Trim
            }
            Op::Write | Op::WriteZeroes | Op::Discard => Event::Failed,
            Op::Read if ok => {
                let expect = self.expect(block);
                self.check(bio, block, expect);
                return;
            }
            _ => return,
        };
        self.record.record(block, event);
        self.result.loose = self.record.merged();
    }

    fn stopped(&self) -> bool {
        self.result.stopped
    }

    fn verify_phase(&mut self, ctx: &mut Context, free: &mut Vec<Bio>) {
        if !self.spec.do_verify || self.spec.read_only || self.result.stopped {
            return;
        }
        let mut next = 0u64;
        let mut me = std::mem::replace(self, Verifier::placeholder());
        loop {
            // Aim every free bio at the next written block.
            while let Some(mut bio) = free.pop() {
                let found = if me.result.stopped {
                    None
                } else {
                    me.record.next_checkable(next)
                };
                let Some((block, _)) = found.filter(|&(b, _)| b < me.spec.blocks) else {
                    free.push(bio);
                    break;
                };
                bio.set_op(Op::Read);
                bio.set_offset_bytes(me.offset_of(block));
                bio.private &= !HOOK_PRIVATE_MASK;
                me.set_busy(block, true);
                next = block + 1;
                if let Err(e) = ctx.submit(bio) {
                    let bio = e.into_bio();
                    me.cancel(&bio);
                    next = block;
                    free.push(bio);
                    break;
                }
            }
            if ctx.in_flight() == 0 && ctx.ready() == 0 {
                break;
            }
            ctx.poll_wait(1, |c| {
                if c.bio().op() == Op::Read && c.status().is_ok() {
                    let block = me.block_of(c.bio());
                    me.set_busy(block, false);
                    let expect = me.expect(block);
                    me.check(c.bio(), block, expect);
                } else {
                    me.complete(&c);
                }
                free.push(c.into_bio());
            });
        }
        *self = me;
    }

    fn result(&mut self) -> Option<VerifyResult> {
        Some(std::mem::take(&mut self.result))
    }
}

impl Verifier {
    fn placeholder() -> Verifier {
        Verifier::new(VerifySpec {
            kind: VerifyKind::Crc32c,
            bs: 512,
            interval: 512,
            pattern: None,
            draw_base: 0,
            slice_base: 0,
            blocks: 0,
            job: 0,
            job_seed: 0,
            do_verify: false,
            fatal: false,
            read_only: false,
            backlog: 0,
            backlog_batch: 0,
            record_entries_max: 2,
        })
    }
}

/// Refuse a run whose verify cannot work: a device that keeps no data.
pub fn check_jobs(jobs: &[JobSpec]) -> anyhow::Result<()> {
    for job in jobs.iter().filter(|j| j.verify.is_some()) {
        for spec in &job.devices {
            if let Some(why) = refuse_device(spec) {
                anyhow::bail!("job {}: {why}", job.name);
            }
        }
    }
    Ok(())
}

/// The verifier of job `index` of the run, if its job verifies. Writing
/// jobs of one stonewall group (`groups[i]`) on the same device verify
/// disjoint slices of their region.
pub fn for_job(
    plan: &[(JobSpec, Device)],
    groups: &[usize],
    index: usize,
    region_bytes: u64,
) -> anyhow::Result<Option<Verifier>> {
    let (job, dev) = &plan[index];
    let Some(kind) = job.verify else {
        return Ok(None);
    };
    if u32::from(job.trim_percentage) + u32::from(job.write_zeroes_percentage) > 100 {
        anyhow::bail!(
            "job {}: trim_percentage={} and write_zeroes_percentage={} add up to more than 100",
            job.name,
            job.trim_percentage,
            job.write_zeroes_percentage
        );
    }
    if job.trim_percentage > 0 && !dev.info().features.discard {
        anyhow::bail!(
            "job {}: trim_percentage={} discards, and device {} does not support discard",
            job.name,
            job.trim_percentage,
            dev.name()
        );
    }
    let interval = job.verify_interval.unwrap_or(job.bs);
    if kind == VerifyKind::Pattern && job.verify_pattern.is_none() {
        anyhow::bail!(
            "job {}: verify=pattern checks verify_pattern=, and there is none",
            job.name
        );
    }
    let header_min = (2 * kind.data_start()).max(1) as u64;
    if interval == 0
        || !job.bs.is_multiple_of(interval)
        || (kind.has_header() && interval < header_min)
    {
        anyhow::bail!(
            "job {}: verify_interval={interval} must divide bs={} and hold twice the header ({header_min} bytes)",
            job.name,
            job.bs
        );
    }
    let region_blocks = region_bytes / job.bs;
    let read_only = job.rw.read_percent(job.rwmixread) == 100;
    let writes = |j: &JobSpec| j.verify.is_some() && j.rw.read_percent(j.rwmixread) < 100;
    let same = |i: usize| {
        plan[i].1.name() == dev.name() && groups[i] == groups[index] && writes(&plan[i].0)
    };
    let (slices, slice) = if read_only {
        (1, 0)
    } else {
        (
            (0..plan.len()).filter(|&i| same(i)).count() as u64,
            (0..index).filter(|&i| same(i)).count() as u64,
        )
    };
    // A slice starts a whole number of the job's steps (bs plus a hole of
    // rw=write:N) from its region's start, so that where the job's I/O
    // falls against the device's boundaries is as the job file says.
    let step_blocks = if !job.rw.is_random() && job.seq_stride > 0 {
        (job.bs + job.seq_stride as u64).div_ceil(job.bs)
    } else {
        1
    };
    let per = region_blocks / slices.max(1) / step_blocks * step_blocks;
    if per == 0 {
        anyhow::bail!(
            "job {}: verify gives each of the {slices} jobs on {} its own slice, and {} blocks \
             of {} bytes do not go round",
            job.name,
            dev.name(),
            region_blocks,
            job.bs
        );
    }
    let seed = job.randseed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let backlog_batch = job.verify_backlog_batch.unwrap_or(job.verify_backlog);
    let writers = groups
        .iter()
        .filter(|&&g| g == groups[index])
        .count()
        .max(1);
    let v = Verifier::new(VerifySpec {
        kind,
        bs: job.bs,
        interval,
        pattern: job.verify_pattern.clone(),
        draw_base: job.offset,
        slice_base: job.offset + slice * per * job.bs,
        blocks: per,
        job: index as u16,
        job_seed: seed,
        do_verify: job.do_verify,
        // continue_on_error=verify (or all) goes on past a mismatch, as
        // fio's does even with verify_fatal=1.
        fatal: job.verify_fatal && !job.continue_on_error.verify,
        read_only,
        backlog: job.verify_backlog,
        backlog_batch,
        record_entries_max: (RECORD_ENTRIES_MAX / writers).max(1 << 12),
    });
    Ok(Some(v.with_mix(
        job.trim_percentage,
        job.write_zeroes_percentage,
        job.trim_verify_zero,
    )))
}

/// Why a device spec cannot be verified, if it cannot: the null device
/// keeps no data unless `memory_backed=1`.
pub fn refuse_device(spec: &str) -> Option<String> {
    let parsed = mqblk::spec::parse(spec).ok()?;
    if !matches!(parsed.kind.as_str(), "null" | "nullb") {
        return None;
    }
    let mut o = parsed.options;
    match o.take_bool("memory_backed") {
        Ok(Some(true)) => None,
        _ => Some(format!(
            "--verify needs a device that keeps its data; {spec:?} discards writes \
             (use null,memory_backed=1, ram, or file:)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: VerifyKind, blocks: u64) -> VerifySpec {
        VerifySpec {
            kind,
            bs: 4096,
            interval: 4096,
            pattern: None,
            draw_base: 0,
            slice_base: 0,
            blocks,
            job: 3,
            job_seed: 42,
            do_verify: true,
            fatal: false,
            read_only: false,
            backlog: 0,
            backlog_batch: 0,
            record_entries_max: 1 << 10,
        }
    }

    fn verifier(kind: VerifyKind) -> Verifier {
        Verifier::new(spec(kind, 16))
    }

    fn written(v: &mut Verifier, block: u64) -> (Bio, u32) {
        let mut bio = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
        bio.set_offset_bytes(block * 4096);
        v.prepare(&mut bio);
        let g = Verifier::generation_of(&bio);
        v.set_busy(block, false);
        v.record.record(block, Event::Write(g));
        (bio, g)
    }

    #[test]
    fn header_round_trip_and_crc() {
        let mut v = verifier(VerifyKind::Crc32c);
        let mut bio = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
        bio.set_offset_bytes(5 * 4096);
        v.prepare(&mut bio);
        let block = v.block_of(&bio);
        assert_eq!(block, 5);
        let data = bio.segments()[0].as_slice();
        let h = Header::decode(data);
        assert_eq!(h.magic, MAGIC);
        assert_eq!(h.offset, 5 * 4096);
        assert_eq!(h.len, 4096);
        assert_eq!(h.job, 3);
        let mut sum = [0u8; 32];
        assert_eq!(VerifyKind::Crc32c.sum(data, &mut sum), 4);
        assert_eq!(h.crc.to_le_bytes(), sum[..4]);
        // A second prepare on the same block moves to the next free one.
        let mut other = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
        other.set_offset_bytes(5 * 4096);
        v.prepare(&mut other);
        assert_eq!(v.block_of(&other), 6);
        // The engine's half of `private` is left as it was.
        let mut third = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
        third.private = 0xdead << 32;
        v.prepare(&mut third);
        assert_eq!(third.private >> 32, 0xdead);
        assert_eq!(v.block_of(&third), 0);
        assert_ne!(Verifier::generation_of(&third), 0);
    }

    #[test]
    fn checks_catch_corruption_staleness_and_misplacement() {
        let mut v = verifier(VerifyKind::Crc32c);
        let (mut bio, g) = written(&mut v, 1);
        v.check(&bio, 1, Expect::Generation(g));
        assert_eq!(v.result.errors, 0);
        v.check(&bio, 1, Expect::Generation(g + 1));
        assert_eq!(
            v.result.mismatches[0].reason,
            "stale data (not the last write)"
        );
        v.check(&bio, 2, Expect::Generation(g));
        assert!(v.result.mismatches[1].reason.starts_with("wrong offset"));
        bio.segments_mut()[0].as_mut_slice()[100] ^= 1;
        v.check(&bio, 1, Expect::Generation(g));
        let m = &v.result.mismatches[2];
        assert!(m.reason.starts_with("bad crc32c"));
        assert!(m.to_string().contains("at offset 4096"), "{m}");
        assert_eq!(v.result.errors, 3);
    }

    #[test]
    fn md5_and_sha256_blocks_check_and_catch_corruption() {
        for kind in [VerifyKind::Md5, VerifyKind::Sha256] {
            let mut v = verifier(kind);
            let (mut bio, g) = written(&mut v, 2);
            let data = bio.segments()[0].as_slice();
            assert_eq!(Header::decode(data).kind, kind.code());
            v.check(&bio, 2, Expect::Generation(g));
            assert_eq!(v.result.errors, 0, "{kind:?}: {:?}", v.result.mismatches);
            bio.segments_mut()[0].as_mut_slice()[4000] ^= 0x80;
            v.check(&bio, 2, Expect::Generation(g));
            let m = &v.result.mismatches[0];
            assert_eq!(m.reason, format!("bad {} (data corrupted)", kind.name()));
            bio.segments_mut()[0].as_mut_slice()[4000] ^= 0x80;
            bio.segments_mut()[0].as_mut_slice()[HEADER_BYTES] ^= 1;
            v.check(&bio, 2, Expect::Generation(g));
            assert_eq!(v.result.errors, 2);
        }
    }

    #[test]
    fn zeroed_and_discarded_blocks_are_checked_by_what_they_may_hold() {
        let mut v = verifier(VerifyKind::Crc32c);
        let (bio, g) = written(&mut v, 3);
        let zeros = Bio::read_at(3 * 4096, mqblk::IoBuf::page_aligned(4096));
        v.check(&bio, 3, Expect::ZerosOr(g));
        v.check(&zeros, 3, Expect::ZerosOr(g));
        assert_eq!(v.result.errors, 0, "{:?}", v.result.mismatches);
        v.check(&zeros, 3, Expect::Zeros);
        assert_eq!(v.result.errors, 0);
        v.check(&bio, 3, Expect::Zeros);
        assert!(v.result.mismatches[0].reason.starts_with("not zeros"));
        let mut v = v.with_mix(10, 10, true);
        v.check(&bio, 3, Expect::ZerosOr(g));
        assert_eq!(v.result.errors, 2);
        assert!(v.result.mismatches[1].reason.contains("trim_verify_zero"));
        v.trim_verify_zero = false;
        v.check(&bio, 3, Expect::ZerosOr(g + 1));
        assert_eq!(
            v.result.mismatches[2].reason,
            "stale data (not the last write)"
        );
    }

    #[test]
    fn intervals_and_patterns_are_written_and_checked() {
        let mut s = spec(VerifyKind::Crc32c, 16);
        s.interval = 512;
        s.pattern = Some(VerifyPattern::parse("0xaa555aa5").unwrap());
        let mut v = Verifier::new(s.clone());
        let (mut bio, g) = written(&mut v, 4);
        let data = bio.segments()[0].as_slice();
        for i in 0..8 {
            let h = Header::decode(&data[i * 512..]);
            assert_eq!(h.offset, 4 * 4096 + i as u64 * 512);
            assert_eq!(h.len, 512);
        }
        assert_eq!(
            &data[HEADER_BYTES..HEADER_BYTES + 4],
            &[0xaa, 0x55, 0x5a, 0xa5]
        );
        v.check(&bio, 4, Expect::Generation(g));
        assert_eq!(v.result.errors, 0, "{:?}", v.result.mismatches);
        // A read-only job takes any valid header for the offset.
        s.read_only = true;
        let mut r = Verifier::new(s.clone());
        r.check(&bio, 4, Expect::AnyOrZeros);
        assert_eq!(r.result.errors, 0, "{:?}", r.result.mismatches);
        bio.segments_mut()[0].as_mut_slice()[1024 + 100] ^= 1;
        r.check(&bio, 4, Expect::AnyOrZeros);
        assert_eq!(r.result.mismatches[0].offset, 4 * 4096 + 1024);
        // verify=pattern: the pattern alone, with %o.
        s.kind = VerifyKind::Pattern;
        s.read_only = false;
        s.pattern = Some(VerifyPattern::parse("%o").unwrap());
        let mut p = Verifier::new(s);
        let (bio, g) = written(&mut p, 2);
        assert_eq!(
            &bio.segments()[0].as_slice()[8..16],
            &(2u64 * 4096).to_le_bytes()
        );
        p.check(&bio, 2, Expect::Generation(g));
        p.check(&bio, 3, Expect::Generation(g));
        assert_eq!(p.result.errors, 1);
        assert!(p.result.mismatches[0].reason.starts_with("pattern"));
    }

    #[test]
    fn a_backlog_reads_back_what_was_written_as_it_goes() {
        let mut s = spec(VerifyKind::Crc32c, 16);
        s.backlog = 2;
        s.backlog_batch = 2;
        let mut v = Verifier::new(s);
        for b in [5, 9] {
            let (_, g) = written(&mut v, b);
            // As a completion would.
            v.written.push_back(b);
            v.record.record(b, Event::Write(g));
        }
        // The engine's completion path fills to_read; do it by hand.
        v.to_read.extend(v.written.drain(..));
        assert_eq!(v.retarget(Op::Write), Op::Read);
        let mut bio = Bio::read_at(0, mqblk::IoBuf::page_aligned(4096));
        v.prepare(&mut bio);
        assert_eq!(bio.offset_bytes(), 5 * 4096);
    }

    #[test]
    fn the_mix_turns_writes_into_discards_and_write_zeroes_in_their_shares() {
        let mut v = verifier(VerifyKind::Crc32c).with_mix(20, 30, false);
        let mut n = [0u32; 3];
        for _ in 0..10_000 {
            match v.retarget(Op::Write) {
                Op::Write => n[0] += 1,
                Op::Discard => n[1] += 1,
                Op::WriteZeroes => n[2] += 1,
                op => panic!("{op:?}"),
            }
            assert_eq!(v.retarget(Op::Read), Op::Read);
        }
        assert!((4500..5500).contains(&n[0]), "{n:?}");
        assert!((1700..2300).contains(&n[1]), "{n:?}");
        assert!((2700..3300).contains(&n[2]), "{n:?}");
    }

    #[test]
    fn null_without_memory_is_refused() {
        assert!(refuse_device("null").is_some());
        assert!(refuse_device("null,size=1G").is_some());
        assert!(refuse_device("null,memory_backed=1").is_none());
        assert!(refuse_device("ram,size=1G").is_none());
    }
}
