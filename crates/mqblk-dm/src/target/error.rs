//! `error`: every I/O fails (Linux dm-error), to test what sits above.

use mqblk_core::driver::Status;

use super::ctor::Ctor;
use super::target_type::{Io, Route, Target};
use crate::legs::LegId;
use crate::table::TableError;

/// Fails everything with an I/O error.
#[derive(Debug)]
pub struct Error;

impl Error {
    /// Build (no arguments).
    pub fn new(c: &mut Ctor<'_, '_>) -> Result<Error, TableError> {
        c.no_more(0)?;
        Ok(Error)
    }
}

impl Target for Error {
    fn name(&self) -> &'static str {
        "error"
    }

    fn map(&self, _io: &Io, _hwq: u16, route: &mut Route) {
        route.fail(Status::IoError);
    }

    fn legs(&self) -> Vec<LegId> {
        Vec::new()
    }
}
