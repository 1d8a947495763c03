//! mqblk-fio: fio's job model, as mqblk's workload engine takes it. It
//! turns fio's syntax (command-line options, job files) or Rust calls
//! into typed jobs, and checks every value on the way in; it runs
//! nothing.
//!
//! It sits below `mqblk-bench` (the engine that runs these jobs on
//! `mqblk::Device`s and reports them) and above `mqblk` (it uses only its
//! spec parsing: sizes, booleans, queue modes). It is a crate of its own
//! because the engine with it passed 12,000 lines, and the cut between
//! describing a job and running it is the one fio has too (`options.c`
//! and `parse.c` apart from the I/O engines and `backend.c`). Use it
//! through `mqblk-bench`, which re-exports [`JobOptions`] and [`JobSpec`].
//!
//! By call order:
//! - [`options`]: every key, declared once, its parsing and validation,
//!   and the layering of `[global]`, job sections and the command line;
//! - [`jobfile`]: fio job files (INI) into jobs;
//! - [`job`]: the typed job ([`JobSpec`]);
//! - what a job names, each parsed from fio's spelling: [`distribution`]
//!   (`random_distribution=`), [`random_generator`], [`zone`]
//!   (`zonemode=`), [`verify_pattern`], [`content`] (dedupe and
//!   compression), [`steadystate`] (`ss=`).

// Call order; one group per stage so that rustfmt keeps the order.
pub mod options;

pub mod jobfile;

pub mod job;

pub mod distribution;

pub mod random_generator;

pub mod zone;

pub mod verify_pattern;

pub mod content;

pub mod steadystate;

pub use job::{JobSpec, RwMode, VerifyKind};
pub use options::{JobOptions, OptionError};
