//! The NBD server (control plane): exports, the listener, and one thread
//! per connection. `mqblk serve` is a thin command line over this.
//!
//! Each connection gets its own [`mqblk_core::Context`] (a context is
//! `Send`, not `Sync`), so connections to one device share nothing on the
//! I/O path but the device's hardware queues. The per-connection data path
//! is in the private `conn` module.

mod conn;
mod export;
mod socket_path;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use mqblk_nbd_proto::{ExportInfo, TlsMode};

pub use export::{export_info, Export};
pub use socket_path::lock_path;

use crate::transport::Socket;

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
    /// Negotiation must finish within this.
    pub handshake_timeout: Duration,
    /// Connections served at once; more are closed on accept.
    pub max_connections: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_requests: 128,
            max_bytes: 64 << 20,
            stall_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

/// How long a blocked read or accept waits before looking at the shutdown
/// flag and the deadlines.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Where to listen.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A TCP address such as `127.0.0.1:10809` (port 0 picks one).
    Tcp(String),
    /// A unix socket path. Anything at the path but a stale socket is
    /// refused, and `PATH.lock` keeps two servers off one path.
    Unix(PathBuf),
}

/// Everything a server serves.
pub struct ServerConfig {
    /// The exports; the first is also the default export (empty name).
    pub exports: Vec<Export>,
    /// TLS policy.
    pub tls_mode: TlsMode,
    /// TLS configuration (needed unless `tls_mode` is `Off`).
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Per-connection bounds.
    pub limits: ConnLimits,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("exports", &self.exports)
            .field("tls_mode", &self.tls_mode)
            .field("limits", &self.limits)
            .finish()
    }
}

/// What the server shares with its connection threads.
pub(crate) struct Shared {
    pub(crate) exports: Vec<Export>,
    pub(crate) infos: Vec<ExportInfo>,
    pub(crate) tls_mode: TlsMode,
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    pub(crate) limits: ConnLimits,
    pub(crate) shutdown: Arc<AtomicBool>,
    pub(crate) stats: ServerStats,
}

/// Counters of a server's life.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections refused because `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections closed for breaking the protocol (bad magic, oversize
    /// payload, stall, bad option).
    pub dropped: AtomicU64,
    /// Requests answered.
    pub requests: AtomicU64,
    /// Requests answered with an error.
    pub errors: AtomicU64,
}

enum Listener {
    Tcp(TcpListener),
    Unix(socket_path::ClaimedSocket),
}

/// A bound NBD server. [`Server::run`] serves until the shutdown flag is
/// set, then drains every connection and flushes every export.
pub struct Server {
    listener: Listener,
    shared: Arc<Shared>,
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A configuration problem.
    #[error("{0}")]
    Config(String),
    /// Binding or accepting failed. The message is `what`; the OS error
    /// is the source (so `{:#}` prints each once).
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Server {
    /// Check the configuration and bind the listener.
    pub fn bind(cfg: ServerConfig, listen: &Listen) -> Result<Server, ServerError> {
        if cfg.exports.is_empty() {
            return Err(ServerError::Config("at least one export is needed".into()));
        }
        for (i, e) in cfg.exports.iter().enumerate() {
            if cfg.exports[..i].iter().any(|o| o.name == e.name) {
                return Err(ServerError::Config(format!(
                    "export name {:?} given twice",
                    e.name
                )));
            }
        }
        if cfg.tls_mode != TlsMode::Off && cfg.tls.is_none() {
            return Err(ServerError::Config(
                "TLS is on but no certificate was given (--tls-cert and --tls-key)".into(),
            ));
        }
        let min_bytes = u64::from(mqblk_nbd_proto::consts::DEFAULT_MAX_PAYLOAD);
        if cfg.limits.max_bytes < min_bytes {
            return Err(ServerError::Config(format!(
                "per-connection buffer memory of {} bytes is less than one request of up to \
                 {min_bytes} bytes; allow at least {} MiB",
                cfg.limits.max_bytes,
                min_bytes.div_ceil(1 << 20)
            )));
        }
        if cfg.limits.max_requests == 0 {
            return Err(ServerError::Config(
                "per-connection requests in flight is 0; allow at least 1".into(),
            ));
        }
        if cfg.limits.max_connections == 0 {
            return Err(ServerError::Config(
                "connections served at once is 0; allow at least 1".into(),
            ));
        }
        let io = |what: String| move |source| ServerError::Io { what, source };
        let listener = match listen {
            Listen::Tcp(addr) => {
                let l = TcpListener::bind(addr.as_str())
                    .map_err(io(format!("cannot listen on {addr}")))?;
                l.set_nonblocking(true)
                    .map_err(io("set_nonblocking".into()))?;
                Listener::Tcp(l)
            }
            Listen::Unix(path) => {
                let claimed = socket_path::claim(path).map_err(ServerError::Config)?;
                claimed
                    .listener
                    .set_nonblocking(true)
                    .map_err(io("set_nonblocking".into()))?;
                Listener::Unix(claimed)
            }
        };
        let infos = cfg.exports.iter().map(export_info).collect();
        Ok(Server {
            listener,
            shared: Arc::new(Shared {
                exports: cfg.exports,
                infos,
                tls_mode: cfg.tls_mode,
                tls: cfg.tls,
                limits: cfg.limits,
                shutdown: Arc::new(AtomicBool::new(false)),
                stats: ServerStats::default(),
            }),
        })
    }

    /// The TCP address bound (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// The flag that stops the server: set it (from a signal handler, or
    /// another thread) and [`Server::run`] drains and returns.
    pub fn shutdown_handle(&self) -> Arc<AtomicBool> {
        self.shared.shutdown.clone()
    }

    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// What is exported, as clients see it.
    pub fn export_infos(&self) -> &[ExportInfo] {
        &self.shared.infos
    }

    /// Serve until the shutdown flag is set. Then: stop accepting, let
    /// every connection finish its in-flight requests and send their
    /// replies, flush every export, and return.
    pub fn run(&self) -> Result<(), ServerError> {
        let sh = &self.shared;
        let mut conns: Vec<JoinHandle<()>> = Vec::new();
        while !sh.shutdown.load(Ordering::Relaxed) {
            let accepted = match &self.listener {
                Listener::Tcp(l) => l.accept().map(|(s, _)| Socket::Tcp(s)),
                Listener::Unix(c) => c.listener.accept().map(|(s, _)| Socket::Unix(s)),
            };
            let sock = match accepted {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(TICK / 5);
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors and the like: back off, keep serving.
                    eprintln!("mqblk serve: accept: {e}");
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            conns.retain(|h| !h.is_finished());
            if conns.len() >= sh.limits.max_connections {
                sh.stats.refused.fetch_add(1, Ordering::Relaxed);
                sock.shutdown();
                continue;
            }
            sh.stats.connections.fetch_add(1, Ordering::Relaxed);
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new()
                .name("nbd-conn".into())
                .spawn(move || conn::serve(sock, &shared));
            match spawned {
                Ok(h) => conns.push(h),
                Err(e) => eprintln!("mqblk serve: cannot start a connection thread: {e}"),
            }
        }
        for h in conns {
            let _ = h.join();
        }
        for e in &sh.exports {
            if e.read_only {
                continue;
            }
            if let Ok(mut ctx) = e.device.context() {
                if let Err(err) = ctx.flush() {
                    eprintln!("mqblk serve: flush of export {:?} failed: {err}", e.name);
                }
            }
        }
        Ok(())
    }
}
