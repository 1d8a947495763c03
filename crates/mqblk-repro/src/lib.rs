//! mqblk-repro: the seeds' experiments, one function each, run on the
//! workload engine (`mqblk-bench`) in this process, and `all`, every one
//! of them and a report. It sits above `mqblk-bench` (every point is a
//! bench run: the same jobs, devices and counters as `mqblk bench`) and
//! `mqblk-plot` (each experiment draws its figure with its `chart`), and
//! below `mqblk-cli`, whose `mqblk repro NAME` parses the arguments into
//! a [`ReproOptions`] and calls [`run`].
//!
//! Each experiment runs its points through the bench's own engine, in this
//! process (the same jobs, devices and counters as `mqblk bench`), every
//! point `point::ROUNDS` times, and writes a directory:
//!
//! - `points/NN-LABEL.json`: the fio-shaped JSON of every run, as
//!   `mqblk bench --output-format=json` prints it;
//! - `NAME.csv`: one row per point, the plotted figures as median, `_min`
//!   and `_max`;
//! - `NAME.md`: the seed's figures beside ours, each with its source (the
//!   seed's file and its table, figure or section), then every point;
//! - `NAME.svg`, `NAME.png`: the plot, the runs' range as error bars, the
//!   seed's figures as black dashed lines, their sources as its caption.
//!
//! `mqblk repro all --out DIR` runs them all into `DIR/NAME/` and writes
//! `DIR/index.html` (`index`), one page that needs no server.
//!
//! Modules: `point` runs one point and its rounds, `kernel_counters`
//! reads what the kernel counts around it, `syscalls` counts system
//! calls with strace, `table` writes tables, `seed` names the seeds,
//! `outcome` is what an experiment hands back, `experiment` what one
//! is and what running it gave, `machine` and
//! `index` make the report, `queue_modes` runs a point in every queue
//! mode at each count (for iorl, many-disks and mq-scaling); then one
//! module per experiment.

pub(crate) mod point;

pub(crate) mod kernel_counters;

pub(crate) mod syscalls;

pub(crate) mod table;

pub(crate) mod seed;

pub(crate) mod outcome;

pub(crate) mod experiment;

pub(crate) mod machine;

pub(crate) mod index;

pub(crate) mod queue_modes;

pub(crate) mod readv;

pub(crate) mod submits;

pub(crate) mod iorl;

pub(crate) mod many_disks;

pub(crate) mod mq_scaling;

pub(crate) mod plug;

pub(crate) mod part_cache;

pub(crate) mod descriptor;

pub(crate) mod copies;

pub(crate) mod mapping;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context as _, Result};

pub use experiment::{Experiment, Written};
pub use point::Runner;

/// What to run, and where: `mqblk repro`'s arguments.
#[derive(Clone, Debug)]
pub struct ReproOptions {
    /// The experiment (an [`Experiment::name`] of [`EXPERIMENTS`]); [`ALL`]
    /// for every one and a report (DIR/index.html); `list` to name them.
    pub name: String,
    /// Every point's run time multiplied by this (1: each experiment takes
    /// under 2 minutes on 2 cores; 0.01 checks that it runs).
    pub scale: f64,
    /// The output directory (default: mqblk-repro/NAME, or mqblk-repro for
    /// `all`).
    pub out: Option<PathBuf>,
}

/// Every experiment, in the order the report gives them.
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        name: "readv",
        title: "readv: seed 000 Table 3, read against readv on ram and file devices",
        question: "Does a read of one buffer cut into many segments cost more than a read of \
                   the same bytes into one?",
        seed_answer: "Before its readv patch, Linux 2.4 served a readv of 16 pieces of 4 KiB \
                      as 16 blocking reads, one after another: 104 MB/s against 240 MB/s for \
                      reads of 64 KiB over 32 disks, with far less CPU idle. With the patch, \
                      readv matched read (241 MB/s); 2.5.17 reached 150.",
        run: readv::run,
    },
    Experiment {
        name: "submits",
        title: "submits: seed 000 Table 8, pieces and requests per 128 KiB read",
        question: "Into how many pieces and requests is one large read cut on its way to the \
                   device?",
        seed_answer: "Linux 2.4's raw I/O cut every 128 KiB read into 256 buffer heads of 512 \
                      bytes, each entering the request queue and tried for a merge; the \
                      rawvary patch used 4 KiB pieces, 32 per read, eight times fewer calls.",
        run: submits::run,
    },
    Experiment {
        name: "iorl",
        title: "iorl: seed 000 §5, one lock for every device against one per device and mq",
        question: "What does one lock over every device's queue cost, against a lock per \
                   device and against none?",
        seed_answer: "Under one global request lock, 66.2% of 8 CPUs' time went to spinning \
                      on it; a lock per queue cut that to 7.6% (and 0.3% on the new locks), \
                      raised the decision-support workload's score by 78% and the disk \
                      benchmark from 133 to 235 MB/s.",
        run: iorl::run,
    },
    Experiment {
        name: "many-disks",
        title: "many-disks: seed 000 Table 3, the disk microbenchmark over 1 to 32 devices",
        question: "With many slow disks and a process reading each, how much throughput and \
                   idle CPU does one global lock take away?",
        seed_answer: "32 processes reading 64 KiB at a time from 32 disks: 133 MB/s with 21% \
                      of the CPU idle under the global lock, 235 MB/s and 61% idle with a lock \
                      per queue, 243 MB/s and 97% idle on 2.5.17.",
        run: many_disks::run,
    },
    Experiment {
        name: "mq-scaling",
        title: "mq-scaling: seed 004, IOPS against submitting threads in the three queue modes",
        question: "Do IOPS grow with the cores that submit, through one shared queue and \
                   through a queue per context?",
        seed_answer: "One core submits about 800 thousand IOPS through Linux's single-queue \
                      layer, and however many cores submit, that layer stays under a million; \
                      with submitters on four or eight sockets it falls to about 125 \
                      thousand. A software queue per core, mapped onto hardware queues, \
                      scales with the cores, to 10 million IOPS.",
        run: mq_scaling::run,
    },
    Experiment {
        name: "plug",
        title: "plug: seed 003, the cost of plugging, clock reads and allocations per I/O",
        question: "What do plugging, clock reads and heap allocations cost per I/O on a fast \
                   device?",
        seed_answer: "On an SSD doing 30–40 thousand IOPS, a cheaper clock source gave over \
                      10% more IOPS, turning plugging off about 1%, and folding five \
                      allocations per I/O into one, with a cache of requests, 3–4%.",
        run: plug::run,
    },
    Experiment {
        name: "part-cache",
        title: "part-cache: seed 003, partition lookup with and without the one-hit cache",
        question: "What does counting each I/O in its partition cost, and how much does a \
                   one-hit cache of the last partition save?",
        seed_answer: "Counting I/O per partition scanned the partition table on every I/O, \
                      which showed in profiles for high partition numbers; a one-hit cache \
                      removed most of that time and gave a few percent more IOPS, because \
                      submissions come in batches to one partition.",
        run: part_cache::run,
    },
    Experiment {
        name: "descriptor",
        title: "descriptor: seed 000 §8, bytes per in-flight I/O",
        question: "How much memory does one in-flight I/O take?",
        seed_answer: "Linux 2.4.17's kiobuf, the descriptor of raw I/O, took 8792 bytes, \
                      8192 of them in two arrays of 1024 entries, one per sector; the seed's \
                      patch brought it down to 608 bytes.",
        run: descriptor::run,
    },
    Experiment {
        name: "copies",
        title: "copies: seed 001, reads through the page cache against the direct path",
        question: "How much CPU does copying through the page cache cost, against a direct \
                   read into the caller's buffer?",
        seed_answer: "Reading about 30 MB/s from two disks with read(2) took about 45% of a \
                      400 MHz CPU, mostly copying from buffer to buffer; mmap with mlock was \
                      slower still (107 s against 70 s), because it serialised a process's \
                      reads across the disks.",
        run: copies::run,
    },
    Experiment {
        name: "mapping",
        title: "mapping: seed 002, buffers registered once against buffers set up per I/O",
        question: "What does setting a buffer up for the device on every I/O cost, against \
                   doing it once?",
        seed_answer: "Mapping each I/O buffer into the kernel's address space costs a TLB \
                      shootdown on every core when the mapping goes; buffers that are never \
                      mapped avoid it, and cut system time by 30% when hashing a 5 GB file.",
        run: mapping::run,
    },
];

/// The name that runs every experiment.
pub const ALL: &str = "all";

/// Run `mqblk repro`: list, one experiment (its report in Markdown on
/// stdout) or all of them.
pub fn run(args: &ReproOptions) -> Result<()> {
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 100.0) {
        bail!(
            "--scale={}: expected a factor above 0 and at most 100",
            args.scale
        );
    }
    if args.name == "list" {
        for e in EXPERIMENTS {
            println!("{:<12} {}", e.name, e.title);
        }
        println!("{ALL:<12} every experiment, and DIR/index.html");
        return Ok(());
    }
    if args.name == ALL {
        let out = args
            .out
            .clone()
            .unwrap_or_else(|| PathBuf::from("mqblk-repro"));
        return all(args, &out);
    }
    let Some(exp) = EXPERIMENTS.iter().find(|e| e.name == args.name) else {
        let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        bail!(
            "no experiment {:?}; the experiments are: {}, or {ALL}",
            args.name,
            names.join(", ")
        );
    };
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("mqblk-repro").join(exp.name));
    let w = run_one(exp, args, &out)?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(markdown(&w, args).as_bytes())?;
    stdout.flush()?;
    Ok(())
}

/// Every experiment into `out/NAME`, then `out/index.html`.
fn all(args: &ReproOptions, out: &Path) -> Result<()> {
    let t0 = Instant::now();
    let mut done = Vec::new();
    let mut failed: Vec<(&str, String)> = Vec::new();
    for exp in EXPERIMENTS {
        match run_one(exp, args, &out.join(exp.name)) {
            Ok(w) => done.push(w),
            Err(e) => {
                eprintln!("mqblk: repro {}: {e:#}", exp.name);
                failed.push((exp.name, format!("{e:#}")));
            }
        }
    }
    let page = index::page(&done, &failed, args.scale, t0.elapsed());
    let path = out.join("index.html");
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "wrote {} ({} experiments in {:.0} s)",
        path.display(),
        done.len(),
        t0.elapsed().as_secs_f64()
    );
    for w in &done {
        println!("{:<12} {:>6.1} s", w.exp.name, w.elapsed.as_secs_f64());
    }
    if !failed.is_empty() {
        let names: Vec<&str> = failed.iter().map(|f| f.0).collect();
        bail!(
            "{} of {} experiments failed: {} (the report says why)",
            failed.len(),
            EXPERIMENTS.len(),
            names.join(", ")
        );
    }
    Ok(())
}

/// Run `exp` into `out` and write its files.
fn run_one(exp: &'static Experiment, args: &ReproOptions, out: &Path) -> Result<Written> {
    std::fs::create_dir_all(out.join("points"))
        .with_context(|| format!("creating {}", out.display()))?;
    let t0 = Instant::now();
    eprintln!("mqblk: repro {}: {}", exp.name, exp.title);
    let mut runner = Runner::new(args.scale, out);
    let outcome = (exp.run)(&mut runner)?;
    let w = Written {
        exp,
        outcome,
        points: runner.points(),
        elapsed: t0.elapsed(),
    };
    let stem = out.join(exp.name);
    let csv = stem.with_extension("csv");
    std::fs::write(&csv, w.outcome.points.csv())
        .with_context(|| format!("writing {}", csv.display()))?;
    let md_path = stem.with_extension("md");
    std::fs::write(&md_path, markdown(&w, args))
        .with_context(|| format!("writing {}", md_path.display()))?;
    // The data is written before the plot, so a missing font loses no
    // measurement.
    let (svg, png) = w.outcome.figure.render(&stem)?;
    eprintln!(
        "mqblk: wrote {}, {}, {}, {} and {} runs under {} in {:.1} s",
        csv.display(),
        md_path.display(),
        svg.display(),
        png.display(),
        w.points,
        out.join("points").display(),
        w.elapsed.as_secs_f64()
    );
    Ok(w)
}

fn markdown(w: &Written, args: &ReproOptions) -> String {
    let exp = w.exp;
    let mut s = format!("# {}\n\n", exp.title);
    let scale = if args.scale == 1.0 {
        String::new()
    } else {
        format!(" --scale={}", args.scale)
    };
    s.push_str(&format!(
        "Command: `mqblk repro {}{scale}` ({} runs, {} cores, {:.1} s, mqblk {}).\n\n",
        exp.name,
        w.points,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
        w.elapsed.as_secs_f64(),
        env!("CARGO_PKG_VERSION"),
    ));
    s.push_str(&format!("**The question.** {}\n\n", exp.question));
    s.push_str(&format!("**The seed's answer.** {}\n\n", exp.seed_answer));
    s.push_str(&format!("**Ours.** {}\n\n", w.outcome.answer));
    s.push_str("## The seed beside ours\n\n");
    s.push_str(&table::seed_markdown(&w.outcome.seed));
    s.push_str("\n## Every point\n\n");
    s.push_str(&w.outcome.points.markdown());
    if !w.outcome.notes.is_empty() {
        s.push_str("\n## Notes\n\n");
        for n in &w.outcome.notes {
            s.push_str(&format!("- {n}\n"));
        }
    }
    s.push_str(&format!("\n![{}]({}.png)\n", exp.title, exp.name));
    s
}
