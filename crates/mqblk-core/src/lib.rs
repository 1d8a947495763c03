//! mqblk-core: the multi-queue block layer, without any driver.
//!
//! The pipeline, in module order:
//!
//! ```text
//! caller ─▶ Bio ─▶ Plug ─▶ SwQueue ─▶ Scheduler ─▶ HwQueue (tags) ─▶ Driver
//!        ◀─ completion (routed to the submitting context) ◀──────────┘
//! ```
//!
//! Drivers implement [`driver::Driver`] and see nothing else of the core.
//! Devices are created and configured through [`queue`] (control plane);
//! I/O goes through a per-thread [`context::Context`] (data plane).

#![warn(missing_docs)]

mod slots;
pub(crate) mod sync;

pub mod clock;
pub mod error;
pub mod limits;
pub mod spec;

// Front end.
pub mod bio;
mod bioset;
mod bounce;
pub mod buf;
pub mod context;
mod flush;
pub mod future;
mod merge;
mod split;

// Pipeline stages.
pub mod completion;
pub mod driver;
mod hw_queue;
mod plug;
pub mod request;
pub mod sbitmap;
pub mod sched;
mod sw_queue;
pub mod tag;

// Accounting and the control plane.
pub mod queue;
pub mod stats;

pub use bio::{Bio, BioFlags, Op, Segment};
pub use buf::{BufPool, BufRegion, IoBuf};
pub use completion::{Completion, Completions, HwNotifier};
pub use context::Context;
pub use driver::{Driver, Extent, HwQueueSetup, QueueRq, TimeoutAction};
pub use error::{Error, Result, Status};
pub use future::{block_on, AsyncContext};
pub use limits::{Features, QueueLimits};
pub use queue::{Device, DeviceConfig, Frozen, LimitOverrides, QueueMode, Quiesced};
pub use request::{Request, RqRef};
pub use stats::{DiskStats, Histograms};

/// Bytes of a request plus its bio slot, for one in-flight I/O (Linux
/// 2.4's kiobuf took 8792).
pub const fn descriptor_bytes() -> usize {
    std::mem::size_of::<request::Request>()
        + std::mem::size_of::<bioset::BioNode>()
        + std::mem::size_of::<request::RqAtomics>()
}
