//! The NBD export as `mqblk serve` picks it ([`mqblk_export`]): its
//! options (`--listen`, `--socket`, `--export`, TLS and the connection
//! limits), what they must be before any device is opened, the
//! [`Server`] bound over the devices, its startup line, its stop, and
//! what its end says. Above [`crate::server`], which knows nothing of the
//! command line.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use mqblk_export::{Devices, Error, Export as ExportTrait, ExportArgs, ExportReport, StopSignal};

use crate::server::{ConnLimits, Export, Listen, Server, ServerConfig};
use crate::TlsMode;

/// TLS policy on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TlsArg {
    /// No TLS: STARTTLS is refused.
    Off,
    /// TLS offered; plaintext still allowed.
    On,
    /// TLS required: every option but STARTTLS and ABORT is refused until
    /// TLS is up.
    Require,
}

/// The server's own defaults, which the options' defaults are.
const DEFAULTS: ConnLimits = ConnLimits::DEFAULT;

/// `mqblk serve`'s NBD options.
#[derive(Args, Debug, Default)]
pub struct NbdArgs {
    /// Export name of the device at the same position, repeatable. The
    /// first device defaults to the empty name; later ones need a name.
    #[arg(long = "export", value_name = "NAME")]
    pub export: Vec<String>,

    /// Listen on TCP HOST:PORT (port 0 picks a free one; it is printed).
    /// Give this, --socket or --vhost-user-blk.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "socket")]
    pub listen: Option<String>,

    /// Listen on a unix socket at PATH (a new path, or a stale socket; a
    /// lock file PATH.lock keeps two servers apart). Give this, --listen
    /// or --vhost-user-blk.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,

    /// PEM certificate chain for TLS.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// PEM private key for TLS.
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// TLS policy (default: require with --tls-verify-peer, on with a
    /// certificate, off without).
    #[arg(long, value_enum, value_name = "off|on|require")]
    pub tls: Option<TlsArg>,

    /// Serve only clients whose TLS certificate a CA in FILE (PEM) signed,
    /// as nbdkit's --tls-verify-peer does: a client with no certificate,
    /// or one nobody in FILE signed, fails its TLS handshake. Implies
    /// --tls=require.
    #[arg(
        long = "tls-verify-peer",
        value_name = "CA_FILE",
        requires = "tls_cert"
    )]
    pub tls_verify_peer: Option<PathBuf>,

    /// Requests in flight per connection.
    #[arg(long = "max-requests", value_name = "N", default_value_t = DEFAULTS.max_requests)]
    pub max_requests: u32,

    /// Buffer memory per connection, in MiB (at least 32: one maximum
    /// request).
    #[arg(long = "max-mib", value_name = "MIB", default_value_t = DEFAULTS.max_bytes >> 20)]
    pub max_mib: u64,

    /// Buffer memory of every connection together (requests in flight,
    /// replies queued, buffers cached), as a size: 4G, 512M (a bare number
    /// is bytes). Past three quarters of it, the connections that hold the
    /// most take no requests until memory frees, and those that do not
    /// read their replies go after --stall-timeout. Default: a quarter of
    /// MemAvailable at start (the startup line says how much).
    #[arg(long = "max-memory", value_name = "SIZE")]
    pub max_memory: Option<String>,

    /// Seconds a client may stall mid-message (or not read replies)
    /// before it is disconnected.
    #[arg(
        long = "stall-timeout",
        value_name = "SECONDS",
        default_value_t = DEFAULTS.stall_timeout.as_secs()
    )]
    pub stall_timeout: u64,

    /// Connections served at once; more are refused with a message.
    #[arg(
        long = "max-connections",
        value_name = "N",
        default_value_t = DEFAULTS.max_connections
    )]
    pub max_connections: usize,

    /// Connections served at once from one IP address (one /64 for
    /// IPv6); more are refused with a message. Below --max-connections by
    /// default, so that one address cannot take every slot.
    #[arg(
        long = "max-connections-per-peer",
        value_name = "N",
        default_value_t = DEFAULTS.max_per_peer
    )]
    pub max_per_peer: usize,

    /// Milliseconds a client has to finish negotiating (TLS included).
    #[arg(
        long = "handshake-timeout-ms",
        value_name = "MS",
        default_value_t = DEFAULTS.handshake_timeout.as_millis() as u64
    )]
    pub handshake_timeout_ms: u64,

    /// Milliseconds a connection may idle (nothing in flight, nothing
    /// asked or answered) before it is closed and its memory freed. 0
    /// keeps idle connections: use it for clients that idle for long and
    /// do not reconnect (a kernel nbd-client mount without -persist, qemu
    /// without reconnect-delay).
    #[arg(
        long = "idle-timeout-ms",
        value_name = "MS",
        default_value_t = DEFAULTS.idle_timeout.map_or(0, |d| d.as_millis() as u64)
    )]
    pub idle_timeout_ms: u64,

    /// I/O threads, each an event loop over its share of the connections
    /// (default: one per core).
    #[arg(long = "io-threads", value_name = "N")]
    pub io_threads: Option<usize>,
}

/// Check a `--listen` address: `HOST:PORT` with a port of 0 to 65535
/// (`[::1]:PORT` for IPv6).
fn check_listen(l: &str) -> Result<String, Error> {
    let Some((host, port)) = l.rsplit_once(':') else {
        return Err(Error::option(
            "listen",
            format!(
                "--listen {l:?}: expected HOST:PORT, as in 127.0.0.1:10809 (port 0 picks a free one)"
            ),
        ));
    };
    if host.is_empty() {
        return Err(Error::option(
            "listen",
            format!(
                "--listen {l:?}: no host before the port; expected HOST:PORT, as in \
                 127.0.0.1:{port} or 0.0.0.0:{port}"
            ),
        ));
    }
    if port.parse::<u16>().is_err() {
        return Err(Error::option(
            "listen",
            format!(
                "--listen {l:?}: port {port:?} is not a number from 0 to 65535 (NBD's is 10809; \
                 0 picks a free one)"
            ),
        ));
    }
    Ok(l.to_string())
}

impl NbdArgs {
    /// Where to listen, checked.
    fn address(&self) -> Result<Option<Listen>, Error> {
        Ok(match (&self.listen, &self.socket) {
            (Some(l), _) => Some(Listen::Tcp(check_listen(l)?)),
            (None, Some(p)) => Some(Listen::Unix(p.clone())),
            (None, None) => None,
        })
    }

    /// The connection limits, checked.
    fn limits(&self) -> Result<ConnLimits, Error> {
        let min_mib = u64::from(mqblk_nbd_proto::consts::DEFAULT_MAX_PAYLOAD).div_ceil(1 << 20);
        if self.max_mib < min_mib {
            return Err(Error::option(
                "max-mib",
                format!(
                    "--max-mib {}: expected at least {min_mib}, so that one request of up to \
                     {min_mib} MiB fits in a connection's buffers",
                    self.max_mib
                ),
            ));
        }
        if self.max_mib > (1 << 20) {
            return Err(Error::option(
                "max-mib",
                format!(
                    "--max-mib {}: expected at most 1048576 (1 TiB)",
                    self.max_mib
                ),
            ));
        }
        let max_memory = match &self.max_memory {
            None => None,
            Some(v) => {
                let min = ConnLimits::memory_min();
                let bytes = mqblk_core::spec::parse_size(v).map_err(|why| {
                    Error::option(
                        "max-memory",
                        format!("--max-memory {v:?}: {why}; expected a size such as 4G or 512M"),
                    )
                })?;
                if bytes < min {
                    return Err(Error::option(
                        "max-memory",
                        format!(
                            "--max-memory {v}: expected at least {}M, so that one request of up \
                             to {min_mib} MiB fits below the three quarters of it that any \
                             connection may take",
                            min >> 20
                        ),
                    ));
                }
                Some(bytes)
            }
        };
        let at_least = |option: &'static str, value: u64, what: &str| {
            if value == 0 {
                Err(Error::option(
                    option,
                    format!("--{option} 0: expected at least {what}"),
                ))
            } else {
                Ok(())
            }
        };
        at_least(
            "max-requests",
            u64::from(self.max_requests),
            "1 request in flight per connection",
        )?;
        at_least("max-connections-per-peer", self.max_per_peer as u64, "1")?;
        at_least("handshake-timeout-ms", self.handshake_timeout_ms, "1 ms")?;
        at_least(
            "max-connections",
            self.max_connections as u64,
            "1 connection at once",
        )?;
        at_least("stall-timeout", self.stall_timeout, "1 second")?;
        if let Some(n) = self.io_threads {
            at_least("io-threads", n as u64, "1")?;
        }
        Ok(ConnLimits {
            max_requests: self.max_requests,
            max_bytes: self.max_mib << 20,
            stall_timeout: Duration::from_secs(self.stall_timeout),
            max_connections: self.max_connections,
            max_per_peer: self.max_per_peer,
            handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
            idle_timeout: (self.idle_timeout_ms > 0)
                .then(|| Duration::from_millis(self.idle_timeout_ms)),
            max_memory,
        })
    }

    /// The TLS policy, checked against the certificate options.
    fn tls_mode(&self) -> Result<TlsMode, Error> {
        let verify = self.tls_verify_peer.is_some();
        let mode = match (self.tls, self.tls_cert.is_some()) {
            (Some(TlsArg::Off), _) | (None, false) => TlsMode::Off,
            (None, true) if verify => TlsMode::Require,
            (Some(TlsArg::On), _) | (None, true) => TlsMode::On,
            (Some(TlsArg::Require), _) => TlsMode::Require,
        };
        if verify && mode != TlsMode::Require {
            return Err(Error::option(
                "tls-verify-peer",
                format!(
                    "--tls-verify-peer with --tls={}: a plaintext client would be served with no \
                     certificate at all; use --tls=require (the default with --tls-verify-peer)",
                    if mode == TlsMode::On { "on" } else { "off" }
                ),
            ));
        }
        if mode != TlsMode::Off && self.tls_cert.is_none() {
            return Err(Error::option(
                "tls",
                format!(
                    "--tls={} needs --tls-cert and --tls-key",
                    if mode == TlsMode::On { "on" } else { "require" }
                ),
            ));
        }
        Ok(mode)
    }
}

impl ExportArgs for NbdArgs {
    fn wanted(&self) -> bool {
        self.listen.is_some() || self.socket.is_some()
    }

    fn check(&self) -> Result<(), Error> {
        self.address()?;
        self.limits()?;
        self.tls_mode()?;
        Ok(())
    }

    fn open(&self, devices: Devices<'_>) -> Result<Box<dyn ExportTrait>, Error> {
        let listen = self
            .address()?
            .ok_or_else(|| Error::option("listen", "NBD needs --listen or --socket"))?;
        if self.export.len() > devices.list.len() {
            return Err(Error::option(
                "export",
                format!(
                    "{} --export names for {} devices: give one name per device",
                    self.export.len(),
                    devices.list.len()
                ),
            ));
        }
        let mut exports = Vec::with_capacity(devices.list.len());
        for (i, d) in devices.list.iter().enumerate() {
            let name = match self.export.get(i) {
                Some(n) => n.clone(),
                None if i == 0 => String::new(),
                None => {
                    return Err(Error::option(
                        "export",
                        format!(
                            "--device {:?} (number {}) needs an --export name",
                            d.spec,
                            i + 1
                        ),
                    ))
                }
            };
            let mut e = Export::new(name, d.dev.clone());
            e.read_only = devices.read_only;
            // A device over NBD may sit on a server without multi-conn (so
            // may a stacked device with an NBD leg); every local kind keeps
            // its data in one place all contexts reach.
            let kind = mqblk_core::spec::parse(&d.spec)
                .map(|s| s.kind)
                .unwrap_or_default();
            e.multi_conn = kind != "nbd" && !d.lower.iter().any(|l| l.name().starts_with("nbd"));
            e.description = format!("mqblk {}", d.spec);
            exports.push(e);
        }
        let tls_mode = self.tls_mode()?;
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(c), Some(k)) => Some(
                crate::tls::server_config(c, k, self.tls_verify_peer.as_deref())
                    .map_err(|why| Error::option("tls-cert", why))?,
            ),
            _ => None,
        };
        let server = Server::bind(
            ServerConfig {
                exports,
                tls_mode,
                tls,
                limits: self.limits()?,
            },
            &listen,
        )
        .map_err(Error::export)?;
        let server = match self.io_threads {
            Some(n) => server.with_io_threads(n),
            None => server,
        };
        Ok(Box::new(NbdExport {
            server: Arc::new(server),
            listen,
        }))
    }
}

/// The NBD server as one of `serve`'s exports.
struct NbdExport {
    server: Arc<Server>,
    listen: Listen,
}

impl ExportTrait for NbdExport {
    fn kind(&self) -> &'static str {
        "NBD"
    }

    fn started(&self) -> String {
        let at = match (self.server.local_addr(), &self.listen) {
            (Some(a), _) => format!("nbd://{a}"),
            (None, Listen::Unix(p)) => format!("nbd+unix:///?socket={}", p.display()),
            (None, Listen::Tcp(l)) => l.clone(),
        };
        let names: Vec<String> = self
            .server
            .export_infos()
            .iter()
            .map(|e| format!("{:?} ({} bytes)", e.name, e.size))
            .collect();
        format!(
            "listening on {at}, exports: {}; buffer memory up to {} MiB (--max-memory)",
            names.join(", "),
            self.server.max_memory() >> 20
        )
    }

    fn stop_signal(&self) -> StopSignal {
        // Weak: a stop handle (a signal's watcher thread holds one for the
        // process's life) must not keep the server, whose drop removes its
        // socket and lock file, past the end of `serve`.
        let server = Arc::downgrade(&self.server);
        StopSignal::new(move || {
            if let Some(s) = server.upgrade() {
                s.stop();
            }
        })
    }

    fn serve(self: Box<Self>) -> Result<ExportReport, Error> {
        self.server.run().map_err(Error::export)?;
        let st = self.server.stats();
        Ok(ExportReport {
            lines: vec![format!(
                "stopped after {} connections, {} requests ({} errors, {} connections dropped)",
                st.connections.load(Ordering::Relaxed),
                st.requests.load(Ordering::Relaxed),
                st.errors.load(Ordering::Relaxed),
                st.dropped.load(Ordering::Relaxed)
            )],
        })
    }
}
