//! `mqblk serve`: export any mqblk device over NBD (TCP or a unix socket,
//! optionally TLS), to virtual machines over vhost-user-blk, as a FUSE
//! file, or several at once. The protocols and the data paths are in
//! `mqblk_nbd`, `mqblk_vhost` and `mqblk_fuse`; this is the command line:
//! options, exports, signals.
//!
//! SIGINT or SIGTERM stops accepting, lets every connection finish its
//! in-flight requests and send their replies, flushes every export, and
//! exits 0. A backend that does not answer gets [`signal::STOP_GRACE`]: then the
//! process exits (status 1) without waiting for it, which returns the
//! memory it holds safely. A second signal exits at once. An export whose
//! mirror lost a leg says so as it stops (and `mqblk qos --control=SOCKET
//! show` says so while it serves).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::{Args, ValueEnum};
use mqblk_nbd::{ConnLimits, Export, Listen, Server, ServerConfig, TlsMode};

use crate::open::{device_spec, open_error, open_read_only};
use signal::{stop_on_signal, watch_stop};

mod fuse;
mod signal;

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

/// `mqblk serve` options.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Device specs to export (e.g. ram,size=1G), or give each with
    /// --device. The first is also the default export (empty name).
    #[arg(value_name = "SPEC", conflicts_with = "device")]
    pub specs: Vec<String>,

    /// Device spec to export, repeatable (e.g. ram,size=1G). The first is
    /// also the default export (empty name).
    #[arg(long = "device", value_name = "SPEC")]
    pub device: Vec<String>,

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

    /// Export every device read-only (and open it read-only).
    #[arg(long = "read-only", alias = "readonly", short = 'r')]
    pub read_only: bool,

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

    /// Listen on this unix socket for limit, group and scheduler changes
    /// while serving (`mqblk qos --control=SOCKET ...`).
    #[arg(long, value_name = "SOCKET")]
    pub control: Option<std::path::PathBuf>,

    /// Write blktrace files of every exported device (and the devices
    /// below it) into DIR, for blkparse and btt; `mqblk qos
    /// --control=SOCKET trace start DIR` and `trace stop` do it while
    /// serving.
    #[arg(long, value_name = "DIR")]
    pub trace: Option<PathBuf>,

    /// Keep the counters of every exported device (and the devices below
    /// it) in DIR, refreshed every 100 ms, as `mqblk bench --stats-dir`
    /// does: `mqblk stat DIR` and iostat read them while serving.
    #[arg(long = "stats-dir", value_name = "DIR")]
    pub stats_dir: Option<PathBuf>,

    /// Serve the (first) device to virtual machines as a vhost-user-blk
    /// backend on the unix socket PATH (QEMU's `vhost-user-blk-pci`,
    /// cloud-hypervisor's `--disk vhost_user=true`, libblkio's
    /// `virtio-blk-vhost-user`): one VM at a time, then the next. With
    /// --listen or --socket, the same device is exported over NBD too.
    #[arg(long = "vhost-user-blk", value_name = "PATH")]
    pub vhost_user_blk: Option<PathBuf>,

    /// Virtqueues the VM may use, each served by a thread with its own
    /// context (default: the device's hardware queues).
    #[arg(long = "num-queues", value_name = "N", requires = "vhost_user_blk")]
    pub num_queues: Option<usize>,

    /// After each batch of a virtqueue, keep polling it and the device for
    /// this many microseconds past the last request or completion found,
    /// instead of sleeping until the next kick (0, the default: off). Costs
    /// a core per busy queue; saves the guest's kicks and the completion
    /// wakeups.
    #[arg(
        long = "poll-us",
        value_name = "US",
        default_value_t = 0,
        requires = "vhost_user_blk"
    )]
    pub poll_us: u64,

    /// The disk's serial, as the guest reads it (`/sys/block/vda/serial`;
    /// up to 20 bytes; default: the device's name).
    #[arg(long = "serial", value_name = "ID", requires = "vhost_user_blk")]
    pub serial: Option<String>,

    /// Mount the (first) device as the one regular file FILE (an existing
    /// regular file, hidden while served): its size is the device's
    /// capacity, its contents the device, for losetup, mkfs, mount,
    /// qemu-img or any program (as root). A stale mount left by a killed
    /// server is cleared first. With --listen or --socket, the same device
    /// is exported over NBD too.
    #[arg(long = "fuse", value_name = "FILE")]
    pub fuse: Option<PathBuf>,

    /// Threads serving the FUSE file, each with its own cloned /dev/fuse
    /// and its own context (default: the device's hardware queues, at
    /// least 2).
    #[arg(long = "fuse-threads", value_name = "N", requires = "fuse")]
    pub fuse_threads: Option<usize>,
}

/// The server's own defaults, which the options' defaults are.
const DEFAULTS: ConnLimits = ConnLimits::DEFAULT;

/// Check a `--listen` address: `HOST:PORT` with a port of 0 to 65535
/// (`[::1]:PORT` for IPv6).
fn check_listen(l: &str) -> Result<String> {
    let Some((host, port)) = l.rsplit_once(':') else {
        bail!(
            "--listen {l:?}: expected HOST:PORT, as in 127.0.0.1:10809 (port 0 picks a free one)"
        );
    };
    if host.is_empty() {
        bail!("--listen {l:?}: no host before the port; expected HOST:PORT, as in 127.0.0.1:{port} or 0.0.0.0:{port}");
    }
    if port.parse::<u16>().is_err() {
        bail!(
            "--listen {l:?}: port {port:?} is not a number from 0 to 65535 (NBD's is 10809; \
             0 picks a free one)"
        );
    }
    Ok(l.to_string())
}

/// Run the server until SIGINT/SIGTERM.
pub fn serve_command(args: &ServeArgs) -> Result<()> {
    // Everything the command line alone can tell is checked before any
    // device is opened.
    let listen = match (&args.listen, &args.socket) {
        (Some(l), _) => Some(Listen::Tcp(check_listen(l)?)),
        (None, Some(p)) => Some(Listen::Unix(p.clone())),
        (None, None) if args.vhost_user_blk.is_some() || args.fuse.is_some() => None,
        (None, None) => bail!(
            "serve needs an address: --listen HOST:PORT (TCP, as in --listen 127.0.0.1:10809), \
             --socket PATH (a unix socket), --vhost-user-blk PATH (for virtual machines) or \
             --fuse FILE (a regular file the device is mounted over)"
        ),
    };
    if args.poll_us > 1_000_000 {
        bail!(
            "--poll-us {}: expected at most 1000000 (one second of spinning per batch)",
            args.poll_us
        );
    }
    if args.num_queues == Some(0) || args.num_queues > Some(mqblk_vhost::MAX_QUEUES) {
        bail!(
            "--num-queues {}: expected 1 to {} virtqueues",
            args.num_queues.unwrap_or(0),
            mqblk_vhost::MAX_QUEUES
        );
    }
    let devices: Vec<String> = args
        .specs
        .iter()
        .chain(&args.device)
        .map(|d| device_spec(d))
        .collect();
    if devices.is_empty() {
        bail!(
            "serve needs a device to export: `mqblk serve SPEC --socket PATH` or \
             `--device SPEC`, as in `mqblk serve ram,size=1G --socket /tmp/mqblk.sock`"
        );
    }
    if args.export.len() > devices.len() {
        bail!(
            "{} --export names for {} devices: give one name per device",
            args.export.len(),
            devices.len()
        );
    }
    let min_mib = u64::from(mqblk_nbd_proto::consts::DEFAULT_MAX_PAYLOAD).div_ceil(1 << 20);
    if args.max_mib < min_mib {
        bail!(
            "--max-mib {}: expected at least {min_mib}, so that one request of up to {min_mib} \
             MiB fits in a connection's buffers",
            args.max_mib
        );
    }
    if args.max_mib > (1 << 20) {
        bail!(
            "--max-mib {}: expected at most 1048576 (1 TiB)",
            args.max_mib
        );
    }
    let max_memory = match &args.max_memory {
        None => None,
        Some(v) => {
            let min = ConnLimits::memory_min();
            let bytes = mqblk::spec::parse_size(v).map_err(|why| {
                anyhow::anyhow!("--max-memory {v:?}: {why}; expected a size such as 4G or 512M")
            })?;
            if bytes < min {
                bail!(
                    "--max-memory {v}: expected at least {}M, so that one request of up to \
                     {min_mib} MiB fits below the three quarters of it that any connection may \
                     take",
                    min >> 20
                );
            }
            Some(bytes)
        }
    };
    if args.max_requests == 0 {
        bail!("--max-requests 0: expected at least 1 request in flight per connection");
    }
    if args.max_per_peer == 0 {
        bail!("--max-connections-per-peer 0: expected at least 1");
    }
    if args.handshake_timeout_ms == 0 {
        bail!("--handshake-timeout-ms 0: expected at least 1 ms");
    }
    if args.max_connections == 0 {
        bail!("--max-connections 0: expected at least 1 connection at once");
    }
    if args.stall_timeout == 0 {
        bail!("--stall-timeout 0: expected at least 1 second");
    }
    let verify = args.tls_verify_peer.as_deref();
    let tls_mode = match (args.tls, args.tls_cert.is_some()) {
        (Some(TlsArg::Off), _) | (None, false) => TlsMode::Off,
        (None, true) if verify.is_some() => TlsMode::Require,
        (Some(TlsArg::On), _) | (None, true) => TlsMode::On,
        (Some(TlsArg::Require), _) => TlsMode::Require,
    };
    if verify.is_some() && tls_mode != TlsMode::Require {
        bail!(
            "--tls-verify-peer with --tls={}: a plaintext client would be served with no \
             certificate at all; use --tls=require (the default with --tls-verify-peer)",
            if tls_mode == TlsMode::On { "on" } else { "off" }
        );
    }
    if tls_mode != TlsMode::Off && args.tls_cert.is_none() {
        bail!(
            "--tls={} needs --tls-cert and --tls-key",
            if tls_mode == TlsMode::On {
                "on"
            } else {
                "require"
            }
        );
    }
    let mut exports = Vec::with_capacity(devices.len());
    let mut opened = Vec::with_capacity(devices.len());
    for (i, spec) in devices.iter().enumerate() {
        let name = match args.export.get(i) {
            Some(n) => n.clone(),
            None if i == 0 => String::new(),
            None => bail!(
                "--device {spec:?} (number {}) needs an --export name",
                i + 1
            ),
        };
        let dev = if args.read_only {
            open_read_only(spec)
        } else {
            mqblk::open(spec)
        }
        .map_err(|e| open_error(e, spec))?;
        if let Some(dir) = &args.trace {
            mqblk::start_trace(&dev, dir).map_err(|e| open_error(e, spec))?;
        }
        let kind = mqblk::spec::parse(spec).map(|s| s.kind).unwrap_or_default();
        opened.push(dev.clone());
        let mut e = Export::new(name, dev.clone());
        e.read_only = args.read_only;
        // A device over NBD may sit on a server without multi-conn (so may
        // a stacked device with an NBD leg); every local kind keeps its
        // data in one place all contexts reach.
        e.multi_conn = kind != "nbd"
            && !mqblk::lower_devices(&dev)
                .iter()
                .any(|d| d.name().starts_with("nbd"));
        e.description = format!("mqblk {spec}");
        exports.push(e);
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(c), Some(k)) => {
            Some(mqblk_nbd::tls::server_config(c, k, verify).map_err(anyhow::Error::msg)?)
        }
        _ => None,
    };
    let limits = ConnLimits {
        max_requests: args.max_requests,
        max_bytes: args.max_mib << 20,
        stall_timeout: Duration::from_secs(args.stall_timeout),
        max_connections: args.max_connections,
        max_per_peer: args.max_per_peer,
        handshake_timeout: Duration::from_millis(args.handshake_timeout_ms),
        idle_timeout: (args.idle_timeout_ms > 0)
            .then(|| Duration::from_millis(args.idle_timeout_ms)),
        max_memory,
    };
    let watch = opened.clone();
    let vhost = match &args.vhost_user_blk {
        Some(path) => {
            let cfg = mqblk_vhost::ServerConfig {
                socket: path.clone(),
                num_queues: args.num_queues,
                read_only: args.read_only,
                serial: args.serial.clone(),
                poll: (args.poll_us > 0).then(|| Duration::from_micros(args.poll_us)),
            };
            Some(mqblk_vhost::Server::bind(opened[0].clone(), &cfg).map_err(anyhow::Error::msg)?)
        }
        None => None,
    };
    let fuse = match &args.fuse {
        Some(file) => Some(fuse::mount(
            file,
            args.fuse_threads,
            args.read_only,
            &opened[0],
        )?),
        None => None,
    };
    let _control = match &args.control {
        Some(path) => Some(crate::qos::Control::start(path, opened)?),
        None => None,
    };
    let nbd = match &listen {
        Some(listen) => {
            let server = Server::bind(
                ServerConfig {
                    exports,
                    tls_mode,
                    tls,
                    limits,
                },
                listen,
            )?;
            Some(match args.io_threads {
                Some(n) if n > 0 => server.with_io_threads(n),
                Some(_) => bail!("--io-threads 0: expected at least 1"),
                None => server,
            })
        }
        None => None,
    };
    // A second signal exits at once.
    let stopping = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, stopping.clone())
            .context("installing the signal handler")?;
        signal_hook::flag::register(sig, stopping.clone())
            .context("installing the signal handler")?;
    }
    if let Some(server) = &nbd {
        let stop: Arc<AtomicBool> = server.shutdown_handle();
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            // The flag first, then the byte that wakes the I/O threads to see it.
            signal_hook::flag::register(sig, stop.clone())
                .context("installing the signal handler")?;
            let wake = server.wake_fd().context("the server's wake socket")?;
            signal_hook::low_level::pipe::register(sig, wake)
                .context("installing the signal handler")?;
        }
        let at = match (server.local_addr(), &listen) {
            (Some(a), _) => format!("nbd://{a}"),
            (None, Some(Listen::Unix(p))) => format!("nbd+unix:///?socket={}", p.display()),
            (None, Some(Listen::Tcp(l))) => l.clone(),
            (None, None) => unreachable!("an NBD server has an address"),
        };
        let names: Vec<String> = server
            .export_infos()
            .iter()
            .map(|e| format!("{:?} ({} bytes)", e.name, e.size))
            .collect();
        eprintln!(
            "mqblk serve: listening on {at}, exports: {}; buffer memory up to {} MiB (--max-memory)",
            names.join(", "),
            server.max_memory() >> 20
        );
    }
    let vhost_thread = match vhost {
        Some(server) => {
            let stop = server.stop_handle();
            let on_signal = stop.clone();
            stop_on_signal("vhost-stop", move || on_signal.stop())?;
            let dev = &watch[0];
            eprintln!(
                "mqblk serve: vhost-user-blk on {}: {} ({} bytes, {} virtqueues{})",
                server.socket().display(),
                dev.name(),
                dev.capacity_bytes(),
                server.num_queues(),
                if args.read_only { ", read-only" } else { "" }
            );
            let stats = server.stats();
            let t = std::thread::Builder::new()
                .name("vhost-user-blk".into())
                .spawn(move || server.run())
                .context("starting the vhost-user-blk server")?;
            Some((t, stats, stop))
        }
        None => None,
    };
    let fuse_thread = match fuse {
        Some(server) => Some(fuse::start(server, &watch[0])?),
        None => None,
    };
    let stats_thread = match &args.stats_dir {
        Some(dir) => Some(keep_stats(dir, &watch, stopping.clone())?),
        None => None,
    };
    watch_stop()?;
    let nbd_result = match &nbd {
        Some(server) => server.run().map_err(anyhow::Error::from),
        None => Ok(()),
    };
    if let Some((t, stats, stop)) = vhost_thread {
        if nbd_result.is_err() {
            stop.stop();
        }
        match t.join() {
            Ok(r) => r.map_err(anyhow::Error::msg)?,
            Err(_) => bail!("the vhost-user-blk server panicked"),
        }
        eprintln!(
            "mqblk serve: vhost-user-blk stopped after {} frontends",
            stats.connections.load(Ordering::Relaxed)
        );
    }
    if let Some(running) = fuse_thread {
        fuse::finish(running, nbd_result.is_err())?;
    }
    nbd_result?;
    if let Some(t) = stats_thread {
        stopping.store(true, Ordering::Relaxed);
        match t.join() {
            Ok(r) => r?,
            Err(_) => bail!("the stats writer panicked"),
        }
    }
    // An export that ran degraded says so, as its last word.
    for dev in &watch {
        for leg in mqblk::degraded_legs(dev) {
            eprintln!(
                "mqblk serve: export {}: DEGRADED: {}",
                dev.name(),
                crate::degraded::text(&leg, None)
            );
        }
    }
    if let Some(server) = &nbd {
        let st = server.stats();
        eprintln!(
            "mqblk serve: stopped after {} connections, {} requests ({} errors, {} connections dropped)",
            st.connections.load(Ordering::Relaxed),
            st.requests.load(Ordering::Relaxed),
            st.errors.load(Ordering::Relaxed),
            st.dropped.load(Ordering::Relaxed)
        );
    }
    Ok(())
}

/// Write the counters of `devices` and the devices below them into `dir`
/// every 100 ms until `stop`, then once more, final.
fn keep_stats(
    dir: &std::path::Path,
    devices: &[mqblk::Device],
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Result<()>>> {
    let mut devs: Vec<mqblk::Device> = Vec::new();
    for d in devices {
        for d in std::iter::once(d.clone()).chain(mqblk::lower_devices(d)) {
            if !devs.iter().any(|x| x.name() == d.name()) {
                devs.push(d);
            }
        }
    }
    let sd = crate::stat::StatsDir::new(dir, devs)?;
    sd.write(false)?;
    std::thread::Builder::new()
        .name("serve-stats".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                sd.write(false)?;
            }
            sd.write(true)
        })
        .context("starting the stats writer")
}
