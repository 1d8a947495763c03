//! The FUSE file export of mqblk: any mqblk device as one regular file,
//! mounted over an existing file, so that `losetup`, `mkfs`, `mount`,
//! `qemu-img`, `dd` and any program can use it unchanged (qemu-storage-
//! daemon's `--export type=fuse` does the same for its block nodes).
//!
//! # Why the protocol is parsed here, not with `fuser`
//!
//! The export reads the dozen opcodes it serves from `/dev/fuse` itself
//! (as qemu-storage-daemon now does) and mounts with mount(2) as root.
//! `fuser` runs one session loop on one descriptor and copies each
//! message into its own buffers; what the export needs is below that
//! loop: several threads, each with its own descriptor cloned with
//! `FUSE_DEV_IOC_CLONE` and its own mqblk context; a write read from the
//! kernel straight onto a page boundary of the buffer its bio points
//! into; a read answered with the header and the bio's buffer as one
//! vectored write, and the replies of a batch sent with one io_uring
//! submission; `FOPEN_DIRECT_IO | FOPEN_PARALLEL_DIRECT_WRITES`; and
//! `max_write`/`max_pages` as large as the kernel allows, so that no
//! request is split smaller than the kernel sent it. The protocol is a
//! fixed binary layout of a few structures: [`request`] and [`reply`]
//! are small, make no system call, and are fuzzed (`fuzz/fuzz_targets/
//! fuse_request.rs`) and unit-tested.
//!
//! # The two halves
//!
//! - The protocol half, which never touches a device: [`abi`] (the wire
//!   layout), [`request`] (a message read as a request), [`reply`] (the
//!   answers), [`seek`] (SEEK_DATA and SEEK_HOLE from extents).
//! - The data half, `worker`: one thread per cloned descriptor, with its
//!   own context; reads, writes, fsync and FLUSH (a flush, as
//!   qemu-storage-daemon's export answers both), fallocate (PUNCH_HOLE a
//!   discard, ZERO_RANGE write-zeroes) and lseek become the layer's bios
//!   and extents, and errors their errno (EIO, ENOSPC, EROFS, EINVAL; a
//!   truncate EOPNOTSUPP: the size is fixed). A read-modify-write (bytes
//!   off the device's blocks) and the aligned writes exclude each other.
//!   An abort of the connection by the kernel ends the export with
//!   [`Error::Aborted`].
//!
//! [`Server`] is the control plane (`mount`: the mount(2), the stale
//! mount of a killed server cleared, the clones; `server`: the stop —
//! unmount, lazily if busy, drain, and abort the connection when a user
//! still holds the detached file, so no process is left waiting).
//!
//! [`serve`] is the export as `mqblk serve` picks it
//! ([`mqblk_export::Export`]): its options, startup line, stop and end.

// Pipeline order: the wire, a request read, its answer, the data half,
// then the control plane that mounts and stops it, and `serve`'s face.
pub mod abi;
mod error;
pub mod mount;
pub mod reply;
pub mod request;
pub mod seek;
mod server;
mod worker;

pub mod serve;

pub use error::{Error, MAX_THREADS};
pub use server::{Ended, Server, ServerConfig, StopHandle, DEPTH, DETACH_WAIT, QUIT_WAIT};
