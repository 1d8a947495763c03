//! vhost-user-blk for mqblk: any mqblk device served to virtual machines
//! (QEMU, cloud-hypervisor, libblkio), on rust-vmm's `vhost-user-backend`.
//!
//! The crate has the two halves every export has:
//! - the protocol half, which never touches a device: [`virtio_blk`]
//!   (request types, statuses, the header and ranges, the configuration
//!   space) and [`request`] (a descriptor chain checked and read as a
//!   request: what to submit, what to answer at once, or a broken ring);
//! - the data half, `virtqueue`: one thread and one mqblk context per
//!   virtqueue, as blk-mq maps CPUs onto software queues. A request's
//!   segments become its bio's segments, pointing into guest memory: no
//!   bounce buffer and no copy. Requests complete out of order, as the
//!   device finishes them, and EVENT_IDX keeps interrupts and kicks to
//!   those the driver asked for. Below it, `split_ring` walks the ring's
//!   parts through host pointers, and `guest` resolves the driver's
//!   memory table to host addresses once per table.
//!
//! `backend` is the device as vhost-user-backend sees it (features,
//! configuration space, memory tables, `GET_VRING_BASE` waiting for the
//! ring's requests), and [`Server`] the listener: one frontend at a time,
//! each with fresh queues, until [`StopHandle::stop`].
//!
//! A driver's mistakes end in its own ring: each bad request gets
//! `VIRTIO_BLK_S_IOERR` or `VIRTIO_BLK_S_UNSUPP`, and a chain with no
//! status byte to answer in (or an available index past the ring) marks
//! that ring broken; other queues and other devices go on.
//!
//! [`serve`] is the server as one of `mqblk serve`'s exports
//! ([`mqblk_export::Export`]): its options, startup line, stop and end.

mod backend;
mod error;
mod guest;
pub mod request;
mod server;
mod shape;
mod split_ring;
pub mod virtio_blk;
mod virtqueue;

pub mod serve;

pub use error::{Error, MAX_QUEUES};
pub use server::{Server, ServerConfig, ServerStats, StopHandle};
