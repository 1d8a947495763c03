//! The listener: one frontend at a time, each with a fresh backend (its
//! queues' threads and contexts), then the next. A stop ends the
//! connection, waits for the requests in flight, and returns.

use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mqblk_core::Device;
use vhost::vhost_user::Listener;
use vhost_user_backend::{ShutdownHandle, VhostUserDaemon};
use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};
use vmm_sys_util::epoll::EventSet;

use crate::backend::BlkBackend;
use crate::error::{Error, MAX_QUEUES};
use crate::virtio_blk::Shape;
use crate::virtqueue::Worker;

/// How long the requests of a frontend that left may take before their
/// memory is kept mapped for good and the next frontend is served.
const DRAIN_WAIT: Duration = Duration::from_secs(5);

/// What a server is asked to do.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The unix socket to listen on (a new path, or a stale socket).
    pub socket: PathBuf,
    /// Virtqueues, one thread and one context each (default: the device's
    /// hardware queues).
    pub num_queues: Option<usize>,
    /// Offer the device read-only (VIRTIO_BLK_F_RO): writes fail.
    pub read_only: bool,
    /// The GET_ID answer (up to 20 bytes; default: the device's name).
    pub serial: Option<String>,
    /// After each batch, keep polling the ring and the device for this
    /// long past the last request or completion found (off: `None`). A
    /// queue thread then spins instead of sleeping while the guest is busy.
    pub poll: Option<Duration>,
}

/// Counters over a server's life.
#[derive(Debug, Default)]
pub struct ServerStats {
    /// Frontends served.
    pub connections: AtomicU64,
    /// Frontends that left with requests the device never finished.
    pub abandoned: AtomicU64,
}

/// Ends a running [`Server`] from any thread (or a signal's watcher).
#[derive(Clone)]
pub struct StopHandle {
    stop: Arc<AtomicBool>,
    current: Arc<Mutex<Option<ShutdownHandle>>>,
}

impl StopHandle {
    /// Stop: the frontend's connection is shut down, its requests in
    /// flight complete, and [`Server::run`] returns.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
        {
            h.shutdown();
        }
    }

    /// True once [`StopHandle::stop`] ran.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }
}

/// A vhost-user-blk server of one device.
pub struct Server {
    dev: Device,
    shape: Arc<Shape>,
    serial: Vec<u8>,
    listener: Listener,
    socket: PathBuf,
    stop: StopHandle,
    stats: Arc<ServerStats>,
    poll: Option<Duration>,
}

/// Claim `path` for a listening socket: a live server's socket is refused,
/// a stale one replaced, anything else left alone.
fn claim(path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        return Err(Error::Socket {
            socket: path.to_path_buf(),
            reason: "exists and is not a socket; refusing to replace it".into(),
        });
    }
    if UnixStream::connect(path).is_ok() {
        return Err(Error::Socket {
            socket: path.to_path_buf(),
            reason: "another server is listening on it".into(),
        });
    }
    std::fs::remove_file(path).map_err(|e| Error::Socket {
        socket: path.to_path_buf(),
        reason: format!("cannot remove the stale socket: {e}"),
    })
}

/// A listening socket at `path`, non-blocking (accepted only once poll
/// says a frontend is there). It is bound under a temporary name and
/// renamed into place, so the path appears only once it listens: a client
/// that finds it is never refused.
fn listen(path: &Path) -> Result<Listener, Error> {
    let fail = |reason: String| Error::Socket {
        socket: path.to_path_buf(),
        reason,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let l = std::os::unix::net::UnixListener::bind(&tmp).map_err(|e| fail(e.to_string()))?;
    l.set_nonblocking(true).map_err(|e| fail(e.to_string()))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(format!("cannot put the socket in place: {e}")));
    }
    Ok(Listener::from(l))
}

impl Drop for Server {
    fn drop(&mut self) {
        // The socket this server made (its path appeared at bind).
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Server {
    /// Listen on `cfg.socket` for frontends of `dev`.
    pub fn bind(dev: Device, cfg: &ServerConfig) -> Result<Server, Error> {
        let queues = cfg.num_queues.unwrap_or_else(|| dev.nr_hw_queues()).max(1);
        if queues > MAX_QUEUES {
            return Err(Error::Queues {
                device: dev.name().to_string(),
                queues,
                max: MAX_QUEUES,
            });
        }
        let shape = Arc::new(crate::shape::of(&dev, queues, cfg.read_only)?);
        let serial = cfg
            .serial
            .clone()
            .unwrap_or_else(|| dev.name().to_string())
            .into_bytes();
        if serial.len() > crate::virtio_blk::ID_LEN {
            return Err(Error::Serial {
                serial: String::from_utf8_lossy(&serial).into_owned(),
                max: crate::virtio_blk::ID_LEN,
            });
        }
        claim(&cfg.socket)?;
        let listener = listen(&cfg.socket)?;
        Ok(Server {
            dev,
            shape,
            serial,
            listener,
            socket: cfg.socket.clone(),
            stop: StopHandle {
                stop: Arc::new(AtomicBool::new(false)),
                current: Arc::new(Mutex::new(None)),
            },
            stats: Arc::new(ServerStats::default()),
            poll: cfg.poll.filter(|p| !p.is_zero()),
        })
    }

    /// The handle that stops [`Server::run`].
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// The server's counters.
    pub fn stats(&self) -> Arc<ServerStats> {
        self.stats.clone()
    }

    /// Virtqueues offered.
    pub fn num_queues(&self) -> usize {
        usize::from(self.shape.num_queues)
    }

    /// The socket it listens on.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Serve frontends, one after another, until stopped.
    pub fn run(mut self) -> Result<(), Error> {
        while !self.stop.is_stopped() {
            if !self.frontend_waiting()? {
                continue;
            }
            self.serve_one()?;
        }
        Ok(())
    }

    /// Wait up to 100 ms for a frontend to connect.
    fn frontend_waiting(&self) -> Result<bool, Error> {
        let fd = self.listener.as_raw_fd();
        // SAFETY: the listener owns `fd` for as long as `self` lives.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let fd = fd.as_fd();
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(Error::Socket {
                socket: self.socket.clone(),
                reason: format!("poll: {e}"),
            }),
        }
    }

    /// One frontend, from accept to the last completion.
    fn serve_one(&mut self) -> Result<(), Error> {
        let queues = usize::from(self.shape.num_queues);
        let mut workers = Vec::with_capacity(queues);
        for q in 0..queues {
            let ctx = self.dev.context().map_err(Error::Device)?;
            workers.push(Worker::new(ctx, self.shape.clone(), &self.serial, q as u16));
        }
        let backend = Arc::new(BlkBackend::new(self.shape.clone(), workers, self.poll));
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::new());
        let mut daemon = VhostUserDaemon::new("mqblk-vhost".into(), backend.clone(), mem)
            .map_err(|e| self.daemon_error("start the queue threads", e))?;
        for (t, h) in daemon.get_epoll_handlers().iter().enumerate() {
            let fd = backend.worker(t).completion_fd().map_err(Error::Device)?;
            h.register_listener(fd, EventSet::IN, backend.completion_token(t))
                .map_err(|e| Error::Socket {
                    socket: self.socket.clone(),
                    reason: format!("epoll of queue {t}: {e}"),
                })?;
        }
        match daemon.start(&mut self.listener) {
            Ok(()) => {}
            Err(e) => {
                eprintln!(
                    "mqblk serve: vhost-user-blk {}: a frontend's connection failed: {e}",
                    self.socket.display()
                );
                return Ok(());
            }
        }
        self.stats.connections.fetch_add(1, Ordering::Relaxed);
        *self.stop.current.lock().unwrap_or_else(|e| e.into_inner()) = daemon.shutdown_handle();
        if self.stop.is_stopped() {
            daemon.request_shutdown();
        }
        if let Err(e) = daemon.wait() {
            // A frontend that hangs up (a VM powered off, a client that
            // closed) ends this way: only other endings are worth a line.
            let hung_up = matches!(
                e,
                vhost_user_backend::Error::HandleRequest(
                    vhost::vhost_user::Error::Disconnected
                        | vhost::vhost_user::Error::PartialMessage
                )
            );
            if !hung_up && !self.stop.is_stopped() {
                eprintln!(
                    "mqblk serve: vhost-user-blk {}: the frontend's connection ended: {e}",
                    self.socket.display()
                );
            }
        }
        *self.stop.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // The queue threads end with the daemon.
        drop(daemon);
        for q in 0..backend.queues() {
            let mut w = backend.worker(q);
            if !w.drain(DRAIN_WAIT) {
                eprintln!(
                    "mqblk serve: vhost-user-blk {}: queue {q}: {} requests still in flight \
                     {DRAIN_WAIT:?} after the frontend left; their guest memory stays mapped",
                    self.socket.display(),
                    w.in_flight()
                );
                w.leak_memory();
                self.stats.abandoned.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn daemon_error(&self, what: &str, e: vhost_user_backend::Error) -> Error {
        Error::Socket {
            socket: self.socket.clone(),
            reason: format!("cannot {what}: {e}"),
        }
    }
}
