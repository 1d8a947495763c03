//! libmqblk: the C API of mqblk, in libblkio's shape.
//!
//! A C program opens a device from a spec string ([`device`]), makes one
//! queue per thread ([`queue`]: a `Context` underneath), submits reads,
//! writes, vectors, flushes, discards and write-zeroes each with a user
//! pointer, and collects completions by blocking, by polling, or through a
//! completion fd for its event loop. Buffers are the caller's memory and go
//! to the driver untouched (no copy, no allocation per I/O).
//!
//! Every entry point is `extern "C"`, checks each pointer for NULL, and runs
//! inside `catch_unwind` ([`error::entry`]): no Rust panic crosses the ABI.
//! Failures return a negative [`error::MqblkError`] code, and the calling
//! thread's last error message says what went wrong ([`error`]).
//!
//! The header `include/mqblk.h` is generated from this crate by cbindgen
//! (`cbindgen.toml`) and committed; `tests/header.rs` checks that it is up
//! to date.

pub mod error;

pub mod device;
pub mod queue;
