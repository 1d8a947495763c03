//! `mqblk repro NAME`: the command line over [`mqblk_repro`], which runs
//! the seeds' experiments and writes their tables, plots and report.

use std::path::PathBuf;

use anyhow::Result;

/// `mqblk repro`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ReproArgs {
    /// The experiment: readv, submits, iorl, many-disks, mq-scaling, plug,
    /// part-cache, descriptor, copies, mapping; `all` for every one and a
    /// report (DIR/index.html); `list` to name them.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Multiply every point's run time by F (1: each experiment takes
    /// under 2 minutes on 2 cores; 0.01 checks that it runs).
    #[arg(long, value_name = "F", default_value = "1")]
    pub scale: f64,
    /// The output directory (default: mqblk-repro/NAME, or mqblk-repro for
    /// `all`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Run `mqblk repro`.
pub fn repro_command(args: &ReproArgs) -> Result<()> {
    mqblk_repro::run(&mqblk_repro::ReproOptions {
        name: args.name.clone(),
        scale: args.scale,
        out: args.out.clone(),
    })
}
