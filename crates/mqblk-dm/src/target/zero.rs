//! `zero`: reads return zeros, writes are dropped (Linux dm-zero).

use super::ctor::Ctor;
use super::target_type::{Io, Route, Target};
use crate::legs::LegId;
use crate::table::TableError;

/// Zeros in, nothing out.
#[derive(Debug)]
pub struct Zero;

impl Zero {
    /// Build (no arguments).
    pub fn new(c: &mut Ctor<'_, '_>) -> Result<Zero, TableError> {
        c.no_more(0)?;
        Ok(Zero)
    }
}

impl Target for Zero {
    fn name(&self) -> &'static str {
        "zero"
    }

    fn map(&self, _io: &Io, _hwq: u16, route: &mut Route) {
        route.zero();
    }

    fn legs(&self) -> Vec<LegId> {
        Vec::new()
    }
}
