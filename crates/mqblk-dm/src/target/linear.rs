//! `linear DEV OFFSET`: the target's range is `DEV`'s sectors from
//! `OFFSET` on (Linux dm-linear).

use mqblk_core::driver::Op;

use super::ctor::Ctor;
use super::target_type::{Io, Route, Target};
use crate::legs::LegId;
use crate::table::TableError;

/// A linear mapping onto one leg.
#[derive(Debug)]
pub struct Linear {
    leg: LegId,
    offset_bytes: u64,
}

impl Linear {
    /// Build from `DEV OFFSET`.
    pub fn new(c: &mut Ctor<'_, '_>) -> Result<Linear, TableError> {
        let offset = c.num(1, "offset")?;
        c.no_more(2)?;
        let leg = c.leg(0, offset, c.line.len)?;
        Ok(Linear::on(leg, offset << 9))
    }

    /// A linear mapping onto `leg` from `offset_bytes` (built in code).
    pub fn on(leg: LegId, offset_bytes: u64) -> Linear {
        Linear { leg, offset_bytes }
    }
}

impl Target for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    #[inline]
    fn map(&self, io: &Io, _hwq: u16, route: &mut Route) {
        route.to_leg(self.leg, self.offset_bytes + io.offset_bytes);
    }

    fn routes(&self) -> bool {
        true
    }

    #[inline]
    fn route(&self, _op: Op, offset_bytes: u64, _len: u64, _hwq: u16) -> Option<(LegId, u64)> {
        Some((self.leg, self.offset_bytes + offset_bytes))
    }

    fn legs(&self) -> Vec<LegId> {
        vec![self.leg]
    }

    fn linear(&self) -> Option<(LegId, u64)> {
        Some((self.leg, self.offset_bytes))
    }
}
