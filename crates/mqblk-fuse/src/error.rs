//! What can go wrong setting an export up.

use std::path::PathBuf;

/// Most threads an export runs (each with its own `/dev/fuse` clone and
/// its own context).
pub const MAX_THREADS: usize = 64;

/// What can go wrong setting an export up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file to mount over is not usable.
    #[error("FUSE export on {file}: {reason}")]
    File {
        /// The path asked for.
        file: PathBuf,
        /// Why, and what to do.
        reason: String,
    },
    /// A live FUSE server already serves the file.
    #[error(
        "FUSE export on {file}: a FUSE file system is already mounted there and answers \
         ({fstype}); stop its server, or unmount it with `umount {file}` \
         (`umount -l {file}` if it is busy)"
    )]
    Busy {
        /// The path asked for.
        file: PathBuf,
        /// The mount's file system type.
        fstype: String,
    },
    /// `/dev/fuse`, mount(2) or a clone failed.
    #[error("FUSE export on {file}: {what}")]
    Sys {
        /// The path asked for.
        file: PathBuf,
        /// The step that failed.
        what: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// More threads than an export runs.
    #[error("device {device}: {threads} FUSE threads asked for; 1 to {max}")]
    Threads {
        /// The device.
        device: String,
        /// Threads asked for.
        threads: usize,
        /// The most allowed.
        max: usize,
    },
    /// The kernel aborted the connection (through fusectl's `abort`, or a
    /// forced unmount that left the mount in place) while no stop was
    /// asked for: the export ended its requests and cleared the mount.
    #[error(
        "FUSE export on {file}: the kernel aborted FUSE connection {connection} \
         (/sys/fs/fuse/connections/{connection}/abort): its waiting requests failed; \
         the export ended its I/O in flight ({abandoned} left on the device), \
         unmounted the file{detached} and stopped"
    )]
    Aborted {
        /// The file served.
        file: PathBuf,
        /// The connection's id.
        connection: u64,
        /// Requests the device had not finished when the export left.
        abandoned: u32,
        /// `" (lazily: it was busy)"` when the unmount was detached.
        detached: &'static str,
    },
    /// The device refused a context.
    #[error(transparent)]
    Device(#[from] mqblk_core::Error),
}
