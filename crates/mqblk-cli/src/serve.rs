//! `mqblk serve`: export any mqblk device over NBD (TCP or a unix socket,
//! optionally TLS), to virtual machines over vhost-user-blk, as a FUSE
//! file, or several at once. Each export is a crate (`mqblk_nbd`,
//! `mqblk_vhost`, `mqblk_fuse`) behind one interface, `mqblk_export`:
//! its options, its checks, its binding, its startup line and its end
//! are its own. This command only opens the devices, chooses the exports
//! asked for, runs them together, and stops them.
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
use clap::Args;
use mqblk_export::{Devices, ExportArgs, Exported};

use crate::open::{device_spec, open_error, open_read_only};
use signal::{stop_on_signal, watch_stop};

mod signal;

/// `mqblk serve` options: the devices and what applies to every export,
/// then each export's own.
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

    /// Export every device read-only (and open it read-only).
    #[arg(long = "read-only", alias = "readonly", short = 'r')]
    pub read_only: bool,

    /// Listen on this unix socket for limit, group and scheduler changes
    /// while serving (`mqblk qos --control=SOCKET ...`).
    #[arg(long, value_name = "SOCKET")]
    pub control: Option<PathBuf>,

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

    #[command(flatten)]
    pub nbd: mqblk_nbd::serve::NbdArgs,

    #[command(flatten)]
    pub vhost: mqblk_vhost::serve::VhostArgs,

    #[command(flatten)]
    pub fuse: mqblk_fuse::serve::FuseArgs,
}

/// Run the exports asked for until SIGINT/SIGTERM.
pub fn serve_command(args: &ServeArgs) -> Result<()> {
    // Everything the command line alone can tell is checked before any
    // device is opened.
    let kinds: [&dyn ExportArgs; 3] = [&args.nbd, &args.vhost, &args.fuse];
    let wanted: Vec<&dyn ExportArgs> = kinds.into_iter().filter(|e| e.wanted()).collect();
    if wanted.is_empty() {
        bail!(
            "serve needs an address: --listen HOST:PORT (TCP, as in --listen 127.0.0.1:10809), \
             --socket PATH (a unix socket), --vhost-user-blk PATH (for virtual machines) or \
             --fuse FILE (a regular file the device is mounted over)"
        );
    }
    for e in &wanted {
        e.check()?;
    }
    let specs: Vec<String> = args
        .specs
        .iter()
        .chain(&args.device)
        .map(|d| device_spec(d))
        .collect();
    if specs.is_empty() {
        bail!(
            "serve needs a device to export: `mqblk serve SPEC --socket PATH` or \
             `--device SPEC`, as in `mqblk serve ram,size=1G --socket /tmp/mqblk.sock`"
        );
    }
    let mut devices = Vec::with_capacity(specs.len());
    for spec in specs {
        let dev = if args.read_only {
            open_read_only(&spec)
        } else {
            mqblk::open(&spec)
        }
        .map_err(|e| open_error(e, &spec))?;
        if let Some(dir) = &args.trace {
            mqblk::start_trace(&dev, dir).map_err(|e| open_error(e, &spec))?;
        }
        let lower = mqblk::lower_devices(&dev);
        devices.push(Exported { spec, dev, lower });
    }
    let on = Devices {
        list: &devices,
        read_only: args.read_only,
    };
    let mut exports = Vec::with_capacity(wanted.len());
    for e in &wanted {
        exports.push(e.open(on)?);
    }
    let watch: Vec<mqblk::Device> = devices.iter().map(|d| d.dev.clone()).collect();
    let _control = match &args.control {
        Some(path) => Some(crate::qos::Control::start(path, watch.clone())?),
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
    for e in &exports {
        let stop = e.stop_signal();
        stop_on_signal(&format!("{}-stop", e.kind()), move || stop.stop())?;
    }
    for e in &exports {
        eprintln!("mqblk serve: {}", e.started());
    }
    let stats_thread = match &args.stats_dir {
        Some(dir) => Some(keep_stats(dir, &watch, stopping.clone())?),
        None => None,
    };
    watch_stop()?;
    let mut failed = None;
    for (_, result) in mqblk_export::serve_all(exports) {
        match result {
            Ok(report) => {
                for line in report.lines {
                    eprintln!("mqblk serve: {line}");
                }
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(e.into());
    }
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
