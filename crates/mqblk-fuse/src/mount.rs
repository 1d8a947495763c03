//! The control plane's system calls: `/dev/fuse` opened and cloned, the
//! file system mounted over the file (mount(2), as root), a stale mount
//! of a killed server found in `/proc/self/mountinfo` and lazily
//! unmounted, and the end: unmount, lazily if busy, and the connection
//! aborted when a user still holds the file.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::Error;

/// How long a mount found on the file has to answer a stat before it is
/// taken for a hung server.
pub const STAT_WAIT: Duration = Duration::from_secs(1);

/// A mount listed in `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountEntry {
    /// The superblock's device, `major:minor` (a FUSE connection's id is
    /// `major << 20 | minor`).
    pub dev: (u32, u32),
    /// The mount point, unescaped.
    pub mount_point: PathBuf,
    /// The file system type (`fuse`, `fuse.mqblk`, ...).
    pub fstype: String,
}

impl MountEntry {
    /// The FUSE connection's id, its directory under
    /// `/sys/fs/fuse/connections`.
    pub fn connection(&self) -> u64 {
        u64::from(self.dev.0) << 20 | u64::from(self.dev.1)
    }
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') << 6 | (d[1] - b'0') << 3 | (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The FUSE mounts on `path` listed in `mountinfo` (the text of
/// `/proc/self/mountinfo`), oldest first (the last one is on top).
pub fn fuse_mounts_on(mountinfo: &str, path: &Path) -> Vec<MountEntry> {
    let mut found = Vec::new();
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        // id parent major:minor root mount_point options [optional...] - fstype source super
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(dev), Some(mp), Some(fstype)) =
            (fields.get(2), fields.get(4), fields.get(sep + 1))
        else {
            continue;
        };
        if *fstype != "fuse" && !fstype.starts_with("fuse.") {
            continue;
        }
        let mount_point = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(mp)));
        if mount_point != path {
            continue;
        }
        let Some((ma, mi)) = dev.split_once(':') else {
            continue;
        };
        let (Ok(ma), Ok(mi)) = (ma.parse(), mi.parse()) else {
            continue;
        };
        found.push(MountEntry {
            dev: (ma, mi),
            mount_point,
            fstype: fstype.to_string(),
        });
    }
    found
}

/// `file` as the mount table names it: its directory resolved, its own
/// name kept (a stale mount on it cannot be resolved: stat fails).
pub fn mount_point(file: &Path) -> Result<PathBuf, Error> {
    let fail = |reason: String| Error::File {
        file: file.to_path_buf(),
        reason,
    };
    let name = file
        .file_name()
        .ok_or_else(|| fail("names no file".into()))?;
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| fail(format!("its directory cannot be resolved: {e}")))?;
    Ok(dir.join(name))
}

fn read_mountinfo(file: &Path) -> Result<String, Error> {
    std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| Error::Sys {
        file: file.to_path_buf(),
        what: "reading /proc/self/mountinfo",
        source,
    })
}

/// The FUSE mounts on `path` now.
pub fn mounts_on(path: &Path) -> Result<Vec<MountEntry>, Error> {
    Ok(fuse_mounts_on(&read_mountinfo(path)?, path))
}

/// stat(2) of `path` in a thread of its own, for at most `max`: `None` if
/// it does not answer (a server that hangs), else its result.
fn stat_within(path: &Path, max: Duration) -> Option<std::io::Result<std::fs::Metadata>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("fuse-stat".into())
        .spawn(move || {
            let _ = tx.send(std::fs::metadata(&p));
        });
    if spawned.is_err() {
        return Some(std::fs::metadata(path));
    }
    rx.recv_timeout(max).ok()
}

/// Clear the FUSE mounts on `path` whose server is gone (stat answers
/// ENOTCONN: a killed server), each with a lazy unmount, and say so on
/// stderr; refuse a mount whose server answers, or hangs.
pub fn clear_stale(path: &Path) -> Result<(), Error> {
    // Each round clears the top mount; a file holds few.
    for _ in 0..16 {
        let Some(top) = mounts_on(path)?.pop() else {
            return Ok(());
        };
        match stat_within(path, STAT_WAIT) {
            Some(Err(e)) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                unmount_lazy(path).map_err(|source| Error::Sys {
                    file: path.to_path_buf(),
                    what: "the lazy unmount of a stale FUSE mount (try `umount -l FILE`)",
                    source,
                })?;
                eprintln!(
                    "mqblk serve: {}: cleared a stale FUSE mount ({}, connection {}) whose \
                     server is gone",
                    path.display(),
                    top.fstype,
                    top.connection()
                );
            }
            None => {
                return Err(Error::Busy {
                    file: path.to_path_buf(),
                    fstype: format!(
                        "{}, but its server does not answer a stat within {STAT_WAIT:?}",
                        top.fstype
                    ),
                })
            }
            Some(_) => {
                return Err(Error::Busy {
                    file: path.to_path_buf(),
                    fstype: top.fstype,
                })
            }
        }
    }
    Err(Error::File {
        file: path.to_path_buf(),
        reason: "more than 16 stale FUSE mounts on it; clear them with `umount -l FILE`".into(),
    })
}

fn cstr(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

/// Open `/dev/fuse`.
pub fn open_dev(file: &Path) -> Result<OwnedFd, Error> {
    // SAFETY: a NUL-terminated literal; open returns a new descriptor or -1.
    let fd = unsafe { libc::open(c"/dev/fuse".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(Error::Sys {
            file: file.to_path_buf(),
            what: "opening /dev/fuse (is FUSE in this kernel?)",
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Mount a one-file FUSE file system served on `fd` over the regular file
/// `path` (as root: mount(2) itself, no fusermount).
pub fn mount(fd: &OwnedFd, path: &Path, read_only: bool) -> Result<(), Error> {
    let sys = |what, source| Error::Sys {
        file: path.to_path_buf(),
        what,
        source,
    };
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let opts = format!(
        "fd={},rootmode=100000,user_id={uid},group_id={gid},allow_other",
        fd.as_raw_fd()
    );
    let target = cstr(path).map_err(|e| sys("the path", e))?;
    let opts = CString::new(opts).expect("no NUL in the options");
    let mut flags = libc::MS_NOSUID | libc::MS_NODEV;
    if read_only {
        flags |= libc::MS_RDONLY;
    }
    // SAFETY: every pointer is a NUL-terminated string that outlives the
    // call; the kernel copies them.
    let r = unsafe {
        libc::mount(
            c"mqblk".as_ptr(),
            target.as_ptr(),
            c"fuse.mqblk".as_ptr(),
            flags,
            opts.as_ptr().cast(),
        )
    };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        let what = if e.raw_os_error() == Some(libc::EPERM) {
            "mount(2) (a FUSE export mounts as root)"
        } else {
            "mount(2)"
        };
        return Err(sys(what, e));
    }
    Ok(())
}

/// A new `/dev/fuse` descriptor on the connection of `fd`
/// (`FUSE_DEV_IOC_CLONE`): requests are read from either, and a reply
/// goes back on the one its request came from.
pub fn clone_dev(fd: &OwnedFd, file: &Path) -> Result<OwnedFd, Error> {
    let new = open_dev(file)?;
    let mut src: u32 = fd.as_raw_fd() as u32;
    // SAFETY: both descriptors are open; the ioctl reads one u32 from
    // `src`, which lives across the call.
    let r = unsafe {
        libc::ioctl(
            new.as_raw_fd(),
            crate::abi::DEV_IOC_CLONE as _,
            &mut src as *mut u32,
        )
    };
    if r != 0 {
        return Err(Error::Sys {
            file: file.to_path_buf(),
            what: "cloning /dev/fuse (FUSE_DEV_IOC_CLONE)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(new)
}

/// umount2(path, flags).
fn umount2(path: &Path, flags: libc::c_int) -> std::io::Result<()> {
    let target = cstr(path)?;
    // SAFETY: a NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(target.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Detach the mount on `path` now; it ends once its last user lets go.
pub fn unmount_lazy(path: &Path) -> std::io::Result<()> {
    umount2(path, libc::MNT_DETACH)
}

/// How an unmount went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// Gone, and the connection with it.
    Done,
    /// Busy (the file is open, a loop device holds it): detached, the
    /// connection lives until its users let go or it is aborted.
    Detached,
}

/// Unmount `path`: at once if nobody uses it, else lazily.
pub fn unmount(path: &Path) -> std::io::Result<Unmounted> {
    match umount2(path, 0) {
        Ok(()) => Ok(Unmounted::Done),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
            unmount_lazy(path)?;
            Ok(Unmounted::Detached)
        }
        Err(e) => Err(e),
    }
}

/// Abort connection `id` through the fusectl file system, if it is
/// mounted: every request waiting on it fails at once (ECONNABORTED), and
/// reads of its `/dev/fuse` descriptors return ENODEV. False where
/// fusectl is not mounted (then closing every descriptor aborts it).
pub fn abort(id: u64) -> bool {
    std::fs::write(format!("/sys/fs/fuse/connections/{id}/abort"), b"1").is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 252:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
101 22 0:61 / /tmp/a\\040b/disk.img rw,nosuid,nodev,relatime shared:60 - fuse.mqblk mqblk rw,user_id=0,group_id=0,allow_other
102 22 0:62 / /tmp/other rw - fuse fuse rw
103 101 0:63 / /tmp/a\\040b/disk.img rw - fuse storage-export rw
";

    #[test]
    fn fuse_mounts_on_a_path_are_found_oldest_first() {
        let m = fuse_mounts_on(INFO, Path::new("/tmp/a b/disk.img"));
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].dev, (0, 61));
        assert_eq!(m[0].fstype, "fuse.mqblk");
        assert_eq!(m[1].dev, (0, 63));
        assert_eq!(m[1].connection(), 63);
        assert!(fuse_mounts_on(INFO, Path::new("/")).is_empty());
    }

    #[test]
    fn escapes_are_undone() {
        assert_eq!(unescape("a\\040b\\134c\\0"), b"a b\\c\\0");
    }

    #[test]
    fn a_connection_id_is_the_kernels_dev_t() {
        let e = MountEntry {
            dev: (1, 2),
            mount_point: PathBuf::new(),
            fstype: "fuse".into(),
        };
        assert_eq!(e.connection(), (1 << 20) | 2);
    }
}
