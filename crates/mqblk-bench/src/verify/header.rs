//! The header at the start of every verify interval: fio's own `struct
//! verify_header` and the checksum header of its type after it, so that
//! `fio --verify_only` checks what `mqblk bench` wrote and mqblk checks
//! what fio wrote (md5, crc32c, sha1, sha3-*, xxhash, crc64, crc32, crc16,
//! crc7; fio 3.33's sha256 and sha512 are not SHA-2, so its blocks of
//! those and ours differ):
//!
//! ```text
//!  0  magic u16 = 0xacca     2  verify type u16 (fio's: 2 md5, 5 crc32c, 9 sha256,
//!                           3 crc64, 4 crc32, 7 crc16, 8 crc7, 11-14 sha3-*,
//!                           15 xxhash, 16 sha1)
//!  4  interval length u32    8  seed of the data u64        16  device offset u64
//! 24  time_sec u32, 28 time_nsec u32 (0: mqblk reads no clock per write)
//! 32  thread u16 (the job)  34  numberio u16 (the job's write count, low 16 bits)
//! 36  crc32c u32 of bytes [0, 36)
//! 40  the data's checksum: crc7 (1 byte), crc16 (2), crc32c, crc32 or
//!     xxhash (4), crc64 (8), md5 (16), sha1 (20), sha3-* (28 to 64) or
//!     sha256 (32, in fio's 64)
//!  D  data: xorshift64* stream from the seed, or verify_pattern (D = 40 + that room)
//! ```
//!
//! As fio's, the checksum covers the data [D, len) only; the header has
//! its own crc. All fields are little-endian, as fio writes them on x86.
//! `verify=pattern` has no header: the interval is the pattern alone.

use std::fmt::Write as _;

use mqblk_fio::job::VerifyKind;

/// fio's verify header magic.
pub const MAGIC: u16 = 0xacca;
/// Bytes of fio's `struct verify_header` at the start of each interval.
pub const HEADER_BYTES: usize = 40;
/// Bytes of the longest checksum (sha3-512).
pub const DIGEST_MAX: usize = 64;
/// Bytes of the header its crc32c covers (up to the crc itself).
const HEADER_CRC_BYTES: usize = 36;

/// What a verify kind puts in each block: fio's header layout and
/// digests, as the engine writes and checks them (the kind itself, as a
/// job names it, is mqblk-fio's).
pub(crate) trait KindLayout: Copy {
    /// fio's `verify_type` for this kind (its enum in verify.h).
    fn code(self) -> u16;

    /// Whether a header of fio's type `code` is one of this kind (fio's
    /// crc32c-intel, 6, writes crc32c).
    fn accepts(self, code: u16) -> bool;

    /// Whether intervals carry a header (all but `verify=pattern`).
    fn has_header(self) -> bool;

    /// Bytes of fio's checksum header after the verify header.
    fn digest_room(self) -> usize;

    /// Bytes of the checksum itself.
    fn digest_len(self) -> usize;

    /// Where an interval's data starts.
    fn data_start(self) -> usize;

    /// The checksum of `block`'s data into `out`; returns its length. A
    /// crc32c is 4 little-endian bytes.
    fn sum(self, block: &[u8], out: &mut [u8; DIGEST_MAX]) -> usize;

    /// Seal an interval whose header and data are in place: its data's
    /// checksum after the header, then the header's own crc32c (into
    /// `h.crc` too).
    fn seal(self, block: &mut [u8], h: &mut Header);

    /// The checksum stored in an interval.
    fn stored(self, block: &[u8]) -> &[u8];
}

impl KindLayout for VerifyKind {
    /// fio's `verify_type` for this kind (its enum in verify.h).
    fn code(self) -> u16 {
        match self {
            VerifyKind::Md5 => 2,
            VerifyKind::Crc32c => 5,
            VerifyKind::Sha256 => 9,
            VerifyKind::XxHash => 15,
            VerifyKind::Crc64 => 3,
            VerifyKind::Crc32 => 4,
            VerifyKind::Crc16 => 7,
            VerifyKind::Crc7 => 8,
            VerifyKind::Sha3_224 => 11,
            VerifyKind::Sha3_256 => 12,
            VerifyKind::Sha3_384 => 13,
            VerifyKind::Sha3_512 => 14,
            VerifyKind::Sha1 => 16,
            // VERIFY_PATTERN_NO_HDR: never written in a header.
            VerifyKind::Pattern => 18,
        }
    }

    /// Whether a header of fio's type `code` is one of this kind (fio's
    /// crc32c-intel, 6, writes crc32c).
    fn accepts(self, code: u16) -> bool {
        code == self.code() || (self == VerifyKind::Crc32c && code == 6)
    }

    /// Whether intervals carry a header (all but `verify=pattern`).
    fn has_header(self) -> bool {
        self != VerifyKind::Pattern
    }

    /// Bytes of fio's checksum header after the verify header.
    fn digest_room(self) -> usize {
        match self {
            VerifyKind::Pattern => 0,
            VerifyKind::Crc32c => 4,
            VerifyKind::Md5 => 16,
            // fio's `struct vhdr_sha256` holds 64 bytes for its 32.
            VerifyKind::Sha256 => 64,
            VerifyKind::Sha1 => 20,
            VerifyKind::XxHash | VerifyKind::Crc32 => 4,
            VerifyKind::Crc64 => 8,
            VerifyKind::Crc16 => 2,
            VerifyKind::Crc7 => 1,
            VerifyKind::Sha3_224 => 28,
            VerifyKind::Sha3_256 => 32,
            VerifyKind::Sha3_384 => 48,
            VerifyKind::Sha3_512 => 64,
        }
    }

    /// Bytes of the checksum itself.
    fn digest_len(self) -> usize {
        match self {
            VerifyKind::Sha256 => 32,
            other => other.digest_room(),
        }
    }

    /// Where an interval's data starts.
    fn data_start(self) -> usize {
        if self.has_header() {
            HEADER_BYTES + self.digest_room()
        } else {
            0
        }
    }

    /// The checksum of `block`'s data into `out`; returns its length. A
    /// crc32c is 4 little-endian bytes.
    fn sum(self, block: &[u8], out: &mut [u8; DIGEST_MAX]) -> usize {
        use sha2::Digest as _;
        let data = &block[self.data_start()..];
        match self {
            VerifyKind::Pattern => 0,
            VerifyKind::Crc32c => {
                out[..4].copy_from_slice(&fio_crc32c(data).to_le_bytes());
                4
            }
            VerifyKind::Md5 => {
                out[..16].copy_from_slice(&md5::Md5::digest(data));
                16
            }
            VerifyKind::Sha256 => {
                out[..32].copy_from_slice(&sha2::Sha256::digest(data));
                32
            }
            VerifyKind::Sha1 => {
                // fio keeps SHA-1's five state words as the machine's
                // u32s (`struct vhdr_sha1`), not the digest's big-endian
                // bytes: each word's bytes turned round.
                let digest = sha1::Sha1::digest(data);
                for (o, w) in out[..20].chunks_mut(4).zip(digest.chunks(4)) {
                    o.copy_from_slice(&[w[3], w[2], w[1], w[0]]);
                }
                20
            }
            VerifyKind::XxHash => {
                // fio's XXH32_init(1): the seed is 1.
                let h = xxhash_rust::xxh32::xxh32(data, 1);
                out[..4].copy_from_slice(&h.to_le_bytes());
                4
            }
            VerifyKind::Crc64 => {
                let c = crc::Crc::<u64>::new(&crc::CRC_64_REDIS).checksum(data);
                out[..8].copy_from_slice(&c.to_le_bytes());
                8
            }
            VerifyKind::Crc32 => {
                // cksum's CRC without its final inversion.
                let c = !crc::Crc::<u32>::new(&crc::CRC_32_CKSUM).checksum(data);
                out[..4].copy_from_slice(&c.to_le_bytes());
                4
            }
            VerifyKind::Crc16 => {
                let c = crc::Crc::<u16>::new(&crc::CRC_16_ARC).checksum(data);
                out[..2].copy_from_slice(&c.to_le_bytes());
                2
            }
            VerifyKind::Crc7 => {
                out[0] = crc::Crc::<u8>::new(&crc::CRC_7_MMC).checksum(data);
                1
            }
            VerifyKind::Sha3_224 => digest::<sha3::Sha3_224>(data, out),
            VerifyKind::Sha3_256 => digest::<sha3::Sha3_256>(data, out),
            VerifyKind::Sha3_384 => digest::<sha3::Sha3_384>(data, out),
            VerifyKind::Sha3_512 => digest::<sha3::Sha3_512>(data, out),
        }
    }

    /// Seal an interval whose header and data are in place: its data's
    /// checksum after the header, then the header's own crc32c (into
    /// `h.crc` too).
    fn seal(self, block: &mut [u8], h: &mut Header) {
        if !self.has_header() {
            return;
        }
        let mut sum = [0u8; DIGEST_MAX];
        let n = self.sum(block, &mut sum);
        block[HEADER_BYTES..HEADER_BYTES + n].copy_from_slice(&sum[..n]);
        h.crc = fio_crc32c(&block[..HEADER_CRC_BYTES]);
        block[HEADER_CRC_BYTES..HEADER_BYTES].copy_from_slice(&h.crc.to_le_bytes());
    }

    /// The checksum stored in an interval.
    fn stored(self, block: &[u8]) -> &[u8] {
        &block[HEADER_BYTES..HEADER_BYTES + self.digest_len()]
    }
}

/// `D`'s digest of `data` into `out`; its length.
fn digest<D: sha2::Digest>(data: &[u8], out: &mut [u8; DIGEST_MAX]) -> usize {
    let d = D::digest(data);
    out[..d.len()].copy_from_slice(&d);
    d.len()
}

/// Whether the header at the start of `block` carries its own crc32c.
pub fn header_crc_ok(block: &[u8], h: &Header) -> bool {
    fio_crc32c(&block[..HEADER_CRC_BYTES]) == h.crc
}

/// fio's crc32c: Castagnoli's, started at !0 and not inverted at the end
/// (its `crc32c_sw` and `crc32c_intel` return the register as it is), so
/// the complement of the standard one.
pub fn fio_crc32c(data: &[u8]) -> u32 {
    !crc32c::crc32c(data)
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
    /// fio's verify type code.
    pub kind: u16,
    /// Interval length.
    pub len: u32,
    /// Device offset the interval was written at.
    pub offset: u64,
    /// Seed of the data (fio's `rand_seed`).
    pub seed: u64,
    /// Generation: the writing job's count of writes (fio's `numberio`;
    /// 16 bits of it are stored).
    pub generation: u32,
    /// Writing job (fio's `thread`).
    pub job: u16,
    /// The header's crc32c.
    pub crc: u32,
}

impl Header {
    /// Write the header into the first [`HEADER_BYTES`] of `out`.
    pub fn encode(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.magic.to_le_bytes());
        out[2..4].copy_from_slice(&self.kind.to_le_bytes());
        out[4..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..16].copy_from_slice(&self.seed.to_le_bytes());
        out[16..24].copy_from_slice(&self.offset.to_le_bytes());
        out[24..32].fill(0);
        out[32..34].copy_from_slice(&self.job.to_le_bytes());
        out[34..36].copy_from_slice(&(self.generation as u16).to_le_bytes());
        out[36..40].copy_from_slice(&self.crc.to_le_bytes());
    }

    /// Read a header from the first [`HEADER_BYTES`] of `b`.
    pub fn decode(b: &[u8]) -> Header {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Header {
            magic: u16_at(0),
            kind: u16_at(2),
            len: u32_at(4),
            seed: u64_at(8),
            offset: u64_at(16),
            job: u16_at(32),
            generation: u32::from(u16_at(34)),
            crc: u32_at(36),
        }
    }
}

impl std::fmt::Display for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{magic={:#06x} type={} len={} offset={} seed={:#018x} numberio={} thread={} \
             header crc32c={:#010x}}}",
            self.magic,
            self.kind,
            self.len,
            self.offset,
            self.seed,
            self.generation & 0xffff,
            self.job,
            self.crc
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
