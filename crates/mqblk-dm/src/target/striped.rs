//! `striped NR_STRIPES CHUNK_SECTORS (DEV OFFSET)...`: chunks dealt round
//! robin over the legs (Linux dm-stripe, RAID 0).

use mqblk_core::QueueLimits;

use mqblk_core::driver::Op;

use super::ctor::Ctor;
use super::target_type::{Io, Route, Target};
use crate::extent::Use;
use crate::legs::LegId;
use crate::table::TableError;

/// Chunks of `chunk_bytes` dealt over the stripes in turn.
#[derive(Debug)]
pub struct Striped {
    chunk_sectors: u32,
    geometry: StripeMap,
}

/// Where a stripe's chunks lie: the arithmetic of a stripe's route, fixed
/// for the table's life, which the bio-based driver of a one-line table
/// runs inline (`bio_based::FastRoute`).
#[derive(Clone, Debug)]
pub struct StripeMap {
    chunk_bytes: u64,
    stripes: Vec<(LegId, u64)>,
    /// log2 of the chunk and of the number of stripes, when both are
    /// powers of two (the usual table): a routed bio then costs shifts
    /// and masks, not three 64-bit divisions.
    shifts: Option<(u32, u32)>,
}

impl StripeMap {
    /// The leg and the offset there of `len_bytes` at `offset_bytes`
    /// (within the target), if they lie in one chunk.
    #[inline(always)]
    pub fn route(&self, offset_bytes: u64, len_bytes: u64) -> Option<(LegId, u64)> {
        let (within, stripe, row) = match self.shifts {
            Some((c, n)) => {
                let chunk = offset_bytes >> c;
                let stripe = chunk & ((1 << n) - 1);
                (offset_bytes & (self.chunk_bytes - 1), stripe, chunk >> n)
            }
            None => {
                let chunk = offset_bytes / self.chunk_bytes;
                let n = self.stripes.len() as u64;
                (
                    offset_bytes - chunk * self.chunk_bytes,
                    chunk % n,
                    chunk / n,
                )
            }
        };
        if within + len_bytes > self.chunk_bytes {
            return None;
        }
        let (leg, base) = *self.stripes.get(stripe as usize)?;
        Some((leg, base + row * self.chunk_bytes + within))
    }
}

impl Striped {
    /// Where its chunks lie.
    pub fn geometry(&self) -> &StripeMap {
        &self.geometry
    }

    /// Build from `N CHUNK (DEV OFFSET){N}`.
    pub fn new(c: &mut Ctor<'_, '_>) -> Result<Striped, TableError> {
        let n = c.num(0, "number of stripes")?;
        if n == 0 || n > 256 {
            return Err(c.err(0, "number of stripes", format!("{n}; expected 1 to 256")));
        }
        let chunk = c.num(1, "chunk size")?;
        if chunk == 0 || chunk > u64::from(u32::MAX >> 1) {
            return Err(c.err(
                1,
                "chunk size",
                format!("{chunk} sectors; expected 1 to 2^30"),
            ));
        }
        let len = c.line.len;
        if !len.is_multiple_of(n) {
            return Err(TableError::new(
                c.line.line,
                2,
                "length",
                format!("{len} sectors is not divisible by the {n} stripes"),
            ));
        }
        let width = len / n;
        if !width.is_multiple_of(chunk) {
            return Err(TableError::new(
                c.line.line,
                2,
                "length",
                format!(
                    "{len} sectors over {n} stripes is {width} per stripe, not a multiple of the chunk size {chunk}"
                ),
            ));
        }
        let mut stripes = Vec::with_capacity(n as usize);
        for s in 0..n as usize {
            let offset = c.num(2 + 2 * s + 1, "offset")?;
            let leg = c.leg_as(2 + 2 * s, offset, width, &format!("stripe {s}"), Use::All)?;
            stripes.push((leg, offset << 9));
        }
        c.no_more(2 + 2 * n as usize)?;
        let chunk_bytes = chunk << 9;
        let shifts = (chunk_bytes.is_power_of_two() && n.is_power_of_two())
            .then(|| (chunk_bytes.trailing_zeros(), n.trailing_zeros()));
        Ok(Striped {
            chunk_sectors: chunk as u32,
            geometry: StripeMap {
                chunk_bytes,
                stripes,
                shifts,
            },
        })
    }
}

impl Target for Striped {
    fn name(&self) -> &'static str {
        "striped"
    }

    #[inline]
    fn max_io_len(&self, offset_bytes: u64) -> u64 {
        let g = &self.geometry;
        g.chunk_bytes - offset_bytes % g.chunk_bytes
    }

    #[inline]
    fn map(&self, io: &Io, _hwq: u16, route: &mut Route) {
        let g = &self.geometry;
        let chunk = io.offset_bytes / g.chunk_bytes;
        let n = g.stripes.len() as u64;
        let (leg, base) = g.stripes[(chunk % n) as usize];
        let at = base + (chunk / n) * g.chunk_bytes + io.offset_bytes % g.chunk_bytes;
        route.to_leg(leg, at);
    }

    fn routes(&self) -> bool {
        true
    }

    #[inline]
    fn route(&self, _op: Op, offset_bytes: u64, len_bytes: u64, _hwq: u16) -> Option<(LegId, u64)> {
        self.geometry.route(offset_bytes, len_bytes)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }

    fn legs(&self) -> Vec<LegId> {
        self.geometry.stripes.iter().map(|s| s.0).collect()
    }

    fn status(&self) -> String {
        format!(
            "{} stripes of {} sectors",
            self.geometry.stripes.len(),
            self.chunk_sectors
        )
    }

    fn limits(&self, lim: &mut QueueLimits) {
        // Requests that never cross a chunk go to one leg each.
        lim.chunk_sectors = if lim.chunk_sectors == 0 {
            self.chunk_sectors
        } else {
            gcd(lim.chunk_sectors, self.chunk_sectors)
        };
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
