//! `mqblk serve --fuse FILE`: the FUSE export of the first device, mounted
//! over FILE (`mqblk_fuse`), started on a thread of its own, stopped by
//! SIGINT or SIGTERM, and what its end says.

use std::path::Path;
use std::thread::JoinHandle;

use anyhow::{bail, Context as _, Result};

use super::signal::stop_on_signal;

/// A FUSE export serving, on its thread.
pub(super) struct Running {
    thread: JoinHandle<Result<mqblk_fuse::Ended, mqblk_fuse::Error>>,
    stop: mqblk_fuse::StopHandle,
    file: std::path::PathBuf,
}

/// Check `--fuse-threads` (`threads`) and mount `dev` over `file`.
pub(super) fn mount(
    file: &Path,
    threads: Option<usize>,
    read_only: bool,
    dev: &mqblk::Device,
) -> Result<mqblk_fuse::Server> {
    if threads == Some(0) || threads > Some(mqblk_fuse::MAX_THREADS) {
        bail!(
            "--fuse-threads {}: expected 1 to {} threads",
            threads.unwrap_or(0),
            mqblk_fuse::MAX_THREADS
        );
    }
    let cfg = mqblk_fuse::ServerConfig {
        file: file.to_path_buf(),
        threads,
        read_only,
    };
    mqblk_fuse::Server::mount(dev.clone(), &cfg).map_err(anyhow::Error::msg)
}

/// Say what is served, stop it at SIGINT or SIGTERM, and serve on a
/// thread of its own.
pub(super) fn start(server: mqblk_fuse::Server, dev: &mqblk::Device) -> Result<Running> {
    let stop = server.stop_handle();
    let on_signal = stop.clone();
    stop_on_signal("fuse-stop", move || on_signal.stop())?;
    eprintln!(
        "mqblk serve: FUSE export on {}: {} ({} bytes, {} threads, requests up to {} KiB{})",
        server.path().display(),
        dev.name(),
        dev.capacity_bytes(),
        server.threads(),
        server.max_request_bytes() >> 10,
        if server.read_only() {
            ", read-only"
        } else {
            ""
        }
    );
    let file = server.path().to_path_buf();
    let thread = std::thread::Builder::new()
        .name("fuse".into())
        .spawn(move || server.run())
        .context("starting the FUSE export")?;
    Ok(Running { thread, stop, file })
}

/// Wait for the export to end (stopping it first if the NBD server
/// failed), and say how it ended.
pub(super) fn finish(r: Running, nbd_failed: bool) -> Result<()> {
    if nbd_failed {
        r.stop.stop();
    }
    let ended = match r.thread.join() {
        Ok(e) => e.map_err(anyhow::Error::msg)?,
        Err(_) => bail!("the FUSE export panicked"),
    };
    if ended.detached {
        eprintln!(
            "mqblk serve: FUSE export {}: the file was busy: the mount was detached (lazy \
             unmount){}",
            r.file.display(),
            if ended.aborted {
                " and its connection aborted: its users' requests fail from now on"
            } else {
                ""
            }
        );
    }
    if ended.threads_left > 0 {
        eprintln!(
            "mqblk serve: FUSE export {}: {} threads still wait on the device",
            r.file.display(),
            ended.threads_left
        );
    }
    eprintln!(
        "mqblk serve: FUSE export stopped after {} requests ({} errors)",
        ended.requests, ended.errors
    );
    Ok(())
}
