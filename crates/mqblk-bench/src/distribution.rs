//! fio's `random_distribution=`: how a random job picks its next block
//! (uniform, zipf, pareto, normal, zoned, zoned_abs, sequence), parsed from fio's
//! spelling and drawn without a clock or an allocation. [`super::pattern`]
//! asks it for a block when the job's I/O is random.
//!
//! As fio's `lib/zipf.c` and `lib/gauss.c`: a skewed rank is scattered
//! over the region by a hash (so the hot blocks are not all at its start),
//! then moved by an offset, the optional center (`zipf:1.2:0.25`), or a
//! random one.

use mqblk::Op;

/// Terms of the zipf normalising sum computed exactly; the rest of the sum
/// is its integral (as fio caps its own at ten million).
const ZIPF_TERMS_MAX: u64 = 10_000_000;

pub(crate) use mqblk_fio::distribution::Distribution;

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
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A zone drawn by [`Skew`]: cumulative access, first block, blocks.
#[derive(Clone, Copy, Debug)]
pub struct BlockZone {
    access_cum: f64,
    first: u64,
    len: u64,
}

/// A distribution set up over `n` blocks: what [`Skew::block`] draws from.
pub enum Skew {
    /// Uniform.
    Uniform,
    /// Gray et al.'s zipf generator ("Quickly generating billion-record
    /// synthetic databases"), as fio uses.
    Zipf {
        theta: f64,
        zetan: f64,
        alpha: f64,
        eta: f64,
        offset: u64,
    },
    /// Pareto.
    Pareto { power: f64, offset: u64 },
    /// Normal, as a sum of twelve uniforms (fio's `gauss_next`).
    Normal { dev_blocks: u64, offset: u64 },
    /// The zones of reads, writes and trims, in block units.
    Zoned { sets: [Vec<BlockZone>; 3] },
    /// fio's `sequence`: the block of the k-th draw of a direction is
    /// `order[k % len]`, plus `(k / len) * len` with a stride (fio counts
    /// each direction's I/Os issued; these are the draws).
    Sequence {
        order: Vec<u64>,
        stride: bool,
        /// Draws so far, per fio direction (read, write, trim).
        drawn: [u64; 3],
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

/// A 64-bit mix (splitmix64's finaliser), into 0..n.
fn scatter(rank: u64, n: u64) -> u64 {
    let mut z = rank.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    ((u128::from(z) * u128::from(n)) >> 64) as u64
}

impl Skew {
    /// `d` over `n` blocks of `block_bytes`; `rng` draws the random hot
    /// spot of a distribution without a center; `sequence_stride` is
    /// `random_sequence_stride=`. Setup, not the hot path: a zipf job sums
    /// its normalising constant here.
    pub fn new(
        d: &Distribution,
        n: u64,
        block_bytes: u64,
        sequence_stride: bool,
        rng: &mut Rng,
    ) -> Skew {
        let n = n.max(1);
        let offset = |center: Option<f64>, rng: &mut Rng| match center {
            Some(c) => ((n as f64) * c) as u64 % n,
            None => rng.below(n),
        };
        match d {
            Distribution::Uniform => Skew::Uniform,
            Distribution::Zipf { theta, center } => {
                let theta = *theta;
                let zetan = zeta(n, theta);
                let zeta2 = zeta(2.min(n), theta);
                Skew::Zipf {
                    theta,
                    zetan,
                    alpha: 1.0 / (1.0 - theta),
                    eta: (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
                    offset: offset(*center, rng),
                }
            }
            Distribution::Pareto { h, center } => Skew::Pareto {
                power: h.ln() / (1.0 - h).ln(),
                offset: offset(*center, rng),
            },
            Distribution::Normal { dev, center } => {
                let dev_blocks = ((n as f64 * dev / 100.0).ceil() as u64).min(n / 2);
                // fio centers on the middle; a center moves it.
                let offset = match center {
                    Some(c) => ((n as f64) * (c - 0.5)).rem_euclid(n as f64) as u64 % n,
                    None => 0,
                };
                Skew::Normal { dev_blocks, offset }
            }
            Distribution::Zoned(z) | Distribution::ZonedAbs(z) => {
                let absolute = matches!(d, Distribution::ZonedAbs(_));
                let sets = [0, 1, 2].map(|i| {
                    let mut cum = 0.0;
                    let mut first = 0u64;
                    let mut out = Vec::with_capacity(z.sets[i].len());
                    for zone in &z.sets[i] {
                        cum += zone.access;
                        let len = if absolute {
                            (zone.size / block_bytes.max(1) as f64) as u64
                        } else {
                            (zone.size / 100.0 * n as f64) as u64
                        };
                        // A zone past the region's end is cut to it (as
                        // fio: zoned_abs beyond the file is clamped).
                        let first_in = first.min(n - 1);
                        let len = len.max(1).min(n - first_in);
                        out.push(BlockZone {
                            access_cum: cum,
                            first: first_in,
                            len,
                        });
                        first = first.saturating_add(len);
                    }
                    out
                });
                Skew::Zoned { sets }
            }
            Distribution::Sequence(order) => Skew::Sequence {
                order: order.iter().map(|&b| u64::from(b)).collect(),
                stride: sequence_stride,
                drawn: [0; 3],
            },
        }
    }

    /// Whether this is the uniform distribution (the engine's short path).
    pub fn is_uniform(&self) -> bool {
        matches!(self, Skew::Uniform)
    }

    /// The next block, in 0..n, for an I/O of `op`; only a `sequence`
    /// gives n or more, when its blocks go past the region (fio ends the
    /// job there).
    #[inline]
    pub fn block(&mut self, rng: &mut Rng, n: u64, op: Op) -> u64 {
        let n = n.max(1);
        match self {
            Skew::Uniform => rng.below(n),
            &mut Skew::Zipf {
                theta,
                zetan,
                alpha,
                eta,
                offset,
            } => {
                let u = rng.unit();
                let uz = u * zetan;
                let rank = if uz < 1.0 {
                    0
                } else if uz < 1.0 + 0.5f64.powf(theta) {
                    1
                } else {
                    ((n as f64) * (eta * u - eta + 1.0).powf(alpha)) as u64
                };
                (scatter(rank.min(n - 1), n) + offset) % n
            }
            &mut Skew::Pareto { power, offset } => {
                let rank = ((n - 1) as f64 * rng.unit().powf(power)) as u64;
                (scatter(rank.min(n - 1), n) + offset) % n
            }
            &mut Skew::Normal { dev_blocks, offset } => {
                // fio's gauss_next: the mean of twelve uniform draws, then
                // a uniform spread of the deviation.
                let mut sum = 0u64;
                for _ in 0..12 {
                    sum += rng.below(n + 1);
                }
                let mut x = sum.div_ceil(12) as i64;
                if dev_blocks > 0 {
                    let mut dev = rng.below(dev_blocks) as i64 - (dev_blocks / 2) as i64;
                    while dev != 0 && !(0..n as i64).contains(&(x + dev)) {
                        dev /= 2;
                    }
                    x += dev;
                }
                (x.clamp(0, n as i64 - 1) as u64 + offset) % n
            }
            Skew::Zoned { sets } => {
                let set = &sets[super::counts::direction(op).min(2)];
                let u = rng.unit() * 100.0;
                let zone = set
                    .iter()
                    .find(|z| u < z.access_cum)
                    .or(set.last())
                    .copied()
                    .unwrap_or(BlockZone {
                        access_cum: 100.0,
                        first: 0,
                        len: n,
                    });
                (zone.first + rng.below(zone.len)).min(n - 1)
            }
            Skew::Sequence {
                order,
                stride,
                drawn,
            } => {
                let k = &mut drawn[super::counts::direction(op).min(2)];
                let len = order.len().max(1) as u64;
                let at = order.get((*k % len) as usize).copied().unwrap_or(0);
                let b = if *stride {
                    (*k / len).saturating_mul(len).saturating_add(at)
                } else {
                    at
                };
                *k += 1;
                b
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqblk_fio::distribution::SEQUENCE_MAX;

    #[test]
    fn a_sequence_parses_and_cycles_with_or_without_its_stride() {
        assert_eq!(
            Distribution::parse("sequence:2, 0,1"),
            Ok(Distribution::Sequence(vec![2, 0, 1]))
        );
        assert!(Distribution::parse("sequence:").is_err());
        assert!(Distribution::parse("sequence:1,+2").is_err());
        let many = vec!["1"; SEQUENCE_MAX + 1].join(",");
        assert!(Distribution::parse(&format!("sequence:{many}")).is_err());
        let d = Distribution::Sequence(vec![2, 0, 1]);
        let mut rng = Rng(1);
        for (stride, want) in [(false, [2, 0, 1, 2, 0, 1]), (true, [2, 0, 1, 5, 3, 4])] {
            let mut skew = Skew::new(&d, 12, 4096, stride, &mut rng);
            let got: Vec<u64> = (0..6).map(|_| skew.block(&mut rng, 12, Op::Read)).collect();
            assert_eq!(got, want);
            // Writes count their own draws, as fio's io_issues per direction.
            assert_eq!(skew.block(&mut rng, 12, Op::Write), 2);
        }
    }

    #[test]
    fn fio_s_spellings_parse() {
        assert_eq!(Distribution::parse("random"), Ok(Distribution::Uniform));
        assert_eq!(
            Distribution::parse("zipf:1.2:0.25"),
            Ok(Distribution::Zipf {
                theta: 1.2,
                center: Some(0.25)
            })
        );
        assert_eq!(
            Distribution::parse("gauss"),
            Ok(Distribution::Normal {
                dev: 10.0,
                center: None
            })
        );
        let Distribution::Zoned(z) = Distribution::parse("zoned:50/5:30/15:20/").unwrap() else {
            panic!()
        };
        assert_eq!(z.sets[0].len(), 3);
        assert_eq!(z.sets[0][2].size, 80.0);
        assert_eq!(z.sets[0], z.sets[2]);
        let Distribution::Zoned(z) =
            Distribution::parse("zoned:50/5:30/15:20/,50/10:50/90").unwrap()
        else {
            panic!()
        };
        assert_eq!(z.sets[1].len(), 2);
        assert_eq!(z.sets[2], z.sets[0]);
        let Distribution::ZonedAbs(z) =
            Distribution::parse("zoned_abs=60/20G:30/100G:10/500g").unwrap()
        else {
            panic!()
        };
        assert_eq!(z.sets[0][1].size, (100u64 << 30) as f64);
        for bad in [
            "zipf:1",
            "pareto:1.5",
            "lognormal",
            "zipf:1.2:3",
            "zoned:50/5",
            "zoned:50/60:50/60",
            "zoned_abs:100/0",
            "normal:101",
        ] {
            assert!(Distribution::parse(bad).is_err(), "{bad}");
        }
        let many: String = (0..257).map(|_| "0/0.1:").collect::<String>() + "100/";
        assert!(Distribution::parse(&format!("zoned:{many}")).is_err());
    }

    #[test]
    fn skewed_draws_stay_in_range_and_are_skewed() {
        for d in [
            "zipf:1.2",
            "zipf:0.8:0.5",
            "pareto:0.9",
            "normal:5",
            "normal:5:0.1",
            "zoned:60/10:30/20:10/",
            "zoned_abs:90/400k:10/",
        ] {
            let dist = Distribution::parse(d).unwrap_or_else(|e| {
                // zoned_abs needs a size on every zone.
                assert!(d.starts_with("zoned_abs"), "{d}: {e}");
                Distribution::parse("zoned_abs:90/400k:10/1m").unwrap()
            });
            let n = 1000u64;
            let mut rng = Rng(7);
            let mut skew = Skew::new(&dist, n, 4096, false, &mut rng);
            let mut hits = vec![0u32; n as usize];
            for _ in 0..20_000 {
                let b = skew.block(&mut rng, n, Op::Read);
                assert!(b < n, "{d}: block {b}");
                hits[b as usize] += 1;
            }
            hits.sort_unstable_by(|a, b| b.cmp(a));
            let top: u32 = hits[..100].iter().sum();
            // Uniform would put about 10% in the 100 hottest blocks.
            assert!(top > 20_000 / 100 * 15, "{d}: top 100 blocks got {top}");
        }
    }

    #[test]
    fn zoned_abs_zones_are_where_they_say() {
        let d = Distribution::parse("zoned_abs:100/40k").unwrap();
        let mut rng = Rng(3);
        let mut skew = Skew::new(&d, 1000, 4096, false, &mut rng);
        for _ in 0..1000 {
            assert!(skew.block(&mut rng, 1000, Op::Write) < 10);
        }
    }
}
