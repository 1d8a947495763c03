//! What one experiment hands back to `repro` to be written: its table of
//! points, the seed's figures beside ours, the plot and notes.

use super::table::{SeedRow, Table};
use crate::plot::chart::Figure;

/// What an experiment hands back to be written.
pub struct Outcome {
    /// Every point, one row each.
    pub points: Table,
    /// The seed's figures beside ours.
    pub seed: Vec<SeedRow>,
    /// The plot.
    pub figure: Figure,
    /// What a reader should know (the workload, the seed's method).
    pub notes: Vec<String>,
}
