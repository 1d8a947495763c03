//! The vhost-user-blk export as `mqblk serve` picks it
//! ([`mqblk_export`]): its options (`--vhost-user-blk`, `--num-queues`,
//! `--poll-us`, `--serial`), the [`Server`] bound over the first device,
//! its startup line, its stop, and what its end says. Above the server,
//! which knows nothing of the command line.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use mqblk_export::{Devices, Error, Export, ExportArgs, ExportReport, StopSignal};

use crate::{Server, ServerConfig, MAX_QUEUES};

/// The longest spin after a batch (`--poll-us`).
const POLL_US_MAX: u64 = 1_000_000;

/// `mqblk serve`'s vhost-user-blk options.
#[derive(Args, Debug, Default)]
pub struct VhostArgs {
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
}

impl ExportArgs for VhostArgs {
    fn wanted(&self) -> bool {
        self.vhost_user_blk.is_some()
    }

    fn check(&self) -> Result<(), Error> {
        if self.poll_us > POLL_US_MAX {
            return Err(Error::option(
                "poll-us",
                format!(
                    "--poll-us {}: expected at most {POLL_US_MAX} (one second of spinning per \
                     batch)",
                    self.poll_us
                ),
            ));
        }
        if self.num_queues == Some(0) || self.num_queues > Some(MAX_QUEUES) {
            return Err(Error::option(
                "num-queues",
                format!(
                    "--num-queues {}: expected 1 to {MAX_QUEUES} virtqueues",
                    self.num_queues.unwrap_or(0)
                ),
            ));
        }
        Ok(())
    }

    fn open(&self, devices: Devices<'_>) -> Result<Box<dyn Export>, Error> {
        let socket = self
            .vhost_user_blk
            .clone()
            .ok_or_else(|| Error::option("vhost-user-blk", "no --vhost-user-blk socket given"))?;
        let first = devices
            .list
            .first()
            .ok_or_else(|| Error::option("device", "no device to serve over vhost-user-blk"))?;
        let cfg = ServerConfig {
            socket,
            num_queues: self.num_queues,
            read_only: devices.read_only,
            serial: self.serial.clone(),
            poll: (self.poll_us > 0).then(|| Duration::from_micros(self.poll_us)),
        };
        let server = Server::bind(first.dev.clone(), &cfg).map_err(Error::export)?;
        Ok(Box::new(VhostExport {
            server,
            name: first.dev.name().to_string(),
            capacity_bytes: first.dev.capacity_bytes(),
            read_only: devices.read_only,
        }))
    }
}

/// The vhost-user-blk server as one of `serve`'s exports.
struct VhostExport {
    server: Server,
    name: String,
    capacity_bytes: u64,
    read_only: bool,
}

impl Export for VhostExport {
    fn kind(&self) -> &'static str {
        "vhost-user-blk"
    }

    fn started(&self) -> String {
        format!(
            "vhost-user-blk on {}: {} ({} bytes, {} virtqueues{})",
            self.server.socket().display(),
            self.name,
            self.capacity_bytes,
            self.server.num_queues(),
            if self.read_only { ", read-only" } else { "" }
        )
    }

    fn stop_signal(&self) -> StopSignal {
        let stop = self.server.stop_handle();
        StopSignal::new(move || stop.stop())
    }

    fn serve(self: Box<Self>) -> Result<ExportReport, Error> {
        let stats = self.server.stats();
        self.server.run().map_err(Error::export)?;
        Ok(ExportReport {
            lines: vec![format!(
                "vhost-user-blk stopped after {} frontends",
                stats.connections.load(Ordering::Relaxed)
            )],
        })
    }
}
