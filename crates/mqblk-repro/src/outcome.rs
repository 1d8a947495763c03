//! What one experiment hands back to `repro` to be written: its table of
//! points, the seed's figures beside ours, the plot, our answer in a
//! sentence or two, and notes.

use super::table::{SeedRow, Table};
use mqblk_plot::chart::Figure;

/// What an experiment hands back to be written.
pub struct Outcome {
    /// Every point, one row each.
    pub points: Table,
    /// The seed's figures beside ours, each with its source.
    pub seed: Vec<SeedRow>,
    /// The plot (its caption names the seed's sources).
    pub figure: Figure,
    /// Our answer to the experiment's question, from this run's figures.
    pub answer: String,
    /// What a reader should know (the workload, the seed's method).
    pub notes: Vec<String>,
}
