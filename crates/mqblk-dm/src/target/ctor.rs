//! A target's constructor (Linux `dm_target`'s `ctr`): the line it is
//! built from, the legs it opens, its arguments read one by one, and the
//! argument syntax each target shows in errors.

use crate::extent::Use;
use crate::legs::{LegId, LegSet};
use crate::table::{TableError, TableLine};

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
            let reason = format!(
                "sectors {offset}..{} run past `{spec}`, which has {have} sectors",
                offset.saturating_add(sectors)
            );
            // An offset inside the device: the line is too long for what
            // is left of it (field 2). An offset past its end: the offset.
            return Err(if offset < have {
                TableError::new(
                    self.line.line,
                    2,
                    "length",
                    format!(
                        "{reason}: from offset {offset}, {what} `{spec}` holds at most {} sectors of this line",
                        have - offset
                    ),
                )
            } else {
                self.err(i + 1, "offset", reason)
            });
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
