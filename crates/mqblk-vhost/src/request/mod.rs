//! A descriptor chain read as a virtio-blk request, and every check a
//! request gets before it becomes a bio (virtio 1.2, 5.2.6): the header and
//! the status byte where the spec puts them, data of the right direction,
//! ranges inside the device. Protocol only: the caller lends a reader of
//! guest memory, and gets back what to submit, what to answer at once, or
//! that the chain cannot be answered at all (the ring is broken).
//!
//! In call order: `chain` (the descriptors as the driver laid them out, and
//! reading guest memory through them), then `parse` (the request they
//! make).

mod chain;
mod parse;
#[cfg(test)]
mod tests;

pub use chain::{Desc, ReadGuest, Span};
pub use parse::{parse, Op, Parsed, Request};
