//! fio's `random_distribution=` as a job names it (uniform, zipf, pareto,
//! normal, zoned, zoned_abs, sequence), parsed from fio's spelling.
//! mqblk-bench's `distribution` draws from it.

/// Most zones of one direction of `zoned`/`zoned_abs` (fio's limit).
pub const ZONES_MAX: usize = 256;

/// Most block indices of `sequence:` (fio's `FIO_SEQ_MAX`).
pub const SEQUENCE_MAX: usize = 64;

/// One zone of `zoned` or `zoned_abs`: the share of the accesses, and
/// its size (a percentage of the region, or bytes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Zone {
    /// Percent of the accesses.
    pub access: f64,
    /// Percent of the region (`zoned`) or bytes (`zoned_abs`).
    pub size: f64,
}

/// The zones of each direction (read, write, trim), as fio's
/// `zoned:R,W,T` gives them; one set given applies to all.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ZoneSets {
    /// Per fio direction: read, write, trim.
    pub sets: [Vec<Zone>; 3],
}

/// fio's `random_distribution=`.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum Distribution {
    /// Uniform (`random`, the default).
    #[default]
    Uniform,
    /// Zipf with exponent theta (`zipf:1.2[:center]`).
    Zipf {
        /// theta: > 0, not 1.
        theta: f64,
        /// Where the hot spot sits, 0 to 1 of the region (None: random).
        center: Option<f64>,
    },
    /// Pareto with shape h (`pareto:0.9[:center]`).
    Pareto {
        /// h: between 0 and 1.
        h: f64,
        /// As zipf's.
        center: Option<f64>,
    },
    /// Normal (`normal:DEV[:center]`, `gauss`): deviation as a percent of
    /// the region.
    Normal {
        /// Percent of the region, 0 to 100.
        dev: f64,
        /// The middle, 0 to 1 (default 0.5).
        center: Option<f64>,
    },
    /// `zoned:A/S:A/S...`: A percent of the accesses go to the next S
    /// percent of the region.
    Zoned(ZoneSets),
    /// `zoned_abs:A/SIZE:...`: as zoned, with sizes in bytes.
    ZonedAbs(ZoneSets),
    /// `sequence:B,B,...`: the blocks (in units of the job's block size)
    /// taken in this order, cycle after cycle; `random_sequence_stride=1`
    /// moves each cycle on by the sequence's length.
    Sequence(Vec<u32>),
}

impl Distribution {
    /// Parse fio's spelling; the error says what is wrong.
    pub fn parse(s: &str) -> Result<Distribution, String> {
        let s = s.trim();
        // fio's HOWTO writes `zoned_abs=...` once; take it.
        let cut = s.find([':', '=']);
        let (kind, arg) = match cut {
            Some(i) => (s[..i].trim(), Some(s[i + 1..].trim())),
            None => (s, None),
        };
        // THETA[:CENTER] for zipf, pareto and normal.
        let params = |default: f64| -> Result<(f64, Option<f64>), String> {
            let Some(a) = arg else {
                return Ok((default, None));
            };
            let mut it = a.split(':');
            let num = |t: &str| {
                t.trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| format!("{t:?} is not a number"))
            };
            let v = num(it.next().unwrap_or_default())?;
            let center = match it.next() {
                Some(c) => {
                    let c = num(c)?;
                    if !(0.0..=1.0).contains(&c) {
                        return Err(format!("the center {c} is not between 0 and 1"));
                    }
                    Some(c)
                }
                None => None,
            };
            if it.next().is_some() {
                return Err("at most two numbers".into());
            }
            Ok((v, center))
        };
        Ok(match kind {
            "random" => Distribution::Uniform,
            "zipf" => {
                let (theta, center) = params(1.2)?;
                if theta <= 0.0 || theta == 1.0 {
                    return Err(format!("zipf theta {theta}: above 0 and not 1"));
                }
                Distribution::Zipf { theta, center }
            }
            "pareto" => {
                let (h, center) = params(0.9)?;
                if h <= 0.0 || h >= 1.0 {
                    return Err(format!("pareto h {h}: between 0 and 1"));
                }
                Distribution::Pareto { h, center }
            }
            "normal" | "gauss" => {
                let (dev, center) = params(10.0)?;
                if !(0.0..=100.0).contains(&dev) {
                    return Err(format!("normal deviation {dev}: 0 to 100 (percent)"));
                }
                Distribution::Normal { dev, center }
            }
            "zoned" => Distribution::Zoned(ZoneSets::parse(arg.unwrap_or(""), false)?),
            "zoned_abs" => Distribution::ZonedAbs(ZoneSets::parse(arg.unwrap_or(""), true)?),
            "sequence" => Distribution::Sequence(parse_sequence(arg.unwrap_or(""))?),
            other => return Err(format!("unknown distribution `{other}`")),
        })
    }
}

/// `2,0,1`: up to [`SEQUENCE_MAX`] block indices.
fn parse_sequence(s: &str) -> Result<Vec<u32>, String> {
    if s.trim().is_empty() {
        return Err("sequence: expected block indices, as in sequence:2,0,1".into());
    }
    let order = s
        .split(',')
        .map(|b| {
            let b = b.trim();
            // Digits only, as fio: no sign, no suffix.
            b.parse::<u32>()
                .ok()
                .filter(|_| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()))
                .ok_or_else(|| format!("sequence: {b:?} is not a block index (0 or more)"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    if order.len() > SEQUENCE_MAX {
        return Err(format!(
            "sequence: {} block indices, at most {SEQUENCE_MAX}",
            order.len()
        ));
    }
    Ok(order)
}

impl ZoneSets {
    /// Parse `50/5:30/15:20/` (a blank size takes what is left; `zoned`)
    /// or `60/20G:30/100G:10/500g` (`zoned_abs`), up to three groups
    /// (reads, writes, trims) separated by commas.
    fn parse(s: &str, absolute: bool) -> Result<ZoneSets, String> {
        let groups: Vec<&str> = s.split(',').collect();
        if groups.len() > 3 {
            return Err("at most three groups: reads, writes, trims".into());
        }
        let mut sets: Vec<Vec<Zone>> = Vec::new();
        for g in &groups {
            if g.trim().is_empty() {
                // An empty group takes the first's (fio: "if just one set
                // is given, it'll apply to all of them").
                match sets.first() {
                    Some(first) => sets.push(first.clone()),
                    None => return Err("the first group is empty".into()),
                }
                continue;
            }
            sets.push(Self::parse_group(g, absolute)?);
        }
        let first = sets[0].clone();
        let at = |i: usize| sets.get(i).cloned().unwrap_or_else(|| first.clone());
        Ok(ZoneSets {
            sets: [at(0), at(1), at(2)],
        })
    }

    fn parse_group(g: &str, absolute: bool) -> Result<Vec<Zone>, String> {
        let mut zones = Vec::new();
        let mut blank = 0usize;
        let (mut access_total, mut size_total) = (0.0, 0.0);
        for part in g.split(':').filter(|p| !p.trim().is_empty()) {
            if zones.len() == ZONES_MAX {
                return Err(format!("more than {ZONES_MAX} zones"));
            }
            let (a, sz) = part
                .split_once('/')
                .ok_or_else(|| format!("{part:?}: expected ACCESS/SIZE"))?;
            let access: f64 = a
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| (0.0..=100.0).contains(v))
                .ok_or_else(|| format!("{a:?}: not a percentage"))?;
            let size = match sz.trim() {
                "" if !absolute => {
                    blank += 1;
                    f64::NAN
                }
                v if absolute => mqblk::spec::parse_size(v)
                    .ok()
                    .filter(|&b| b > 0)
                    .ok_or_else(|| format!("{v:?}: not a size above 0"))?
                    as f64,
                v => v
                    .parse()
                    .ok()
                    .filter(|v: &f64| *v > 0.0 && *v <= 100.0)
                    .ok_or_else(|| format!("{v:?}: not a percentage"))?,
            };
            access_total += access;
            if !size.is_nan() {
                size_total += size;
            }
            zones.push(Zone { access, size });
        }
        if zones.is_empty() {
            return Err("no zones".into());
        }
        if (access_total - 100.0).abs() > 1e-6 {
            return Err(format!(
                "the access percentages add up to {access_total}, not 100"
            ));
        }
        if !absolute && size_total > 100.0 + 1e-6 {
            return Err(format!(
                "the zone sizes add up to {size_total}%, more than 100"
            ));
        }
        let share = if blank > 0 {
            (100.0 - size_total) / blank as f64
        } else {
            0.0
        };
        for z in &mut zones {
            if z.size.is_nan() {
                z.size = share;
            }
        }
        Ok(zones)
    }
}
