//! The header at the start of every verify interval, as fio's `struct
//! verify_header`, and the checksum each `verify=` kind keeps:
//!
//! ```text
//!  0  magic u16 = 0xacca     2  verify type u8 (1 crc32c, 2 md5, 3 sha256)   3  0
//!  4  interval length u32    8  device offset u64            16  seed u64
//! 24  generation u32        28  job u16                      30  0
//! 32  crc32c u32 of bytes [0, 32) and [D, len) (crc32c only, else 0)   36  0
//! 40  md5 (16 bytes) or sha256 (32 bytes) of bytes [0, 32) and [D, len)
//!  D  data: xorshift64* stream from the seed, or verify_pattern (D = 40, 56 or 72)
//! ```
//!
//! `verify=pattern` has no header: the interval is the pattern alone.

use std::fmt::Write as _;

use crate::bench::job::VerifyKind;

/// fio's verify header magic.
pub const MAGIC: u16 = 0xacca;
/// Bytes of the header at the start of each interval.
pub const HEADER_BYTES: usize = 40;

// The layout side of the job's `verify=` kind: what each checksum writes
// where.
impl VerifyKind {
    /// The code in the header's type byte.
    pub fn code(self) -> u8 {
        match self {
            VerifyKind::Crc32c => 1,
            VerifyKind::Md5 => 2,
            VerifyKind::Sha256 => 3,
            VerifyKind::Pattern => 0,
        }
    }

    /// Whether intervals carry a header (all but `verify=pattern`).
    pub fn has_header(self) -> bool {
        self != VerifyKind::Pattern
    }

    /// Bytes of digest after the header (the crc32c lives in the header).
    fn digest_len(self) -> usize {
        match self {
            VerifyKind::Crc32c | VerifyKind::Pattern => 0,
            VerifyKind::Md5 => 16,
            VerifyKind::Sha256 => 32,
        }
    }

    /// Where an interval's data starts.
    pub fn data_start(self) -> usize {
        if self.has_header() {
            HEADER_BYTES + self.digest_len()
        } else {
            0
        }
    }

    /// The checksum of `block` (header bytes before the crc, and the data),
    /// into `out`; returns its length. A crc32c is 4 little-endian bytes.
    pub fn sum(self, block: &[u8], out: &mut [u8; 32]) -> usize {
        use sha2::Digest as _;
        let data = &block[self.data_start()..];
        match self {
            VerifyKind::Pattern => 0,
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

    /// Seal an interval whose header (with crc 0) and data are in place.
    pub fn seal(self, block: &mut [u8], h: &mut Header) {
        let mut sum = [0u8; 32];
        let n = self.sum(block, &mut sum);
        match self {
            VerifyKind::Pattern => {}
            VerifyKind::Crc32c => {
                h.crc = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
                h.encode(&mut block[..HEADER_BYTES]);
            }
            _ => block[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(&sum[..n]),
        }
    }

    /// The checksum stored in an interval.
    pub fn stored<'a>(self, block: &'a [u8], h: &Header, crc: &'a mut [u8; 4]) -> &'a [u8] {
        match self {
            VerifyKind::Pattern => &[],
            VerifyKind::Crc32c => {
                *crc = h.crc.to_le_bytes();
                &crc[..]
            }
            _ => &block[HEADER_BYTES..self.data_start()],
        }
    }
}

/// Lower-case hex of `bytes` (a crc32c's 4 bytes as the number they are).
pub fn hex(kind: VerifyKind, bytes: &[u8]) -> String {
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

/// A header, as written or as read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`] if this is a verify interval.
    pub magic: u16,
    /// Verify type code.
    pub kind: u8,
    /// Interval length.
    pub len: u32,
    /// Device offset the interval was written at.
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
    /// Write the header into the first [`HEADER_BYTES`] of `out`.
    pub fn encode(&self, out: &mut [u8]) {
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

    /// Read a header from the first [`HEADER_BYTES`] of `b`.
    pub fn decode(b: &[u8]) -> Header {
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

/// splitmix64: seeds from (job, block, generation).
pub fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Fill `data` from `seed` (xorshift64*).
pub fn fill_data(data: &mut [u8], seed: u64) {
    let mut x = seed | 1;
    for chunk in data.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}
