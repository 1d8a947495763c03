//! The io_uring engine: one ring per hardware queue (the hardware queue's
//! submission and completion queues, as an NVMe queue pair would be).
//!
//! - `queue_rq` turns a request into ONE submission entry: READ/WRITE
//!   (READ_FIXED/WRITE_FIXED when the buffer comes from the registered
//!   arena), READV/WRITEV for a request of several segments, FSYNC
//!   (DATASYNC) for a flush, FALLOCATE for discard and write-zeroes. A FUA
//!   write carries RWF_DSYNC; a PREFLUSH write is preceded by a linked
//!   fdatasync. `user_data` is the tag, so completion needs no lookup and
//!   no allocation: per-tag slots hold the request and its iovecs.
//! - Entries are submitted once per batch (`last`, or `commit_rqs`), with
//!   GETEVENTS so that deferred completion work runs in the same system
//!   call.
//! - `poll` reaps the completion queue without a system call when it has
//!   entries; it enters the kernel only when the kernel flags pending task
//!   work (IORING_SQ_TASKRUN), or always with IOPOLL (the kernel polls the
//!   device inside the call).
//! - The interrupt line of `wait=poll` ([`UringQueue::irq_fd`]): an
//!   eventfd registered with the ring, which the kernel signals as it
//!   posts completions (and, on a DEFER_TASKRUN ring, as it queues their
//!   task work), so that a context's completion fd, and so an event loop
//!   or a future, sleeps until there is something to poll. Nobody reads it
//!   but `poll`, once it took completions, and only when the ring goes
//!   quiet: a `poll` that finds nothing, or that took the last request in
//!   flight, drains the eventfd, then takes what came in meanwhile and
//!   runs task work whose signal it drained. So the line is readable while
//!   a completion waits, quiet once nothing is in flight, and it wakes a
//!   sleeper at most once for completions already taken; a ring that
//!   completes something at every `poll` never reads it. No line with
//!   IOPOLL (completions appear only when the ring is polled) or
//!   COOP_TASKRUN (the kernel signals only once the sleeper itself runs
//!   the task work).
//! - A short read or write is resubmitted for the rest; a read that hits
//!   the end of the file is an I/O error.
//! - A timed-out request (Linux `->timeout`): its slot is marked, and an
//!   IORING_OP_ASYNC_CANCEL for its `user_data` (and its linked PREFLUSH)
//!   is submitted; the request completes with [`Status::Timeout`] when its
//!   own completion comes back (-ECANCELED, -EINTR, or whatever it ends
//!   with), because only then has the kernel let go of its buffers. Until
//!   then the timeout answers `ResetTimer`, and each later call sends the
//!   cancel again. A timed-out request is never retried or continued.
//! - On a file system whose requests wait for a server (FUSE, NFS, SMB,
//!   9p, Ceph), every entry carries IOSQE_ASYNC. io_uring would otherwise
//!   issue a read inline, in the submitting thread, and a FUSE read blocks
//!   there until the server answers (seen on Linux 6.18): the thread
//!   that should notice the timeout would be the one stuck. In an io-wq
//!   worker the read can be cancelled (the worker is signalled, FUSE
//!   sends FUSE_INTERRUPT to its server).
//!
//! Task-run modes, detected rather than assumed: SINGLE_ISSUER +
//! DEFER_TASKRUN (completion work runs only when the ring's one issuer
//! enters the kernel), else COOP_TASKRUN, else neither. A DEFER_TASKRUN
//! ring is created disabled and bound to the first thread that uses it; if
//! another thread uses the hardware queue later (contexts sharing it, or a
//! context that moved), new submissions wait until the ring is idle, and
//! the ring is then rebuilt without SINGLE_ISSUER (COOP_TASKRUN). The
//! in-flight I/O of the old issuer completes when that thread next polls
//! the queue (or exits): a context must not move to another thread with
//! I/O in flight on a DEFER_TASKRUN ring and then leave its old thread
//! idle forever; `taskrun=coop` avoids the question.
//!
//! By call order: [`setup`] makes a queue and keeps its [`ring`] usable,
//! [`submit`] turns requests into entries, [`complete`] reaps and waits,
//! all on the state in [`queue`]; [`irq`] is the interrupt line.

mod complete;
mod irq;
mod queue;
mod ring;
mod setup;
mod submit;

pub use queue::{RingReport, UringQueue};
pub use ring::{build_ring, Flavor, RingConfig};
