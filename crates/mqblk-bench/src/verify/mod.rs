//! Verified data (fio's `verify=`, `do_verify=`, `verify_fatal=`,
//! `verify_interval=`, `verify_pattern=`, `verify_backlog=`): every
//! interval of every block a job writes carries a header naming it
//! ([`header`]: fio's own `struct verify_header` and checksum layout for
//! md5, crc32c and sha256, so fio checks what mqblk wrote and the
//! reverse), and is checked when it is read back.
//!
//! The seed of a block's data is a function of (job, block, generation),
//! so the expected content of a block is known from the generation of its
//! last completed write alone; the [`record`] keeps those compactly, as
//! runs, so any device size can be verified. A write-only job (`rw=write`,
//! `randwrite`) with `do_verify=1` reads every block it wrote back after
//! the measured phase (fio's verify phase), or every `verify_backlog`
//! writes as it goes; `randrw`/`rw` also check each read of a block this
//! job has written against its last write; a read-only job checks that
//! every block it reads carries a valid header for its offset (data
//! written by an earlier job or run; zeros, never written, are counted
//! apart). I/O to a block that has I/O in flight is moved to the next free
//! block (fio's `serialize_overlap`), so the expected content is never
//! ambiguous. Writing jobs that run at once on one device verify disjoint
//! slices of their region.
//!
//! Data-less writes join the mix with `trim_percentage=N` (that share of
//! the job's writes become discards of the block) and
//! `write_zeroes_percentage=N` (write-zeroes instead). A zeroed block must
//! read back as zeros. A discarded block may read as zeros or as what it
//! held before (a device may ignore a discard, as librbd does below its
//! object's granularity), unless `trim_verify_zero=1` asks for zeros.
//!
//! The engine is generic over [`Hook`]: with verify off it runs with
//! [`NoVerify`], which only stamps 8 bytes per 4 KiB of each write (fio's
//! `scramble_buffers`); reads cost nothing extra.
//!
//! By call order: [`setup`] gives each job its hook, the engine calls the
//! [`hook`] around every I/O, the [`verifier`] fills and checks blocks
//! through its [`record`] and [`header`]s, and [`result`] is what it
//! reports.

pub(crate) mod header;
mod hook;
pub(crate) mod record;
mod result;
mod setup;
mod verifier;

pub use hook::{Hook, NoVerify, HOOK_PRIVATE_MASK};
pub use result::{Mismatch, VerifyResult};
pub use setup::{check_jobs, for_job};
pub use verifier::Verifier;
