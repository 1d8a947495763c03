//! A FUSE file system that hangs reads, spoken over `/dev/fuse` directly
//! (no libfuse), run in a child process so a test can stop it by its pid.
//!
//! It holds one file, `disk`, of [`SIZE`] bytes, kept in memory. A READ or
//! WRITE at or past `hang_from` is never answered, as a stuck network or device
//! would leave it; every other request is answered at once. It honours
//! FUSE_INTERRUPT as a well-behaved server does: the held request is
//! answered EINTR. Its OPEN replies carry FOPEN_DIRECT_IO, so reads go
//! straight to it as synchronous requests (a page-cache read would wait
//! on the folio lock, which only a fatal signal ends) whether the file is
//! opened with O_DIRECT or not.
//!
//! [`Mount`] starts it (the test binary runs itself with
//! [`HELPER_ENV`] set; see [`serve_if_helper`]), waits until the mount
//! answers, and on drop, even on a panic, continues, kills and waits for
//! the child and detaches the mount.

#![allow(dead_code)]

use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the child: the mount point.
pub const HELPER_ENV: &str = "MQBLK_TEST_FUSE_MOUNT";
const EVENTS_ENV: &str = "MQBLK_TEST_FUSE_EVENTS";
const HANG_ENV: &str = "MQBLK_TEST_FUSE_HANG_FROM";

/// Size of `disk`.
pub const SIZE: u64 = 1 << 20;

/// Why FUSE cannot be used here, if it cannot.
pub fn unavailable() -> Option<String> {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        Ok(_) => None,
        Err(e) => Some(format!(
            "cannot open /dev/fuse ({e}): this kernel has no FUSE here"
        )),
    }
}

/// The running file system.
pub struct Mount {
    pub dir: PathBuf,
    events: PathBuf,
    child: Option<Child>,
}

impl Mount {
    /// Start the server with reads at or past `hang_from` held. `Err` says
    /// why FUSE cannot run here (the caller skips).
    pub fn start(tag: &str, hang_from: u64) -> Result<Mount, String> {
        if let Some(why) = unavailable() {
            return Err(why);
        }
        let base = std::env::temp_dir().join(format!("mqblk-fuse-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("mnt");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let events = base.join("events");
        std::fs::write(&events, b"").map_err(|e| e.to_string())?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let child = Command::new(exe)
            .args(["fuse_server", "--exact", "--nocapture", "--test-threads=1"])
            .env(HELPER_ENV, &dir)
            .env(EVENTS_ENV, &events)
            .env(HANG_ENV, hang_from.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the FUSE server: {e}"))?;
        let mut m = Mount {
            dir,
            events,
            child: Some(child),
        };
        let disk = m.disk();
        let t = Instant::now();
        loop {
            if std::fs::metadata(&disk).is_ok_and(|md| md.len() == SIZE) {
                return Ok(m);
            }
            if let Some(st) = m.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let why = std::fs::read_to_string(&m.events).unwrap_or_default();
                return Err(format!(
                    "the FUSE server exited ({st}) before its mount answered: {}",
                    why.trim()
                ));
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "the FUSE mount did not come up"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn disk(&self) -> PathBuf {
        self.dir.join("disk")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map_or(0, |c| c.id() as i32)
    }

    /// Send `sig` to the server (and to nothing else).
    pub fn signal(&self, sig: i32) {
        let pid = self.pid();
        if pid > 0 {
            // SAFETY: kill takes no pointers; the pid is our own child,
            // not yet reaped (we wait for it only in drop), so it cannot
            // name another process.
            unsafe { libc::kill(pid, sig) };
        }
    }

    /// What the server logged (one event a line).
    pub fn events(&self) -> String {
        std::fs::read_to_string(&self.events).unwrap_or_default()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let pid = c.id() as i32;
            // SAFETY: as in `signal`: our own child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGCONT);
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // The server is gone (its /dev/fuse closed, which fails whatever
        // was still waiting on it); detach the mount even if busy.
        if let Ok(p) = CString::new(self.dir.as_os_str().as_bytes()) {
            // SAFETY: umount2 reads the NUL-terminated path.
            unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
        }
        if let Some(base) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(base);
        }
    }
}

// ---- the server (runs in the child) ----

const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2;
const FUSE_GETATTR: u32 = 3;
const FUSE_SETATTR: u32 = 4;
const FUSE_OPEN: u32 = 14;
const FUSE_READ: u32 = 15;
const FUSE_WRITE: u32 = 16;
const FUSE_STATFS: u32 = 17;
const FUSE_RELEASE: u32 = 18;
const FUSE_FSYNC: u32 = 20;
const FUSE_FLUSH: u32 = 25;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_ACCESS: u32 = 34;
const FUSE_INTERRUPT: u32 = 36;
const FUSE_DESTROY: u32 = 38;
const FUSE_BATCH_FORGET: u32 = 42;
const FOPEN_DIRECT_IO: u32 = 1;
const IN_HEADER: usize = 40;
const ROOT: u64 = 1;
const DISK: u64 = 2;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn attr(node: u64) -> Vec<u8> {
    let (size, mode, nlink) = if node == ROOT {
        (0, libc::S_IFDIR | 0o755, 2)
    } else {
        (SIZE, libc::S_IFREG | 0o644, 1)
    };
    let mut a = Vec::with_capacity(88);
    for v in [node, size, size.div_ceil(512), 0, 0, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    for v in [0u32, 0, 0, mode, nlink, 0, 0, 0, 4096, 0] {
        a.extend_from_slice(&v.to_le_bytes());
    }
    a
}

struct Server {
    fd: i32,
    log: std::fs::File,
}

impl Server {
    fn reply(&self, unique: u64, error: i32, payload: &[u8]) {
        let len = 16 + payload.len();
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&(-error).to_le_bytes());
        out.extend_from_slice(&unique.to_le_bytes());
        out.extend_from_slice(payload);
        // SAFETY: write reads `len` bytes from `out`, a live buffer.
        // ENOENT (the request was interrupted and is gone) is fine.
        unsafe { libc::write(self.fd, out.as_ptr().cast(), out.len()) };
    }

    fn event(&mut self, what: &str) {
        let _ = writeln!(self.log, "{what}");
    }
}

/// Run the server if this process is the helper; never returns then.
pub fn serve_if_helper() {
    let Some(mnt) = std::env::var_os(HELPER_ENV) else {
        return;
    };
    let events = std::env::var_os(EVENTS_ENV).expect("events file");
    let hang_from: u64 = std::env::var(HANG_ENV)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    let log = std::fs::OpenOptions::new()
        .append(true)
        .open(&events)
        .expect("open the events file");
    let code = serve(Path::new(&mnt), log, hang_from);
    std::process::exit(code);
}

fn serve(mnt: &Path, log: std::fs::File, hang_from: u64) -> i32 {
    let dev = CString::new("/dev/fuse").unwrap();
    // SAFETY: open reads the NUL-terminated path.
    let fd = unsafe { libc::open(dev.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    let mut s = Server { fd, log };
    if fd < 0 {
        s.event(&format!(
            "open /dev/fuse: {}",
            std::io::Error::last_os_error()
        ));
        return 1;
    }
    let src = CString::new("mqblk-hang").unwrap();
    let target = CString::new(mnt.as_os_str().as_bytes()).unwrap();
    let fstype = CString::new("fuse").unwrap();
    let data = CString::new(format!(
        "fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other"
    ))
    .unwrap();
    // SAFETY: every pointer is a live NUL-terminated string.
    let r = unsafe {
        libc::mount(
            src.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        s.event(&format!("mount: {}", std::io::Error::last_os_error()));
        return 1;
    }
    let mut store = vec![0u8; SIZE as usize];
    let mut held: Vec<u64> = Vec::new();
    let mut buf = vec![0u8; (1 << 20) + 4096];
    loop {
        // SAFETY: read writes at most buf.len() bytes into `buf`.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN | libc::ENOENT) => continue,
                // Unmounted.
                Some(libc::ENODEV) => return 0,
                _ => {
                    s.event(&format!("read /dev/fuse: {e}"));
                    return 1;
                }
            }
        }
        let req = &buf[..n as usize];
        if req.len() < IN_HEADER {
            continue;
        }
        let opcode = u32_at(req, 4);
        let unique = u64_at(req, 8);
        let node = u64_at(req, 16);
        let body = &req[IN_HEADER..];
        match opcode {
            FUSE_INIT => {
                let max_readahead = u32_at(body, 8);
                let mut out = Vec::with_capacity(64);
                for v in [7u32, 31, max_readahead, 0] {
                    out.extend_from_slice(&v.to_le_bytes());
                }
                out.extend_from_slice(&16u16.to_le_bytes()); // max_background
                out.extend_from_slice(&12u16.to_le_bytes()); // congestion_threshold
                out.extend_from_slice(&(128u32 << 10).to_le_bytes()); // max_write
                out.extend_from_slice(&1u32.to_le_bytes()); // time_gran
                out.resize(64, 0);
                s.reply(unique, 0, &out);
            }
            FUSE_LOOKUP => {
                let name = body.split(|&b| b == 0).next().unwrap_or(&[]);
                if node == ROOT && name == b"disk" {
                    let mut out = Vec::with_capacity(128);
                    for v in [DISK, 0, 1, 1] {
                        out.extend_from_slice(&v.to_le_bytes());
                    }
                    out.extend_from_slice(&[0u8; 8]);
                    out.extend_from_slice(&attr(DISK));
                    s.reply(unique, 0, &out);
                } else {
                    s.reply(unique, libc::ENOENT, &[]);
                }
            }
            FUSE_GETATTR | FUSE_SETATTR => {
                let mut out = Vec::with_capacity(104);
                out.extend_from_slice(&1u64.to_le_bytes());
                out.extend_from_slice(&[0u8; 8]);
                out.extend_from_slice(&attr(node));
                s.reply(unique, 0, &out);
            }
            FUSE_OPEN | FUSE_OPENDIR => {
                let flags = if opcode == FUSE_OPEN {
                    FOPEN_DIRECT_IO
                } else {
                    0
                };
                let mut out = Vec::with_capacity(16);
                out.extend_from_slice(&1u64.to_le_bytes());
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                s.reply(unique, 0, &out);
            }
            FUSE_READ => {
                let offset = u64_at(body, 8);
                let size = u32_at(body, 16) as u64;
                if offset >= hang_from {
                    s.event(&format!("held READ {unique} at {offset}"));
                    held.push(unique);
                    continue;
                }
                let end = (offset + size).min(SIZE);
                let data = if offset < end {
                    &store[offset as usize..end as usize]
                } else {
                    &[][..]
                };
                s.reply(unique, 0, data);
            }
            FUSE_WRITE => {
                let offset = u64_at(body, 8);
                let size = u32_at(body, 16) as usize;
                if offset >= hang_from {
                    s.event(&format!("held WRITE {unique} at {offset}"));
                    held.push(unique);
                    continue;
                }
                let data = &body[40..40 + size];
                let end = (offset as usize + size).min(SIZE as usize);
                if (offset as usize) < end {
                    store[offset as usize..end].copy_from_slice(&data[..end - offset as usize]);
                }
                let mut out = Vec::with_capacity(8);
                out.extend_from_slice(&(size as u32).to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                s.reply(unique, 0, &out);
            }
            FUSE_INTERRUPT => {
                let target = u64_at(body, 0);
                if let Some(i) = held.iter().position(|&u| u == target) {
                    held.swap_remove(i);
                    s.event(&format!("INTERRUPT {target}: answered EINTR"));
                    s.reply(target, libc::EINTR, &[]);
                } else {
                    s.event(&format!("INTERRUPT {target}: not held"));
                }
            }
            FUSE_STATFS => {
                let mut out = vec![0u8; 80];
                out[40..44].copy_from_slice(&4096u32.to_le_bytes());
                out[44..48].copy_from_slice(&255u32.to_le_bytes());
                s.reply(unique, 0, &out);
            }
            FUSE_READDIR => s.reply(unique, 0, &[]),
            FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FLUSH | FUSE_FSYNC | FUSE_ACCESS => {
                s.reply(unique, 0, &[])
            }
            FUSE_FORGET | FUSE_BATCH_FORGET => {}
            FUSE_DESTROY => {
                s.reply(unique, 0, &[]);
                return 0;
            }
            _ => s.reply(unique, libc::ENOSYS, &[]),
        }
    }
}
