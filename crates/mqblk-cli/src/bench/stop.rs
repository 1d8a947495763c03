//! The stop of a run, as fio takes it: the first SIGINT or SIGTERM stops
//! the jobs, drains them and reports what ran (exit status 128 + the
//! signal); a second one exits at once. The handlers are in place before
//! the first device opens: a signal that comes while a device is still
//! opening (an `rbd:` image whose cluster is slow, an NBD server that
//! does not answer its handshake) cannot wait for the open, so it prints
//! one line naming the device and exits.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

/// Longest a job waits for a completion before it looks at the phase
/// again: a job whose device does not answer, or whose I/O its throttle
/// holds, still sees a stop in time.
pub const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// The run's stop: set by the first signal, read by the supervisor and
/// the jobs.
pub struct Stop {
    flag: Arc<AtomicBool>,
    signal: Arc<AtomicUsize>,
    /// The device spec being opened now, if one is.
    opening: Arc<Mutex<Option<String>>>,
}

/// While it lives, a signal is answered with "`spec` was still opening"
/// and an exit; see [`Stop::opening`].
pub struct Opening<'a> {
    stop: &'a Stop,
}

impl Stop {
    /// Install the handlers: from now on a signal stops the run.
    pub fn install() -> Result<Stop> {
        let flag = Arc::new(AtomicBool::new(false));
        let signal = Arc::new(AtomicUsize::new(0));
        let opening: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        for sig in [SIGINT, SIGTERM] {
            // In this order: a signal that finds the flag set (the second)
            // exits at once, in the handler; the first only sets it.
            signal_hook::flag::register_conditional_shutdown(sig, 128 + sig, flag.clone())
                .context("installing the signal handler")?;
            signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
                .context("installing the signal handler")?;
            signal_hook::flag::register(sig, flag.clone())
                .context("installing the signal handler")?;
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("installing the signal handler")?;
        let watched = opening.clone();
        std::thread::Builder::new()
            .name("stop".into())
            .spawn(move || {
                for sig in signals.forever() {
                    let spec = watched.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(spec) = spec {
                        stopped_while_opening(sig, &spec);
                    }
                }
            })
            .context("starting the signal thread")?;
        Ok(Stop {
            flag,
            signal,
            opening,
        })
    }

    /// The flag a signal sets.
    pub fn flag(&self) -> &AtomicBool {
        &self.flag
    }

    /// The signal that stopped the run, if one did.
    pub fn signal(&self) -> Option<i32> {
        match self.signal.load(Relaxed) {
            0 => None,
            sig => Some(sig as i32),
        }
    }

    /// `spec` is opening until the guard is dropped. A signal that came
    /// before is answered now, as one that comes during the open will be.
    pub fn opening(&self, spec: &str) -> Opening<'_> {
        *self.opening.lock().unwrap_or_else(|e| e.into_inner()) = Some(spec.to_string());
        if let Some(sig) = self.signal() {
            stopped_while_opening(sig, spec);
        }
        Opening { stop: self }
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        *self.stop.opening.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// A signal came while `spec` was opening: say so in one line, and exit
/// with 128 + the signal. The open is left where it is (a library's
/// connect may block for minutes), so the process ends without its exit
/// handlers, which could wait on it.
fn stopped_while_opening(sig: i32, spec: &str) -> ! {
    eprintln!(
        "mqblk: stopped by signal {sig} while {spec} was still opening; nothing ran, no report"
    );
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process at once, from any thread; nothing was
    // written to stdout yet (the banner comes after the devices open), and
    // stderr is unbuffered and flushed above.
    unsafe { libc::_exit(128 + sig) }
}
