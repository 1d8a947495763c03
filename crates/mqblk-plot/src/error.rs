//! What can go wrong reading reports and drawing them: one error for the
//! crate, naming the file or the panel.

use std::path::PathBuf;

/// Why a plot was not made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A report could not be read: missing, past its size cap, not text.
    #[error(transparent)]
    Read(#[from] mqblk_core::input::InputError),
    /// A file holds no fio-shaped report with jobs.
    #[error(
        "{}: no fio-shaped JSON report with jobs in it (expected the output of `mqblk bench \
         --output-format=json` or `fio --output-format=json`)",
        path.display()
    )]
    NoReport {
        /// The file.
        path: PathBuf,
    },
    /// A report has no `jobs` array.
    #[error("report {report}: no jobs array")]
    NoJobsArray {
        /// The report's label (its file's name).
        report: String,
    },
    /// The reports together hold no job.
    #[error("no jobs in {inputs}")]
    NoJobs {
        /// The files, as given.
        inputs: String,
    },
    /// A figure without panels.
    #[error("nothing to plot")]
    NothingToPlot,
    /// No font for the labels could be loaded; the message says which
    /// were tried and how to name one.
    #[error("{0}")]
    Font(String),
    /// plotters could not draw a part of the figure.
    #[error("drawing {what}: {reason}")]
    Draw {
        /// The part: a panel's title, the background, the caption.
        what: String,
        /// plotters' error.
        reason: String,
    },
    /// A figure could not be written.
    #[error("writing {}: {reason}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// plotters' error.
        reason: String,
    },
}

/// The crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
