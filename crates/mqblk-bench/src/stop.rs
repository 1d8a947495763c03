//! The stop of a run, as fio takes it: the first SIGINT or SIGTERM stops
//! the jobs, drains them and reports what ran (exit status 128 + the
//! signal); a second one, once the run has said it is stopping
//! (`announce`), exits at once. The handlers are in place before the
//! jobs are read: a signal that comes while a device is still opening (an
//! `rbd:` image whose cluster is slow, an NBD server that does not answer
//! its handshake) cannot wait for the open, so it prints one line naming
//! the device and exits.
//!
//! One stop can arrive twice: `timeout` signals its child and then its
//! whole process group, two `kill`s from one process. The copies come
//! microseconds apart (more on a loaded machine), and when the handler ran
//! between them the second copy used to exit at once, with no report (3
//! of 45 `timeout -s INT` runs). So a signal is a second stop only if
//! 1. it comes after `announce` has told the user that a second one
//!    exits at once, and
//! 2. it is not the first one again: the same signal from the same
//!    process (`si_pid`; a terminal's signals come from the kernel, and
//!    each of those is its own).
//!
//! A user who presses Ctrl-C again, or runs `kill` again, after reading
//! that line still gets out at once.

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use signal_hook::consts::{SIGINT, SIGTERM};

/// Longest a job waits for a completion before it looks at the phase
/// again: a job whose device does not answer, or whose I/O its throttle
/// holds, still sees a stop in time.
pub(crate) const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// Block SIGINT and SIGTERM in this thread: the binary's
/// `.preinit_array` entry, so that a signal before `main` has its handlers
/// in place ([`Stop::install`]) or has said it runs no bench ([`unblock`])
/// waits, pending, instead of ending the process without a word.
pub extern "C" fn block_stop_signals() {
    set_blocked(libc::SIG_BLOCK);
}

/// Block or unblock (`how`) SIGINT and SIGTERM in this thread.
fn set_blocked(how: libc::c_int) {
    // SAFETY: a sigset_t on the stack, filled by sigemptyset before use;
    // pthread_sigmask reads it and writes nothing else.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, SIGINT);
        libc::sigaddset(&mut set, SIGTERM);
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Let SIGINT and SIGTERM through again, with their default action: a
/// command that is not a bench, or a bench whose handlers failed.
pub fn unblock() {
    set_blocked(libc::SIG_UNBLOCK);
}

/// Set by [`announce`]: from then on a signal exits at once. Signals are
/// the process's, so this is too.
static EXIT_ARMED: AtomicBool = AtomicBool::new(false);

/// Who sent the first stop: [`sender`]'s key; 0 before any.
static FIRST_STOP: AtomicU64 = AtomicU64::new(0);

/// A key for a signal's sender: the signal and the pid of the process
/// that sent it, or [`FROM_KERNEL`] for one the kernel sent (a terminal's
/// Ctrl-C), which is never taken for a copy.
fn sender(sig: i32, info: &libc::siginfo_t) -> u64 {
    if ![libc::SI_USER, libc::SI_QUEUE, libc::SI_TKILL].contains(&info.si_code) {
        return FROM_KERNEL;
    }
    // SAFETY: si_pid is set for a signal a process sent (SI_USER,
    // SI_QUEUE, SI_TKILL), which the check above established.
    let pid = unsafe { info.si_pid() };
    (sig as u64) << 32 | u64::from(pid as u32)
}

/// [`sender`] of a signal from the kernel.
const FROM_KERNEL: u64 = u64::MAX;

/// In the handler: whether this signal ends the process at once (see the
/// module's doc). The first one records its sender.
fn is_second_stop(sig: i32, info: &libc::siginfo_t) -> bool {
    let key = sender(sig, info);
    match FIRST_STOP.compare_exchange(0, key, SeqCst, SeqCst) {
        Ok(_) => false,
        Err(first) => EXIT_ARMED.load(SeqCst) && (key == FROM_KERNEL || key != first),
    }
}

/// The run has seen the stop: say so (with the grace a job still waiting
/// for its I/O gets), and from now on let a signal exit at once. Called
/// once per run, by the supervisor, where it first sees the flag.
pub(crate) fn announce(grace: std::time::Duration) {
    eprintln!(
        "mqblk: stopping: reporting what ran; a job still waiting for its I/O gets {grace:?} \
         (a second signal exits at once)"
    );
    EXIT_ARMED.store(true, SeqCst);
}

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
            // In this order: a signal that finds the exit armed (one after
            // the announcement) exits at once, in the handler; the others
            // only set the flags.
            // SAFETY: the action reads the siginfo it is given, touches
            // atomics and calls _exit, all async-signal-safe; it allocates
            // nothing and takes no lock.
            unsafe {
                signal_hook_registry::register_sigaction(sig, move |info| {
                    if is_second_stop(sig, info) {
                        signal_hook::low_level::exit(128 + sig);
                    }
                })
            }
            .context("installing the signal handler")?;
            signal_hook::flag::register_usize(sig, signal.clone(), sig as usize)
                .context("installing the signal handler")?;
            signal_hook::flag::register(sig, flag.clone())
                .context("installing the signal handler")?;
        }
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
            .context("installing the signal handler")?;
        // The handlers are in place: a signal that came since the start
        // is delivered now.
        unblock();
        let watched = opening.clone();
        // The thread is not on the I/O path: it stops counting its
        // allocations, and install returns only once it runs, so that its
        // start (std copies a named thread's name) cannot fall in a
        // measured phase on a loaded machine.
        let (started, running) = std::sync::mpsc::sync_channel(0);
        std::thread::Builder::new()
            .name("stop".into())
            .spawn(move || {
                crate::alloc_count::exclude_this_thread();
                let _ = started.send(());
                for sig in signals.forever() {
                    let spec = watched.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    if let Some(spec) = spec {
                        stopped_while_opening(sig, &spec);
                    }
                }
            })
            .context("starting the signal thread")?;
        running
            .recv()
            .context("starting the signal thread: it ended at once")?;
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
