//! The bench engine: fio's job model driven through mqblk contexts.
//!
//! One thread per job, one context per thread, `iodepth` bios per job made
//! before the measured phase and reused for every I/O. The loop submits
//! every free bio, then reaps; offsets come from a xorshift generator; the
//! clock is never read per I/O (the supervisor thread flips phase flags),
//! so the engine costs a few nanoseconds per I/O beside the layer it
//! measures. Latency comes from the layer's own histograms; only a log or
//! `slat_percentiles=1` has the job read the clock per I/O, for its own
//! stamps (`sample`).
//!
//! The stages, in call order:
//! - [`prepare`]: open every device and check every job against it;
//! - [`run`]: the supervisor: stonewall groups, phases, stop, figures;
//! - `job`: a job's thread: aim, submit, reap, stop, drain;
//! - `finish`: a job's figures, and the I/O that stopped it.

mod shared;

mod prepare;

mod finish;

mod job;

mod run;

pub use prepare::{prepare, Prepared};
pub use run::run;
