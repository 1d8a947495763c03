//! Targets (Linux `struct target_type`): what one line of a table does with
//! the I/O that falls in its range.
//!
//! The stacked driver cuts each request into pieces, one per target and
//! never across a target's [`Target::max_io_len`] boundary, and asks the
//! target to [`Target::map`] each piece: send it to one or more legs
//! (remapped, without copying), fill it with zeros, or fail it. When a
//! child sent to a leg ends, the target decides in [`Target::end_io`]
//! whether that is the piece's end or whether to try another leg.

mod ctor;
pub(crate) mod target_type;

mod delay;
mod error;
mod flakey;
mod linear;
pub mod mirror;
mod striped;
mod zero;

pub use ctor::{usage, Ctor};
pub use target_type::{EndAction, Io, Route, Sent, Target};

pub use delay::Delay;
pub use error::Error as ErrorTarget;
pub use flakey::Flakey;
pub use linear::Linear;
pub use mirror::{Mirror, MirrorReads, MirrorWrites, WriteLegs};
pub use striped::{StripeMap, Striped};
pub use zero::Zero;

use crate::table::TableError;

/// The targets a table may name.
pub const TARGETS: &[&str] = &[
    "linear", "striped", "zero", "error", "delay", "flakey", "mirror",
];

/// Build the target of one line.
pub fn build(c: &mut Ctor<'_, '_>) -> Result<Box<dyn Target>, TableError> {
    Ok(match c.line.target.as_str() {
        "linear" => Box::new(Linear::new(c)?),
        "striped" => Box::new(Striped::new(c)?),
        "zero" => Box::new(Zero::new(c)?),
        "error" => Box::new(ErrorTarget::new(c)?),
        "delay" => Box::new(Delay::new(c)?),
        "flakey" => Box::new(Flakey::new(c)?),
        "mirror" => Box::new(Mirror::new(c)?),
        other => {
            let near = mqblk_core::spec::nearest(other, TARGETS.iter().copied())
                .map(|n| format!(" (did you mean `{n}`?)"))
                .unwrap_or_default();
            return Err(TableError::new(
                c.line.line,
                3,
                "target",
                format!(
                    "unknown target `{other}`{near}; known: {}",
                    TARGETS.join(", ")
                ),
            ));
        }
    })
}
