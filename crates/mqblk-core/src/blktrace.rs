//! blktrace (Linux `kernel/trace/blktrace.c`): every step of every I/O,
//! written in blktrace's binary format so that `blkparse` and `btt` read
//! it as they read a kernel trace.
//!
//! Beside the pipeline, like the stats: the stages of `context/` call the
//! recorder at the points where the layer does each thing (Q, A, X, M/F,
//! G, I, P, U, D, R, C), and only when the context's feature word says the
//! device is traced; with tracing off the hot path tests no new bit.
//!
//! A device being traced has a session (`BlkTrace`), made by
//! [`crate::Device::start_trace`] and ended by
//! [`crate::Device::stop_trace`]. Each context that does I/O while it lasts
//! gets a channel (Linux's per-CPU relay buffer): a ring allocated once,
//! filled without a lock or a call, and written to `DIR/NAME.blktrace.N`,
//! N counting the session's contexts from 0 (blkparse's CPU number).
//! A flusher thread writes every channel out every few milliseconds; a
//! context whose ring is three quarters full writes it out itself, in one
//! `writev`. `blkparse -D DIR -i NAME` then reads the device's files.
//!
//! Devices are numbered (major [`DevNum::MAJOR`], a minor each, views
//! included) so that records and remaps name them.
//!
//! ```text
//! blktrace.rs   the face: what the rest of the crate uses
//!   session     BlkTrace: the files, the channels, the flusher
//!   recorder    the trace points, one per event
//!   channel     the ring and its file
//!   event       struct blk_io_trace, the action bits, DevNum
//! ```

mod channel;
pub(crate) mod event;
mod recorder;
mod session;

pub use event::DevNum;
pub(crate) use recorder::Recorder;
pub(crate) use session::BlkTrace;
pub use session::TraceSummary;
