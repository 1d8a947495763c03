//! mqblk-export: the one small interface through which `mqblk serve`
//! picks and runs its exports: NBD (`mqblk-nbd`), vhost-user-blk
//! (`mqblk-vhost`) and a FUSE file (`mqblk-fuse`).
//!
//! Exports sit at the caller's end of the pipeline: each one turns a
//! protocol's requests into bios on contexts of its own, over devices
//! that `serve` opened (`caller → Bio → … → driver`, where the caller is
//! a remote client, a virtual machine or a program reading a file). No
//! export knows another, and `serve` knows none of their insides: it
//! opens the devices, asks each export's options ([`ExportArgs`]) whether
//! they were given and whether they make sense, binds every chosen
//! export ([`ExportArgs::open`]) before any serves, says what each serves
//! ([`Export::started`]), runs them together ([`serve_all`]), stops them
//! at a signal ([`StopSignal`]), and prints how each ended
//! ([`ExportReport`]).
//!
//! Why a crate of its own, and not a module of `mqblk`: the exports
//! implement this trait, and `mqblk` depends on `mqblk-nbd` (its NBD
//! client driver), so the trait must sit below both. It needs nothing
//! but `mqblk-core`'s `Device`, as qemu-storage-daemon's
//! `BlockExportDriver` (`create`, `request_shutdown`) needs nothing but a
//! block node.
//!
//! Binding is apart from serving so that every mistake an export can see
//! before it serves (a socket path in use, a file that cannot be mounted,
//! an option out of range) ends the command before any client is let in.

#![forbid(unsafe_code)]

use std::sync::mpsc;
use std::sync::Arc;

use mqblk_core::Device;

/// A device to export, as `serve` opened it.
#[derive(Clone, Debug)]
pub struct Exported {
    /// The spec it was opened from (`ram,size=1G`), for descriptions.
    pub spec: String,
    /// The device.
    pub dev: Device,
    /// The devices below it (a stacked device's legs, a partition's
    /// whole device), deepest last.
    pub lower: Vec<Device>,
}

/// What every export of one `serve` is given: the devices (opened once,
/// shared by every export), in the order given.
#[derive(Clone, Copy, Debug)]
pub struct Devices<'a> {
    /// The devices; an export of one device serves the first.
    pub list: &'a [Exported],
    /// The devices were opened read-only: export them so.
    pub read_only: bool,
}

/// Asks a running export to stop: stop taking clients, let the requests
/// in flight finish and be answered, flush, and return from
/// [`Export::serve`]. Callable from any thread, more than once.
#[derive(Clone)]
pub struct StopSignal(Arc<dyn Fn() + Send + Sync>);

impl StopSignal {
    /// A stop that runs `stop`.
    pub fn new(stop: impl Fn() + Send + Sync + 'static) -> StopSignal {
        StopSignal(Arc::new(stop))
    }

    /// Ask the export to stop.
    pub fn stop(&self) {
        (self.0)()
    }
}

impl std::fmt::Debug for StopSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopSignal")
    }
}

/// How an export ended: the lines it says, each after `mqblk serve: `
/// (`stopped after 3 connections, ...`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExportReport {
    /// The lines, in order.
    pub lines: Vec<String>,
}

/// Why an export did not start, or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An option given to the export is wrong; the message names the
    /// option, the value and what was expected (`--num-queues 0: expected
    /// 1 to 64 virtqueues`).
    #[error("{message}")]
    Option {
        /// The option, as the command line spells it (`num-queues`).
        option: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The export's own typed error (binding, mounting, serving).
    #[error(transparent)]
    Export(Box<dyn std::error::Error + Send + Sync>),
    /// The export's thread panicked.
    #[error("the {kind} export panicked")]
    Panicked {
        /// [`Export::kind`].
        kind: &'static str,
    },
}

impl Error {
    /// A wrong option: `message` names it, its value and what was
    /// expected.
    pub fn option(option: &'static str, message: impl Into<String>) -> Error {
        Error::Option {
            option,
            message: message.into(),
        }
    }

    /// The export's own error.
    pub fn export(e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Export(Box::new(e))
    }
}

/// One export, bound and ready: its socket listens, its file is mounted.
/// Nothing is served until [`Export::serve`].
pub trait Export: Send {
    /// Its name in messages and thread names: `NBD`, `vhost-user-blk`,
    /// `FUSE`.
    fn kind(&self) -> &'static str;

    /// The line `serve` prints once it is bound (after `mqblk serve: `):
    /// where it serves, what, and with which bounds.
    fn started(&self) -> String;

    /// The handle that stops it, from any thread.
    fn stop_signal(&self) -> StopSignal;

    /// Serve until [`StopSignal::stop`] (or until it fails), then say how
    /// it ended. Runs on a thread of its own.
    fn serve(self: Box<Self>) -> Result<ExportReport, Error>;
}

/// One export's options, as the command line gave them.
pub trait ExportArgs {
    /// True if the command line asked for this export (its address, its
    /// socket, its file).
    fn wanted(&self) -> bool;

    /// Check everything the options alone can tell, before any device is
    /// opened.
    fn check(&self) -> Result<(), Error>;

    /// Bind the export over `devices` (after [`ExportArgs::check`]).
    fn open(&self, devices: Devices<'_>) -> Result<Box<dyn Export>, Error>;
}

/// Serve every export, each on a thread of its own, until all have
/// returned. When one fails (or panics), the others are stopped, so that
/// the command ends. The results come in the order of `exports`.
pub fn serve_all(
    exports: Vec<Box<dyn Export>>,
) -> Vec<(&'static str, Result<ExportReport, Error>)> {
    /// Says that thread `.1` ended, even if it panicked.
    struct Ended(mpsc::Sender<usize>, usize);
    impl Drop for Ended {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }

    let (tx, rx) = mpsc::channel::<usize>();
    let n = exports.len();
    let mut kinds = Vec::with_capacity(n);
    let mut stops = Vec::with_capacity(n);
    let mut threads = Vec::with_capacity(n);
    let mut results: Vec<Option<Result<ExportReport, Error>>> = (0..n).map(|_| None).collect();
    for (i, export) in exports.into_iter().enumerate() {
        kinds.push(export.kind());
        stops.push(export.stop_signal());
        let ended = Ended(tx.clone(), i);
        let spawned = std::thread::Builder::new()
            .name(format!("serve-{}", export.kind().to_ascii_lowercase()))
            .spawn(move || {
                let _ended = ended;
                export.serve()
            });
        match spawned {
            Ok(t) => threads.push(Some(t)),
            Err(e) => {
                threads.push(None);
                results[i] = Some(Err(Error::export(e)));
            }
        }
    }
    drop(tx);
    let mut stopped = false;
    loop {
        if !stopped && results.iter().any(|r| matches!(r, Some(Err(_)))) {
            stops.iter().for_each(StopSignal::stop);
            stopped = true;
        }
        // Each thread says it ended once; all said, the channel closes.
        let Ok(i) = rx.recv() else { break };
        if let Some(t) = threads[i].take() {
            let kind = kinds[i];
            results[i] = Some(t.join().unwrap_or(Err(Error::Panicked { kind })));
        }
    }
    kinds
        .into_iter()
        .zip(results)
        .map(|(kind, r)| (kind, r.unwrap_or(Err(Error::Panicked { kind }))))
        .collect()
}
