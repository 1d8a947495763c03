//! The NBD server (control plane): exports, the listener, limits, and a
//! fixed set of I/O threads. `mqblk serve` is a thin command line over
//! this.
//!
//! Each I/O thread runs one event loop (`event_loop`) over the listener,
//! its connections' sockets, and one [`mqblk_core::Context`] per export
//! whose completion fd sits in the same epoll set; connections on one
//! thread share that context, and threads share nothing on the I/O path
//! but the device's hardware queues. A connection is a non-blocking state
//! machine (`conn`).

// By call order, from the top down: each file uses only files below it.
mod event_loop;

mod conn;

mod shared;

mod export;
mod memory;
mod socket_path;

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mqblk_nbd_proto::{ExportInfo, TlsMode};

pub use export::{export_info, Export};
pub use shared::{ConnLimits, ServerStats};
pub use socket_path::lock_path;

use memory::MemoryBudget;
use shared::{Listener, Shared};

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

/// A bound NBD server. [`Server::run`] serves until [`Server::stop`] (or
/// the shutdown flag and a wake), then drains every connection and
/// flushes every export.
pub struct Server {
    listener: Listener,
    shared: Arc<Shared>,
    io_threads: usize,
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
        if cfg.limits.max_per_peer == 0 {
            return Err(ServerError::Config(
                "connections per peer is 0; allow at least 1".into(),
            ));
        }
        if cfg.limits.max_connections == 0 {
            return Err(ServerError::Config(
                "connections served at once is 0; allow at least 1".into(),
            ));
        }
        let max_memory = cfg
            .limits
            .max_memory
            .unwrap_or_else(ConnLimits::memory_default);
        if max_memory < ConnLimits::memory_min() {
            return Err(ServerError::Config(format!(
                "server-wide buffer memory of {max_memory} bytes is too small: three quarters of \
                 it must hold one request of up to {min_bytes} bytes; allow at least {} MiB",
                ConnLimits::memory_min() >> 20
            )));
        }
        let io = |what: String| move |source| ServerError::Io { what, source };
        let listener = match listen {
            Listen::Tcp(addr) => {
                let l = TcpListener::bind(addr.as_str()).map_err(|e| {
                    // Say what to do, not only what failed.
                    let next = match e.kind() {
                        std::io::ErrorKind::AddrInUse => {
                            "another server listens on that port: stop it, or choose \
                             another with --listen HOST:PORT (`ss -ltnp` shows who has it)"
                        }
                        std::io::ErrorKind::PermissionDenied => {
                            "ports below 1024 need root or CAP_NET_BIND_SERVICE: choose \
                             one from 1024 up"
                        }
                        std::io::ErrorKind::AddrNotAvailable => {
                            "no interface of this machine has that address"
                        }
                        _ => return io(format!("cannot listen on {addr}"))(e),
                    };
                    ServerError::Config(format!("cannot listen on {addr}: {e}; {next}"))
                })?;
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
        let wake = UnixStream::pair().map_err(io("socketpair".into()))?;
        wake.0
            .set_nonblocking(true)
            .map_err(io("set_nonblocking".into()))?;
        wake.1
            .set_nonblocking(true)
            .map_err(io("set_nonblocking".into()))?;
        let io_threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Server {
            io_threads,
            listener,
            shared: Arc::new(Shared {
                exports: cfg.exports,
                infos,
                tls_mode: cfg.tls_mode,
                tls: cfg.tls,
                budget: MemoryBudget::new(max_memory, cfg.limits.max_connections),
                limits: cfg.limits,
                shutdown: Arc::new(AtomicBool::new(false)),
                stats: ServerStats::default(),
                wake,
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

    /// The flag that stops the server. Setting it alone is not seen until
    /// something wakes the I/O threads: call [`Server::stop`], or write a
    /// byte to [`Server::wake_fd`] (a signal handler can:
    /// `signal_hook::low_level::pipe`).
    pub fn shutdown_handle(&self) -> Arc<AtomicBool> {
        self.shared.shutdown.clone()
    }

    /// A socket to write one byte to after setting the shutdown flag; the
    /// I/O threads wake on it.
    pub fn wake_fd(&self) -> std::io::Result<UnixStream> {
        self.shared.wake.1.try_clone()
    }

    /// Stop: set the shutdown flag and wake every I/O thread.
    pub fn stop(&self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        let _ = (&self.shared.wake.1).write(&[1]);
    }

    /// Use `n` I/O threads (default: one per core).
    pub fn with_io_threads(mut self, n: usize) -> Server {
        self.io_threads = n.max(1);
        self
    }

    /// The server-wide memory budget for data buffers, in bytes (the one
    /// given, or the default a quarter of the memory available).
    pub fn max_memory(&self) -> u64 {
        self.shared.budget.max()
    }

    /// The server's counters.
    pub fn stats(&self) -> &ServerStats {
        &self.shared.stats
    }

    /// What is exported, as clients see it.
    pub fn export_infos(&self) -> &[ExportInfo] {
        &self.shared.infos
    }

    /// Serve until stopped. Then: stop accepting, let every connection
    /// finish its in-flight requests and send their replies, flush every
    /// export, and return.
    pub fn run(&self) -> Result<(), ServerError> {
        let sh = &*self.shared;
        let admission = Mutex::new(event_loop::Admission::default());
        let peers = (0..self.io_threads)
            .map(|_| event_loop::Peer::new())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| ServerError::Io {
                what: "socketpair".into(),
                source,
            })?;
        std::thread::scope(|scope| {
            for i in 0..self.io_threads {
                let admission = &admission;
                let listener = &self.listener;
                let peers = &peers[..];
                let r = std::thread::Builder::new()
                    .name(format!("nbd-io-{i}"))
                    .spawn_scoped(scope, move || {
                        event_loop::run(sh, listener, admission, i, peers)
                    });
                if let Err(e) = r {
                    eprintln!("mqblk serve: cannot start I/O thread {i}: {e}");
                }
            }
        });
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
