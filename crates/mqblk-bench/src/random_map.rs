//! fio's random map: a sized uniform random job touches every block of
//! its region once per pass. [`super::pattern`] draws a block; if the map
//! says it was taken this pass, the next free block after it (wrapping) is
//! used instead, as fio's `axmap_next_free` does. When every block has been
//! taken the map is cleared and a new pass begins (`loops=`, `time_based`).
//! `norandommap` turns it off.
//!
//! The map is a bitmap of the region's blocks with summary levels above it
//! (a bit per full word of the level below), allocated once at setup: the
//! next free block is found in a handful of word reads at any size, and
//! the hot path neither allocates nor locks. A terabyte of 4 KiB blocks
//! costs 32 MiB (one bit per block) plus 1/63 of that for the levels.

pub(crate) use mqblk_fio::random_generator::RandomGenerator;

/// Blocks taken this pass, with a summary level per 64 words below.
pub struct RandomMap {
    /// `levels[0]`: a bit per block; `levels[k + 1]`: a bit per word of
    /// `levels[k]`, set when that word is full. Bits past the end of a
    /// level are set, so they are never found free.
    levels: Vec<Vec<u64>>,
    /// Each level's valid bits (for the reset).
    lens: Vec<u64>,
    /// Blocks not yet taken this pass.
    free: u64,
    blocks: u64,
}

impl RandomMap {
    /// A map of `blocks` blocks, all free. Setup, not the hot path.
    pub fn new(blocks: u64) -> RandomMap {
        let blocks = blocks.max(1);
        let mut lens = vec![blocks];
        while *lens.last().unwrap_or(&1) > 64 {
            let below = *lens.last().unwrap_or(&1);
            lens.push(below.div_ceil(64));
        }
        let levels = lens
            .iter()
            .map(|&len| vec![0u64; len.div_ceil(64) as usize])
            .collect();
        let mut map = RandomMap {
            levels,
            lens,
            free: blocks,
            blocks,
        };
        map.reset();
        map
    }

    /// The bytes a map of `blocks` blocks takes (for the memory check).
    pub fn bytes_for(blocks: u64) -> u64 {
        let mut bytes = 0;
        let mut len = blocks.max(1);
        loop {
            bytes += len.div_ceil(64) * 8;
            if len <= 64 {
                return bytes;
            }
            len = len.div_ceil(64);
        }
    }

    /// Clear every block: a new pass.
    pub fn reset(&mut self) {
        for (words, &len) in self.levels.iter_mut().zip(&self.lens) {
            words.fill(0);
            let tail = len % 64;
            if tail != 0 {
                if let Some(last) = words.last_mut() {
                    *last = !0u64 << tail;
                }
            }
        }
        self.free = self.blocks;
    }

    /// Blocks not yet taken this pass.
    pub fn free(&self) -> u64 {
        self.free
    }

    /// Whether `block` was taken this pass.
    pub fn is_taken(&self, block: u64) -> bool {
        debug_assert!(block < self.blocks);
        self.levels[0][(block / 64) as usize] & (1 << (block % 64)) != 0
    }

    /// The block to use for a draw of `block`: it, if free this pass, or
    /// the next free one after it (wrapping), taken. A full map starts a
    /// new pass first.
    #[inline]
    pub fn take(&mut self, block: u64) -> u64 {
        let block = block.min(self.blocks - 1);
        if self.free() == 0 {
            self.reset();
        }
        let b = if self.is_taken(block) {
            self.next_free(block)
        } else {
            block
        };
        self.mark(b);
        b
    }

    /// Take `block` if it is free (the further blocks of a long I/O).
    #[inline]
    pub fn mark(&mut self, block: u64) {
        if block >= self.blocks || self.is_taken(block) {
            return;
        }
        self.free -= 1;
        let mut index = block;
        for words in &mut self.levels {
            let w = (index / 64) as usize;
            debug_assert!(w < words.len());
            words[w] |= 1 << (index % 64);
            if words[w] != !0 {
                return;
            }
            // That word is full: say so a level up.
            index = w as u64;
        }
    }

    /// The first free block at or after `from`, else the first from 0
    /// (there is one: `free > 0`).
    fn next_free(&self, from: u64) -> u64 {
        self.first_free(0, from)
            .or_else(|| self.first_free(0, 0))
            .unwrap_or(0)
    }

    /// The first free bit of `level` at or after `from`.
    fn first_free(&self, level: usize, from: u64) -> Option<u64> {
        let words = &self.levels[level];
        let w = (from / 64) as usize;
        if w >= words.len() {
            return None;
        }
        let here = !words[w] & (!0u64 << (from % 64));
        if here != 0 {
            return Some(w as u64 * 64 + u64::from(here.trailing_zeros()));
        }
        // The next word with a free bit: from the level above, or by a
        // scan of the top level (at most one word).
        let next = if level + 1 < self.levels.len() {
            self.first_free(level + 1, w as u64 + 1)? as usize
        } else {
            (w + 1..words.len()).find(|&i| words[i] != !0)?
        };
        debug_assert!(next < words.len());
        Some(next as u64 * 64 + u64::from((!words[next]).trailing_zeros()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distribution::Rng;

    #[test]
    fn every_block_once_per_pass_at_many_sizes() {
        for blocks in [1u64, 2, 63, 64, 65, 4095, 4096, 4097, 64 * 64 + 1, 300_000] {
            let mut map = RandomMap::new(blocks);
            let mut rng = Rng(blocks | 1);
            let mut seen = vec![false; blocks as usize];
            for _ in 0..blocks {
                let b = map.take(rng.below(blocks));
                assert!(!seen[b as usize], "block {b} of {blocks} twice in a pass");
                seen[b as usize] = true;
            }
            assert_eq!(map.free(), 0);
            // The next draw starts a new pass.
            let b = map.take(0);
            assert_eq!(b, 0);
            assert_eq!(map.free(), blocks - 1);
        }
    }

    #[test]
    fn a_taken_block_gives_the_next_free_one_wrapping() {
        let mut map = RandomMap::new(200);
        for b in 100..200 {
            map.mark(b);
        }
        map.mark(3);
        assert_eq!(map.take(150), 0);
        assert_eq!(map.take(0), 1);
        assert_eq!(map.take(3), 4);
        assert_eq!(map.free(), 200 - 100 - 4);
    }

    #[test]
    fn a_terabyte_of_4k_blocks_is_a_bitmap_of_32_mib() {
        let blocks = (1u64 << 40) / 4096;
        let bytes = RandomMap::bytes_for(blocks);
        assert!(bytes >= 32 << 20, "{bytes}");
        assert!(bytes < (32 << 20) + (1 << 20), "{bytes}");
    }

    #[test]
    fn generators_take_fios_names() {
        assert_eq!(
            RandomGenerator::parse("tausworthe"),
            Some(RandomGenerator::Tausworthe)
        );
        assert_eq!(
            RandomGenerator::parse("tausworthe64"),
            Some(RandomGenerator::Tausworthe64)
        );
        assert_eq!(RandomGenerator::parse("lfsr"), Some(RandomGenerator::Lfsr));
        assert_eq!(RandomGenerator::parse("mt19937"), None);
    }
}
