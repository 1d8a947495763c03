//! Table parsing (control plane): dmsetup's table format, one target per
//! line, `START LENGTH TARGET ARGS...` in 512-byte sectors.
//!
//! Parsing only splits and checks the shape: starts from 0, no gap, no
//! overlap, lengths above 0. Each target checks its own arguments when it is
//! built ([`crate::target`]). Every error names the line and the field.

use std::fmt;

/// One line of a table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableLine {
    /// Line number in the table, from 1 (comments and blank lines count).
    pub line: usize,
    /// First sector of the stacked device this line covers.
    pub start: u64,
    /// Sectors it covers.
    pub len: u64,
    /// Target name (`linear`, `striped`, ...).
    pub target: String,
    /// The target's arguments, split on whitespace.
    pub args: Vec<String>,
}

/// A parsed table: lines in order, covering `[0, sectors)` without gaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// The lines, by start.
    pub lines: Vec<TableLine>,
}

impl Table {
    /// Sectors the table covers.
    pub fn sectors(&self) -> u64 {
        self.lines.last().map_or(0, |l| l.start + l.len)
    }
}

/// A table that cannot be used, with the line and field at fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableError {
    /// Line number, from 1 (0: the table as a whole).
    pub line: usize,
    /// Field number on that line, from 1 (START is 1, LENGTH 2, TARGET 3,
    /// the target's first argument 4; 0: the line as a whole).
    pub field: usize,
    /// What the field is (`start`, `length`, `chunk size`, ...).
    pub what: String,
    /// What is wrong, and what was expected.
    pub reason: String,
    /// For a lower range that another line or leg already maps: both, and
    /// the sectors they share.
    pub overlap: Option<Box<crate::overlap::Overlap>>,
}

impl TableError {
    /// An error at `line`, `field` (`what`).
    pub fn new(line: usize, field: usize, what: &str, reason: impl Into<String>) -> TableError {
        TableError {
            line,
            field,
            what: what.to_string(),
            reason: reason.into(),
            overlap: None,
        }
    }
}

impl fmt::Display for TableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.field) {
            (0, _) => write!(f, "{}: {}", self.what, self.reason),
            (l, 0) => write!(f, "line {l}: {}: {}", self.what, self.reason),
            (l, n) => write!(f, "line {l}, field {n} ({}): {}", self.what, self.reason),
        }
    }
}

impl std::error::Error for TableError {}

/// Largest table accepted, in lines.
pub const MAX_LINES: usize = 1 << 16;

/// Largest table file read, in bytes: [`MAX_LINES`] lines of 256 bytes.
/// A larger file (or `/dev/zero`) is refused after reading one byte more.
pub const FILE_BYTES_MAX: u64 = (MAX_LINES as u64) << 8;

/// Parse a table: lines separated by newlines (a file) or by `;` (the
/// inline `dm-table:` form). `#` starts a comment.
pub fn parse(text: &str) -> Result<Table, TableError> {
    let mut lines = Vec::new();
    let mut next = 0u64;
    for (i, raw) in text.split(['\n', ';']).enumerate() {
        let line = i + 1;
        let body = raw.split('#').next().unwrap_or("").trim();
        if body.is_empty() {
            continue;
        }
        if lines.len() == MAX_LINES {
            return Err(TableError::new(
                line,
                0,
                "table",
                format!("more than {MAX_LINES} lines"),
            ));
        }
        let mut f = body.split_whitespace();
        let start = number(line, 1, "start", f.next())?;
        let len = number(line, 2, "length", f.next())?;
        let target = f
            .next()
            .ok_or_else(|| TableError::new(line, 3, "target", "missing; expected e.g. `linear`"))?;
        if len == 0 {
            return Err(TableError::new(
                line,
                2,
                "length",
                "is 0; a line covers at least one sector",
            ));
        }
        if start != next {
            let reason = if start > next {
                format!("starts at sector {start}, leaving a gap: the previous line ends at sector {next}")
            } else {
                format!("starts at sector {start}, overlapping the previous line, which ends at sector {next}")
            };
            return Err(TableError::new(line, 1, "start", reason));
        }
        next = start.checked_add(len).ok_or_else(|| {
            TableError::new(line, 2, "length", format!("{start} + {len} overflows"))
        })?;
        if next > u64::MAX >> 9 {
            return Err(TableError::new(
                line,
                2,
                "length",
                format!("ends at sector {next}, past the largest device"),
            ));
        }
        lines.push(TableLine {
            line,
            start,
            len,
            target: target.to_string(),
            args: f.map(str::to_string).collect(),
        });
    }
    if lines.is_empty() {
        return Err(TableError::new(
            0,
            0,
            "table",
            "has no lines; expected `START LENGTH TARGET ARGS...`, e.g. `0 2048 linear ram,size=1M 0`",
        ));
    }
    Ok(Table { lines })
}

/// A number field: decimal sectors (or a count).
pub fn number(line: usize, field: usize, what: &str, v: Option<&str>) -> Result<u64, TableError> {
    let v = v.ok_or_else(|| TableError::new(line, field, what, "missing"))?;
    v.parse::<u64>().map_err(|_| {
        TableError::new(
            line,
            field,
            what,
            format!("`{v}` is not a non-negative decimal number"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_on_newlines_and_semicolons() {
        let t = parse("0 8 zero\n# c\n8 8 linear ram,size=1M 0 ; 16 8 error").unwrap();
        assert_eq!(t.lines.len(), 3);
        assert_eq!(t.lines[1].args, ["ram,size=1M", "0"]);
        assert_eq!(t.lines[2].line, 4);
        assert_eq!(t.sectors(), 24);
    }

    #[test]
    fn gaps_overlaps_and_bad_numbers_name_line_and_field() {
        let e = parse("0 8 zero\n9 8 zero").unwrap_err();
        assert_eq!((e.line, e.field), (2, 1));
        assert!(e.to_string().contains("gap"), "{e}");
        let e = parse("0 8 zero\n4 8 zero").unwrap_err();
        assert!(e.to_string().contains("overlapping"), "{e}");
        let e = parse("0 x zero").unwrap_err();
        assert_eq!((e.line, e.field, e.what.as_str()), (1, 2, "length"));
        let e = parse("0 8").unwrap_err();
        assert_eq!(e.field, 3);
        assert!(parse(" \n# only a comment").is_err());
        let e = parse("0 0 zero").unwrap_err();
        assert_eq!(e.field, 2);
    }

    proptest::proptest! {
        #[test]
        fn any_text_parses_or_errs_without_panic(s in "\\PC{0,200}") {
            let _ = parse(&s);
        }
    }
}
