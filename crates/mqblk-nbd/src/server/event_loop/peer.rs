//! The I/O threads' view of each other: open connections and a hand-off
//! inbox with a socket that wakes the receiving loop.

use std::os::unix::net::UnixStream;
use std::sync::atomic::AtomicUsize;
use std::sync::Mutex;

use crate::server::conn::Limbo;

/// What the I/O threads know of each other: each one's open connections
/// (so an accepting thread hands a new connection to the least loaded
/// one), and an inbox for the hand-off with a socket that wakes its loop.
pub(crate) struct Peer {
    pub(crate) conns: AtomicUsize,
    pub(crate) inbox: Mutex<Vec<Limbo>>,
    pub(crate) wake: (UnixStream, UnixStream),
}

impl Peer {
    pub(crate) fn new() -> std::io::Result<Peer> {
        let wake = UnixStream::pair()?;
        wake.0.set_nonblocking(true)?;
        wake.1.set_nonblocking(true)?;
        Ok(Peer {
            conns: AtomicUsize::new(0),
            inbox: Mutex::new(Vec::new()),
            wake,
        })
    }
}
