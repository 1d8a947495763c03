//! Where each I/O of a job goes: fio's `rw=` (sequential, with fio's
//! `rw=TYPE:N` holes and backward strides, or random), `offset=`, the
//! read/write mix, and `random_distribution=` (uniform, zipf, pareto,
//! normal). Drawn without a clock and without allocating; the uniform path
//! is a multiply and a shift.

use mqblk::Op;

use super::job::{BlockSizes, Distribution, JobSpec, Zones};

/// xorshift64*: two shifts, a multiply; plenty for offsets.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[inline(always)]
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in 0..n without a division.
    #[inline(always)]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in [0, 1).
    #[inline(always)]
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Terms of the zipf normalising sum computed exactly; the rest of the sum
/// is its integral (as fio caps its own at ten million).
const ZIPF_TERMS_MAX: u64 = 10_000_000;

/// A skewed draw of a block rank in 0..n, scattered over the region by a
/// hash (as fio does, so hot blocks are not all at the start).
enum Skew {
    Uniform,
    /// Gray et al.'s zipf generator ("Quickly generating billion-record
    /// synthetic databases"), as fio uses.
    Zipf {
        theta: f64,
        zetan: f64,
        alpha: f64,
        eta: f64,
    },
    Pareto {
        power: f64,
    },
    Normal {
        dev_blocks: f64,
    },
    /// Cumulative access fractions and the zones' block ranges.
    Zoned {
        zones: Zones,
    },
}

fn zeta(n: u64, theta: f64) -> f64 {
    let exact = n.min(ZIPF_TERMS_MAX);
    let mut sum = 0.0;
    for i in 1..=exact {
        sum += (i as f64).powf(-theta);
    }
    if n > exact {
        // ∫ x^-θ dx from exact to n.
        let a = 1.0 - theta;
        sum += ((n as f64).powf(a) - (exact as f64).powf(a)) / a;
    }
    sum
}

fn scatter(rank: u64, n: u64) -> u64 {
    // A 64-bit mix (splitmix64's finaliser), then into range.
    let mut z = rank.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    ((u128::from(z) * u128::from(n)) >> 64) as u64
}

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
    /// Random, uniform, one block size, no trim: the common job, drawn
    /// by a short path that gives the same sequence as the general one.
    plain: bool,
}

impl Offsets {
    /// The offsets of `job` over `blocks` blocks of its region, from `seed`.
    /// Setup, not the hot path: a zipf job sums its normalising constant
    /// here.
    pub fn new(job: &JobSpec, blocks: u64, seed: u64) -> Offsets {
        let bs_sectors = unit_bytes(job) >> 9;
        let blocks = blocks.max(1);
        let skew = match job.distribution {
            Distribution::Uniform => Skew::Uniform,
            Distribution::Zipf(theta) => {
                let zetan = zeta(blocks, theta);
                let zeta2 = zeta(2.min(blocks), theta);
                Skew::Zipf {
                    theta,
                    zetan,
                    alpha: 1.0 / (1.0 - theta),
                    eta: (1.0 - (2.0 / blocks as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
                }
            }
            Distribution::Pareto(h) => Skew::Pareto {
                power: h.ln() / (1.0 - h).ln(),
            },
            Distribution::Normal(dev_percent) => Skew::Normal {
                dev_blocks: blocks as f64 * dev_percent / 100.0,
            },
            Distribution::Zoned(zones) => Skew::Zoned { zones },
        };
        let step_bytes = job.bs as i64 + job.seq_stride;
        // A backward job starts at its region's last block, as fio does.
        let region_sectors = blocks * bs_sectors;
        let max_sectors = (job.block_sizes.max(job.bs) >> 9).min(region_sectors);
        let next_sector = if step_bytes < 0 {
            region_sectors - max_sectors
        } else {
            0
        };
        let plain = job.rw.is_random()
            && matches!(skew, Skew::Uniform)
            && job.block_sizes == BlockSizes::Fixed
            && !job.rw.is_trim()
            && bs_sectors == max_sectors;
        Offsets {
            plain,
            random: job.rw.is_random(),
            blocks,
            bs_sectors,
            max_sectors,
            sizes: job.block_sizes.clone(),
            base_sector: job.offset >> 9,
            next_sector,
            step_sectors: job.seq_stride / 512,
            read_percent: job.rw.read_percent(job.rwmixread),
            trim: job.rw.is_trim(),
            skew,
            rng: Rng(seed | 1),
        }
    }

    #[inline]
    fn random_block(&mut self) -> u64 {
        let n = self.blocks;
        match self.skew {
            Skew::Uniform => self.rng.below(n),
            Skew::Zipf {
                theta,
                zetan,
                alpha,
                eta,
            } => {
                let u = self.rng.unit();
                let uz = u * zetan;
                let rank = if uz < 1.0 {
                    0
                } else if uz < 1.0 + 0.5f64.powf(theta) {
                    1
                } else {
                    ((n as f64) * (eta * u - eta + 1.0).powf(alpha)) as u64
                };
                scatter(rank.min(n - 1), n)
            }
            Skew::Pareto { power } => {
                let rank = ((n - 1) as f64 * self.rng.unit().powf(power)) as u64;
                scatter(rank.min(n - 1), n)
            }
            Skew::Zoned { zones } => {
                let u = self.rng.unit() * 100.0;
                let (mut acc, mut start) = (0.0, 0.0);
                let mut pick = (0.0, 100.0);
                for &(a, size) in &zones.zones[..zones.len] {
                    acc += a;
                    pick = (start, size);
                    if u < acc {
                        break;
                    }
                    start += size;
                }
                let first = (pick.0 / 100.0 * n as f64) as u64;
                let len = ((pick.1 / 100.0 * n as f64) as u64).max(1);
                (first + self.rng.below(len)).min(n - 1)
            }
            Skew::Normal { dev_blocks } => {
                // Box-Muller, clamped into the region.
                let u1 = self.rng.unit().max(f64::MIN_POSITIVE);
                let u2 = self.rng.unit();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let x = n as f64 / 2.0 + z * dev_blocks;
                (x.max(0.0) as u64).min(n - 1)
            }
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

    /// The next I/O's operation, first sector and length in sectors.
    #[inline(always)]
    pub fn next(&mut self) -> (Op, u64, u64) {
        if self.plain {
            let op = match self.read_percent {
                100 => Op::Read,
                0 => Op::Write,
                p if (self.rng.next() % 100) < u64::from(p) => Op::Read,
                _ => Op::Write,
            };
            let s = self.rng.below(self.blocks) * self.bs_sectors;
            return (op, self.base_sector + s, self.max_sectors);
        }
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
        let sector = if self.random {
            let s = self.random_block() * self.bs_sectors;
            // A long I/O near the end moves back to fit, staying aligned.
            if s + len > region {
                (region - len) / self.bs_sectors * self.bs_sectors
            } else {
                s
            }
        } else {
            let mut s = self.next_sector;
            if s + len > region {
                s = 0;
            }
            let mut n = s as i64 + len as i64 + self.step_sectors;
            if n < 0 {
                // Backwards past the start: wrap to the last whole I/O.
                n = (region - self.max_sectors) as i64;
            } else if n as u64 + len > region {
                n = 0;
            }
            self.next_sector = n as u64;
            s
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
    use crate::bench::job::RwMode;

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
    fn skewed_distributions_stay_in_range_and_are_skewed() {
        for d in [
            "zipf:1.2",
            "pareto:0.9",
            "normal:5",
            "zoned:60/10:30/20:10/",
        ] {
            let mut j = job(RwMode::RandRead, 4096, 0);
            j.distribution = Distribution::parse(d).unwrap();
            let n = 1000u64;
            let mut o = Offsets::new(&j, n, 7);
            let mut hits = vec![0u32; n as usize];
            for _ in 0..20_000 {
                let b = o.next().1 / 8;
                assert!(b < n, "{d}: block {b}");
                hits[b as usize] += 1;
            }
            hits.sort_unstable_by(|a, b| b.cmp(a));
            let top: u32 = hits[..10].iter().sum();
            // Uniform would put about 1% in the 10 hottest blocks.
            assert!(top > 20_000 / 100 * 3, "{d}: top 10 blocks got {top}");
        }
        assert_eq!(Distribution::parse("zipf:1"), None);
        assert_eq!(Distribution::parse("pareto:1.5"), None);
        assert_eq!(Distribution::parse("lognormal"), None);
        assert_eq!(Distribution::parse("random"), Some(Distribution::Uniform));
    }
}
