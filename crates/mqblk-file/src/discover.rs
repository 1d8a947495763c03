//! Discovery (control plane): open the target and find out what it is,
//! the way Linux fills a `struct queue_limits` from the hardware.
//!
//! - alignment: statx(STATX_DIOALIGN) where the kernel and filesystem
//!   report it, else BLKSSZGET/BLKPBSZGET for a block device, else a safe
//!   default (4096 for O_DIRECT on a file, 512 otherwise);
//! - capacity: BLKGETSIZE64, or the file's size; `size=` creates a new
//!   file, exposes a prefix of a larger target, and grows an existing
//!   file only with `create=1`;
//! - read-only: the open mode, and BLKROGET;
//! - a regular file is locked as qemu locks images ([`crate::lock`]);
//! - rotational and write cache: the block device's `queue/` in sysfs;
//! - discard and write-zeroes: probed, not assumed (fallocate past the end
//!   of a file, which changes nothing; sysfs limits for a block device).
//!
//! The result feeds `Driver::limits()` and `Driver::features()`, so the
//! core's validation, splitting and bouncing apply unchanged.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};

use crate::config::FileConfig;

/// `_IO(0x12, 94)`: is the block device read-only?
const BLKROGET: libc::c_ulong = 0x125e;
/// `_IO(0x12, 104)`: logical block size.
const BLKSSZGET: libc::c_ulong = 0x1268;
/// `_IOR(0x12, 114, size_t)`: size in bytes.
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
/// `_IO(0x12, 119)`: discard a `[start, len]` byte range.
pub(crate) const BLKDISCARD: libc::c_ulong = 0x1277;
/// `_IO(0x12, 123)`: physical block size.
const BLKPBSZGET: libc::c_ulong = 0x127b;
/// `_IO(0x12, 127)`: zero a `[start, len]` byte range.
pub(crate) const BLKZEROOUT: libc::c_ulong = 0x127f;

/// Largest byte count one read or write moves (Linux `MAX_RW_COUNT`).
pub const MAX_RW_BYTES: u64 = 0x7fff_f000;

/// What kind of file the target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A regular file.
    Regular,
    /// A block device.
    Block,
}

/// How discard is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiscardHow {
    /// fallocate(PUNCH_HOLE | KEEP_SIZE) on a regular file.
    PunchHole,
    /// ioctl(BLKDISCARD) on a block device.
    BlkDiscard,
}

/// How write-zeroes is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroHow {
    /// fallocate(ZERO_RANGE | KEEP_SIZE): keeps the space allocated. On a
    /// block device this is BLKZEROOUT's path (blkdev_issue_zeroout).
    ZeroRange,
    /// fallocate(PUNCH_HOLE | KEEP_SIZE): a file system without ZERO_RANGE
    /// (tmpfs); reads return zeros, the space is freed (Linux loop does the
    /// same for REQ_OP_WRITE_ZEROES without REQ_NOUNMAP).
    PunchHole,
    /// ioctl(BLKZEROOUT) (the psync engine, on a block device).
    BlkZeroout,
}

/// Everything discovery found.
#[derive(Clone, Debug)]
pub struct Geometry {
    /// Regular file or block device.
    pub kind: TargetKind,
    /// Usable bytes.
    pub capacity_bytes: u64,
    /// Offsets and lengths must be multiples of this.
    pub logical_block_size: u32,
    /// The device's preferred write unit.
    pub physical_block_size: u32,
    /// Buffer addresses and lengths must be multiples of this (mask + 1).
    pub dma_alignment: u32,
    /// Where the alignment came from.
    pub align_source: &'static str,
    /// Writes are refused.
    pub read_only: bool,
    /// Spinning media (sysfs `queue/rotational`).
    pub rotational: bool,
    /// Completed writes may be volatile until a flush.
    pub write_cache: bool,
    /// Discard, if the target supports it.
    pub discard: Option<DiscardHow>,
    /// Largest discard in bytes (0 without discard).
    pub max_discard_bytes: u64,
    /// Write-zeroes, if supported.
    pub write_zeroes: Option<ZeroHow>,
    /// The block device behind the target (`major:minor`), if any.
    pub blockdev: Option<(u32, u32)>,
    /// Things the user should know (fallbacks taken, options ignored).
    pub notes: Vec<String>,
    /// The image lock of a regular file (`lock=1`), held as long as this.
    pub lock: Option<std::sync::Arc<crate::lock::ImageLock>>,
}

fn os_err(context: String, e: io::Error) -> String {
    format!("{context}: {e}")
}

/// Open `cfg.path` with the mode the options ask for, and describe it.
///
/// The target's size never changes unless asked: a missing file is created
/// when `size=` is given, an existing one is grown only with `create=1`.
/// A file this call created is removed again if anything later fails, so a
/// failed open leaves nothing behind.
pub fn open(cfg: &FileConfig) -> Result<(File, Geometry), String> {
    let mut created = false;
    let r = open_inner(cfg, &mut created);
    if r.is_err() && created {
        let _ = std::fs::remove_file(&cfg.path);
    }
    r
}

/// True for a path under `/dev` (but `/dev/shm`, a tmpfs for files): a
/// missing one is a device that is not there, never a file to create.
fn is_device_path(path: &std::path::Path) -> bool {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // `..` is not resolved by `absolute`; a path that climbs is judged by
    // its components as written.
    let mut at = std::path::PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                at.pop();
            }
            std::path::Component::CurDir => {}
            c => at.push(c),
        }
    }
    at.starts_with("/dev") && !at.starts_with("/dev/shm")
}

/// What a non-regular, non-block file is, for errors.
fn kind_name(ft: &std::fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_symlink() {
        "a dangling symbolic link"
    } else {
        "not a regular file"
    }
}

fn open_inner(cfg: &FileConfig, created: &mut bool) -> Result<(File, Geometry), String> {
    let path = &cfg.path;
    let shown = path.display();
    // What is there decides what the open may do; a character device or a
    // directory is refused before any flag (O_DIRECT) is blamed.
    let existing = match std::fs::metadata(path) {
        Ok(m) => Some(m),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(format!(
                "cannot look at {shown} ({e}): a directory on the way is not searchable \
                 by this user"
            ))
        }
        Err(e) => return Err(os_err(format!("cannot stat {shown}"), e)),
    };
    if let Some(m) = &existing {
        let ft = m.file_type();
        if !ft.is_file() && !ft.is_block_device() {
            return Err(format!(
                "{shown} is {}; expected a regular file or a block device",
                kind_name(&ft)
            ));
        }
    } else {
        if is_device_path(path) {
            return Err(format!(
                "{shown} does not exist: there is no such device (`lsblk` lists the block \
                 devices); mqblk creates no files under /dev"
            ));
        }
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(std::path::Path::new("."));
        if !parent.is_dir() {
            return Err(format!(
                "{shown} cannot be created: the directory {} does not exist; create it first",
                parent.display()
            ));
        }
        if cfg.size_bytes.is_none() {
            return Err(format!(
                "{shown} does not exist; to create it, give its size, as in \
                 file:{shown},size=1G"
            ));
        }
        if cfg.read_only {
            return Err(format!(
                "{shown} does not exist, and a read-only open (ro=1, which `mqblk info` and \
                 read-only workloads use) creates nothing; create it with a writable open \
                 (file:{shown},size={}) or `truncate -s SIZE {shown}`",
                cfg.size_bytes.unwrap_or(0)
            ));
        }
    }
    let mut oo = OpenOptions::new();
    oo.read(true).write(!cfg.read_only);
    let mut custom = libc::O_CLOEXEC;
    if cfg.direct {
        custom |= libc::O_DIRECT;
    }
    oo.custom_flags(custom);
    if existing.is_none() {
        // Exclusive: never take over a file that appeared meanwhile.
        oo.create_new(true);
    }
    let file = match oo.open(path) {
        Ok(f) => {
            *created = existing.is_none();
            f
        }
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && cfg.direct => {
            return Err(format!(
                "cannot open {shown} with O_DIRECT ({e}): its file system does not support \
                 direct I/O; use direct=0, or a file on another file system"
            ))
        }
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {
            return Err(format!(
                "cannot open {shown} for writing ({e}); open it read-only with ro=1"
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied && !cfg.read_only => {
            return Err(format!(
                "cannot open {shown} for reading and writing ({e}); to only read it, add ro=1 \
                 (bench with a read-only workload, info and serve --read-only do so themselves)"
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(format!(
                "cannot open {shown} for reading ({e}): this user may not read it"
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            return Err(format!(
                "{shown} appeared while it was being created; open it again"
            ))
        }
        Err(e) => return Err(os_err(format!("cannot open {shown}"), e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| os_err(format!("cannot stat {shown}"), e))?;
    let ft = meta.file_type();
    let kind = if ft.is_file() {
        TargetKind::Regular
    } else if ft.is_block_device() {
        TargetKind::Block
    } else {
        return Err(format!(
            "{shown} is {}; expected a regular file or a block device",
            kind_name(&ft)
        ));
    };
    // Locked before anything changes it (a grow with create=1).
    let lock = if kind == TargetKind::Regular && cfg.lock {
        crate::lock::take(&file, &meta, path, !cfg.read_only)?.map(std::sync::Arc::new)
    } else {
        None
    };
    let fd = file.as_raw_fd();
    let mut notes = Vec::new();

    // Capacity: a new file gets `size=`; an existing target keeps its size
    // (grown only with create=1) and `size=` smaller exposes a prefix.
    let whole_bytes = match kind {
        TargetKind::Regular => meta.len(),
        TargetKind::Block => {
            let mut size: u64 = 0;
            // SAFETY: BLKGETSIZE64 writes one u64 to the pointer, which
            // points at a live local.
            let r = unsafe { libc::ioctl(fd, BLKGETSIZE64 as _, &mut size as *mut u64) };
            if r != 0 {
                return Err(os_err(
                    format!("BLKGETSIZE64 on {shown}"),
                    io::Error::last_os_error(),
                ));
            }
            size
        }
    };
    // The block device behind the target: itself, or the file's file system.
    let (major, minor) = if kind == TargetKind::Block {
        (libc::major(meta.rdev()), libc::minor(meta.rdev()))
    } else {
        (libc::major(meta.dev()), libc::minor(meta.dev()))
    };
    let queue_dir = sysfs_queue_dir(major, minor);
    let blockdev = queue_dir.as_ref().map(|_| (major, minor));

    // Alignment.
    let dio = statx_dioalign(fd);
    let (mut lbs, mut pbs) = (512u32, 512u32);
    if kind == TargetKind::Block {
        lbs = ioctl_u32(fd, BLKSSZGET).unwrap_or(512);
        pbs = ioctl_u32(fd, BLKPBSZGET).unwrap_or(lbs);
    }
    let (logical_block_size, dma_align_bytes, align_source) = if !cfg.direct {
        // Buffered I/O: the page cache takes any address and length.
        (lbs.max(512), 1, "buffered I/O (no alignment)")
    } else if let Some((mem, off)) = dio {
        (off.max(512), mem.max(1), "statx(STATX_DIOALIGN)")
    } else if kind == TargetKind::Block {
        (lbs, lbs, "BLKSSZGET")
    } else {
        (
            4096,
            4096,
            "default for O_DIRECT on a file (no STATX_DIOALIGN)",
        )
    };
    if !logical_block_size.is_power_of_two() || logical_block_size > 65536 {
        return Err(format!(
            "{shown}: unusable logical block size {logical_block_size} ({align_source})"
        ));
    }
    let lbs64 = u64::from(logical_block_size);
    if let Some(want) = cfg.size_bytes {
        if !want.is_multiple_of(lbs64) {
            let down = want / lbs64 * lbs64;
            let up = match down.checked_add(lbs64) {
                Some(up) if down > 0 => format!("size={down} or size={up}"),
                Some(up) => format!("size={up}"),
                None => format!("size={down}"),
            };
            return Err(format!(
                "size={want} is not a multiple of {shown}'s {logical_block_size}-byte logical \
                 block size ({align_source}); use {up}"
            ));
        }
    }
    let capacity_bytes = match cfg.size_bytes {
        None => whole_bytes,
        Some(want) if want == whole_bytes => want,
        Some(want) if want < whole_bytes => {
            if !*created {
                notes.push(format!(
                    "size={want} exposes only the first {want} of {shown}'s {whole_bytes} bytes"
                ));
            }
            want
        }
        Some(want) => match kind {
            TargetKind::Regular if *created || cfg.create => {
                file.set_len(want).map_err(|e| {
                    let why = if e.raw_os_error() == Some(libc::EFBIG)
                        || e.raw_os_error() == Some(libc::EINVAL)
                    {
                        "larger than this file system allows"
                    } else {
                        "the file system refused"
                    };
                    format!("cannot make {shown} {want} bytes long: {why} ({e})")
                })?;
                if !*created {
                    notes.push(format!(
                        "{shown} was grown from {whole_bytes} to {want} bytes (create=1)"
                    ));
                }
                want
            }
            TargetKind::Regular => {
                return Err(format!(
                    "size={want} is larger than {shown} ({whole_bytes} bytes); add create=1 \
                     to grow the file to {want} bytes, or drop size= to use its {whole_bytes} \
                     bytes"
                ))
            }
            TargetKind::Block => {
                return Err(format!(
                    "size={want} is larger than the block device {shown} ({whole_bytes} bytes); \
                     drop size= to use all of it"
                ))
            }
        },
    };

    if cfg.size_bytes.is_none() && !capacity_bytes.is_multiple_of(lbs64) && capacity_bytes >= lbs64
    {
        notes.push(format!(
            "{shown} has {capacity_bytes} bytes; the last {} are past its last whole \
             {logical_block_size}-byte block and are not used",
            capacity_bytes % lbs64
        ));
    }
    let physical_block_size = match kind {
        TargetKind::Block => pbs.max(logical_block_size),
        TargetKind::Regular => {
            let b = meta.blksize() as u32;
            if b.is_power_of_two() && b <= 65536 {
                b.max(logical_block_size)
            } else {
                logical_block_size
            }
        }
    }
    .next_power_of_two();

    // Read-only.
    let mut read_only = cfg.read_only;
    if kind == TargetKind::Block && !read_only && ioctl_u32(fd, BLKROGET).unwrap_or(0) != 0 {
        read_only = true;
        notes.push(format!("{shown} is a read-only block device (BLKROGET)"));
    }

    // Rotational and write cache from sysfs.
    let rotational = queue_dir
        .as_ref()
        .and_then(|d| read_sysfs(d, "rotational"))
        .is_some_and(|s| s.trim() == "1");
    let write_cache = match kind {
        // A file's writes may sit in the page cache or the file system's
        // metadata until fdatasync, even with O_DIRECT (allocation).
        TargetKind::Regular => true,
        TargetKind::Block => queue_dir
            .as_ref()
            .and_then(|d| read_sysfs(d, "write_cache"))
            .is_none_or(|s| s.trim() == "write back"),
    };

    // Discard and write-zeroes.
    let (mut discard, mut max_discard_bytes, mut write_zeroes) = (None, 0, None);
    if !read_only {
        match kind {
            TargetKind::Regular => {
                let probe_at = capacity_bytes.next_multiple_of(u64::from(logical_block_size));
                let probe_len = u64::from(logical_block_size);
                let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                let zero = libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE;
                let can_punch = fallocate(fd, punch, probe_at, probe_len).is_ok();
                let can_zero = fallocate(fd, zero, probe_at, probe_len).is_ok();
                if can_zero && can_punch {
                    // Give back what the ZERO_RANGE probe may have
                    // preallocated past the end.
                    let _ = fallocate(fd, punch, probe_at, probe_len);
                }
                if can_punch {
                    discard = Some(DiscardHow::PunchHole);
                    max_discard_bytes = u64::MAX;
                }
                write_zeroes = if can_zero {
                    Some(ZeroHow::ZeroRange)
                } else if can_punch {
                    Some(ZeroHow::PunchHole)
                } else {
                    None
                };
            }
            TargetKind::Block => {
                let max = queue_dir
                    .as_ref()
                    .and_then(|d| read_sysfs(d, "discard_max_bytes"))
                    .and_then(|s| s.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                if max > 0 {
                    discard = Some(DiscardHow::BlkDiscard);
                    max_discard_bytes = max;
                }
                // blkdev_issue_zeroout writes zeroes itself when the
                // device has no WRITE ZEROES command, so it always works.
                write_zeroes = Some(ZeroHow::ZeroRange);
            }
        }
    }
    if dio.is_none() && cfg.direct && kind == TargetKind::Regular {
        notes.push(format!(
            "{shown}: the kernel or file system does not report STATX_DIOALIGN; assuming \
             4096-byte alignment for O_DIRECT"
        ));
    }

    Ok((
        file,
        Geometry {
            kind,
            capacity_bytes,
            logical_block_size,
            physical_block_size,
            dma_alignment: dma_align_bytes.next_power_of_two() - 1,
            align_source,
            read_only,
            rotational,
            write_cache,
            discard,
            max_discard_bytes,
            write_zeroes,
            blockdev,
            notes,
            lock,
        },
    ))
}

/// `(dio_mem_align, dio_offset_align)` from statx, if reported.
fn statx_dioalign(fd: libc::c_int) -> Option<(u32, u32)> {
    // SAFETY: statx is plain old data; all-zero is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty C string with AT_EMPTY_PATH names `fd` itself;
    // statx writes one struct statx to the pointer, a live local.
    let r = unsafe {
        libc::statx(
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if r != 0 || stx.stx_mask & libc::STATX_DIOALIGN == 0 {
        return None;
    }
    let (mem, off) = (stx.stx_dio_mem_align, stx.stx_dio_offset_align);
    // Zero means "direct I/O is not supported" on this file.
    (mem != 0 && off != 0 && mem.is_power_of_two() && off.is_power_of_two()).then_some((mem, off))
}

fn ioctl_u32(fd: libc::c_int, req: libc::c_ulong) -> Option<u32> {
    let mut v: libc::c_int = 0;
    // SAFETY: these block ioctls write one int to the pointer, a live local.
    let r = unsafe { libc::ioctl(fd, req as _, &mut v as *mut libc::c_int) };
    (r == 0 && v >= 0).then_some(v as u32)
}

/// fallocate(2) with a typed error.
pub(crate) fn fallocate(
    fd: libc::c_int,
    mode: libc::c_int,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    // SAFETY: fallocate takes no pointers.
    let r = unsafe { libc::fallocate(fd, mode, offset as libc::off_t, len as libc::off_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The sysfs `queue/` directory of block device `major:minor` (a
/// partition's is its disk's).
fn sysfs_queue_dir(major: u32, minor: u32) -> Option<std::path::PathBuf> {
    let base = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    [base.join("queue"), base.join("../queue")]
        .into_iter()
        .find(|dir| dir.join("rotational").exists())
}

fn read_sysfs(dir: &std::path::Path, name: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(name)).ok()
}

/// Whether `/sys/dev/block/M:m/queue/io_poll` says the device polls.
pub fn blockdev_polls(dev: (u32, u32)) -> bool {
    sysfs_queue_dir(dev.0, dev.1)
        .and_then(|d| read_sysfs(&d, "io_poll"))
        .is_some_and(|s| s.trim() == "1")
}
