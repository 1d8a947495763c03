//! mqblk-core: the multi-queue block layer, without any driver.
//!
//! The pipeline, in module order:
//!
//! ```text
//! caller ─▶ Bio ─▶ Plug ─▶ SwQueue ─▶ Scheduler ─▶ HwQueue (tags) ─▶ Driver
//!        ◀─ completion (routed to the submitting context) ◀──────────┘
//! ```
//!
//! Three faces, and nothing else is public:
//! - the user API at the crate root: [`Device`], [`Context`], [`Bio`],
//!   [`IoBuf`], completions and errors;
//! - the driver API, [`driver`]: what a driver implements ([`driver::Driver`])
//!   and the request it is handed ([`driver::RqRef`]); a bio-based driver
//!   (dm), which takes bios in the submitting context and has no request
//!   queue, implements [`bio_based::BioDriver`] instead;
//! - the control plane, [`queue`]: creating and reconfiguring devices.
//!
//! Tags, the sbitmap, bio sets and request slots are private: no safe
//! public function can make a request handle, so none can dangle.

#![warn(missing_docs)]

mod slots;
pub(crate) mod sync;

pub mod clock;
pub mod error;
pub mod input;
pub mod limits;
pub mod op;
pub mod spec;
pub mod timer;

// Front end.
pub mod bio;
pub mod bio_based;
mod bioset;
pub mod blkcg;
mod bounce;
pub mod buf;
mod check;
pub mod clone_set;
pub mod context;
mod flush;
pub mod future;
pub mod ioprio;
mod merge;
mod split;
pub mod throttle;

// Pipeline stages.
mod completion;
pub mod driver;
mod hw_queue;
mod irq;
mod plug;
mod remap;
mod request;
// Public only to the loom models in tests/loom_sbitmap.rs.
#[cfg(loom)]
pub mod sbitmap;
#[cfg(not(loom))]
mod sbitmap;
pub mod sched;
mod sw_queue;
mod tag;

// Accounting and the control plane.
pub mod blktrace;
pub mod partition;
pub mod queue;
pub mod stats;

pub use bio::Completion;
pub use bio::{Bio, BioFlags, EndIo, Op, Segment, SubmitError};
pub use blkcg::{Group, GroupConfig};
pub use blktrace::{DevNum, TraceSummary};
pub use buf::{BufPool, BufRegion, IoBuf};
pub use context::Context;
pub use driver::Extent;
pub use error::{Error, Result, Status};
pub use future::{block_on, join_all, AsyncContext};
pub use ioprio::{IoPrio, IoPrioClass};
pub use limits::{Features, QueueInfo, QueueLimits};
pub use partition::PartitionRange;
pub use queue::{Device, DeviceConfig, Frozen, LimitOverrides, QueueMode, Quiesced};
pub use request::Overdue;
pub use stats::{DiskStats, Histograms};

/// Bytes of a request plus its bio slot, for one in-flight I/O (Linux
/// 2.4's kiobuf took 8792).
pub const fn descriptor_bytes() -> usize {
    std::mem::size_of::<request::Request>()
        + std::mem::size_of::<bioset::BioNode>()
        + std::mem::size_of::<request::RqAtomics>()
}
