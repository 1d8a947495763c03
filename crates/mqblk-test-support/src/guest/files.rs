//! The files the guest writes onto its disk: made here from a seed, so
//! that the host knows each one's SHA-256 before the guest reads it back.

use sha2::{Digest, Sha256};

/// Their sizes: a few hundred KiB to a few MiB, some not a whole number
/// of blocks.
const SIZES: [usize; 4] = [
    300 * 1024 + 7,
    1024 * 1024,
    2560 * 1024 + 4093,
    4096 * 1024 - 1,
];

/// One file the guest writes and checks.
pub struct GuestFile {
    /// Its name, in the guest's `/data` and on the guest's ext4.
    pub name: String,
    /// Its SHA-256, in lowercase hex as `sha256sum` prints it.
    pub sha256: String,
    /// Its bytes.
    pub(super) bytes: Vec<u8>,
}

impl GuestFile {
    /// Its length in bytes.
    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }
}

/// The files for `seed`: the same seed, the same bytes.
pub(super) fn generate(seed: u64) -> Vec<GuestFile> {
    SIZES
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let bytes = stream(
                seed ^ (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                len,
            );
            GuestFile {
                name: format!("file-{i}.bin"),
                sha256: sha256_hex(&bytes),
                bytes,
            }
        })
        .collect()
}

/// The SHA-256 of `bytes` as `sha256sum` prints it.
fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `len` bytes of xorshift64* from `seed` (never the all-zero state).
fn stream(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_files_and_another_seed_other_ones() {
        let a = generate(7);
        let b = generate(7);
        let c = generate(8);
        assert_eq!(a.len(), SIZES.len());
        for ((x, y), z) in a.iter().zip(&b).zip(&c) {
            assert_eq!(x.bytes, y.bytes);
            assert_eq!(x.sha256, y.sha256);
            assert_ne!(x.sha256, z.sha256);
            assert_eq!(x.sha256.len(), 64);
        }
        let lens: Vec<usize> = a.iter().map(GuestFile::len_bytes).collect();
        assert_eq!(lens, SIZES);
    }

    #[test]
    fn the_digest_is_printed_as_sha256sum_prints_it() {
        // FIPS 180-2's first example.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
