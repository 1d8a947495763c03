//! Opening and closing a device, its properties and counters, and aligned
//! buffers (libblkio's `blkio_create`/`blkio_connect`, `blkio_get_*`,
//! `blkio_alloc_mem_region`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::unix::ffi::OsStrExt;

use mqblk::{Device, DiskStats};

use crate::error::{cstr, entry, guard, Failure, MqblkError};

/// An open device (opaque). Close it with `mqblk_close()`; queues made from
/// it keep the device alive until they are destroyed too.
pub struct Mqblk {
    pub(crate) dev: Device,
    /// The name, NUL-terminated, for `mqblk_get_name()`.
    name: std::ffi::CString,
}

/// What a device is and what it accepts (Linux queue limits and features).
/// Offsets and lengths of every I/O must be multiples of
/// `logical_block_size`; buffers aligned to `buf_alignment` (as those of
/// `mqblk_alloc_buf()` are) go to the driver without a bounce copy.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MqblkInfo {
    /// Capacity in bytes.
    pub capacity_bytes: u64,
    /// Smallest addressable unit in bytes.
    pub logical_block_size: u32,
    /// Smallest unit written without read-modify-write, in bytes.
    pub physical_block_size: u32,
    /// Buffer addresses and lengths that are multiples of this go to the
    /// driver untouched.
    pub buf_alignment: u32,
    /// Largest request in bytes (larger I/Os are split).
    pub max_transfer_bytes: u64,
    /// Largest number of segments in one request.
    pub max_segments: u32,
    /// Largest segment in bytes.
    pub max_segment_size: u32,
    /// Largest discard in bytes (0: discard is not supported).
    pub max_discard_bytes: u64,
    /// Largest write-zeroes in bytes (0: emulated by writes, or refused).
    pub max_write_zeroes_bytes: u64,
    /// Number of hardware queues.
    pub nr_hw_queues: u32,
    /// Tags (requests in flight) per hardware queue.
    pub queue_depth: u32,
    /// The device refuses writes.
    pub read_only: bool,
    /// The device has a volatile write cache: flushes matter.
    pub write_cache: bool,
    /// The device implements FUA natively.
    pub fua: bool,
    /// The device implements discard.
    pub discard: bool,
    /// The device implements write-zeroes.
    pub write_zeroes: bool,
}

/// A device's or a queue's counters: the diskstats fields (sectors are 512
/// bytes) and the layer's own counts.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MqblkStats {
    /// Completed reads.
    pub read_ios: u64,
    /// Reads merged into another request.
    pub read_merges: u64,
    /// Sectors read.
    pub read_sectors: u64,
    /// Nanoseconds spent on reads.
    pub read_ns: u64,
    /// Completed writes (write-zeroes included).
    pub write_ios: u64,
    /// Writes merged into another request.
    pub write_merges: u64,
    /// Sectors written.
    pub write_sectors: u64,
    /// Nanoseconds spent on writes.
    pub write_ns: u64,
    /// Completed discards.
    pub discard_ios: u64,
    /// Discards merged into another request.
    pub discard_merges: u64,
    /// Sectors discarded.
    pub discard_sectors: u64,
    /// Nanoseconds spent on discards.
    pub discard_ns: u64,
    /// Completed flushes.
    pub flush_ios: u64,
    /// Nanoseconds spent on flushes.
    pub flush_ns: u64,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Milliseconds with I/O in flight.
    pub io_ticks_ms: u64,
    /// Requests built (after merging and splitting).
    pub requests: u64,
    /// Bios submitted.
    pub bios: u64,
    /// Bios split to fit the limits.
    pub splits: u64,
    /// Bytes copied through bounce buffers.
    pub bytes_copied: u64,
    /// Requests the driver answered busy.
    pub requeues: u64,
    /// Requests that timed out.
    pub timeouts: u64,
    /// Requests that completed with an error.
    pub errors: u64,
}

// The fields above are `DiskStats::flat`'s values in its order, which
// core's one list of counters makes; a test holds the header's names to
// `DiskStats::flat_names`.
impl From<DiskStats> for MqblkStats {
    fn from(s: DiskStats) -> MqblkStats {
        // SAFETY: `MqblkStats` is `repr(C)` and has only `u64` fields, so
        // its layout is that of `[u64; N]` with N its field count: no
        // padding, and every bit pattern is a valid value. `transmute`
        // refuses to compile unless N is `DiskStats::FLAT_LEN`.
        unsafe { std::mem::transmute::<[u64; DiskStats::FLAT_LEN], MqblkStats>(s.flat()) }
    }
}

/// Open the device that `spec` names, for example `null`, `ram,size=1G`,
/// `file:/dev/loop0,direct=1` or `nbd://host:port/export` (the same spec
/// strings as `mqblk bench --device`). On success `*out` is the device.
///
/// # Safety
///
/// `spec` is NULL or a NUL-terminated string; `out` is NULL or points to
/// writable memory for one pointer.
#[no_mangle]
pub unsafe extern "C" fn mqblk_open(spec: *const c_char, out: *mut *mut Mqblk) -> c_int {
    entry("mqblk_open", || {
        if out.is_null() {
            return Err(Failure::null("mqblk_open", "out"));
        }
        if spec.is_null() {
            return Err(Failure::null("mqblk_open", "spec"));
        }
        // SAFETY: `spec` is non-NULL and NUL-terminated (the caller's promise).
        let spec = unsafe { CStr::from_ptr(spec) };
        let spec = spec
            .to_str()
            .map_err(|_| Failure::new(MqblkError::Spec, "mqblk_open: the spec is not UTF-8"))?;
        let dev = mqblk::open(spec)?;
        let name = std::ffi::CString::new(dev.name().replace('\0', "")).unwrap_or_default();
        let handle = Box::into_raw(Box::new(Mqblk { dev, name }));
        // SAFETY: `out` is non-NULL and writable (the caller's promise).
        unsafe { out.write(handle) };
        Ok(0)
    })
}

/// Start writing blktrace files of `dev`, and of every device below it (a
/// partition's disk, a stacked device's legs), into the directory `dir`
/// (made if missing): `NAME.blktrace.N`, one per queue that does I/O,
/// which `blkparse -D DIR -i NAME` and `btt` read. The spec key
/// `trace=DIR` of `mqblk_open()` does the same from the start. With no
/// trace running, the I/O path pays nothing for it.
///
/// # Safety
///
/// `dev` is NULL or a live device; `dir` is NULL or a NUL-terminated
/// string.
#[no_mangle]
pub unsafe extern "C" fn mqblk_trace_start(dev: *const Mqblk, dir: *const c_char) -> c_int {
    entry("mqblk_trace_start", || {
        // SAFETY: the caller's promise, passed on.
        let d = unsafe { dev_ref(dev, "mqblk_trace_start") }?;
        if dir.is_null() {
            return Err(Failure::null("mqblk_trace_start", "dir"));
        }
        // SAFETY: `dir` is non-NULL and NUL-terminated (the caller's promise).
        let dir = unsafe { CStr::from_ptr(dir) };
        let dir = std::ffi::OsStr::from_bytes(dir.to_bytes());
        mqblk::start_trace(&d.dev, dir)?;
        Ok(0)
    })
}

/// Stop the traces of `dev` and the devices below it: every file is
/// complete when this returns. An error if none was running.
///
/// # Safety
///
/// `dev` is NULL or a live device.
#[no_mangle]
pub unsafe extern "C" fn mqblk_trace_stop(dev: *const Mqblk) -> c_int {
    entry("mqblk_trace_stop", || {
        // SAFETY: the caller's promise, passed on.
        let d = unsafe { dev_ref(dev, "mqblk_trace_stop") }?;
        if mqblk::stop_trace(&d.dev)?.is_empty() {
            return Err(Failure::new(
                MqblkError::Inval,
                format!("mqblk_trace_stop: {} is not being traced", d.dev.name()),
            ));
        }
        Ok(0)
    })
}

/// Close a device opened by `mqblk_open()`. NULL is ignored. Queues still
/// alive keep the device open until they are destroyed.
///
/// # Safety
///
/// `dev` is NULL or a device from `mqblk_open()` not closed yet; it is not
/// used after this call.
#[no_mangle]
pub unsafe extern "C" fn mqblk_close(dev: *mut Mqblk) {
    guard(
        "mqblk_close",
        |_| (),
        || {
            if !dev.is_null() {
                // SAFETY: `dev` came from Box::into_raw in mqblk_open and is
                // closed once (the caller's promise).
                drop(unsafe { Box::from_raw(dev) });
            }
            Ok(())
        },
    )
}

/// Borrow a device handle, or fail with MQBLK_ERROR_NULL.
///
/// # Safety
///
/// `dev` is NULL or a live device from `mqblk_open()`.
pub(crate) unsafe fn dev_ref<'a>(dev: *const Mqblk, func: &str) -> Result<&'a Mqblk, Failure> {
    // SAFETY: NULL or live (the caller's promise); as_ref checks NULL.
    unsafe { dev.as_ref() }.ok_or_else(|| Failure::null(func, "dev"))
}

/// The device's name (valid as long as the device is open).
///
/// # Safety
///
/// `dev` is NULL or a live device; NULL gives "".
#[no_mangle]
pub unsafe extern "C" fn mqblk_get_name(dev: *const Mqblk) -> *const c_char {
    guard(
        "mqblk_get_name",
        |_| cstr(b"\0"),
        || {
            // SAFETY: the caller's promise, passed on.
            let d = unsafe { dev_ref(dev, "mqblk_get_name") }?;
            Ok(d.name.as_ptr())
        },
    )
}

/// The device's capacity in bytes (0 if `dev` is NULL).
///
/// # Safety
///
/// `dev` is NULL or a live device.
#[no_mangle]
pub unsafe extern "C" fn mqblk_get_capacity(dev: *const Mqblk) -> u64 {
    guard(
        "mqblk_get_capacity",
        |_| 0,
        || {
            // SAFETY: the caller's promise, passed on.
            let d = unsafe { dev_ref(dev, "mqblk_get_capacity") }?;
            Ok(d.dev.capacity_bytes())
        },
    )
}

/// The device's logical block size in bytes (0 if `dev` is NULL).
///
/// # Safety
///
/// `dev` is NULL or a live device.
#[no_mangle]
pub unsafe extern "C" fn mqblk_get_block_size(dev: *const Mqblk) -> u32 {
    guard(
        "mqblk_get_block_size",
        |_| 0,
        || {
            // SAFETY: the caller's promise, passed on.
            let d = unsafe { dev_ref(dev, "mqblk_get_block_size") }?;
            Ok(d.dev.logical_block_size())
        },
    )
}

/// Fill `*out` with the device's size, limits and features.
///
/// # Safety
///
/// `dev` is NULL or a live device; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mqblk_get_info(dev: *const Mqblk, out: *mut MqblkInfo) -> c_int {
    entry("mqblk_get_info", || {
        // SAFETY: the caller's promise, passed on.
        let d = unsafe { dev_ref(dev, "mqblk_get_info") }?;
        if out.is_null() {
            return Err(Failure::null("mqblk_get_info", "out"));
        }
        let lim = d.dev.limits();
        let features = d.dev.info().features;
        let sectors = |s: u32| u64::from(s) << 9;
        let info = MqblkInfo {
            capacity_bytes: d.dev.capacity_bytes(),
            logical_block_size: lim.logical_block_size,
            physical_block_size: lim.physical_block_size,
            buf_alignment: d.dev.buf_pool().align() as u32,
            max_transfer_bytes: sectors(lim.max_sectors),
            max_segments: lim.max_segments,
            max_segment_size: lim.max_segment_size,
            max_discard_bytes: sectors(lim.max_discard_sectors),
            max_write_zeroes_bytes: sectors(lim.max_write_zeroes_sectors),
            nr_hw_queues: d.dev.nr_hw_queues() as u32,
            queue_depth: d.dev.config().queue_depth,
            read_only: features.read_only,
            write_cache: features.write_cache,
            fua: features.fua,
            discard: features.discard,
            write_zeroes: features.write_zeroes,
        };
        // SAFETY: `out` is non-NULL and writable (the caller's promise).
        unsafe { out.write(info) };
        Ok(0)
    })
}

/// Fill `*out` with the device's counters (every queue, live or destroyed).
///
/// # Safety
///
/// `dev` is NULL or a live device; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn mqblk_get_stats(dev: *const Mqblk, out: *mut MqblkStats) -> c_int {
    entry("mqblk_get_stats", || {
        // SAFETY: the caller's promise, passed on.
        let d = unsafe { dev_ref(dev, "mqblk_get_stats") }?;
        if out.is_null() {
            return Err(Failure::null("mqblk_get_stats", "out"));
        }
        let s = MqblkStats::from(d.dev.stats().snapshot());
        // SAFETY: `out` is non-NULL and writable (the caller's promise).
        unsafe { out.write(s) };
        Ok(0)
    })
}

/// Allocate `len` bytes of zeroed memory aligned for this device (at least
/// `buf_alignment`, and at least a page), for I/O without a bounce copy.
/// Free it with `mqblk_free_buf()`. NULL on failure (see
/// `mqblk_get_error_msg()`). Control plane: allocate buffers once, before
/// the I/O loop.
///
/// # Safety
///
/// `dev` is NULL or a live device.
#[no_mangle]
pub unsafe extern "C" fn mqblk_alloc_buf(dev: *const Mqblk, len: usize) -> *mut c_void {
    guard(
        "mqblk_alloc_buf",
        |_| std::ptr::null_mut(),
        || {
            // SAFETY: the caller's promise, passed on.
            let d = unsafe { dev_ref(dev, "mqblk_alloc_buf") }?;
            let align = d.dev.buf_pool().align().max(4096);
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: `p` is a valid out pointer; align is a power of two
            // and a multiple of the pointer size.
            let rc = unsafe { libc::posix_memalign(&mut p, align, len.max(1)) };
            if rc != 0 || p.is_null() {
                return Err(Failure::new(
                    MqblkError::NoMem,
                    format!("mqblk_alloc_buf: cannot allocate {len} bytes aligned to {align}"),
                ));
            }
            // SAFETY: `p` points to at least len.max(1) writable bytes.
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len.max(1)) };
            Ok(p)
        },
    )
}

/// Free a buffer from `mqblk_alloc_buf()`. NULL is ignored.
///
/// # Safety
///
/// `buf` is NULL or came from `mqblk_alloc_buf()` and is not freed yet, and
/// no I/O that uses it is still in flight.
#[no_mangle]
pub unsafe extern "C" fn mqblk_free_buf(buf: *mut c_void) {
    // SAFETY: posix_memalign memory is freed with free (the caller's promise
    // that it came from mqblk_alloc_buf); free(NULL) does nothing.
    unsafe { libc::free(buf) }
}
