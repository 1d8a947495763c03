//! Verified data (fio's `verify=`, `do_verify=`, `verify_fatal=`): every
//! block a job writes carries a header naming it, and is checked when it is
//! read back.
//!
//! The block layout, as fio's `struct verify_header` plus data:
//!
//! ```text
//!  0  magic u16 = 0xacca     2  verify type u8 (1 crc32c, 2 md5, 3 sha256)   3  0
//!  4  block length u32       8  device offset u64            16  seed u64
//! 24  generation u32        28  job u16                      30  0
//! 32  crc32c u32 of bytes [0, 32) and [D, len) (crc32c only, else 0)   36  0
//! 40  md5 (16 bytes) or sha256 (32 bytes) of bytes [0, 32) and [D, len)
//!  D  data: xorshift64* stream from the seed (D = 40, 56 or 72)
//! ```
//!
//! The seed is a function of (job, block, generation), so the expected
//! header of a block is known from the generation of its last completed
//! write alone: one u32 per block. A write-only job (`rw=write`,
//! `randwrite`) with `do_verify=1` reads every block it wrote back after
//! the measured phase (fio's verify phase); `randrw`/`rw` also check each
//! read of a block this job has written against its last write; a read-only
//! job checks that every block it reads carries a valid header for its
//! offset (data written by an earlier verify run). I/O to a block that has
//! I/O in flight is moved to the next free block (fio's
//! `serialize_overlap`), so the expected content is never ambiguous. Jobs
//! that share a device verify disjoint slices of it.
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

use std::fmt::Write as _;

use mqblk::{Bio, Completion, Context, Device, Op};

use super::job::{JobSpec, VerifyKind};

/// fio's verify header magic.
pub const MAGIC: u16 = 0xacca;
/// Bytes of the header at the start of each block.
pub const HEADER_BYTES: usize = 40;
/// Most blocks one job may track (4 bytes each): 64 Mi blocks.
pub const MAX_BLOCKS: u64 = 1 << 26;
/// Mismatches kept in detail per job (all are counted).
pub const MISMATCHES_KEPT: usize = 16;
/// Generation of a block whose last write failed: its content is unknown.
const GEN_UNKNOWN: u32 = u32::MAX;
/// Highest generation of a data write; the next one is 1 again.
const GEN_MAX: u32 = 0x3fff_ffff;
/// A block whose last write was a write-zeroes: it reads as zeros.
const GEN_ZERO: u32 = 0x4000_0000;
/// Flag on the state of a discarded block, over what it held before (a
/// generation or [`GEN_ZERO`]): it reads as zeros or as that.
const GEN_TRIMMED: u32 = 0x8000_0000;

// The layout side of the job's `verify=` kind: what each checksum writes
// where.
impl VerifyKind {
    fn code(self) -> u8 {
        match self {
            VerifyKind::Crc32c => 1,
            VerifyKind::Md5 => 2,
            VerifyKind::Sha256 => 3,
        }
    }

    /// Bytes of digest after the header (the crc32c lives in the header).
    fn digest_len(self) -> usize {
        match self {
            VerifyKind::Crc32c => 0,
            VerifyKind::Md5 => 16,
            VerifyKind::Sha256 => 32,
        }
    }

    /// Where a block's data starts.
    pub fn data_start(self) -> usize {
        HEADER_BYTES + self.digest_len()
    }

    /// The checksum of `block` (header bytes before the crc, and the data),
    /// into `out`; returns its length. A crc32c is 4 little-endian bytes.
    fn sum(self, block: &[u8], out: &mut [u8; 32]) -> usize {
        use sha2::Digest as _;
        let data = &block[self.data_start()..];
        match self {
            VerifyKind::Crc32c => {
                let c = crc32c::crc32c_append(crc32c::crc32c(&block[..32]), data);
                out[..4].copy_from_slice(&c.to_le_bytes());
                4
            }
            VerifyKind::Md5 => {
                let mut h = md5::Md5::new();
                h.update(&block[..32]);
                h.update(data);
                out[..16].copy_from_slice(&h.finalize());
                16
            }
            VerifyKind::Sha256 => {
                let mut h = sha2::Sha256::new();
                h.update(&block[..32]);
                h.update(data);
                out[..32].copy_from_slice(&h.finalize());
                32
            }
        }
    }

    /// Seal a block whose header (with crc 0) and data are in place.
    fn seal(self, block: &mut [u8], h: &mut Header) {
        let mut sum = [0u8; 32];
        let n = self.sum(block, &mut sum);
        if self == VerifyKind::Crc32c {
            h.crc = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
            h.encode(&mut block[..HEADER_BYTES]);
        } else {
            block[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(&sum[..n]);
        }
    }

    /// The checksum stored in a block.
    fn stored<'a>(self, block: &'a [u8], h: &Header, crc: &'a mut [u8; 4]) -> &'a [u8] {
        if self == VerifyKind::Crc32c {
            *crc = h.crc.to_le_bytes();
            &crc[..]
        } else {
            &block[HEADER_BYTES..self.data_start()]
        }
    }
}

/// Lower-case hex of `bytes` (a crc32c's 4 bytes as the number they are).
fn hex(kind: VerifyKind, bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len() + 2);
    if kind == VerifyKind::Crc32c && bytes.len() == 4 {
        let v = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        let _ = write!(s, "{v:#010x}");
    } else {
        for b in bytes {
            let _ = write!(s, "{b:02x}");
        }
    }
    s
}

/// A block header, as written or as read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`] if this is a verify block.
    pub magic: u16,
    /// Verify type code.
    pub kind: u8,
    /// Block length.
    pub len: u32,
    /// Device offset the block was written at.
    pub offset: u64,
    /// Seed of the data.
    pub seed: u64,
    /// Generation: the writing job's count of writes.
    pub generation: u32,
    /// Writing job.
    pub job: u16,
    /// Stored checksum.
    pub crc: u32,
}

impl Header {
    fn encode(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.magic.to_le_bytes());
        out[2] = self.kind;
        out[3] = 0;
        out[4..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..16].copy_from_slice(&self.offset.to_le_bytes());
        out[16..24].copy_from_slice(&self.seed.to_le_bytes());
        out[24..28].copy_from_slice(&self.generation.to_le_bytes());
        out[28..30].copy_from_slice(&self.job.to_le_bytes());
        out[30..32].fill(0);
        out[32..36].copy_from_slice(&self.crc.to_le_bytes());
        out[36..40].fill(0);
    }

    fn decode(b: &[u8]) -> Header {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Header {
            magic: u16_at(0),
            kind: b[2],
            len: u32_at(4),
            offset: u64_at(8),
            seed: u64_at(16),
            generation: u32_at(24),
            job: u16_at(28),
            crc: u32_at(32),
        }
    }
}

impl std::fmt::Display for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{magic={:#06x} len={} offset={} seed={:#018x} generation={} job={} crc32c={:#010x}}}",
            self.magic, self.len, self.offset, self.seed, self.generation, self.job, self.crc
        )
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Fill `data` from `seed` (xorshift64*).
fn fill_data(data: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in data.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

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
}

impl VerifyResult {
    /// fio-style lines for the normal report.
    pub fn describe(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "  verify       : {}, {} blocks written{}, {} verified, {} errors{}",
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
#[derive(Default)]
pub struct NoVerify {
    stamp: u64,
}

impl Hook for NoVerify {
    #[inline]
    fn prepare(&mut self, bio: &mut Bio) {
        if bio.op() == mqblk::Op::Write {
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

/// Verify on: one job's view of its slice of the device.
pub struct Verifier {
    kind: VerifyKind,
    bs: u64,
    /// First block of the job's slice.
    base_block: u64,
    /// Blocks in the slice.
    blocks: u64,
    /// Generation of the last completed write per block (0: never).
    generation: Vec<u32>,
    /// I/O in flight per block.
    busy: Vec<u64>,
    next_generation: u32,
    job: u16,
    job_seed: u64,
    do_verify: bool,
    fatal: bool,
    /// Only reads: check headers for self-consistency.
    read_only: bool,
    /// Percent of writes that become discards, then write-zeroes.
    trim_pct: u8,
    zero_pct: u8,
    /// `trim_verify_zero=1`: a discarded block must read as zeros.
    trim_verify_zero: bool,
    /// Draws for the mix (xorshift64).
    mix_rng: u64,
    scratch: Vec<u8>,
    result: VerifyResult,
}

impl Verifier {
    /// A verifier for job `job` with block size `bs`, over slice `slice`
    /// of `slices` of a region of `region_blocks` blocks.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: VerifyKind,
        bs: u64,
        region_blocks: u64,
        slice: u64,
        slices: u64,
        job: u16,
        job_seed: u64,
        do_verify: bool,
        fatal: bool,
        read_only: bool,
    ) -> Verifier {
        let per = region_blocks / slices.max(1);
        let blocks = per.max(1);
        Verifier {
            kind,
            bs,
            base_block: slice * per,
            blocks,
            generation: vec![0; blocks as usize],
            busy: vec![0; (blocks as usize).div_ceil(64)],
            next_generation: 1,
            job,
            job_seed,
            do_verify,
            fatal,
            read_only,
            trim_pct: 0,
            zero_pct: 0,
            trim_verify_zero: false,
            mix_rng: splitmix(job_seed ^ 0x006d_6978),
            scratch: vec![0; bs as usize],
            result: VerifyResult {
                kind: kind.name(),
                ..VerifyResult::default()
            },
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
        self.busy[(b / 64) as usize] & (1 << (b % 64)) != 0
    }

    fn set_busy(&mut self, b: u64, on: bool) {
        let w = &mut self.busy[(b / 64) as usize];
        if on {
            *w |= 1 << (b % 64);
        } else {
            *w &= !(1 << (b % 64));
        }
    }

    fn seed_of(&self, block: u64, generation: u32) -> u64 {
        splitmix(self.job_seed ^ block.wrapping_mul(0x9e37_79b9) ^ u64::from(generation) << 40)
    }

    fn offset_of(&self, block: u64) -> u64 {
        (self.base_block + block) * self.bs
    }

    fn expected(&self, block: u64, generation: u32) -> Header {
        Header {
            magic: MAGIC,
            kind: self.kind.code(),
            len: self.bs as u32,
            offset: self.offset_of(block),
            seed: self.seed_of(block, generation),
            generation,
            job: self.job,
            crc: 0,
        }
    }

    /// Write the header and data of `block` at `generation` into the bio.
    fn fill(&mut self, bio: &mut Bio, block: u64, generation: u32) {
        let mut h = self.expected(block, generation);
        let single = bio.segments().len() == 1;
        let mut scratch = std::mem::take(&mut self.scratch);
        {
            let buf: &mut [u8] = if single {
                bio.segments_mut()[0].as_mut_slice()
            } else {
                &mut scratch
            };
            fill_data(&mut buf[self.kind.data_start()..], h.seed);
            h.encode(&mut buf[..HEADER_BYTES]);
            self.kind.seal(buf, &mut h);
        }
        if !single {
            let mut at = 0;
            for s in bio.segments_mut() {
                let d = s.as_mut_slice();
                d.copy_from_slice(&scratch[at..at + d.len()]);
                at += d.len();
            }
        }
        self.scratch = scratch;
    }

    /// Check a block read into `bio` against `state`: a generation (0:
    /// header only, for a read-only job), [`GEN_ZERO`], or a discarded
    /// block's state.
    fn check(&mut self, bio: &Bio, block: u64, state: u32) {
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
        let trimmed = state & GEN_TRIMMED != 0;
        let before = state & !GEN_TRIMMED;
        if zeros && (before == GEN_ZERO || trimmed) {
            // Zeroed, or discarded by a device that zeroes.
            self.scratch = scratch;
            return;
        }
        let kind = self.kind;
        let actual = Header::decode(&data[..HEADER_BYTES]);
        let mut sum = [0u8; 32];
        let n = kind.sum(data, &mut sum);
        let mut crc = [0u8; 4];
        let sum_ok = kind.stored(data, &actual, &mut crc) == &sum[..n];
        let generation = if before == GEN_ZERO { 0 } else { before };
        let mut expected = self.expected(block, generation);
        if state == 0 {
            // Read-only check: whoever wrote it, it must be a valid block
            // for this offset.
            expected.seed = actual.seed;
            expected.generation = actual.generation;
            expected.job = actual.job;
        }
        let reason = if before == GEN_ZERO {
            Some("not zeros (the block was written with write-zeroes)")
        } else if trimmed && self.trim_verify_zero {
            Some("not zeros (the block was discarded, and trim_verify_zero=1)")
        } else if actual.magic != MAGIC {
            Some("bad magic (no verify header)")
        } else if actual.offset != expected.offset {
            Some("wrong offset (data from another block)")
        } else if actual.len != expected.len || actual.kind != expected.kind {
            Some("wrong length or verify type")
        } else if actual.generation != expected.generation
            || actual.job != expected.job
            || actual.seed != expected.seed
        {
            Some("stale data (not the last write)")
        } else if !sum_ok {
            Some(match kind {
                VerifyKind::Crc32c => "bad crc32c (data corrupted)",
                VerifyKind::Md5 => "bad md5 (data corrupted)",
                VerifyKind::Sha256 => "bad sha256 (data corrupted)",
            })
        } else {
            None
        };
        if let Some(reason) = reason {
            let computed = format!("{} {}", kind.name(), hex(kind, &sum[..n]));
            if before != GEN_ZERO {
                // What the block should hold: its header and the data its
                // seed generates, and their checksum.
                let want = &mut scratch[..];
                want.fill(0);
                fill_data(&mut want[kind.data_start()..], expected.seed);
                expected.encode(&mut want[..HEADER_BYTES]);
                kind.seal(want, &mut expected);
            } else {
                expected = Header::default();
            }
            self.result.errors += 1;
            if self.result.mismatches.len() < MISMATCHES_KEPT {
                self.result.mismatches.push(Mismatch {
                    offset: self.offset_of(block),
                    reason,
                    expected,
                    actual,
                    computed,
                });
            }
            if self.fatal {
                self.result.stopped = true;
            }
        }
        self.scratch = scratch;
    }

    /// Whether a block in `state` has content to check.
    fn checkable(state: u32) -> bool {
        state != 0 && state != GEN_UNKNOWN
    }

    /// The block of the slice a prepared bio is aimed at (`offset_of`
    /// inverted); a bio outside the slice gives a block past its end.
    fn block_of(&self, bio: &Bio) -> u64 {
        (bio.offset_bytes() / self.bs).wrapping_sub(self.base_block)
    }

    /// The generation a prepared write carries (0 for other I/O).
    fn generation_of(bio: &Bio) -> u32 {
        (bio.private & HOOK_PRIVATE_MASK) as u32
    }
}

impl Hook for Verifier {
    fn blocks(&self, _blocks: u64) -> u64 {
        self.blocks
    }

    fn retarget(&mut self, op: Op) -> Op {
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
        // The generator drew a block of the slice; step past busy ones
        // (at most iodepth are busy, and the slice is larger).
        let mut block = (bio.offset_bytes() / self.bs) % self.blocks;
        let mut tries = 0u64;
        while self.is_busy(block) && tries < self.blocks {
            block = if block + 1 == self.blocks {
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
            self.next_generation = if g == GEN_MAX { 1 } else { g + 1 };
            self.fill(bio, block, g);
            g
        } else {
            0
        };
        bio.private = (bio.private & !HOOK_PRIVATE_MASK) | u64::from(generation);
    }

    fn cancel(&mut self, bio: &Bio) {
        let block = self.block_of(bio);
        if block < self.blocks {
            self.set_busy(block, false);
        }
    }

    fn complete(&mut self, c: &Completion<'_>) {
        let bio = c.bio();
        let block = self.block_of(bio);
        if block >= self.blocks {
            return;
        }
        self.set_busy(block, false);
        let ok = c.status().is_ok();
        match bio.op() {
            Op::Write => {
                self.generation[block as usize] = if ok {
                    self.result.blocks_written += 1;
                    Self::generation_of(bio)
                } else {
                    GEN_UNKNOWN
                };
            }
            Op::WriteZeroes => {
                self.generation[block as usize] = if ok {
                    self.result.blocks_zeroed += 1;
                    GEN_ZERO
                } else {
                    GEN_UNKNOWN
                };
            }
            Op::Discard => {
                let before = self.generation[block as usize];
                self.generation[block as usize] = if !ok {
                    GEN_UNKNOWN
                } else if Self::checkable(before) {
                    self.result.blocks_trimmed += 1;
                    before | GEN_TRIMMED
                } else {
                    self.result.blocks_trimmed += 1;
                    before
                };
            }
            Op::Read if ok => {
                let g = self.generation[block as usize];
                if self.read_only {
                    self.check(bio, block, 0);
                } else if Self::checkable(g) {
                    self.check(bio, block, g);
                }
            }
            _ => {}
        }
    }

    fn stopped(&self) -> bool {
        self.result.stopped
    }

    fn verify_phase(&mut self, ctx: &mut Context, free: &mut Vec<Bio>) {
        if !self.do_verify || self.read_only || self.result.stopped {
            return;
        }
        let mut next = 0u64;
        let mut me = std::mem::replace(self, Verifier::placeholder());
        loop {
            // Aim every free bio at the next written block.
            while let Some(mut bio) = free.pop() {
                while next < me.blocks && !Self::checkable(me.generation[next as usize]) {
                    next += 1;
                }
                if next >= me.blocks || me.result.stopped {
                    free.push(bio);
                    break;
                }
                bio.set_op(Op::Read);
                bio.set_offset_bytes(me.offset_of(next));
                bio.private &= !HOOK_PRIVATE_MASK;
                me.set_busy(next, true);
                next += 1;
                if let Err(e) = ctx.submit(bio) {
                    let bio = e.into_bio();
                    me.cancel(&bio);
                    next -= 1;
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
                    let g = me.generation[block as usize];
                    me.check(c.bio(), block, g);
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
        Verifier {
            kind: VerifyKind::Crc32c,
            bs: 512,
            base_block: 0,
            blocks: 0,
            generation: Vec::new(),
            busy: Vec::new(),
            next_generation: 1,
            job: 0,
            job_seed: 0,
            do_verify: false,
            fatal: false,
            read_only: false,
            trim_pct: 0,
            zero_pct: 0,
            trim_verify_zero: false,
            mix_rng: 1,
            scratch: Vec::new(),
            result: VerifyResult::default(),
        }
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

/// The verifier of job `index` of the run, if its job verifies. Jobs on
/// the same device verify disjoint slices of it.
pub fn for_job(plan: &[(JobSpec, Device)], index: usize) -> anyhow::Result<Option<Verifier>> {
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
    let cap = dev.capacity_bytes();
    let region_blocks = job.size.unwrap_or(cap).min(cap) / job.bs;
    let same = |d: &Device| d.name() == dev.name();
    let slices = plan.iter().filter(|(_, d)| same(d)).count() as u64;
    let slice = plan[..index].iter().filter(|(_, d)| same(d)).count() as u64;
    let per = region_blocks / slices;
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
    if per > MAX_BLOCKS {
        anyhow::bail!(
            "job {}: verify tracks every block, and {per} blocks of {} bytes are more than \
             {MAX_BLOCKS}; give a smaller --size or a larger --bs",
            job.name,
            job.bs
        );
    }
    let seed = job.randseed ^ (index as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let read_only = job.rw.read_percent(job.rwmixread) == 100;
    let v = Verifier::new(
        kind,
        job.bs,
        region_blocks,
        slice,
        slices,
        index as u16,
        seed,
        job.do_verify,
        // continue_on_error=verify (or all) goes on past a mismatch, as
        // fio's does even with verify_fatal=1.
        job.verify_fatal && !job.continue_on_error.verify,
        read_only,
    );
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

    #[test]
    fn header_round_trip_and_crc() {
        let mut v = Verifier::new(
            VerifyKind::Crc32c,
            4096,
            16,
            0,
            1,
            3,
            42,
            true,
            false,
            false,
        );
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
        let mut v = Verifier::new(VerifyKind::Crc32c, 4096, 16, 0, 1, 0, 7, true, false, false);
        let mut bio = Bio::write_at(4096, mqblk::IoBuf::page_aligned(4096));
        v.prepare(&mut bio);
        let g = Verifier::generation_of(&bio);
        v.generation[1] = g;
        v.check(&bio, 1, g);
        assert_eq!(v.result.errors, 0);
        // Stale: expecting a later generation.
        v.check(&bio, 1, g + 1);
        assert_eq!(
            v.result.mismatches[0].reason,
            "stale data (not the last write)"
        );
        // Misplaced: the block read at another offset.
        v.check(&bio, 2, g);
        assert!(v.result.mismatches[1].reason.starts_with("wrong offset"));
        // Corrupted data.
        bio.segments_mut()[0].as_mut_slice()[100] ^= 1;
        v.check(&bio, 1, g);
        let m = &v.result.mismatches[2];
        assert!(m.reason.starts_with("bad crc32c"));
        assert!(m.to_string().contains("at offset 4096"), "{m}");
        assert_eq!(v.result.errors, 3);
    }

    fn written(v: &mut Verifier, block: u64) -> (Bio, u32) {
        let mut bio = Bio::write_at(0, mqblk::IoBuf::page_aligned(4096));
        bio.set_offset_bytes(block * 4096);
        v.prepare(&mut bio);
        let g = Verifier::generation_of(&bio);
        v.set_busy(block, false);
        v.generation[block as usize] = g;
        (bio, g)
    }

    #[test]
    fn md5_and_sha256_blocks_check_and_catch_corruption() {
        for kind in [VerifyKind::Md5, VerifyKind::Sha256] {
            let mut v = Verifier::new(kind, 4096, 16, 0, 1, 0, 9, true, false, false);
            let (mut bio, g) = written(&mut v, 2);
            let data = bio.segments()[0].as_slice();
            assert_eq!(Header::decode(data).kind, kind.code());
            // The digest sits between the header and the data.
            let mut sum = [0u8; 32];
            let n = kind.sum(data, &mut sum);
            assert_eq!(n, kind.digest_len());
            assert_eq!(&data[HEADER_BYTES..kind.data_start()], &sum[..n]);
            v.check(&bio, 2, g);
            assert_eq!(v.result.errors, 0, "{kind:?}: {:?}", v.result.mismatches);
            bio.segments_mut()[0].as_mut_slice()[4000] ^= 0x80;
            v.check(&bio, 2, g);
            let m = &v.result.mismatches[0];
            assert_eq!(m.reason, format!("bad {} (data corrupted)", kind.name()));
            assert!(
                m.to_string()
                    .contains(&format!("computed {} ", kind.name())),
                "{m}"
            );
            // A flipped digest byte is caught too.
            bio.segments_mut()[0].as_mut_slice()[4000] ^= 0x80;
            bio.segments_mut()[0].as_mut_slice()[HEADER_BYTES] ^= 1;
            v.check(&bio, 2, g);
            assert_eq!(v.result.errors, 2);
        }
    }

    #[test]
    fn zeroed_and_discarded_blocks_are_checked_by_what_they_may_hold() {
        let mut v = Verifier::new(VerifyKind::Crc32c, 4096, 16, 0, 1, 0, 5, true, false, false);
        let (bio, g) = written(&mut v, 3);
        let zeros = Bio::read_at(3 * 4096, mqblk::IoBuf::page_aligned(4096));
        // Discarded: the old block or zeros both pass.
        let trimmed = g | GEN_TRIMMED;
        v.check(&bio, 3, trimmed);
        v.check(&zeros, 3, trimmed);
        assert_eq!(v.result.errors, 0, "{:?}", v.result.mismatches);
        // Zeroed: only zeros pass.
        v.check(&zeros, 3, GEN_ZERO);
        assert_eq!(v.result.errors, 0);
        v.check(&bio, 3, GEN_ZERO);
        assert!(v.result.mismatches[0].reason.starts_with("not zeros"));
        // Discarded with trim_verify_zero=1: only zeros pass.
        let mut v = v.with_mix(10, 10, true);
        v.check(&zeros, 3, trimmed);
        assert_eq!(v.result.errors, 1);
        v.check(&bio, 3, trimmed);
        assert_eq!(v.result.errors, 2);
        assert!(v.result.mismatches[1].reason.contains("trim_verify_zero"));
        // A stale block is still stale after a discard.
        v.trim_verify_zero = false;
        v.check(&bio, 3, (g + 1) | GEN_TRIMMED);
        assert_eq!(
            v.result.mismatches[2].reason,
            "stale data (not the last write)"
        );
    }

    #[test]
    fn the_mix_turns_writes_into_discards_and_write_zeroes_in_their_shares() {
        let mut v = Verifier::new(VerifyKind::Crc32c, 4096, 16, 0, 1, 0, 5, true, false, false)
            .with_mix(20, 30, false);
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
