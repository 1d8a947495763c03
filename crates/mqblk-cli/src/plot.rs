//! `mqblk plot RESULT.json...`: the command line over [`mqblk_plot`],
//! which reads the reports and draws the charts.

use std::path::PathBuf;

use anyhow::Result;

/// `mqblk plot`'s arguments.
#[derive(clap::Args, Debug)]
pub struct PlotArgs {
    /// Reports to plot: `mqblk bench --output-format=json` or `fio
    /// --output-format=json` (or json+) output.
    #[arg(value_name = "RESULT.json", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Where to write the figure: OUT.svg and OUT.png (default: the first
    /// input without its extension).
    #[arg(long, value_name = "OUT")]
    pub out: Option<PathBuf>,
    /// What the bars show.
    #[arg(long, value_enum, default_value = "iops")]
    pub metric: Metric,
}

/// The bar panel's figure ([`mqblk_plot::Metric`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Metric {
    /// I/Os per second.
    Iops,
    /// Bytes per second.
    Bw,
}

/// Run `mqblk plot`: the jobs' figures on stdout, then the files written.
pub fn plot_command(args: &PlotArgs) -> Result<()> {
    let metric = match args.metric {
        Metric::Iops => mqblk_plot::Metric::Iops,
        Metric::Bw => mqblk_plot::Metric::Bw,
    };
    let plotted = mqblk_plot::plot(&args.inputs, args.out.as_deref(), metric)?;
    print!("{}", plotted.summary);
    println!(
        "wrote {} and {}",
        plotted.svg.display(),
        plotted.png.display()
    );
    Ok(())
}
