//! What the server shares with its I/O threads: the exports, the
//! per-connection bounds, the memory budget, the counters, the listener
//! and the shutdown wake. The bottom of the server's files but for the
//! budget (`memory.rs`), the exports (`export.rs`) and the socket path
//! (`socket_path.rs`): the server
//! (`mod.rs`) fills it in, and the event loop (`event_loop.rs`) and its
//! connections (`conn/`) read it.

use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use mqblk_nbd_proto::{ExportInfo, TlsMode};

use super::export::Export;
use super::memory::MemoryBudget;
use super::socket_path::ClaimedSocket;

/// Per-connection bounds: what one client can make the server hold.
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    /// Requests in flight (submitted or with a reply queued) per connection.
    pub max_requests: u32,
    /// Bytes of data buffers held per connection (in flight and cached).
    /// At least the largest payload, so one request always fits.
    pub max_bytes: u64,
    /// A client that stops mid-message (or stops reading replies) for
    /// this long is disconnected.
    pub stall_timeout: Duration,
    /// Negotiation must finish within this (qemu-nbd's default is 10 s;
    /// nbdkit 1.32 has none).
    pub handshake_timeout: Duration,
    /// A connection in transmission with nothing in flight, nothing
    /// queued and no partial message for this long (since its last
    /// request or reply) is disconnected, and everything it held is
    /// freed. On by default (5 minutes), so that clients
    /// which connect and then say nothing cannot hold the server's slots
    /// for ever; `None` keeps idle clients (a virtual machine's disk, or
    /// the kernel's `nbd-client` without `-persist`, may idle for hours
    /// and does not reconnect).
    pub idle_timeout: Option<Duration>,
    /// Connections served at once; more are answered with a refusal and
    /// closed.
    pub max_connections: usize,
    /// Connections served at once from one IP address (TCP only). Below
    /// `max_connections` by default (an eighth of it), so that one address
    /// cannot take every slot.
    pub max_per_peer: usize,
    /// Bytes of data buffers (requests in flight, replies queued, buffers
    /// cached) that every connection together may hold. `None`: a quarter
    /// of the memory available when the server starts
    /// ([`ConnLimits::memory_default`]). Past three quarters of it, the
    /// connections that hold the most stop taking requests until memory
    /// frees; those that do not read their replies are dropped after
    /// `stall_timeout`.
    pub max_memory: Option<u64>,
}

impl ConnLimits {
    /// The defaults (also `mqblk serve`'s): no client can exhaust them.
    /// Idle connections go after 5 minutes, and one address holds at most
    /// an eighth of the slots.
    pub const DEFAULT: ConnLimits = ConnLimits {
        max_requests: 128,
        max_bytes: 64 << 20,
        stall_timeout: Duration::from_secs(30),
        handshake_timeout: Duration::from_secs(10),
        // 5 minutes: Linux's NFS server closes idle TCP connections after
        // about 6.
        idle_timeout: Some(Duration::from_secs(300)),
        max_connections: 1024,
        // Enough for a host with 8 virtual machines of 16 connections
        // each, and 8 such hosts to fill the server.
        max_per_peer: 128,
        max_memory: None,
    };

    /// The server-wide memory budget when none is given: a quarter of
    /// `MemAvailable` in `/proc/meminfo` (1 GiB if it cannot be read), and
    /// at least [`ConnLimits::memory_min`].
    pub fn memory_default() -> u64 {
        let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib << 10)
        });
        available.map_or(1 << 30, |a| a / 4).max(Self::memory_min())
    }

    /// The smallest server-wide budget: one request of the largest
    /// payload fits below its soft mark (three quarters), rounded up to a
    /// MiB.
    pub fn memory_min() -> u64 {
        let payload = u64::from(mqblk_nbd_proto::consts::DEFAULT_MAX_PAYLOAD);
        (payload * 4).div_ceil(3).next_multiple_of(1 << 20)
    }
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits::DEFAULT
    }
}

/// What the server shares with its connection threads.
pub(crate) struct Shared {
    pub(crate) exports: Vec<Export>,
    pub(crate) infos: Vec<ExportInfo>,
    pub(crate) tls_mode: TlsMode,
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    pub(crate) limits: ConnLimits,
    /// Every connection's data buffers, together.
    pub(crate) budget: MemoryBudget,
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(crate) stats: ServerStats,
    /// Readable (edge) when the shutdown flag was set: every I/O thread has
    /// the read end in its epoll set.
    pub(crate) wake: (UnixStream, UnixStream),
}

/// Counters of a server's life.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections served now: counted in when admitted, out when closed
    /// and everything they held is freed.
    pub open: AtomicU64,
    /// Connections refused because `max_connections` (or the peer's
    /// `max_per_peer`) were open.
    pub refused: AtomicU64,
    /// Connections closed for breaking the protocol (bad magic, oversize
    /// payload, stall, bad option).
    pub dropped: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
}

pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(ClaimedSocket),
}

impl Listener {
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(c) => c.listener.as_fd(),
        }
    }
}
