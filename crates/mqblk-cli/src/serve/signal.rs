//! `mqblk serve`'s signals: SIGINT and SIGTERM stop each export (a thread
//! per export sleeps on a socket the handler writes to), and a watchdog
//! ends the process [`STOP_GRACE`] after the signal if a device still holds
//! requests.

use std::time::Duration;

use anyhow::{Context as _, Result};

/// At SIGINT or SIGTERM, stop an export (`stop`): a thread named `name`
/// sleeps on a socket the signal handler writes to.
pub(super) fn stop_on_signal(name: &str, stop: impl FnOnce() + Send + 'static) -> Result<()> {
    let (mut rx, tx) = std::os::unix::net::UnixStream::pair().context("a socket pair")?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::low_level::pipe::register(sig, tx.try_clone()?)
            .context("installing the signal handler")?;
    }
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            use std::io::Read as _;
            let mut b = [0u8; 1];
            if rx.read(&mut b).unwrap_or(0) > 0 {
                stop();
            }
        })
        .context("starting the stop watcher")?;
    Ok(())
}

/// After a stop signal, how long the connections' requests and the final
/// flush may take before the process exits without them.
pub(super) const STOP_GRACE: Duration = Duration::from_millis(1500);

/// At a stop signal, give the server [`STOP_GRACE`] to finish; past it,
/// exit: a backend that died may hold requests for as long as its timeout
/// (or for ever), and a stop must end the process within 2 s. Exiting
/// returns the memory the backend holds; while the process lives, nothing
/// it may still write is freed or reused. The watchdog sleeps on a socket
/// the signal handler writes to.
pub(super) fn watch_stop() -> Result<()> {
    let (mut rx, tx) = std::os::unix::net::UnixStream::pair().context("a socket pair")?;
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::low_level::pipe::register(sig, tx.try_clone()?)
            .context("installing the signal handler")?;
    }
    let spawned = std::thread::Builder::new()
        .name("serve-stop".into())
        .spawn(move || {
            use std::io::Read as _;
            let mut b = [0u8; 1];
            if rx.read(&mut b).unwrap_or(0) == 0 {
                return;
            }
            std::thread::sleep(STOP_GRACE);
            eprintln!(
                "mqblk serve: stopping: requests still held by a device {STOP_GRACE:?} after the \
                 signal; exiting without waiting for them (their clients get no reply)"
            );
            use std::io::Write as _;
            let _ = std::io::stderr().flush();
            // SAFETY: _exit ends the process at once; the threads that
            // wait on the device must not run exit handlers' destructors
            // under them.
            unsafe { libc::_exit(1) };
        });
    if let Err(e) = spawned {
        eprintln!("mqblk serve: note: no stop watchdog ({e}): a stop waits for every device");
    }
    Ok(())
}
