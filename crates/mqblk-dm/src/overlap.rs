//! An overlap: what a table error carries when two lines, or two legs of
//! one line, map onto the same lower sectors ([`crate::extent`] finds it).

/// Two lines, or two legs of one line, over the same lower sectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The lower device's spec, as the later line names it.
    pub spec: String,
    /// The earlier claim: its line and field.
    pub first: (usize, usize),
    /// The later claim: its line and field.
    pub second: (usize, usize),
    /// The sectors of the lower device both map onto, `start..end`.
    pub sectors: std::ops::Range<u64>,
}
