//! The control plane: the file checked (and a stale mount of a killed
//! server cleared), `/dev/fuse` opened, the file system mounted over the
//! file and the descriptor cloned once per thread, each thread given its
//! own context; then, at a stop, the unmount (lazy if the file is busy),
//! the threads' drain, and the connection aborted if a user still holds
//! the detached file, so that no process waits on it for ever.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mqblk_core::Device;

use crate::error::{Error, MAX_THREADS};
use crate::mount::{self, Unmounted};
use crate::reply::InitOut;
use crate::worker::{Shared, Worker, WorkerEnd, PAGE};

/// Requests in flight per thread.
pub const DEPTH: usize = 32;

/// After the unmount, how long the threads have to see the connection
/// end before it is aborted (a user holds the detached file).
pub const DETACH_WAIT: Duration = Duration::from_millis(300);

/// After the abort, how long the threads have to answer what they hold
/// and leave.
pub const QUIT_WAIT: Duration = Duration::from_millis(1200);

/// The largest request, in pages, whatever the kernel allows (4 MiB).
const MAX_PAGES_CAP: u32 = 1024;

/// What an export is asked to do.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The existing regular file to mount over.
    pub file: PathBuf,
    /// Threads, each with its own `/dev/fuse` clone and context (default:
    /// the device's hardware queues, at least 2).
    pub threads: Option<usize>,
    /// Refuse writes (EROFS), and mount read-only.
    pub read_only: bool,
}

/// Ends a running [`Server`] from any thread (or a signal's watcher).
#[derive(Clone)]
pub struct StopHandle {
    tx: Sender<Event>,
    stopped: Arc<AtomicBool>,
}

impl StopHandle {
    /// Stop: unmount, answer the requests in flight, and let
    /// [`Server::run`] return.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        let _ = self.tx.send(Event::Stop);
    }
}

enum Event {
    Stop,
    ThreadEnded,
}

/// How an export ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ended {
    /// Requests answered.
    pub requests: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// The file was busy at the stop: the mount was detached lazily.
    pub detached: bool,
    /// The connection was aborted (a user still held the file): its
    /// waiting requests failed with ECONNABORTED.
    pub aborted: bool,
    /// Threads that did not end within the bounds (a device that never
    /// completes): their requests' buffers stay allocated.
    pub threads_left: usize,
    /// Requests the device never finished.
    pub abandoned: u32,
}

/// A FUSE export of one device: mounted by [`Server::mount`], served by
/// its threads until [`Server::run`] sees a stop.
pub struct Server {
    shared: Arc<Shared>,
    path: PathBuf,
    connection: Option<u64>,
    threads: Vec<JoinHandle<WorkerEnd>>,
    stop: StopHandle,
    events: Receiver<Event>,
}

/// The kernel's largest request, in pages (`fs.fuse.max_pages_limit`,
/// 256 where the file is absent).
fn kernel_max_pages() -> u32 {
    std::fs::read_to_string("/proc/sys/fs/fuse/max_pages_limit")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(256)
}

impl Server {
    /// Mount `dev` over `cfg.file` and start serving it.
    pub fn mount(dev: Device, cfg: &ServerConfig) -> Result<Server, Error> {
        let threads = cfg.threads.unwrap_or_else(|| dev.nr_hw_queues().max(2));
        if threads == 0 || threads > MAX_THREADS {
            return Err(Error::Threads {
                device: dev.name().to_string(),
                threads,
                max: MAX_THREADS,
            });
        }
        let path = mount::mount_point(&cfg.file)?;
        mount::clear_stale(&path)?;
        let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::File {
            file: path.clone(),
            reason: if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist: a FUSE export mounts over an existing regular file \
                 (create it first: `touch FILE`)"
                    .into()
            } else {
                format!("cannot stat it: {e}")
            },
        })?;
        if !meta.file_type().is_file() {
            return Err(Error::File {
                file: path,
                reason: "is not a regular file: a FUSE export mounts over an existing \
                         regular file (as qemu-storage-daemon's does)"
                    .into(),
            });
        }
        let info = dev.info();
        let read_only = cfg.read_only || info.features.read_only;
        let capacity = dev.capacity_bytes();
        let block = u64::from(dev.logical_block_size().max(512));
        let max_pages = kernel_max_pages().clamp(2, MAX_PAGES_CAP);
        let max_write = max_pages * PAGE as u32;
        let background = (threads * DEPTH).min(u16::MAX as usize) as u16;
        let shared = Arc::new(Shared {
            read_only,
            capacity,
            block,
            max_write,
            discard: info.features.discard,
            init: InitOut {
                minor: 0,
                max_readahead: 0,
                flags: 0,
                max_background: background,
                congestion_threshold: background / 4 * 3,
                max_write,
                max_pages: max_pages as u16,
            },
            attr: Mutex::new(Shared::attr_of(&meta, capacity, read_only)),
            rmw: Mutex::new(()),
            rmw_active: AtomicBool::new(false),
            writes_in_flight: (0..threads).map(|_| Default::default()).collect(),
            quit: AtomicBool::new(false),
            dev: dev.clone(),
        });
        // Contexts and buffers before the mount: a failure leaves nothing
        // mounted.
        let mut ctxs = Vec::with_capacity(threads);
        for _ in 0..threads {
            ctxs.push(dev.context()?);
        }
        let fd0 = mount::open_dev(&path)?;
        mount::mount(&fd0, &path, read_only)?;
        let unmount_on_err = |e: Error| {
            let _ = mount::unmount_lazy(&path);
            e
        };
        let mut fds = Vec::with_capacity(threads);
        for _ in 1..threads {
            fds.push(mount::clone_dev(&fd0, &path).map_err(unmount_on_err)?);
        }
        fds.insert(0, fd0);
        let connection = mount::mounts_on(&path)
            .ok()
            .and_then(|m| m.last().map(|m| m.connection()));
        let (tx, events) = mpsc::channel();
        let mut handles = Vec::with_capacity(threads);
        for (i, (fd, ctx)) in fds.into_iter().zip(ctxs).enumerate() {
            let w = Worker::new(fd, ctx, shared.clone(), DEPTH, i).map_err(|e| {
                unmount_on_err(Error::Sys {
                    file: path.clone(),
                    what: "setting up a FUSE thread",
                    source: e,
                })
            })?;
            let tx = tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("fuse-{i}"))
                .spawn(move || {
                    let end = w.run();
                    let _ = tx.send(Event::ThreadEnded);
                    end
                })
                .map_err(|e| {
                    unmount_on_err(Error::Sys {
                        file: path.clone(),
                        what: "starting a FUSE thread",
                        source: e,
                    })
                })?;
            handles.push(h);
        }
        Ok(Server {
            shared,
            path,
            connection,
            threads: handles,
            stop: StopHandle {
                tx,
                stopped: Arc::new(AtomicBool::new(false)),
            },
            events,
        })
    }

    /// The handle that stops [`Server::run`].
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The file the device is mounted over (its directory resolved).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Threads serving.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// The largest request the kernel sends (max_write, and reads alike).
    pub fn max_request_bytes(&self) -> u32 {
        self.shared.max_write
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.shared.read_only
    }

    /// The FUSE connection's id (its directory under
    /// `/sys/fs/fuse/connections`), if the mount table showed it.
    pub fn connection(&self) -> Option<u64> {
        self.connection
    }

    /// Serve until stopped (or until the file system is unmounted or
    /// aborted from outside); then unmount, drain, and return.
    pub fn run(mut self) -> Result<Ended, Error> {
        let mut ended_threads = 0;
        let mut ended = Ended::default();
        match self.events.recv() {
            Ok(Event::ThreadEnded) => ended_threads += 1,
            Ok(Event::Stop) | Err(_) => {}
        }
        // A thread left with no stop asked: the connection ended under
        // us. Still mounted, it was aborted (an unmount from outside
        // leaves no mount).
        let aborted_from_outside = !self.stop.stopped.load(Ordering::Acquire)
            && self.connection.is_some_and(|id| {
                mount::mounts_on(&self.path)
                    .map(|m| m.iter().any(|m| m.connection() == id))
                    .unwrap_or(false)
            });
        if aborted_from_outside {
            // Whatever still reads the connection leaves now.
            self.shared.quit.store(true, Ordering::Release);
        }
        // Stopped, or the connection ended under us (a stale mount would
        // stay): unmount either way; an unmount from outside leaves
        // nothing to do (EINVAL).
        match mount::unmount(&self.path) {
            Ok(Unmounted::Done) => {}
            Ok(Unmounted::Detached) => ended.detached = true,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => eprintln!(
                "mqblk serve: FUSE export {}: unmount: {e}; clear it with `umount -l {}`",
                self.path.display(),
                self.path.display()
            ),
        }
        let wait = |events: &Receiver<Event>, n: &mut usize, total: usize, max: Duration| {
            let deadline = Instant::now() + max;
            while *n < total {
                let left = deadline.saturating_duration_since(Instant::now());
                match events.recv_timeout(left) {
                    Ok(Event::ThreadEnded) => *n += 1,
                    Ok(Event::Stop) => {}
                    Err(_) => break,
                }
            }
        };
        let total = self.threads.len();
        wait(&self.events, &mut ended_threads, total, DETACH_WAIT);
        if ended_threads < total {
            // A user holds the detached file: end the connection, so that
            // nothing waits on this server for ever. Through fusectl where
            // it is mounted; else each thread leaves and closes its
            // descriptor, and the last close aborts the connection.
            ended.aborted = true;
            if let Some(id) = self.connection {
                mount::abort(id);
            }
            self.shared.quit.store(true, Ordering::Release);
            wait(&self.events, &mut ended_threads, total, QUIT_WAIT);
        }
        // A thread says it ended just before its function returns.
        let deadline = Instant::now() + Duration::from_millis(100);
        for h in std::mem::take(&mut self.threads) {
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
            if !h.is_finished() {
                ended.threads_left += 1;
                continue;
            }
            if let Ok(end) = h.join() {
                ended.abandoned += end.abandoned;
                ended.requests += end.requests;
                ended.errors += end.errors;
            }
        }
        if let (true, Some(connection)) = (aborted_from_outside, self.connection) {
            return Err(Error::Aborted {
                file: self.path.clone(),
                connection,
                abandoned: ended.abandoned,
                detached: if ended.detached {
                    " (lazily: it was busy)"
                } else {
                    ""
                },
            });
        }
        Ok(ended)
    }
}
