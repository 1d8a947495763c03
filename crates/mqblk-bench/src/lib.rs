//! `mqblk bench`: fio's job model and fio's reports, run on mqblk devices.
//!
//! A run goes through these modules in order:
//!
//! ```text
//! command line ─┐
//!               ├─▶ options (one key=value setter) ─▶ job (JobSpec) ─▶ engine ─▶ result ─▶ report
//! job file ─────┘     ▲ jobfile parses fio INI
//! ```
//!
//! - [`options`]: every key, its parsing and validation, and the layering
//!   of `[global]`, job sections and the command line (which wins).
//! - [`jobfile`]: fio job files (INI) into jobs.
//! - [`job`]: the typed job.
//! - [`content`]: what write buffers hold (fio's dedupe and compress
//!   options).
//! - [`verify`]: fio's `verify=`: headers written with each block, checked
//!   on read-back.
//! - [`distribution`]: `random_distribution=`, and the random numbers.
//! - [`random_map`]: fio's random map (each block once per pass) and
//!   `random_generator=`.
//! - [`zone`]: `zonemode=` (strided windows, emulated zoned devices).
//! - [`pattern`]: where each I/O goes (rw, offset, the sequencer).
//! - [`rate`]: `rate=`/`rate_iops=` pacing (linear or Poisson) and
//!   `rate_min=`.
//! - [`flow`]: `flow=`, jobs kept in proportion.
//! - [`latency_target`]: `latency_target=`'s queue-depth search and
//!   `max_latency=`.
//! - [`clamp`]: where each job's region lies on its device (percentages,
//!   `offset_increment`, the device's end).
//! - [`layout`]: fio's file layout: a job file's missing `filename=`
//!   created at its `size=` before the devices open.
//! - [`memory`]: what the jobs' slots will pin, checked against the
//!   memory the machine has before anything is allocated.
//! - [`ending`]: when the supervisor ends a job (its runtime, steady
//!   state, `exitall`).
//! - [`stop`]: the signals: the first stops the run, a second exits, and
//!   one that comes while a device is opening says so and exits.
//! - [`engine`]: runs the jobs, one thread and one context each.
//! - [`counts`]: a job's counts per fio direction, published once per
//!   batch for the averaged logs.
//! - [`sample`]: the job's own per-I/O latencies (slat, clat, lat), taken
//!   only when a log or the report asks.
//! - [`hist`]: fio's latency bins, counted per completion for the
//!   histogram log.
//! - [`steadystate`]: `ss=`, jobs ended once their IOPS or bandwidth
//!   settles.
//! - [`status`]: the status line and `--status-interval` reports while
//!   the jobs run.
//! - [`result`]: what was measured.
//! - [`log`]: fio's bandwidth, IOPS and latency logs, and the files of
//!   the histogram log.
//! - [`report`]: fio's text and JSON output, plus the layer's own figures.
//! - [`teardown`]: after the report, the job threads end and the devices
//!   close, within a bound when the run ended on an error or a signal.

// Pipeline order; one group per stage so that rustfmt keeps the order.
pub mod options;

pub mod jobfile;

pub mod job;

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

pub(crate) mod ending;

pub mod stop;

pub mod engine;

pub(crate) mod counts;

pub(crate) mod sample;

pub(crate) mod hist;

pub(crate) mod steadystate;

pub mod status;

pub mod result;

pub(crate) mod log;

pub mod report;

pub mod teardown;

pub mod stats_dir;

pub mod open;

pub mod alloc_count;

pub(crate) mod ctime;

pub mod degraded;
