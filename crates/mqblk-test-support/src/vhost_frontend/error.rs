//! What goes wrong in the test frontend, at the bottom of every layer of
//! it: each error names the socket, the queue or the address it is about.

use std::path::PathBuf;
use std::time::Duration;

/// An error of the test frontend (not of the device: a device's answer
/// is an [`super::Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum FrontendError {
    /// The backend's socket could not be connected or set up.
    #[error("connect to the vhost-user socket {}: {source}", socket.display())]
    Connect {
        /// The socket.
        socket: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A vhost-user message failed (the backend refused it, did not answer
    /// within the reply timeout, or closed the socket).
    #[error("vhost-user {step} on {}: {source}", socket.display())]
    Vhost {
        /// The socket.
        socket: PathBuf,
        /// The message or step.
        step: String,
        /// Why.
        #[source]
        source: vhost::Error,
    },
    /// The backend does not offer what the frontend needs.
    #[error("the backend on {} {what}", socket.display())]
    Backend {
        /// The socket.
        socket: PathBuf,
        /// What it lacks.
        what: String,
    },
    /// The guest memory could not be made, mapped or reached.
    #[error("guest memory: {0}")]
    Memory(String),
    /// A queue's kick or call eventfd failed.
    #[error("queue {queue}: {what} eventfd: {source}")]
    Event {
        /// The queue.
        queue: u16,
        /// Which fd, and what was done with it.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A queue index the frontend did not set up.
    #[error("queue {queue} is not set up (the frontend has {num_queues})")]
    NoQueue {
        /// The index asked for.
        queue: u16,
        /// The queues set up.
        num_queues: u16,
    },
    /// A chain longer than the queue (or an indirect table's room).
    #[error("{descs} descriptors do not fit in {room} on queue {queue}")]
    ChainTooLong {
        /// The queue.
        queue: u16,
        /// The descriptors given.
        descs: usize,
        /// What fits.
        room: usize,
    },
    /// A good request got no answer within its bound.
    #[error("{op} at sector {sector} on queue {queue}: no used element within {waited:?}")]
    NoAnswer {
        /// The request.
        op: &'static str,
        /// Its sector.
        sector: u64,
        /// The queue.
        queue: u16,
        /// How long it waited.
        waited: Duration,
    },
    /// A good request was answered with a status other than OK.
    #[error("{op} at sector {sector} on queue {queue}: {outcome}")]
    NotOk {
        /// The request.
        op: &'static str,
        /// Its sector.
        sector: u64,
        /// The queue.
        queue: u16,
        /// The answer.
        outcome: String,
    },
}
