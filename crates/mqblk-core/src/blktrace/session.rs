//! A device's trace session (Linux `struct blk_trace`, made by
//! `BLKTRACESETUP` and ended by `BLKTRACETEARDOWN`): where the files go,
//! the channels of the contexts that record into it, and the flusher that
//! writes them out every few milliseconds.
//!
//! Control plane, above the recorders it hands out: the per-I/O path
//! never reaches it, only a context's gate does.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::channel::{Channel, Totals};
use super::event::DevNum;
use super::recorder::Recorder;

/// Bytes of each context's ring: about 20,000 records between flushes.
const CHANNEL_BYTES: usize = 1 << 20;
/// How often the flusher writes the channels out.
const FLUSH_EVERY: Duration = Duration::from_millis(10);

/// What a finished trace wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// The directory the files are in.
    pub dir: PathBuf,
    /// Their names' stem: `blkparse -i STEM` reads them.
    pub name: String,
    /// Files written (one per context that did I/O).
    pub files: u32,
    /// Bytes written.
    pub bytes: u64,
    /// Records dropped: a ring was full while its drain was busy.
    pub lost: u64,
    /// Write errors, one per file that had one.
    pub errors: Vec<String>,
    /// The mean time from a driver finishing a request to its context
    /// reaping it (the layer's share of the completion path, which C
    /// and so btt's D2C leave out), in nanoseconds; `None` if no driver
    /// stamped a completion.
    pub reap_delay_ns: Option<u64>,
}

/// A device's trace session (Linux `struct blk_trace`). Control plane;
/// contexts reach it through their recorders.
pub(crate) struct BlkTrace {
    dir: PathBuf,
    stem: String,
    dev: DevNum,
    shared: Arc<Shared>,
    flusher: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What the session and its flusher share.
struct Shared {
    /// The channels of contexts tracing now (a channel goes when its
    /// context stops tracing).
    channels: Mutex<Vec<Weak<Channel>>>,
    /// The next file's number.
    next_cpu: AtomicU32,
    /// What closed channels wrote (the recorders add to it as they go);
    /// also what tells a recorder of this session from one of another.
    totals: Arc<Totals>,
    /// Set when the session stops; the flusher waits on it.
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The files of sessions running now, so two never share one name.
static RUNNING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl BlkTrace {
    /// Start a session for the device `name` numbered `dev`, writing into
    /// `dir` (made if missing). Files of an earlier trace of the same name
    /// there are removed first, as blkparse would read them along.
    pub(crate) fn start(dir: &Path, name: &str, dev: DevNum) -> std::io::Result<Arc<BlkTrace>> {
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        let stem: String = name
            .chars()
            .map(|c| if c == '/' || c.is_control() { '_' } else { c })
            .collect();
        let key = dir.join(&stem);
        {
            let mut running = lock(&RUNNING);
            if running.contains(&key) {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "another device named {stem} is being traced into {} already",
                        dir.display()
                    ),
                ));
            }
            running.push(key);
        }
        let t = BlkTrace {
            dir: dir.clone(),
            stem,
            dev,
            shared: Arc::new(Shared {
                channels: Mutex::new(Vec::new()),
                next_cpu: AtomicU32::new(0),
                totals: Arc::new(Totals::default()),
                stop: Mutex::new(false),
                wake: Condvar::new(),
            }),
            flusher: Mutex::new(None),
        };
        // From here on, dropping `t` takes the name back.
        t.remove_stale()?;
        let shared = t.shared.clone();
        let h = std::thread::Builder::new()
            .name("mqblk-blktrace".into())
            .spawn(move || flusher(&shared))?;
        *lock(&t.flusher) = Some(h);
        Ok(Arc::new(t))
    }

    /// Remove `STEM.blktrace.N` files an earlier trace left.
    fn remove_stale(&self) -> std::io::Result<()> {
        let prefix = format!("{}.blktrace.", self.stem);
        for e in std::fs::read_dir(&self.dir)? {
            let e = e?;
            let name = e.file_name();
            let Some(n) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
                continue;
            };
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                std::fs::remove_file(e.path())?;
            }
        }
        Ok(())
    }

    /// The directory the files go to.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// A recorder for a context starting to trace: the next file, and a
    /// ring for it. Control plane (the context's gate): allocates, opens.
    pub(crate) fn recorder(self: &Arc<Self>) -> std::io::Result<Recorder> {
        let cpu = self.shared.next_cpu.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}.blktrace.{cpu}", self.stem);
        let file = std::fs::File::create(self.dir.join(&name))?;
        let ch = Arc::new(Channel::new(CHANNEL_BYTES, Box::new(file), name));
        {
            let mut chans = lock(&self.shared.channels);
            chans.retain(|w| w.strong_count() > 0);
            chans.push(Arc::downgrade(&ch));
        }
        Ok(Recorder::new(ch, self.shared.totals.clone(), self.dev, cpu))
    }

    /// True if `r` records for this session.
    pub(crate) fn owns(&self, r: &Recorder) -> bool {
        r.adds_to(&self.shared.totals)
    }

    /// End the session: every channel written out and closed, the flusher
    /// stopped. Records contexts make before they next pass their gate are
    /// dropped.
    pub(crate) fn stop(&self) -> TraceSummary {
        self.stop_flusher();
        let live: Vec<Arc<Channel>> = lock(&self.shared.channels)
            .drain(..)
            .filter_map(|w| w.upgrade())
            .collect();
        let totals = &self.shared.totals;
        for ch in live {
            if let Some(c) = ch.close() {
                totals.add(c);
            }
        }
        TraceSummary {
            dir: self.dir.clone(),
            name: self.stem.clone(),
            files: self.shared.next_cpu.load(Ordering::Relaxed),
            bytes: totals.bytes(),
            lost: totals.lost(),
            errors: totals.errors(),
            reap_delay_ns: totals.reap_delay_ns(),
        }
    }

    fn stop_flusher(&self) {
        *lock(&self.shared.stop) = true;
        self.shared.wake.notify_all();
        if let Some(h) = lock(&self.flusher).take() {
            let _ = h.join();
        }
    }
}

impl Drop for BlkTrace {
    fn drop(&mut self) {
        // The contexts closed their own channels as they went.
        self.stop_flusher();
        let key = self.dir.join(&self.stem);
        lock(&RUNNING).retain(|k| *k != key);
    }
}

/// The flusher: write every channel out, every [`FLUSH_EVERY`], until the
/// session stops.
fn flusher(s: &Shared) {
    let mut stop = lock(&s.stop);
    while !*stop {
        stop = s
            .wake
            .wait_timeout(stop, FLUSH_EVERY)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        let chans: Vec<Arc<Channel>> = lock(&s.channels).iter().filter_map(Weak::upgrade).collect();
        drop(stop);
        for ch in chans {
            ch.drain();
        }
        stop = lock(&s.stop);
    }
}
