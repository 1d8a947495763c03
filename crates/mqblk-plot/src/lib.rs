//! mqblk-plot: charts of `mqblk bench` and fio JSON reports, so that fio
//! and mqblk land on one chart.
//!
//! It sits after the pipeline, outside it: it reads what a bench (the
//! workload engine over `mqblk::Device`s) or fio wrote, and draws it. It
//! opens no device and links no part of the layer, as Linux keeps
//! `blktrace`'s and fio's plotting out of the kernel tree. `mqblk plot`
//! is a thin command over [`plot`]; the seeds' experiments (`mqblk repro`)
//! draw their own figures with [`chart`].
//!
//! By call order:
//! - [`plot`]: read the reports, build the figure, write SVG and PNG;
//! - [`input`]: fio's `json` and `json+`, mqblk's bench JSON, and a file
//!   of several reports (as `--status-interval` writes) into [`Job`]s;
//! - [`figure`]: the three panels of a set of jobs: IOPS (or bandwidth)
//!   bars per job and direction, the clat percentile curves, and the
//!   latency histogram from the log-linear buckets (`clat_ns.bins`: mqblk
//!   writes them always, fio with `--output-format=json+`);
//! - [`chart`]: drawing any [`chart::Figure`], as SVG and PNG.
//!
//! ```no_run
//! let plotted = mqblk_plot::plot(
//!     &["randrw.json".into()],
//!     None,
//!     mqblk_plot::Metric::Iops,
//! )?;
//! print!("{}", plotted.summary);
//! println!("wrote {} and {}", plotted.svg.display(), plotted.png.display());
//! # Ok::<(), mqblk_plot::Error>(())
//! ```

#![forbid(unsafe_code)]

pub mod input;

pub mod figure;

pub mod chart;

mod error;

use std::path::{Path, PathBuf};

pub use error::{Error, Result};
pub use figure::{figure, rebin, summary, Metric};
pub use input::{Direction, Job};

/// What [`plot`] wrote, and the jobs' figures as text.
#[derive(Clone, Debug)]
pub struct Plotted {
    /// The SVG file.
    pub svg: PathBuf,
    /// The PNG file.
    pub png: PathBuf,
    /// One line per job and direction: IOPS, bandwidth and p99.
    pub summary: String,
}

/// Plot the reports `inputs` into `out`.svg and `out`.png (default: the
/// first input without its extension): every job of every report on one
/// figure, its bars showing `metric`.
pub fn plot(inputs: &[PathBuf], out: Option<&Path>, metric: Metric) -> Result<Plotted> {
    let mut jobs = Vec::new();
    for path in inputs {
        jobs.extend(input::load(path)?);
    }
    if jobs.is_empty() {
        return Err(Error::NoJobs {
            inputs: display_list(inputs),
        });
    }
    let stem = match out {
        Some(o) => o.to_path_buf(),
        None => inputs[0].with_extension(""),
    };
    let (svg, png) = figure(&jobs, metric).render(&stem)?;
    Ok(Plotted {
        svg,
        png,
        summary: summary(&jobs),
    })
}

fn display_list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
