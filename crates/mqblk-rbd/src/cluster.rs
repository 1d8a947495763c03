//! The control plane: the cluster connection, the pool's I/O context and
//! image handles, each an owner that releases its librados or librbd
//! object in `Drop`, and the open-time errors, typed.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::Arc;

use crate::ffi;
use crate::spec::{RbdOptions, RbdTarget};

/// Why an image could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// No monitor answered.
    #[error(
        "no Ceph monitor answered within {timeout_s} s (mon host {mon_host}, from {conf}): \
         is the cluster up and the address right?"
    )]
    MonUnreachable {
        /// The monitors asked.
        mon_host: String,
        /// The config file read.
        conf: String,
        /// How long it waited.
        timeout_s: String,
    },
    /// The pool does not exist.
    #[error("pool `{pool}` does not exist (create it with `ceph osd pool create {pool}` and `rbd pool init {pool}`)")]
    PoolMissing {
        /// The pool.
        pool: String,
    },
    /// The image does not exist.
    #[error("image `{pool}/{image}` does not exist (create it with `rbd create --size SIZE {pool}/{image}`, or add create=SIZE to the spec)")]
    ImageMissing {
        /// The pool.
        pool: String,
        /// The image.
        image: String,
    },
    /// The snapshot does not exist.
    #[error("image `{pool}/{image}` has no snapshot `{snap}`")]
    SnapMissing {
        /// The pool.
        pool: String,
        /// The image.
        image: String,
        /// The snapshot.
        snap: String,
    },
    /// Any other librados or librbd failure.
    #[error("{call} failed: {err}")]
    Call {
        /// What was called.
        call: String,
        /// Its errno.
        #[source]
        err: std::io::Error,
    },
}

fn call_error(call: impl Into<String>, r: i32) -> OpenError {
    OpenError::Call {
        call: call.into(),
        err: std::io::Error::from_raw_os_error(-r),
    }
}

fn cstring(s: &str) -> CString {
    // The spec parser refuses NUL bytes in every name, id and path.
    CString::new(s).unwrap_or_default()
}

/// A connected cluster handle (`rados_t`).
#[derive(Debug)]
pub(crate) struct Cluster {
    ptr: ffi::rados_t,
    /// The device's `io_timeout_ms` (0: none): also how long closing an
    /// image may take before it is left to finish in the background.
    timeout_ms: u32,
}

// SAFETY: a librados cluster handle may be used from any thread (librados
// is thread-safe); this type only shuts it down in Drop, once.
unsafe impl Send for Cluster {}
// SAFETY: as above: every call on a shared handle is thread-safe.
unsafe impl Sync for Cluster {}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: ptr came from rados_create and is shut down once; every
        // I/O context and image of it holds an Arc of it, so they are gone.
        unsafe { ffi::rados_shutdown(self.ptr) };
    }
}

impl Cluster {
    /// Read the config and connect. `timeout_ms` (the device's
    /// `io_timeout_ms`, 0 for none) bounds librados: OSD and monitor
    /// operations fail with ETIMEDOUT after it, and so does the connect.
    pub(crate) fn connect(opts: &RbdOptions, timeout_ms: u32) -> Result<Cluster, OpenError> {
        let id = opts.id.as_deref().map(cstring);
        let mut ptr: ffi::rados_t = ptr::null_mut();
        // SAFETY: ptr is a live out-pointer; id is NUL-terminated or null.
        let r =
            unsafe { ffi::rados_create(&mut ptr, id.as_ref().map_or(ptr::null(), |c| c.as_ptr())) };
        if r < 0 {
            return Err(call_error("rados_create", r));
        }
        let c = Cluster { ptr, timeout_ms };
        let conf = opts.conf.as_deref().map(cstring);
        // SAFETY: c.ptr is a fresh cluster handle; conf is NUL-terminated
        // or null (librados' default search).
        let r = unsafe {
            ffi::rados_conf_read_file(c.ptr, conf.as_ref().map_or(ptr::null(), |c| c.as_ptr()))
        };
        if r < 0 {
            return Err(call_error(
                format!(
                    "reading the Ceph config {}",
                    opts.conf
                        .as_deref()
                        .unwrap_or("(default search, $CEPH_CONF)")
                ),
                r,
            ));
        }
        // SAFETY: null: the default variable CEPH_ARGS.
        let r = unsafe { ffi::rados_conf_parse_env(c.ptr, ptr::null()) };
        if r < 0 {
            return Err(call_error("parsing CEPH_ARGS", r));
        }
        if let Some(on) = opts.cache {
            c.set("rbd_cache", if on { "true" } else { "false" })?;
        }
        if timeout_ms > 0 {
            // librados has no cancel: a request it holds is let go only
            // when the OSD answers or this timeout fires. Just past the
            // layer's timeout, it bounds how long a timed-out request waits
            // for its buffers (see the driver's module doc), and the layer's
            // timeout fires first: the request is overdue before librbd
            // lets go of it (or of the writes its cache held back behind
            // it, which it would then acknowledge), so a caller hears of it
            // at the layer's timeout.
            let secs = timeout_secs(timeout_ms);
            c.set("rados_osd_op_timeout", &secs)?;
            c.set("rados_mon_op_timeout", &secs)?;
            c.set("client_mount_timeout", &secs)?;
        }
        // SAFETY: c.ptr is configured and not yet connected.
        let r = unsafe { ffi::rados_connect(c.ptr) };
        if r < 0 {
            if r == -libc::ETIMEDOUT || r == -libc::ENOENT || r == -libc::EINTR {
                return Err(OpenError::MonUnreachable {
                    mon_host: c.get("mon_host").unwrap_or_default(),
                    conf: opts
                        .conf
                        .clone()
                        .unwrap_or_else(|| "the default config".into()),
                    timeout_s: c.get("client_mount_timeout").unwrap_or_default(),
                });
            }
            return Err(call_error("rados_connect", r));
        }
        Ok(c)
    }

    fn set(&self, key: &str, value: &str) -> Result<(), OpenError> {
        let (k, v) = (cstring(key), cstring(value));
        // SAFETY: both strings are NUL-terminated and live across the call.
        let r = unsafe { ffi::rados_conf_set(self.ptr, k.as_ptr(), v.as_ptr()) };
        if r < 0 {
            return Err(call_error(format!("setting {key}={value}"), r));
        }
        Ok(())
    }

    /// A config value as text.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        let k = cstring(key);
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf is writable for its length; librados NUL-terminates.
        let r = unsafe {
            ffi::rados_conf_get(self.ptr, k.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
        };
        if r < 0 {
            return None;
        }
        let s = CStr::from_bytes_until_nul(&buf).ok()?;
        Some(s.to_string_lossy().into_owned())
    }
}

/// `rados_osd_op_timeout` and friends for a layer timeout: librados takes
/// whole seconds. The whole seconds of the layer's timeout plus one: past
/// the layer's timeout, and at most 1 s past it.
pub(crate) fn timeout_secs(timeout_ms: u32) -> String {
    (timeout_ms / 1000 + 1).to_string()
}

/// A pool's I/O context (`rados_ioctx_t`).
#[derive(Debug)]
pub(crate) struct IoCtx {
    ptr: ffi::rados_ioctx_t,
    cluster: Arc<Cluster>,
}

// SAFETY: an I/O context may be used from any thread for the calls made
// here (image open/create); it is destroyed once, in Drop.
unsafe impl Send for IoCtx {}
// SAFETY: as above.
unsafe impl Sync for IoCtx {}

impl Drop for IoCtx {
    fn drop(&mut self) {
        // SAFETY: ptr came from rados_ioctx_create; every image opened
        // through it holds an Arc of it and is closed already.
        unsafe { ffi::rados_ioctx_destroy(self.ptr) };
    }
}

impl IoCtx {
    pub(crate) fn new(cluster: Arc<Cluster>, pool: &str) -> Result<IoCtx, OpenError> {
        let p = cstring(pool);
        let mut ptr: ffi::rados_ioctx_t = ptr::null_mut();
        // SAFETY: cluster is connected; p is NUL-terminated; ptr is a live
        // out-pointer.
        let r = unsafe { ffi::rados_ioctx_create(cluster.ptr, p.as_ptr(), &mut ptr) };
        if r == -libc::ENOENT {
            return Err(OpenError::PoolMissing { pool: pool.into() });
        }
        if r < 0 {
            return Err(call_error(format!("opening pool {pool}"), r));
        }
        Ok(IoCtx { ptr, cluster })
    }

    /// Create `image` of `size_bytes` unless it exists. Returns true if it
    /// was created.
    pub(crate) fn create_image(&self, image: &str, size_bytes: u64) -> Result<bool, OpenError> {
        let n = cstring(image);
        let mut order: libc::c_int = 0;
        // SAFETY: self.ptr is live; n is NUL-terminated; order is a live
        // in/out int (0: the default object size).
        let r = unsafe { ffi::rbd_create(self.ptr, n.as_ptr(), size_bytes, &mut order) };
        match r {
            0 => Ok(true),
            r if r == -libc::EEXIST => Ok(false),
            r => Err(call_error(format!("creating image {image}"), r)),
        }
    }
}

/// An open image (`rbd_image_t`).
#[derive(Debug)]
pub(crate) struct Image {
    pub(crate) ptr: ffi::rbd_image_t,
    io: Arc<IoCtx>,
    /// `pool/image`, for the message of a close that does not finish.
    name: String,
}

/// An image handle on its way to `rbd_close` on another thread.
struct Closing(ffi::rbd_image_t);

// SAFETY: the handle is closed once, by the thread it is sent to; nothing
// else uses it after Drop gave it away.
unsafe impl Send for Closing {}

// SAFETY: librbd's image handle is thread-safe for the asynchronous I/O
// calls, `rbd_poll_io_events` (a lock-free queue inside) and the
// control-plane queries made here; it is closed once, in Drop.
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

impl Drop for Image {
    /// Close the image, waiting at most one `io_timeout_ms`: with the
    /// cluster gone, `rbd_close` waits for librados (releasing the
    /// exclusive lock, dropping the watch) for several op timeouts. Past
    /// the bound it is left to finish on its thread, which keeps the I/O
    /// context and cluster alive until it does; the process may exit
    /// before.
    fn drop(&mut self) {
        let closing = Closing(self.ptr);
        let close = move |c: Closing| {
            // SAFETY: ptr came from rbd_open and is closed once, here; the
            // driver drops an image only when no I/O of it is in flight
            // (or leaks it: see the driver).
            unsafe { ffi::rbd_close(c.0) };
        };
        let bound = self.io.cluster.timeout_ms;
        if bound == 0 {
            close(closing);
            return;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let io = self.io.clone();
        let spawned = std::thread::Builder::new()
            .name("rbd-close".into())
            .spawn(move || {
                close(closing);
                drop(io);
                let _ = tx.send(());
            });
        if let Err(e) = spawned {
            eprintln!(
                "mqblk: rbd {}: cannot start the close thread ({e}); not closed",
                self.name
            );
            return;
        }
        let bound = std::time::Duration::from_millis(u64::from(bound));
        if rx.recv_timeout(bound).is_err() {
            eprintln!(
                "mqblk: rbd {}: closing the image did not finish within io_timeout_ms ({bound:?}); \
                 it goes on in the background (is the cluster down?)",
                self.name
            );
        }
    }
}

impl Image {
    pub(crate) fn open(io: Arc<IoCtx>, t: &RbdTarget, read_only: bool) -> Result<Image, OpenError> {
        let n = cstring(&t.image);
        let snap = t.snap.as_deref().map(cstring);
        let sp = snap.as_ref().map_or(ptr::null(), |c| c.as_ptr());
        let mut ptr: ffi::rbd_image_t = ptr::null_mut();
        // SAFETY: io is live; n and sp are NUL-terminated (or sp null);
        // ptr is a live out-pointer.
        let r = unsafe {
            if read_only {
                ffi::rbd_open_read_only(io.ptr, n.as_ptr(), &mut ptr, sp)
            } else {
                ffi::rbd_open(io.ptr, n.as_ptr(), &mut ptr, sp)
            }
        };
        if r == -libc::ENOENT {
            if let Some(s) = &t.snap {
                // Is it the image or the snapshot that is missing?
                let mut p2: ffi::rbd_image_t = ptr::null_mut();
                // SAFETY: as above, without a snapshot.
                let r2 =
                    unsafe { ffi::rbd_open_read_only(io.ptr, n.as_ptr(), &mut p2, ptr::null()) };
                if r2 == 0 {
                    // SAFETY: p2 was just opened and is closed once.
                    unsafe { ffi::rbd_close(p2) };
                    return Err(OpenError::SnapMissing {
                        pool: t.pool.clone(),
                        image: t.image.clone(),
                        snap: s.clone(),
                    });
                }
            }
            return Err(OpenError::ImageMissing {
                pool: t.pool.clone(),
                image: t.image.clone(),
            });
        }
        if r < 0 {
            return Err(call_error(
                format!("opening image {}/{}", t.pool, t.image),
                r,
            ));
        }
        Ok(Image {
            ptr,
            io,
            name: format!("{}/{}", t.pool, t.image),
        })
    }

    /// Flush librbd's cache (synchronous; control plane).
    pub(crate) fn flush(&self) -> Result<(), OpenError> {
        // SAFETY: ptr is an open image.
        let r = unsafe { ffi::rbd_flush(self.ptr) };
        if r < 0 {
            return Err(call_error("rbd_flush", r));
        }
        Ok(())
    }

    /// Size and object size in bytes.
    pub(crate) fn stat(&self) -> Result<(u64, u64), OpenError> {
        // SAFETY: rbd_image_info_t is plain data; all zeros is valid.
        let mut info: ffi::rbd_image_info_t = unsafe { std::mem::zeroed() };
        // SAFETY: info is a live struct of the size passed.
        let r = unsafe { ffi::rbd_stat(self.ptr, &mut info, std::mem::size_of_val(&info)) };
        if r < 0 {
            return Err(call_error("rbd_stat", r));
        }
        Ok((info.size, info.obj_size))
    }

    /// The image's effective value of a librbd option (config file, pool
    /// and image overrides applied).
    pub(crate) fn config(&self, key: &str) -> Option<String> {
        let mut max: libc::c_int = 0;
        // SAFETY: with a null array librbd only stores the count needed.
        let r = unsafe { ffi::rbd_config_image_list(self.ptr, ptr::null_mut(), &mut max) };
        if r != -libc::ERANGE && r < 0 || max <= 0 {
            return None;
        }
        let mut opts: Vec<ffi::rbd_config_option_t> = (0..max)
            .map(|_| ffi::rbd_config_option_t {
                name: ptr::null_mut(),
                value: ptr::null_mut(),
                source: 0,
            })
            .collect();
        // SAFETY: opts holds `max` entries; librbd fills at most that many
        // and stores the count in max.
        let r = unsafe { ffi::rbd_config_image_list(self.ptr, opts.as_mut_ptr(), &mut max) };
        if r < 0 {
            return None;
        }
        let mut out = None;
        for o in &opts[..max.clamp(0, opts.len() as i32) as usize] {
            if o.name.is_null() || o.value.is_null() {
                continue;
            }
            // SAFETY: librbd filled name and value with NUL-terminated
            // strings that live until the cleanup below.
            let (name, value) = unsafe { (CStr::from_ptr(o.name), CStr::from_ptr(o.value)) };
            if name.to_bytes() == key.as_bytes() {
                out = Some(value.to_string_lossy().into_owned());
            }
        }
        // SAFETY: the entries librbd filled, freed once.
        unsafe { ffi::rbd_config_image_list_cleanup(opts.as_mut_ptr(), max) };
        out
    }
}
