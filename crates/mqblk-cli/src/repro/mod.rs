//! `mqblk repro NAME`: the seeds' experiments, one command each.
//!
//! Each experiment runs its points through the bench's own engine, in this
//! process (the same jobs, devices and counters as `mqblk bench`), and
//! writes a directory:
//!
//! - `points/NN-LABEL.json`: the fio-shaped JSON of every point, as
//!   `mqblk bench --output-format=json` prints it;
//! - `NAME.csv`: one row per point;
//! - `NAME.md`: the seed's own figure beside ours, then every point;
//! - `NAME.svg`, `NAME.png`: the plot.
//!
//! Where the seed's figure is not recorded in this repository, the table
//! says so instead of a number.
//!
//! Modules: [`point`] runs one point, [`table`] writes tables, [`outcome`]
//! is what an experiment hands back, and one module per experiment.

pub mod point;

pub mod table;

pub mod outcome;

pub mod readv;

pub mod submits;

pub mod iorl;

pub mod mq_scaling;

pub mod plug;

pub mod descriptor;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use outcome::Outcome;
pub use point::Runner;

/// `mqblk repro`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ReproArgs {
    /// The experiment: readv, submits, iorl, mq-scaling, plug, part-cache,
    /// descriptor (or `list`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Multiply every point's run time by F (1: each experiment takes
    /// under 2 minutes on 2 cores; 0.01 checks that it runs).
    #[arg(long, value_name = "F", default_value = "1")]
    pub scale: f64,
    /// The output directory (default: mqblk-repro/NAME).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// One experiment.
pub struct Experiment {
    /// Its command-line name.
    pub name: &'static str,
    /// The seed and what it measured.
    pub title: &'static str,
    run: fn(&mut Runner) -> Result<Outcome>,
}

/// Every experiment, in the order (part-cache is refused until
/// partitions exist).
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "readv",
        title: "readv: seed 000 Table 3, read versus readv on ram and file devices",
        run: readv::run,
    },
    Experiment {
        name: "submits",
        title: "submits: seed 000 Table 8, requests and bios per 128 KiB read",
        run: submits::run,
    },
    Experiment {
        name: "iorl",
        title: "iorl: seed 000 §5, one lock for every device against one per device and mq",
        run: iorl::run,
    },
    Experiment {
        name: "mq-scaling",
        title: "mq-scaling: seed 004, IOPS against submitting threads in the three queue modes",
        run: mq_scaling::run,
    },
    Experiment {
        name: "plug",
        title: "plug: seed 003, the cost of plugging and of clock reads per I/O",
        run: plug::run,
    },
    Experiment {
        name: "descriptor",
        title: "descriptor: seed 000 §8, bytes per in-flight I/O",
        run: descriptor::run,
    },
];

/// The experiment that waits for partitions.
pub const PART_CACHE: &str = "part-cache";

/// Run `mqblk repro`.
pub fn repro_command(args: &ReproArgs) -> Result<()> {
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 100.0) {
        bail!(
            "--scale={}: expected a factor above 0 and at most 100",
            args.scale
        );
    }
    let names = || {
        let mut n: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        n.push(PART_CACHE);
        n.join(", ")
    };
    if args.name == "list" {
        for e in EXPERIMENTS {
            println!("{:<12} {}", e.name, e.title);
        }
        println!(
            "{PART_CACHE:<12} part-cache: seed 003, partition lookup with and without the \
             one-hit cache (needs partitions)"
        );
        return Ok(());
    }
    if args.name == PART_CACHE {
        bail!(
            "repro part-cache measures partition lookup (4 to 128 partitions, with and without \
             the one-hit cache), and mqblk has no partitions yet: it runs once the partitions \
             issue (SPEC,part=N) has landed"
        );
    }
    let Some(exp) = EXPERIMENTS.iter().find(|e| e.name == args.name) else {
        bail!(
            "no experiment {:?}; the experiments are: {}",
            args.name,
            names()
        );
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("mqblk-repro").join(exp.name));
    std::fs::create_dir_all(out.join("points"))
        .with_context(|| format!("creating {}", out.display()))?;
    let t0 = Instant::now();
    eprintln!("mqblk: repro {}: {}", exp.name, exp.title);
    let mut runner = Runner::new(args.scale, &out);
    let outcome = (exp.run)(&mut runner)?;
    let elapsed = t0.elapsed();
    write(exp, args, &out, &outcome, &runner, elapsed)
}

fn write(
    exp: &Experiment,
    args: &ReproArgs,
    out: &Path,
    outcome: &Outcome,
    runner: &Runner,
    elapsed: Duration,
) -> Result<()> {
    let stem = out.join(exp.name);
    let csv = stem.with_extension("csv");
    std::fs::write(&csv, outcome.points.csv())
        .with_context(|| format!("writing {}", csv.display()))?;
    let md = markdown(exp, args, outcome, runner, elapsed);
    let md_path = stem.with_extension("md");
    std::fs::write(&md_path, &md).with_context(|| format!("writing {}", md_path.display()))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(md.as_bytes())?;
    stdout.flush()?;
    // The data is written before the plot, so a missing font loses no
    // measurement.
    let (svg, png) = outcome.figure.render(&stem)?;
    eprintln!(
        "mqblk: wrote {}, {}, {}, {} and {} points under {} in {:.1} s",
        csv.display(),
        md_path.display(),
        svg.display(),
        png.display(),
        runner.points(),
        out.join("points").display(),
        elapsed.as_secs_f64()
    );
    Ok(())
}

fn markdown(
    exp: &Experiment,
    args: &ReproArgs,
    outcome: &Outcome,
    runner: &Runner,
    elapsed: Duration,
) -> String {
    let mut s = format!("# {}\n\n", exp.title);
    let scale = if args.scale == 1.0 {
        String::new()
    } else {
        format!(" --scale={}", args.scale)
    };
    s.push_str(&format!(
        "Command: `mqblk repro {}{scale}` ({} points, {} cores, {:.1} s, mqblk {}).\n\n",
        exp.name,
        runner.points(),
        runner.cores(),
        elapsed.as_secs_f64(),
        env!("CARGO_PKG_VERSION"),
    ));
    s.push_str("## The seed beside ours\n\n");
    s.push_str(&table::seed_markdown(&outcome.seed));
    s.push_str("\n## Every point\n\n");
    s.push_str(&outcome.points.markdown());
    if !outcome.notes.is_empty() {
        s.push_str("\n## Notes\n\n");
        for n in &outcome.notes {
            s.push_str(&format!("- {n}\n"));
        }
    }
    s.push_str(&format!("\n![{}]({}.png)\n", exp.title, exp.name));
    s
}
