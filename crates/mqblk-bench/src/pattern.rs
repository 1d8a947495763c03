//! Where each I/O of a job goes: fio's `rw=` (sequential, with fio's
//! `rw=TYPE:N` holes and backward strides, or random), `offset=`, the
//! read/write mix, and `random_distribution=` (uniform, zipf, pareto,
//! normal), and fio's random map ([`super::random_map`]: each block once
//! per pass). Drawn without a clock and without allocating; the uniform
//! path is a multiply, a shift and a bit of the map.

use mqblk::Op;

pub use super::distribution::Rng;
use super::distribution::Skew;
use super::random_map::{RandomGenerator, RandomMap};
use super::zone::{Strided, Zbd, ZoneMode};
use mqblk_fio::job::{BlockSizes, JobSpec};

/// Where the next I/O goes, and how long it is.
pub struct Offsets {
    random: bool,
    /// Units of the offset alignment (`bs`, or `blockalign`/the smallest
    /// size with `bsrange`/`bssplit`) in the region (a verifier may narrow
    /// it).
    blocks: u64,
    /// Sectors of one unit.
    bs_sectors: u64,
    /// Sectors of the largest I/O.
    max_sectors: u64,
    sizes: BlockSizes,
    /// First sector of the region (`offset=`).
    base_sector: u64,
    /// Sequential position, in sectors from the region's start.
    next_sector: u64,
    /// Sectors moved after each sequential I/O (`bs` plus the hole).
    step_sectors: i64,
    read_percent: u32,
    /// `rw=trim`/`randtrim`: every I/O is a discard.
    trim: bool,
    skew: Skew,
    rng: Rng,
    /// Random, uniform, one block size, no trim, no zones, every I/O
    /// random: the common job, drawn by a short path that gives the same
    /// sequence as the general one.
    plain: bool,
    /// `percentage_random=` per direction (read, write, trim).
    percent_random: [u32; 3],
    /// fio's `rw=randread:N`: a new random offset every N I/Os (0 or 1:
    /// every I/O); the others follow `rw_sequencer`.
    seq_nr: u64,
    seq_left: u64,
    /// `rw_sequencer=identical`: the I/Os between random ones repeat the
    /// last offset (else they continue sequentially).
    identical: bool,
    /// Where the last I/O started, sectors from the region's start.
    last_start: u64,
    strided: Option<Strided>,
    zbd: Option<Zbd>,
    /// fio's random map: the blocks a uniform random job took this pass
    /// (None: `norandommap`, or a job the map does not apply to).
    map: Option<RandomMap>,
    /// A zoned job with nothing left to read.
    exhausted: bool,
}

impl Offsets {
    /// The offsets of `job` over `blocks` blocks of its region, from `seed`.
    /// Setup, not the hot path: a zipf job sums its normalising constant
    /// here.
    pub fn new(job: &JobSpec, blocks: u64, seed: u64) -> Offsets {
        let bs_sectors = unit_bytes(job) >> 9;
        let blocks = blocks.max(1);
        // The skew's own draws (a random hot spot) come from another
        // stream, so that the offsets' stream is the same for every
        // distribution.
        let skew = Skew::new(
            &job.distribution,
            blocks,
            bs_sectors << 9,
            job.random_sequence_stride,
            &mut Rng(seed ^ 0x0005_eed0_d157 | 1),
        );
        let step_bytes = job.bs as i64 + job.seq_stride;
        // A backward job starts at its region's last block, as fio does.
        let region_sectors = blocks * bs_sectors;
        let max_sectors = (job.block_sizes.max(job.bs) >> 9).min(region_sectors);
        let random = job.rw.is_random();
        let next_sector = if step_bytes < 0 && !random {
            region_sectors - max_sectors
        } else {
            0
        };
        // fio's `rw=randread:N` counts I/Os; `rw=read:N` is a hole.
        let seq_nr = if random {
            job.seq_stride.max(0) as u64
        } else {
            0
        };
        let (strided, zbd) = match job.zone.effective() {
            ZoneMode::None => (None, None),
            ZoneMode::Strided => (Some(Strided::new(&job.zone, region_sectors)), None),
            ZoneMode::Zbd => (None, Some(Zbd::new(&job.zone, region_sectors))),
        };
        let plain = random
            && skew.is_uniform()
            && job.block_sizes == BlockSizes::Fixed
            && !job.rw.is_trim()
            && bs_sectors == max_sectors
            && job.percentage_random == [100; 3]
            && seq_nr <= 1
            && strided.is_none()
            && zbd.is_none();
        // As fio: the map is for uniform random draws over the region
        // (fio's lfsr covers every block whatever norandommap says).
        let mapped = random
            && skew.is_uniform()
            && zbd.is_none()
            && strided.is_none()
            && (!job.norandommap || job.random_generator == RandomGenerator::Lfsr);
        Offsets {
            map: mapped.then(|| RandomMap::new(blocks)),
            plain,
            random,
            blocks,
            bs_sectors,
            max_sectors,
            sizes: job.block_sizes.clone(),
            base_sector: job.offset >> 9,
            next_sector,
            step_sectors: if random { 0 } else { job.seq_stride / 512 },
            read_percent: job.rw.read_percent(job.rwmixread),
            trim: job.rw.is_trim(),
            skew,
            rng: Rng(seed | 1),
            percent_random: job.percentage_random,
            seq_nr,
            seq_left: seq_nr,
            identical: job.rw_sequencer_identical,
            last_start: 0,
            strided,
            zbd,
            exhausted: false,
        }
    }

    /// The length of the next I/O of `op`, in sectors.
    #[inline(always)]
    fn len_sectors(&mut self, op: Op) -> u64 {
        let bytes = match &self.sizes {
            BlockSizes::Fixed => return self.max_sectors,
            BlockSizes::Range(min, max) => {
                let steps = max / min;
                min * (1 + self.rng.below(steps))
            }
            BlockSizes::Split(reads, writes) => {
                let split = if op == Op::Read { reads } else { writes };
                let p = self.rng.below(100) as u32;
                split
                    .iter()
                    .find(|(_, cum)| p < *cum)
                    .or(split.last())
                    .map_or(512, |c| c.0)
            }
        };
        (bytes >> 9).min(self.max_sectors)
    }

    /// Whether this I/O takes a new random offset: fio's `rw=randread:N`
    /// (every Nth) and `percentage_random=`.
    #[inline]
    fn draws_random(&mut self, op: Op) -> bool {
        if self.seq_nr > 1 {
            self.seq_left -= 1;
            if self.seq_left > 0 {
                return false;
            }
            self.seq_left = self.seq_nr;
        }
        let p = self.percent_random[super::counts::direction(op).min(2)];
        p >= 100 || (p > 0 && self.rng.below(100) < u64::from(p))
    }

    /// A zoned job has no I/O left (`zonemode=zbd` reads with nothing
    /// written); [`Offsets::next`] then gives a length of 0.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// The next I/O's operation, first sector and length in sectors (a
    /// length of 0: no I/O left, see [`Offsets::exhausted`]).
    #[inline(always)]
    pub fn next(&mut self) -> (Op, u64, u64) {
        if self.plain {
            let op = match self.read_percent {
                100 => Op::Read,
                0 => Op::Write,
                p if (self.rng.next() % 100) < u64::from(p) => Op::Read,
                _ => Op::Write,
            };
            let mut b = self.rng.below(self.blocks);
            if let Some(m) = &mut self.map {
                b = m.take(b);
            }
            let s = b * self.bs_sectors;
            return (op, self.base_sector + s, self.max_sectors);
        }
        self.next_general()
    }

    fn next_general(&mut self) -> (Op, u64, u64) {
        let op = match self.read_percent {
            _ if self.trim => Op::Discard,
            100 => Op::Read,
            0 => Op::Write,
            p => {
                if (self.rng.next() % 100) < u64::from(p) {
                    Op::Read
                } else {
                    Op::Write
                }
            }
        };
        let len = self.len_sectors(op);
        let region = self.blocks * self.bs_sectors;
        // The window the I/O goes in: the region, or a strided zone.
        let (win_start, win_len) = match &mut self.strided {
            Some(s) => s.window(len << 9),
            None => (0, region),
        };
        let win_len = win_len.max(len);
        let win_blocks = (win_len / self.bs_sectors).max(1);
        let random = self.random && self.draws_random(op);
        let sector = if random {
            let b = if win_len == region {
                self.skew.block(&mut self.rng, self.blocks, op)
            } else {
                self.rng.below(win_blocks)
            };
            if b >= self.blocks {
                // A `sequence` past the region's end: as fio, the job's
                // I/O is done.
                self.exhausted = true;
                return (op, self.base_sector, 0);
            }
            let b = match &mut self.map {
                Some(m) => {
                    // A long I/O takes every block it covers.
                    let b = m.take(b);
                    for more in 1..len.div_ceil(self.bs_sectors) {
                        m.mark(b + more);
                    }
                    b
                }
                None => b,
            };
            let s = b * self.bs_sectors;
            // A long I/O near the end moves back to fit, staying aligned.
            let s = if s + len > win_len {
                (win_len - len) / self.bs_sectors * self.bs_sectors
            } else {
                s
            };
            self.next_sector = win_start + s + len;
            win_start + s
        } else if self.random && self.identical {
            self.last_start
        } else {
            // Sequential, within the window.
            let mut s = self.next_sector;
            if s < win_start || s + len > win_start + win_len {
                s = win_start;
            }
            let mut n = s as i64 + len as i64 + self.step_sectors;
            if n < win_start as i64 {
                // Backwards past the start: wrap to the last whole I/O.
                n = (win_start + win_len - self.max_sectors) as i64;
            } else if n as u64 + len > win_start + win_len {
                n = win_start as i64;
            }
            self.next_sector = n as u64;
            s
        };
        self.last_start = sector;
        let sector = match &mut self.zbd {
            Some(z) => match z.place(op, sector, len, region, &mut self.rng) {
                Some(s) => s,
                None => {
                    self.exhausted = true;
                    return (op, self.base_sector, 0);
                }
            },
            None => sector,
        };
        (op, self.base_sector + sector, len)
    }
}

/// The offset alignment of a job: `blockalign=`, or its smallest block size.
pub fn unit_bytes(job: &JobSpec) -> u64 {
    job.blockalign
        .unwrap_or_else(|| job.block_sizes.min(job.bs))
        .max(512)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqblk_fio::job::RwMode;

    fn job(rw: RwMode, bs: u64, stride: i64) -> JobSpec {
        JobSpec {
            rw,
            bs,
            seq_stride: stride,
            ..JobSpec::default()
        }
    }

    fn offsets_bytes(o: &mut Offsets, n: usize) -> Vec<u64> {
        (0..n).map(|_| o.next().1 * 512).collect()
    }

    #[test]
    fn the_short_path_draws_what_the_general_one_does() {
        for rw in [RwMode::RandRead, RwMode::RandWrite, RwMode::RandRw] {
            let j = job(rw, 4096, 0);
            let mut fast = Offsets::new(&j, 1 << 20, 42);
            let mut general = Offsets::new(&j, 1 << 20, 42);
            assert!(fast.plain);
            general.plain = false;
            for _ in 0..10_000 {
                assert_eq!(fast.next(), general.next());
            }
        }
    }

    #[test]
    fn a_random_job_takes_every_block_once_per_pass_unless_norandommap() {
        let count = |j: &JobSpec| {
            let mut o = Offsets::new(j, 4096, 7);
            let mut seen = vec![0u32; 4096];
            for _ in 0..4096 {
                seen[(o.next().1 / 8) as usize] += 1;
            }
            seen
        };
        let mut j = job(RwMode::RandWrite, 4096, 0);
        assert!(count(&j).iter().all(|&n| n == 1));
        // bsrange: each I/O takes the blocks it covers.
        j.block_sizes = BlockSizes::Range(4096, 16384);
        let mut o = Offsets::new(&j, 4096, 7);
        let mut seen = vec![0u32; 4096];
        // Each draw takes a free block, so one pass is at most 4096 draws.
        for _ in 0..4096 {
            let (_, sector, len) = o.next();
            for b in sector / 8..(sector + len) / 8 {
                seen[b as usize] += 1;
            }
            if seen.iter().all(|&n| n >= 1) {
                break;
            }
        }
        assert!(seen.iter().all(|&n| n >= 1), "a block missed");
        j.block_sizes = BlockSizes::Fixed;
        j.norandommap = true;
        let missed = count(&j).iter().filter(|&&n| n == 0).count();
        // About 1/e of the blocks without the map.
        assert!(missed > 1000, "{missed} of 4096 missed with norandommap");
        j.random_generator = RandomGenerator::Lfsr;
        assert!(count(&j).iter().all(|&n| n == 1));
    }

    #[test]
    fn sequential_with_holes_and_backwards() {
        let mut o = Offsets::new(&job(RwMode::Read, 4096, 4096), 8, 1);
        assert_eq!(offsets_bytes(&mut o, 5), [0, 8192, 16384, 24576, 0]);
        // fio's backwards-read: rw=read:-8k with bs=4k steps back 4k.
        let mut o = Offsets::new(&job(RwMode::Read, 4096, -8192), 4, 1);
        assert_eq!(offsets_bytes(&mut o, 5), [12288, 8192, 4096, 0, 12288]);
    }

    #[test]
    fn offset_moves_the_region() {
        let mut j = job(RwMode::Write, 4096, 0);
        j.offset = 1 << 20;
        let mut o = Offsets::new(&j, 2, 1);
        assert_eq!(
            offsets_bytes(&mut o, 3),
            [1 << 20, (1 << 20) + 4096, 1 << 20]
        );
    }

    #[test]
    fn block_sizes_follow_bssplit_and_bsrange_and_stay_aligned() {
        let mut j = job(RwMode::RandRead, 65536, 0);
        j.block_sizes = BlockSizes::Split(
            BlockSizes::parse_split("4k/10:64k/").unwrap(),
            vec![(8192, 100)],
        );
        j.blockalign = Some(4096);
        let mut o = Offsets::new(&j, 1024, 3);
        let mut big = 0;
        for _ in 0..10_000 {
            let (_, sector, len) = o.next();
            assert_eq!(sector % 8, 0);
            assert!(len == 8 || len == 128, "{len}");
            assert!((sector + len) * 512 <= 1024 * 4096);
            big += u32::from(len == 128);
        }
        assert!((8500..9500).contains(&big), "{big} of 10000 were 64k");
        j.rw = RwMode::Write;
        let mut o = Offsets::new(&j, 1024, 3);
        assert!((0..100).all(|_| o.next().2 == 16));
        j.block_sizes = BlockSizes::Range(4096, 16384);
        j.blockalign = None;
        j.rw = RwMode::Read;
        let mut o = Offsets::new(&j, 4, 3);
        let mut seen = Vec::new();
        for _ in 0..50 {
            let (_, sector, len) = o.next();
            assert!([8, 16, 24, 32].contains(&len));
            assert!(sector + len <= 32);
            seen.push(len);
        }
        assert!(seen.iter().any(|&l| l != seen[0]));
        assert_eq!(
            BlockSizes::parse_split("4k/50:8k/40").unwrap_err(),
            "the percentages add up to 90, not 100"
        );
    }

    #[test]
    fn random_n_and_percentage_random_mix_sequential_runs_in() {
        // rw=randread:4: a new random offset every 4th I/O, sequential
        // in between.
        let mut j = job(RwMode::RandRead, 4096, 4);
        let mut o = Offsets::new(&j, 1 << 20, 9);
        assert!(!o.plain);
        // As fio: every 4th I/O is random, the 3 after it follow on.
        let offs = offsets_bytes(&mut o, 12);
        assert_eq!(offs[..3], [0, 4096, 8192], "{offs:?}");
        for i in 4..7 {
            assert_eq!(offs[i], offs[3] + (i as u64 - 3) * 4096, "{offs:?}");
        }
        j.rw_sequencer_identical = true;
        let mut o = Offsets::new(&j, 1 << 20, 9);
        let offs = offsets_bytes(&mut o, 8);
        assert!(offs[4..7].iter().all(|&x| x == offs[3]), "{offs:?}");
        // percentage_random=0: all sequential.
        let mut j = job(RwMode::RandWrite, 4096, 0);
        j.percentage_random = [0; 3];
        let mut o = Offsets::new(&j, 64, 9);
        assert_eq!(offsets_bytes(&mut o, 3), [0, 4096, 8192]);
    }

    #[test]
    fn strided_zones_read_a_window_then_skip() {
        let mut j = job(RwMode::Read, 4096, 0);
        j.zone = crate::zone::ZoneSpec {
            size: 8192,
            skip: 8192,
            ..Default::default()
        };
        let mut o = Offsets::new(&j, 16, 1);
        assert_eq!(
            offsets_bytes(&mut o, 6),
            [0, 4096, 16384, 20480, 32768, 36864]
        );
    }
}
