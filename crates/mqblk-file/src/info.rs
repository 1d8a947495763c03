//! What a file device is running on (control plane): the engine, the ring
//! flags it got, and the fallbacks it took, by device name, for `mqblk
//! info` and for programs that want to say which engine they ended up
//! with. Written at setup (and when a ring is rebuilt), never per I/O.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Notes shared between a device's queues and its registry entry.
pub type Notes = Arc<Mutex<Vec<String>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Add a note once.
pub fn note(notes: &Notes, s: String) {
    let mut l = lock(notes);
    if !l.contains(&s) {
        l.push(s);
    }
}

/// A file device as it was set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// Device name (`file0`, ...).
    pub name: String,
    /// The file or block device.
    pub path: String,
    /// `regular file` or `block device`.
    pub target_kind: &'static str,
    /// `uring` or `psync`.
    pub engine: &'static str,
    /// io_uring setup flags in use (empty for psync).
    pub ring_flags: String,
    /// O_DIRECT.
    pub direct: bool,
    /// IOPOLL in use.
    pub iopoll: bool,
    /// SQPOLL in use.
    pub sqpoll: bool,
    /// `poll` or `sleep`.
    pub wait: &'static str,
    /// Registered (fixed) buffers in use.
    pub fixed_bufs: bool,
    /// Registered file in use.
    pub fixed_file: bool,
    /// Where the alignment came from.
    pub align_source: &'static str,
    /// Fallbacks taken and why (iopoll unavailable, io_uring refused, ...).
    pub notes: Vec<String>,
}

impl FileInfo {
    /// One line: `engine=uring (SINGLE_ISSUER|...) direct=1 ...`.
    pub fn summary(&self) -> String {
        let mut s = format!("engine={}", self.engine);
        if !self.ring_flags.is_empty() {
            s.push_str(&format!(" ({})", self.ring_flags));
        }
        s.push_str(&format!(
            ", {}, direct={}, iopoll={}, sqpoll={}, wait={}, fixed_bufs={}, fixed_file={}",
            self.target_kind,
            u8::from(self.direct),
            u8::from(self.iopoll),
            u8::from(self.sqpoll),
            self.wait,
            u8::from(self.fixed_bufs),
            u8::from(self.fixed_file)
        ));
        s
    }
}

/// A registry entry: the setup facts, and the live notes.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) info: Mutex<FileInfo>,
    pub(crate) notes: Notes,
}

static REGISTRY: Mutex<Vec<Weak<Entry>>> = Mutex::new(Vec::new());

/// Register a device's entry; it disappears when the device does.
pub(crate) fn register(entry: &Arc<Entry>) {
    let mut r = lock(&REGISTRY);
    r.retain(|w| w.strong_count() > 0);
    r.push(Arc::downgrade(entry));
}

/// The setup of file device `name`, if one by that name is open.
pub fn info(name: &str) -> Option<FileInfo> {
    let r = lock(&REGISTRY);
    r.iter().filter_map(Weak::upgrade).find_map(|e| {
        let mut i = lock(&e.info).clone();
        if i.name != name {
            return None;
        }
        i.notes = lock(&e.notes).clone();
        Some(i)
    })
}
