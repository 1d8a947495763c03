//! What can go wrong setting a server up, and the limits it checks.

use std::path::PathBuf;

/// Most virtqueues a server offers (one thread each).
pub const MAX_QUEUES: usize = 64;

/// What can go wrong setting a server up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The socket cannot be listened on.
    #[error("vhost-user-blk socket {socket}: {reason}")]
    Socket {
        /// The path asked for.
        socket: PathBuf,
        /// Why.
        reason: String,
    },
    /// More queues than a server offers.
    #[error("device {device}: {queues} virtqueues asked for; at most {max}")]
    Queues {
        /// The device.
        device: String,
        /// Queues asked for.
        queues: usize,
        /// The most allowed.
        max: usize,
    },
    /// A serial longer than GET_ID can answer.
    #[error("serial {serial:?} is longer than virtio-blk's {max} bytes")]
    Serial {
        /// The serial.
        serial: String,
        /// The most allowed.
        max: usize,
    },
    /// The device refused a context.
    #[error(transparent)]
    Device(#[from] mqblk_core::Error),
}
