//! The FUSE export as `mqblk serve` picks it ([`mqblk_export`]): its
//! options (`--fuse FILE`, `--fuse-threads`), the [`Server`] mounted over
//! the first device, its startup line, its stop, and what its end says
//! (a detached mount, threads left waiting on the device). Above the
//! server, which knows nothing of the command line.

use std::path::PathBuf;

use clap::Args;
use mqblk_export::{Devices, Error, Export, ExportArgs, ExportReport, StopSignal};

use crate::{Server, ServerConfig, MAX_THREADS};

/// `mqblk serve`'s FUSE options.
#[derive(Args, Debug, Default)]
pub struct FuseArgs {
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

impl ExportArgs for FuseArgs {
    fn wanted(&self) -> bool {
        self.fuse.is_some()
    }

    fn check(&self) -> Result<(), Error> {
        let threads = self.fuse_threads;
        if threads == Some(0) || threads > Some(MAX_THREADS) {
            return Err(Error::option(
                "fuse-threads",
                format!(
                    "--fuse-threads {}: expected 1 to {MAX_THREADS} threads",
                    threads.unwrap_or(0)
                ),
            ));
        }
        Ok(())
    }

    fn open(&self, devices: Devices<'_>) -> Result<Box<dyn Export>, Error> {
        let file = self
            .fuse
            .clone()
            .ok_or_else(|| Error::option("fuse", "no --fuse file given"))?;
        let first = devices
            .list
            .first()
            .ok_or_else(|| Error::option("device", "no device to serve as a FUSE file"))?;
        let cfg = ServerConfig {
            file,
            threads: self.fuse_threads,
            read_only: devices.read_only,
        };
        let server = Server::mount(first.dev.clone(), &cfg).map_err(Error::export)?;
        Ok(Box::new(FuseExport {
            server,
            name: first.dev.name().to_string(),
            capacity_bytes: first.dev.capacity_bytes(),
        }))
    }
}

/// The FUSE file as one of `serve`'s exports.
struct FuseExport {
    server: Server,
    name: String,
    capacity_bytes: u64,
}

impl Export for FuseExport {
    fn kind(&self) -> &'static str {
        "FUSE"
    }

    fn started(&self) -> String {
        let s = &self.server;
        format!(
            "FUSE export on {}: {} ({} bytes, {} threads, requests up to {} KiB{})",
            s.path().display(),
            self.name,
            self.capacity_bytes,
            s.threads(),
            s.max_request_bytes() >> 10,
            if s.read_only() { ", read-only" } else { "" }
        )
    }

    fn stop_signal(&self) -> StopSignal {
        let stop = self.server.stop_handle();
        StopSignal::new(move || stop.stop())
    }

    fn serve(self: Box<Self>) -> Result<ExportReport, Error> {
        let file = self.server.path().to_path_buf();
        let ended = self.server.run().map_err(Error::export)?;
        let mut lines = Vec::new();
        if ended.detached {
            lines.push(format!(
                "FUSE export {}: the file was busy: the mount was detached (lazy unmount){}",
                file.display(),
                if ended.aborted {
                    " and its connection aborted: its users' requests fail from now on"
                } else {
                    ""
                }
            ));
        }
        if ended.threads_left > 0 {
            lines.push(format!(
                "FUSE export {}: {} threads still wait on the device",
                file.display(),
                ended.threads_left
            ));
        }
        lines.push(format!(
            "FUSE export stopped after {} requests ({} errors)",
            ended.requests, ended.errors
        ));
        Ok(ExportReport { lines })
    }
}
