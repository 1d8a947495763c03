//! mqblk-bench: fio's workload engine as a library. It takes jobs in
//! fio's terms (command-line options, a job file, or [`JobOptions`] set
//! key by key from Rust), runs them on [`mqblk::Device`]s, one thread and
//! one context per job, and hands back what was measured as types
//! ([`RunResult`]), with fio's verify and fio's reports (normal, json,
//! json+, terse) made from them.
//!
//! It sits above the layer and below the command: it opens devices by
//! their spec through `mqblk` (every driver, stack and partition that
//! `mqblk::open` knows), and `mqblk bench` in `mqblk-cli` is a thin wrapper
//! over it (arguments, the banner, the exit status); the seeds'
//! experiments (`mqblk repro`) run their points through it. As Linux keeps
//! fio out of the kernel tree, nothing of the layer depends on it. The
//! job model (the typed job, fio's option keys and job files) is
//! `mqblk-fio`, below this crate: describing a job apart from running it,
//! as fio keeps `options.c` apart from `backend.c`, and each crate under
//! 12,000 lines. Its [`options`] and [`jobfile`] are re-exported here.
//!
//! A verified job on a `ram` device, run in this process:
//!
//! ```
//! let mut options = mqblk_bench::JobOptions::default();
//! for (key, value) in [("device", "ram,size=16M"), ("rw", "randwrite"),
//!     ("bs", "4k"), ("size", "4M"), ("verify", "crc32c")] {
//!     options.set(key, Some(value))?;
//! }
//! let job = options.build("job0")?;
//! let run = mqblk_bench::run_jobs(std::slice::from_ref(&job))?;
//! run.verdict()?; // no I/O error, no verify mismatch
//! let verify = run.jobs[0].verify.as_ref().expect("verify=crc32c ran");
//! assert_eq!((run.jobs[0].write.bytes, verify.blocks_verified, verify.errors), (4 << 20, 1024, 0));
//! print!("{}", mqblk_bench::report::normal(&[job], &run));
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! The entry points, by call order:
//! - the jobs: [`JobOptions`] (one layer of fio's `key=value` settings,
//!   [`JobOptions::set`] and [`JobOptions::build`]) into a [`JobSpec`];
//!   [`jobfile::load`] reads a fio job file into jobs, the command line's
//!   options on top;
//! - the run: [`run_jobs`], or [`engine::prepare`] then [`engine::run`]
//!   for a caller that wants the devices between the two, a status line, or
//!   a [`stop::Stop`] on SIGINT;
//! - the results: [`RunResult`] (per job, per direction, plus the layer's
//!   own figures) and its [`RunResult::verdict`];
//! - the reports: [`report::normal`], [`report::json`],
//!   [`report::json_plus`] and [`report::terse`], fio's four formats.
//!
//! Inside, a run goes through these modules in order:
//!
//! ```text
//! command line ─┐
//!               ├─▶ options (one key=value setter) ─▶ job (JobSpec) ─▶ engine ─▶ result ─▶ report
//! job file ─────┘     ▲ jobfile parses fio INI
//! ```
//!
//! - in `mqblk-fio`: [`options`] (every key, its parsing and validation,
//!   and the layering of `[global]`, job sections and the command line,
//!   which wins), [`jobfile`] (fio job files into jobs), and the typed
//!   job, [`JobSpec`], with what it names (distributions, zones, verify
//!   patterns, steady state), parsed.
//! - `content`: what write buffers hold (fio's dedupe and compress
//!   options).
//! - `verify`: fio's `verify=`: headers written with each block, checked
//!   on read-back.
//! - `distribution`: `random_distribution=` drawn, and the random
//!   numbers.
//! - `random_map`: fio's random map (each block once per pass).
//! - `zone`: `zonemode=` (strided windows, emulated zoned devices).
//! - `pattern`: where each I/O goes (rw, offset, the sequencer).
//! - `rate`: `rate=`/`rate_iops=` pacing (linear or Poisson) and
//!   `rate_min=`.
//! - `flow`: `flow=`, jobs kept in proportion.
//! - `latency_target`: `latency_target=`'s queue-depth search and
//!   `max_latency=`.
//! - `clamp`: where each job's region lies on its device (percentages,
//!   `offset_increment`, the device's end).
//! - [`layout`]: fio's file layout: a job file's missing `filename=`
//!   created at its `size=` before the devices open.
//! - `memory`: what the jobs' slots will pin, checked against the
//!   memory the machine has before anything is allocated.
//! - `ending`: when the supervisor ends a job (its runtime, steady
//!   state, `exitall`).
//! - [`open`]: a device opened by its spec, its error naming it.
//! - [`stop`]: the signals: the first stops the run, a second exits, and
//!   one that comes while a device is opening says so and exits.
//! - [`engine`]: runs the jobs, one thread and one context each.
//! - `counts`: a job's counts per fio direction, published once per
//!   batch for the averaged logs.
//! - `sample`: the job's own per-I/O latencies (slat, clat, lat), taken
//!   only when a log or the report asks.
//! - `hist`: fio's latency bins, counted per completion for the
//!   histogram log.
//! - `steadystate`: `ss=`, jobs ended once their IOPS or bandwidth
//!   settles.
//! - [`status`]: the status line and `--status-interval` reports while
//!   the jobs run.
//! - [`alloc_count`]: heap allocations counted, for `allocs_per_io`
//!   (the binary installs the allocator).
//! - `result`: what was measured; [`verdict`]: whether it went well.
//! - [`stats_dir`]: the diskstats directory `iostat` and `mqblk stat`
//!   read.
//! - `log`: fio's bandwidth, IOPS and latency logs, and the files of
//!   the histogram log.
//! - `ctime`, [`degraded`]: dates and failed mirror legs as the
//!   reports write them.
//! - [`report`]: fio's text and JSON output, plus the layer's own figures.
//! - [`teardown`]: after the report, the job threads end and the devices
//!   close, within a bound when the run ended on an error or a signal.

pub use mqblk_fio::{jobfile, options};

// Pipeline order; one group per stage so that rustfmt keeps the order.
pub(crate) mod content;

pub(crate) mod verify;

pub(crate) mod distribution;

pub(crate) mod random_map;

pub(crate) mod zone;

pub(crate) mod pattern;

pub(crate) mod rate;

pub(crate) mod flow;

pub(crate) mod latency_target;

pub(crate) mod clamp;

pub mod layout;

pub(crate) mod memory;

pub mod open;

pub(crate) mod ending;

pub mod stop;

pub mod engine;

pub(crate) mod counts;

pub(crate) mod sample;

pub(crate) mod hist;

pub(crate) mod steadystate;

pub mod status;

pub mod alloc_count;

pub(crate) mod result;

pub mod verdict;

pub mod stats_dir;

pub(crate) mod log;

pub(crate) mod ctime;

pub mod degraded;

pub mod report;

pub mod teardown;

pub use mqblk_fio::{JobOptions, JobSpec, OptionError, RwMode, VerifyKind};
pub use result::{DeviceAlignment, DirResult, JobResult, LayerResult, RunResult};
pub use verify::{Mismatch, VerifyResult};

/// Run `jobs` to their end on the devices they name, in this process:
/// [`engine::prepare`], [`engine::run`] with no status line and no
/// signal handling, then the devices closed. What each job did is in the
/// result; [`RunResult::verdict`] says whether the run went well.
pub fn run_jobs(jobs: &[JobSpec]) -> anyhow::Result<RunResult> {
    let prepared = engine::prepare(jobs, false, None)?;
    let never = std::sync::atomic::AtomicBool::new(false);
    let (run, teardown) = engine::run(prepared, &status::StatusOptions::quiet(), &never)?;
    teardown.close(None);
    Ok(run)
}
