//! The harness of the bio tests (`bio_model`, `bio_stacking`), in call
//! order: random tables and the opener of their legs ([`table`]), random
//! bios submitted several at a time and counted as they end ([`submit`]),
//! and the in-memory model their outcomes are checked against
//! ([`model`]).
//!
//! A table line's fields are split on whitespace, so a table cannot name
//! an inline table (which has spaces) as its leg; `mqblk` does it with
//! `dm:FILE`, which Miri's isolation hides. Here a leg spec `table:NAME`
//! names a table that the test's opener holds.
//!
//! Only ram legs and in-memory tables: no syscall, so Miri runs the tests
//! (fewer cases and smaller devices under `cfg(miri)`).

// Each test target uses its part of the harness.
#![allow(dead_code)]

pub mod model;
pub mod submit;
pub mod table;

/// Cases per property: Miri is about a thousand times slower. One random
/// table a property under Miri (each took 90 to 160 s there, in the
/// largest jobs of CI's Miri phase): it reaches the clones' unsafe code in
/// bio_based.rs as two do; the native run's 128 cases cover the tables.
pub const CASES: u32 = if cfg!(miri) { 1 } else { 128 };
/// Largest chunk and line, in sectors.
pub const CHUNK_MAX: u64 = if cfg!(miri) { 16 } else { 64 };
pub const LINE_MAX: u64 = if cfg!(miri) { 16 } else { 64 };
/// Largest bio, in sectors.
pub const BIO_MAX: u64 = if cfg!(miri) { 24 } else { 96 };
/// Most bios per case.
pub const STEPS_MAX: usize = if cfg!(miri) { 8 } else { 32 };
