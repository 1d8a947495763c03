//! Targets (Linux `struct target_type`): what one line of a table does with
//! the I/O that falls in its range.
//!
//! The stacked driver cuts each request into pieces, one per target and
//! never across a target's [`Target::max_io_len`] boundary, and asks the
//! target to [`Target::map`] each piece: send it to one or more legs
//! (remapped, without copying), fill it with zeros, or fail it. When a
//! child sent to a leg ends, the target decides in [`Target::end_io`]
//! whether that is the piece's end or whether to try another leg.

mod delay;
mod error;
mod flakey;
mod linear;
pub mod mirror;
mod striped;
mod zero;

pub use delay::Delay;
pub use error::Error as ErrorTarget;
pub use flakey::Flakey;
pub use linear::Linear;
pub use mirror::Mirror;
pub use striped::Striped;
pub use zero::Zero;

use mqblk_core::driver::{BioFlags, Op, Status};
use mqblk_core::QueueLimits;

use crate::extent::Use;
use crate::legs::{LegId, LegSet};
use crate::table::{TableError, TableLine};

/// One piece of a request, as its target sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Io {
    /// Operation (never `Flush`: flushes go to every leg, unmapped).
    pub op: Op,
    /// The request's flags (FUA, ...).
    pub flags: BioFlags,
    /// Offset of the piece within the target's range, in bytes.
    pub offset_bytes: u64,
    /// Length of the piece, in bytes.
    pub len_bytes: u64,
}

/// Where a piece goes, filled by [`Target::map`].
#[derive(Debug, Default)]
pub struct Route {
    pub(crate) sends: smallvec::SmallVec<[Sent; 4]>,
    pub(crate) zero: bool,
    pub(crate) fail: Option<Status>,
    pub(crate) requeue: bool,
}

/// One child: the piece, remapped onto a leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The leg.
    pub leg: LegId,
    /// Offset on the leg, in bytes.
    pub offset_bytes: u64,
    /// Hold the child back this long before it is submitted (`delay`).
    pub delay_ns: u64,
}

impl Route {
    /// Send the piece to `leg` at `offset_bytes`. Called several times, the
    /// piece goes to every such leg (a mirror's write).
    #[inline]
    pub fn to_leg(&mut self, leg: LegId, offset_bytes: u64) {
        self.sends.push(Sent {
            leg,
            offset_bytes,
            delay_ns: 0,
        });
    }

    /// As [`Route::to_leg`], submitted only after `delay_ns`.
    pub fn to_leg_after(&mut self, leg: LegId, offset_bytes: u64, delay_ns: u64) {
        self.sends.push(Sent {
            leg,
            offset_bytes,
            delay_ns,
        });
    }

    /// End the piece here: a read gets zeros, anything else succeeds.
    pub fn zero(&mut self) {
        self.zero = true;
    }

    /// End the piece here with `status`.
    pub fn fail(&mut self, status: Status) {
        self.fail = Some(status);
    }

    /// Not now: the whole request goes back to the hardware queue and is
    /// mapped again later (Linux `DM_MAPIO_REQUEUE`; a mirror region being
    /// copied). Pieces of the same request already routed are handed to
    /// their target's [`Target::unmap`].
    pub fn requeue(&mut self) {
        self.requeue = true;
    }

    pub(crate) fn clear(&mut self) {
        self.sends.clear();
        self.zero = false;
        self.fail = None;
        self.requeue = false;
    }
}

/// What to do when a child ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndAction {
    /// This child is done; fold `status` into the request's.
    Done(Status),
    /// Send the same child again, to `leg` at `offset_bytes` (a mirror read
    /// that failed on one leg).
    Retry {
        /// The leg to try.
        leg: LegId,
        /// Offset on that leg.
        offset_bytes: u64,
    },
}

/// A target: one line of a table, built from its arguments.
pub trait Target: Send + Sync + 'static {
    /// The target's name, as in the table (`linear`).
    fn name(&self) -> &'static str;

    /// Bytes from `offset_bytes` (within the target) to the next boundary
    /// a piece must not cross: a stripe's chunk. Default: none.
    #[inline]
    fn max_io_len(&self, _offset_bytes: u64) -> u64 {
        u64::MAX
    }

    /// Route one piece. `hwq` is the hardware queue asking (for targets that
    /// balance or keep per-queue state).
    fn map(&self, io: &Io, hwq: u16, route: &mut Route);

    /// A child sent to `leg` ended with `status`. Default: it is done.
    #[inline]
    fn end_io(&self, _io: &Io, _leg: LegId, status: Status) -> EndAction {
        EndAction::Done(status)
    }

    /// A child routed by [`Target::map`] to `leg` is dropped unsent,
    /// because another piece of its request asked for a requeue. Called
    /// once per such child, in place of [`Target::end_io`]. Default:
    /// nothing.
    fn unmap(&self, _io: &Io, _leg: LegId) {}

    /// A flush sent to `leg` (one of [`Target::legs`]) failed with
    /// `status`; return what the request should see. Default: the error.
    /// Called only on failure.
    fn end_flush(&self, _leg: LegId, status: Status) -> Status {
        status
    }

    /// This target as `Any`, for control-plane calls specific to one
    /// target type (`mirror::replace`). Default: none.
    fn as_any(&self) -> Option<&dyn std::any::Any> {
        None
    }

    /// The legs this target sends to (flushes go to each).
    fn legs(&self) -> Vec<LegId>;

    /// A line for `mqblk dm status` (Linux `dmsetup status`).
    fn status(&self) -> String {
        String::new()
    }

    /// Limits this target adds on top of its legs' (a stripe's chunk).
    fn limits(&self, _lim: &mut QueueLimits) {}

    /// For a plain linear mapping: its leg and the offset on it, in bytes
    /// (a table of one such line is opened as a remapped window).
    fn linear(&self) -> Option<(LegId, u64)> {
        None
    }

    /// True if it holds children back in time ([`Route::to_leg_after`]):
    /// the device is then polled rather than slept on, so that a delayed
    /// child is sent when it is due.
    fn delays(&self) -> bool {
        false
    }

    /// True if it has a say in flushes ([`Target::map_flush`]).
    fn maps_flush(&self) -> bool {
        false
    }

    /// A flush of the device, which goes to every leg: fail it
    /// ([`Route::fail`]) or hold back its child to a leg
    /// ([`Route::to_leg_after`]; the offset is ignored). Called only if
    /// [`Target::maps_flush`].
    fn map_flush(&self, _hwq: u16, _route: &mut Route) {}
}

/// What a target constructor gets: its line, and the legs to open.
pub struct Ctor<'a, 'b> {
    /// The line.
    pub line: &'a TableLine,
    /// Opens the lower devices it names.
    pub legs: &'a mut LegSet<'b>,
}

impl Ctor<'_, '_> {
    /// Argument `i` (from 0), or an error naming it.
    pub fn arg(&self, i: usize, what: &str) -> Result<&str, TableError> {
        self.line.args.get(i).map(String::as_str).ok_or_else(|| {
            TableError::new(
                self.line.line,
                4 + i,
                what,
                format!(
                    "missing; `{}` takes {}",
                    self.line.target,
                    usage(&self.line.target)
                ),
            )
        })
    }

    /// Argument `i` as a number.
    pub fn num(&self, i: usize, what: &str) -> Result<u64, TableError> {
        crate::table::number(self.line.line, 4 + i, what, Some(self.arg(i, what)?))
    }

    /// An error about argument `i`.
    pub fn err(&self, i: usize, what: &str, reason: impl Into<String>) -> TableError {
        TableError::new(self.line.line, 4 + i, what, reason)
    }

    /// No arguments past `n`.
    pub fn no_more(&self, n: usize) -> Result<(), TableError> {
        if self.line.args.len() > n {
            return Err(self.err(
                n,
                "argument",
                format!(
                    "`{}` is one too many; `{}` takes {}",
                    self.line.args[n],
                    self.line.target,
                    usage(&self.line.target)
                ),
            ));
        }
        Ok(())
    }

    /// Open the leg named by argument `i`, and check that `sectors` sectors
    /// from `offset` (argument `i + 1`'s value) lie inside it, and that no
    /// other line or leg maps onto them ([`crate::extent`]).
    pub fn leg(&mut self, i: usize, offset: u64, sectors: u64) -> Result<LegId, TableError> {
        self.leg_as(i, offset, sectors, "device", Use::All)
    }

    /// As [`Ctor::leg`], for a leg that `what` names in errors ("stripe 1")
    /// and that gets the I/O `use_` says.
    pub fn leg_as(
        &mut self,
        i: usize,
        offset: u64,
        sectors: u64,
        what: &str,
        use_: Use,
    ) -> Result<LegId, TableError> {
        let spec = self.arg(i, "device")?.to_string();
        let (id, dev) = self
            .legs
            .open(&spec)
            .map_err(|e| self.err(i, "device", format!("`{spec}` does not open: {e}")))?;
        let have = dev.capacity_bytes() >> 9;
        if offset.checked_add(sectors).is_none_or(|end| end > have) {
            return Err(self.err(
                i + 1,
                "offset",
                format!(
                    "sectors {offset}..{} run past `{spec}`, which has {have} sectors",
                    offset.saturating_add(sectors)
                ),
            ));
        }
        self.legs.claims.claim(
            &dev,
            &spec,
            (self.line.line, 4 + i),
            what,
            use_,
            offset..offset + sectors,
        )?;
        Ok(id)
    }
}

/// The targets a table may name.
pub const TARGETS: &[&str] = &[
    "linear", "striped", "zero", "error", "delay", "flakey", "mirror",
];

/// The argument syntax of `target`, for errors.
pub fn usage(target: &str) -> &'static str {
    match target {
        "linear" => "`DEV OFFSET`",
        "striped" => "`NR_STRIPES CHUNK_SECTORS (DEV OFFSET)...`",
        "zero" | "error" => "no arguments",
        "delay" => "`DEV OFFSET MS [DEV OFFSET MS [DEV OFFSET MS]]` (reads; writes; flushes)",
        "flakey" => "`DEV OFFSET UP_SECONDS DOWN_SECONDS`",
        "mirror" => "`LOG_TYPE #LOG_ARGS LOG_ARGS... #DEVS (DEV OFFSET)... [#FEATURES FEATURES...]`, e.g. `core 1 1024 2 ram,size=1G 0 ram,size=1G 0` or `disk 2 file:/var/mirror.log 1024 2 DEV 0 DEV 0`",
        _ => "arguments this build does not know",
    }
}

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
