//! What a job's write buffers hold when it does not verify: fio's
//! `dedupe_percentage=` (that share of the writes repeat an earlier
//! buffer: `dedupe_mode=repeat`, or one of a working set of
//! `dedupe_working_set_percentage` of the region's blocks:
//! `dedupe_mode=working_set`, shared by every job with `dedupe_global=1`)
//! and `buffer_compress_percentage=` (each `buffer_compress_chunk` holds
//! that share of zeros after its random bytes, so it compresses by as
//! much). The verify hook without verify ([`super::verify::NoVerify`])
//! calls it for every write of a job that asks; other jobs only stamp.

use mqblk::Bio;

use super::distribution::Rng;

pub(crate) use mqblk_fio::content::ContentSpec;

/// Buffers kept for `dedupe_mode=repeat` to repeat.
const RECENT: usize = 64;

/// A job's buffer maker.
pub struct Content {
    spec: ContentSpec,
    rng: Rng,
    /// Seeds of this job's own buffers (unique to it).
    job_salt: u64,
    next_unique: u64,
    recent: [u64; RECENT],
    recent_len: usize,
    /// Blocks of the working set.
    ws_blocks: u64,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Content {
    /// Job `job`'s buffers over a region of `blocks` blocks.
    pub fn new(spec: ContentSpec, job: u64, blocks: u64, seed: u64) -> Content {
        let ws = blocks * u64::from(spec.working_set_pct.max(1)) / 100;
        Content {
            spec,
            rng: Rng(seed | 1),
            job_salt: mix(job + 1),
            next_unique: 0,
            recent: [0; RECENT],
            recent_len: 0,
            ws_blocks: ws.max(1),
        }
    }

    /// The seed of the next write's buffer.
    fn next_seed(&mut self) -> u64 {
        let dedupe =
            self.spec.dedupe_pct > 0 && self.rng.below(100) < u64::from(self.spec.dedupe_pct);
        if dedupe {
            if self.spec.working_set {
                let salt = if self.spec.global { 0 } else { self.job_salt };
                return mix(salt ^ mix(self.rng.below(self.ws_blocks) | 1 << 63));
            }
            if self.recent_len > 0 {
                return self.recent[self.rng.below(self.recent_len as u64) as usize];
            }
        }
        self.next_unique += 1;
        let seed = mix(self.job_salt ^ self.next_unique);
        if self.recent_len < RECENT {
            self.recent_len += 1;
        }
        self.recent[(self.next_unique as usize) % RECENT] = seed;
        seed
    }

    /// Fill a write's buffer.
    pub fn fill(&mut self, bio: &mut Bio) {
        let seed = self.next_seed();
        let chunk = (self.spec.compress_chunk.max(1)) as usize;
        let random = chunk * (100 - usize::from(self.spec.compress_pct.min(100))) / 100;
        let mut x = Rng(seed | 1);
        let mut at = 0usize;
        for s in bio.segments_mut() {
            for b in s.as_mut_slice() {
                *b = if at % chunk < random {
                    x.next() as u8
                } else {
                    0
                };
                at += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_bio() -> Bio {
        Bio::write_at(0, mqblk::IoBuf::page_aligned(4096))
    }

    #[test]
    fn a_compressible_buffer_holds_its_share_of_zeros() {
        let spec = ContentSpec {
            compress_pct: 75,
            compress_chunk: 512,
            ..ContentSpec::default()
        };
        let mut c = Content::new(spec, 0, 1000, 1);
        let mut bio = write_bio();
        c.fill(&mut bio);
        let data = bio.segments()[0].as_slice();
        for chunk in data.chunks(512) {
            assert!(chunk[128..].iter().all(|&b| b == 0));
            assert!(chunk[..128].iter().any(|&b| b != 0));
        }
    }

    #[test]
    fn dedupe_repeats_buffers_in_its_share() {
        for working_set in [false, true] {
            let spec = ContentSpec {
                dedupe_pct: 50,
                working_set,
                working_set_pct: 5,
                compress_chunk: 512,
                ..ContentSpec::default()
            };
            let mut c = Content::new(spec, 0, 1000, 7);
            let mut seen = std::collections::HashSet::new();
            let mut dups = 0;
            for _ in 0..2000 {
                if !seen.insert(c.next_seed()) {
                    dups += 1;
                }
            }
            // About half are repeats (a little more: the working set's
            // own first uses are new).
            assert!((800..1200).contains(&dups), "{working_set}: {dups}");
        }
    }
}
