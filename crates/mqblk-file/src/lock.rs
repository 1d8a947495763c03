//! Image locking (control plane), as qemu locks its images: when a regular
//! file opens, it takes an OFD lock (`fcntl(F_OFD_SETLK)`) on the whole
//! file, shared to read and exclusive to write, held for as long as the
//! device keeps the file open. A second writer, or a reader beside a
//! writer, is refused at open with the file and, where it can be found,
//! the holder; `lock=off` opts out, as qemu's `locking=off`.
//!
//! OFD locks belong to an open file, not a process: two opens in one
//! process conflict as two processes do, and closing any other descriptor
//! of the file keeps the lock (a POSIX lock would be lost). A child forked
//! after its parent locked the file holds the same open file, and so the
//! same lock: its own open of the file is covered by it, as fio's job
//! processes open the device their parent sized.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Most `/proc/PID/fdinfo` entries read while looking for a lock's holder.
const FDINFO_SCAN_MAX: usize = 1 << 16;

/// Longest wait for a lock that no process holds any more to go.
const ORPHAN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A whole-file lock request of type `l_type` (`F_RDLCK`, `F_WRLCK`).
fn whole_file(l_type: libc::c_int) -> libc::flock {
    libc::flock {
        l_type: l_type as libc::c_short,
        l_whence: libc::SEEK_SET as libc::c_short,
        l_start: 0,
        l_len: 0,
        l_pid: 0,
    }
}

/// A file this process, or the parent it was forked from, locked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Taken {
    dev: u64,
    ino: u64,
    /// The process that took the lock.
    pid: u32,
    write: bool,
}

/// The locks taken in this process (and, in a forked child, its parent's).
static TAKEN: std::sync::Mutex<Vec<Taken>> = std::sync::Mutex::new(Vec::new());

fn taken() -> std::sync::MutexGuard<'static, Vec<Taken>> {
    TAKEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A lock held on an image, released when this is dropped: with the
/// device, not when the kernel lets go of the file (an io_uring ring
/// holds it a while after it is closed).
#[derive(Debug)]
pub struct ImageLock {
    /// A descriptor of the locked open file (a `dup`: the same open file,
    /// so the same lock).
    file: File,
    taken: Taken,
}

impl ImageLock {
    /// Exclusive (to write) rather than shared.
    pub fn write(&self) -> bool {
        self.taken.write
    }
}

impl Drop for ImageLock {
    fn drop(&mut self) {
        if self.taken.pid != std::process::id() {
            // A forked child's copy: the lock is the parent's to let go.
            return;
        }
        let mut all = taken();
        if let Some(i) = all.iter().position(|t| *t == self.taken) {
            all.swap_remove(i);
        }
        drop(all);
        let mut fl = whole_file(libc::F_UNLCK);
        // SAFETY: F_OFD_SETLK reads one `struct flock`, which points at a
        // live local of that type; the descriptor is open (owned by `file`).
        let _ = unsafe {
            libc::fcntl(
                self.file.as_raw_fd(),
                libc::F_OFD_SETLK,
                &mut fl as *mut libc::flock,
            )
        };
    }
}

/// Lock `file` (at `path`, described by `meta`) for writing (`write`) or
/// reading, or say who holds it. `None`: the lock this process inherited
/// from the parent that took it covers the open.
pub(crate) fn take(
    file: &File,
    meta: &std::fs::Metadata,
    path: &Path,
    write: bool,
) -> Result<Option<ImageLock>, String> {
    let me = Taken {
        dev: meta.dev(),
        ino: meta.ino(),
        pid: std::process::id(),
        write,
    };
    let fd = file.as_raw_fd();
    let shown = path.display();
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(10);
    let holders = loop {
        let mut fl = whole_file(if write { libc::F_WRLCK } else { libc::F_RDLCK });
        // SAFETY: F_OFD_SETLK reads one `struct flock`, which points at a
        // live local of that type.
        let r = unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &mut fl as *mut libc::flock) };
        if r == 0 {
            let file = file
                .try_clone()
                .map_err(|e| format!("cannot keep the lock of {shown}: {e}"))?;
            taken().push(me);
            return Ok(Some(ImageLock { file, taken: me }));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EACCES) => {}
            Some(libc::EINVAL) | Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) => {
                return Err(format!(
                    "cannot lock {shown} ({e}): its file system takes no OFD locks; add \
                     lock=off to open it unlocked"
                ))
            }
            _ => return Err(format!("cannot lock {shown}: {e}")),
        }
        let inherited = taken()
            .iter()
            .any(|t| (t.dev, t.ino) == (me.dev, me.ino) && t.pid != me.pid && (t.write || !write));
        if inherited {
            return Ok(None);
        }
        // A lock that no process's descriptor holds belongs to a file the
        // kernel is still letting go of (the io_uring ring of a process
        // that just exited): it goes within moments, so wait for it, a
        // bounded while.
        let holders = holders(meta);
        if !holders.is_empty() || started.elapsed() >= ORPHAN_LOCK_WAIT {
            break holders;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(200));
    };
    // Who has it, and how: F_OFD_GETLK gives the type, never the pid (an
    // OFD lock has no owner process), so the pid is looked up in fdinfo.
    let mut probe = whole_file(if write { libc::F_WRLCK } else { libc::F_RDLCK });
    // SAFETY: F_OFD_GETLK reads and writes one `struct flock` at a live
    // local of that type.
    let r = unsafe { libc::fcntl(fd, libc::F_OFD_GETLK, &mut probe as *mut libc::flock) };
    let held_write = r != 0 || i32::from(probe.l_type) != libc::F_RDLCK;
    let holder = match holders.first() {
        Some(&pid) if pid == std::process::id() => {
            format!("this process (pid {pid}: another device on the same file)")
        }
        Some(&pid) => match comm(pid) {
            Some(name) => format!("pid {pid} ({name})"),
            None => format!("pid {pid}"),
        },
        None if r == 0 && probe.l_pid > 0 => format!("pid {}", probe.l_pid),
        None => "another process".to_string(),
    };
    let (held, why) = match (held_write, write) {
        (true, true) => ("write", "two writers of one image corrupt it"),
        (true, false) => ("write", "it is being changed under this reader"),
        (false, _) => ("read", "a writer would change it under its reader"),
    };
    Err(format!(
        "{shown} is locked: {holder} has it open with a {held} lock, and {why}; close it \
         there first, open both read-only (ro=1), or add lock=off to open it anyway (as \
         qemu's locking=off), at the risk of corrupting it"
    ))
}

/// The processes with an OFD lock on the file `meta` describes, from the
/// `lock:` lines of `/proc/PID/fdinfo/FD` (as `/proc/locks` writes them:
/// `OFDLCK ADVISORY WRITE -1 MAJ:MIN:INODE 0 EOF`, the device in hex).
fn holders(meta: &std::fs::Metadata) -> Vec<u32> {
    let dev = meta.dev();
    let key = format!(
        "{:02x}:{:02x}:{} ",
        libc::major(dev),
        libc::minor(dev),
        meta.ino()
    );
    let mut out = Vec::new();
    let mut seen = 0usize;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return out;
    };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fdinfo")) else {
            continue;
        };
        for f in fds.flatten() {
            seen += 1;
            if seen > FDINFO_SCAN_MAX {
                return out;
            }
            let Ok(text) = read_small(&f.path()) else {
                continue;
            };
            let held = text
                .lines()
                .filter(|l| l.starts_with("lock:") && l.contains("OFDLCK"))
                .any(|l| l.contains(&key));
            if held && !out.contains(&pid) {
                out.push(pid);
            }
        }
    }
    // Another process first: this one's own lock is the less likely news.
    out.sort_by_key(|&p| p == std::process::id());
    out
}

/// A process's command name.
fn comm(pid: u32) -> Option<String> {
    read_small(Path::new(&format!("/proc/{pid}/comm")))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A small proc file, read to at most 64 KiB.
fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut s = String::new();
    File::open(path)?.take(64 << 10).read_to_string(&mut s)?;
    Ok(s)
}
