//! The verifier: where each block's I/O goes, what a write fills it with,
//! and how a read back is checked against the record of its last write.

use std::collections::VecDeque;

use mqblk::{Bio, Completion, Context, Op};

use mqblk_fio::job::VerifyKind;

use super::header::KindLayout;
use super::header::{
    fill_data, header_crc_ok, hex, splitmix, Header, DIGEST_MAX, HEADER_BYTES, MAGIC,
};
use super::hook::{Hook, HOOK_PRIVATE_MASK};
use super::record::{Event, Expect, Record};
use super::result::{Found, Mismatch, VerifyResult, Writer, FOUND_BYTES_SHOWN, MISMATCHES_KEPT};
use mqblk_fio::verify_pattern::VerifyPattern;

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
            // A header is shown as one only where one was found; random
            // bytes are shown as bytes.
            let actual = Header::decode(chunk);
            let found = if !kind.has_header() || expected.magic != MAGIC {
                Found::Data
            } else if actual.magic == MAGIC {
                Found::Header(actual)
            } else {
                let mut first = [0u8; FOUND_BYTES_SHOWN];
                let n = chunk.len().min(FOUND_BYTES_SHOWN);
                first[..n].copy_from_slice(&chunk[..n]);
                Found::Bytes(first)
            };
            let writer = match (expect, &found) {
                (Expect::Generation(_) | Expect::ZerosOr(_), _) => Writer::Recorded,
                (_, Found::Header(_)) => Writer::AsFound,
                _ => Writer::Any,
            };
            let mut sum = [0u8; DIGEST_MAX];
            let n = kind.sum(chunk, &mut sum);
            let expected = self.sealed(block, interval, expected);
            self.result.errors += 1;
            if self.result.mismatches.len() < MISMATCHES_KEPT {
                self.result.mismatches.push(Mismatch {
                    offset: self.offset_of(block) + interval * self.spec.interval,
                    reason,
                    expected: (expected.magic == MAGIC).then_some(expected),
                    writer,
                    found,
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
            let mut sum = [0u8; DIGEST_MAX];
            let n = kind.sum(chunk, &mut sum);
            let sum_ok = kind.stored(chunk) == &sum[..n];
            let reason = if actual.magic != MAGIC {
                "bad magic (no verify header)"
            } else if !header_crc_ok(chunk, &actual) {
                "bad header crc32c (the header corrupted)"
            } else if actual.offset != expected.offset {
                "wrong offset (data from another block)"
            } else if actual.len != expected.len || !kind.accepts(actual.kind) {
                "wrong length or verify type"
            } else if actual.generation != expected.generation & 0xffff
                || actual.job != expected.job
                || actual.seed != expected.seed
            {
                "stale data (not the last write)"
            } else if !sum_ok {
                match kind {
                    VerifyKind::Md5 => "bad md5 (data corrupted)",
                    VerifyKind::Sha256 => "bad sha256 (data corrupted)",
                    VerifyKind::Sha1 => "bad sha1 (data corrupted)",
                    VerifyKind::XxHash => "bad xxhash (data corrupted)",
                    VerifyKind::Crc64 => "bad crc64 (data corrupted)",
                    VerifyKind::Crc32 => "bad crc32 (data corrupted)",
                    VerifyKind::Crc16 => "bad crc16 (data corrupted)",
                    VerifyKind::Crc7 => "bad crc7 (data corrupted)",
                    VerifyKind::Sha3_224 => "bad sha3-224 (data corrupted)",
                    VerifyKind::Sha3_256 => "bad sha3-256 (data corrupted)",
                    VerifyKind::Sha3_384 => "bad sha3-384 (data corrupted)",
                    VerifyKind::Sha3_512 => "bad sha3-512 (data corrupted)",
                    VerifyKind::Crc32c | VerifyKind::Pattern => "bad crc32c (data corrupted)",
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

    fn verify_phase(&mut self, ctx: &mut Context, free: &mut Vec<Bio>, aborted: &dyn Fn() -> bool) {
        if !self.spec.do_verify || self.spec.read_only || self.result.stopped {
            return;
        }
        let mut next = 0u64;
        let mut me = std::mem::replace(self, Verifier::placeholder());
        loop {
            if aborted() {
                me.result.interrupted = true;
                break;
            }
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
            // Bounded, so that a stop is seen while a throttle or the
            // device holds the reads.
            ctx.poll_wait_for(1, crate::stop::STOP_CHECK, |c| {
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

#[cfg(test)]
mod tests;
