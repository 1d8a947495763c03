//! The file device's options (control plane): the part of a spec string
//! after `file:/path,`, parsed into typed fields.
//!
//! Options every device kind takes (`hw_queues`, `queue_depth`, ...) are
//! left for [`DeviceConfig::take_common`]; `ro` is read here too (it decides
//! the open mode) and left in place for it. Whatever is left after both is
//! an unknown option, and [`SpecOptions::finish`] rejects it by name.
//!
//! [`DeviceConfig::take_common`]: mqblk_core::queue::DeviceConfig::take_common

use std::path::PathBuf;

use mqblk_core::error::{Error, Result};
use mqblk_core::spec::{parse_bool, parse_size, SpecOptions};

/// Default size of the registered buffer arena (io_uring fixed buffers).
pub const DEFAULT_FIXED_BUFS_BYTES: usize = 64 << 20;
/// Largest registered buffer arena: io_uring registers at most 1 GiB per
/// buffer.
pub const MAX_FIXED_BUFS_BYTES: usize = 1 << 30;
/// Default worker threads per hardware queue of the psync engine.
pub const DEFAULT_WORKERS: u32 = 4;
/// Most worker threads per hardware queue of the psync engine.
pub const MAX_WORKERS: u32 = 256;
/// Default idle time of the SQPOLL kernel thread before it sleeps.
pub const DEFAULT_SQPOLL_IDLE_MS: u32 = 1000;

/// Which I/O engine to use (`engine=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EngineChoice {
    /// io_uring when the kernel allows it, otherwise psync (no `engine=`).
    #[default]
    Auto,
    /// io_uring, or fail (`engine=uring`).
    Uring,
    /// pread/pwrite worker threads (`engine=psync`).
    Psync,
}

/// How a waiting context learns that the ring has completions (`wait=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WaitMode {
    /// The context polls the completion queue (Linux `poll_queues`):
    /// lowest latency, and no extra thread.
    #[default]
    Poll,
    /// An eventfd registered with the ring wakes a helper thread that
    /// wakes the context (an interrupt line): waiting contexts sleep.
    Sleep,
}

impl WaitMode {
    /// The name used in spec strings.
    pub fn name(self) -> &'static str {
        match self {
            WaitMode::Poll => "poll",
            WaitMode::Sleep => "sleep",
        }
    }
}

/// Which io_uring task-run mode to ask for (`taskrun=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TaskRun {
    /// The best the kernel offers: DEFER_TASKRUN (with SINGLE_ISSUER),
    /// else COOP_TASKRUN, else neither.
    #[default]
    Auto,
    /// SINGLE_ISSUER + DEFER_TASKRUN, or fail.
    Defer,
    /// COOP_TASKRUN, or fail.
    Coop,
    /// Neither (completions interrupt the submitting task).
    Off,
}

/// Every file-device option, typed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileConfig {
    /// The file or block device.
    pub path: PathBuf,
    /// `engine=uring|psync` (default: io_uring, falling back to psync when
    /// the kernel refuses io_uring).
    pub engine: EngineChoice,
    /// `direct=1` (default): O_DIRECT, no page cache.
    pub direct: bool,
    /// `iopoll=1`: polled completions (IORING_SETUP_IOPOLL); needs direct.
    pub iopoll: bool,
    /// `sqpoll=1`: a kernel thread consumes the submission queue.
    pub sqpoll: bool,
    /// `sqpoll_idle_ms=`: idle time before the SQPOLL thread sleeps.
    pub sqpoll_idle_ms: u32,
    /// `wait=poll|sleep` (default poll).
    pub wait: WaitMode,
    /// `fixed_bufs=SIZE`: bytes of buffer arena registered with each ring
    /// (default 64M; 0 disables fixed buffers).
    pub fixed_bufs_bytes: usize,
    /// `size=SIZE`: the capacity. A new file is created with this size; an
    /// existing file or block device exposes only its first `size` bytes
    /// (a larger `size` than the file is an error unless `create=1`).
    pub size_bytes: Option<u64>,
    /// `create=1`: create the file if it is missing, and grow an existing
    /// file to `size=` if it is smaller. Without it an existing file never
    /// changes size.
    pub create: bool,
    /// `workers=N`: psync worker threads per hardware queue (default 4).
    pub workers: u32,
    /// `taskrun=auto|defer|coop|off`.
    pub taskrun: TaskRun,
    /// `ro=1`: open read-only (also taken by the common options).
    pub read_only: bool,
    /// `lock=1` (default): lock a regular file as qemu locks its images,
    /// shared to read and exclusive to write (an OFD lock held while the
    /// device is open); `lock=0` opens it unlocked (qemu's `locking=off`).
    pub lock: bool,
}

impl FileConfig {
    /// Defaults for `path`.
    pub fn new(path: impl Into<PathBuf>) -> FileConfig {
        FileConfig {
            path: path.into(),
            engine: EngineChoice::Auto,
            direct: true,
            iopoll: false,
            sqpoll: false,
            sqpoll_idle_ms: DEFAULT_SQPOLL_IDLE_MS,
            wait: WaitMode::Poll,
            fixed_bufs_bytes: DEFAULT_FIXED_BUFS_BYTES,
            size_bytes: None,
            create: false,
            workers: DEFAULT_WORKERS,
            taskrun: TaskRun::Auto,
            read_only: false,
            lock: true,
        }
    }

    /// Take the file device's options for `target` out of `o`, validating
    /// each one. The common options (and `ro`, which both read) are left.
    pub fn from_options(target: &str, o: &mut SpecOptions) -> Result<FileConfig> {
        if target.is_empty() {
            return Err(Error::spec(
                o.spec(),
                "file: needs a path, as in file:/dev/sdb",
            ));
        }
        let mut c = FileConfig::new(target);
        if let Some(v) = o.take_str("engine") {
            c.engine = match v.as_str() {
                "uring" | "io_uring" => EngineChoice::Uring,
                "psync" => EngineChoice::Psync,
                _ => return Err(o.error("engine", &v, "uring or psync")),
            };
        }
        if let Some(b) = o.take_bool("direct")? {
            c.direct = b;
        }
        if let Some(b) = o.take_bool("iopoll")? {
            c.iopoll = b;
        }
        if let Some(b) = o.take_bool("sqpoll")? {
            c.sqpoll = b;
        }
        if let Some(ms) = o.take_u64("sqpoll_idle_ms")? {
            c.sqpoll_idle_ms = u32::try_from(ms)
                .map_err(|_| o.error("sqpoll_idle_ms", &ms.to_string(), "0 to 4294967295"))?;
        }
        if let Some(v) = o.take_str("wait") {
            c.wait = match v.as_str() {
                "poll" => WaitMode::Poll,
                "sleep" => WaitMode::Sleep,
                _ => return Err(o.error("wait", &v, "poll or sleep")),
            };
        }
        if let Some(v) = o.take_str("fixed_bufs") {
            let n = match parse_bool(&v) {
                Some(false) => 0,
                Some(true) => DEFAULT_FIXED_BUFS_BYTES as u64,
                None => parse_size(&v).map_err(|why| {
                    o.error(
                        "fixed_bufs",
                        &v,
                        &format!("a size such as 64M, or 0 ({why})"),
                    )
                })?,
            };
            if n > MAX_FIXED_BUFS_BYTES as u64 {
                return Err(o.error("fixed_bufs", &v, "0 (off) to 1G"));
            }
            c.fixed_bufs_bytes = n as usize;
        }
        if let Some(v) = o.take_str("size") {
            let n = parse_size(&v)
                .map_err(|why| o.error("size", &v, &format!("a size such as 1G ({why})")))?;
            if n == 0 {
                return Err(o.error("size", &v, "a non-zero size such as 1G"));
            }
            c.size_bytes = Some(n);
        }
        if let Some(b) = o.take_bool("create")? {
            c.create = b;
        }
        if let Some(b) = o.take_bool("lock")? {
            c.lock = b;
        }
        if let Some(n) = o.take_u64("workers")? {
            if !(1..=u64::from(MAX_WORKERS)).contains(&n) {
                return Err(o.error("workers", &n.to_string(), "1 to 256"));
            }
            c.workers = n as u32;
        }
        if let Some(v) = o.take_str("taskrun") {
            c.taskrun = match v.as_str() {
                "auto" => TaskRun::Auto,
                "defer" => TaskRun::Defer,
                "coop" => TaskRun::Coop,
                "off" | "none" => TaskRun::Off,
                _ => return Err(o.error("taskrun", &v, "auto, defer, coop or off")),
            };
        }
        // `ro` decides the open mode; the common options take it too.
        if let Some(v) = o.take_str("ro") {
            c.read_only = parse_bool(&v)
                .ok_or_else(|| o.error("ro", &v, "0 or 1 (or on/off, true/false)"))?;
            o.set("ro", &v);
        }
        if c.create && c.size_bytes.is_none() {
            return Err(o.error(
                "create",
                "1",
                "create=1 together with size=, as in file:/data/disk.img,create=1,size=1G",
            ));
        }
        if c.create && c.read_only {
            return Err(o.error(
                "create",
                "1",
                "create=0 with ro=1: a file opened read-only cannot be created or grown",
            ));
        }
        if c.iopoll && !c.direct {
            return Err(o.error(
                "iopoll",
                "1",
                "iopoll=0 with direct=0: polled completions need O_DIRECT (direct=1)",
            ));
        }
        if c.iopoll && c.wait == WaitMode::Sleep {
            return Err(o.error(
                "iopoll",
                "1",
                "iopoll=0 with wait=sleep: polled completions are only found by polling \
                 (use wait=poll)",
            ));
        }
        if c.engine == EngineChoice::Psync && (c.iopoll || c.sqpoll) {
            return Err(o.error(
                if c.iopoll { "iopoll" } else { "sqpoll" },
                "1",
                "0 with engine=psync: iopoll and sqpoll are io_uring features",
            ));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use mqblk_core::spec;

    use super::*;

    fn parse(s: &str) -> Result<FileConfig> {
        let parsed = spec::parse(s).expect("spec parses");
        let mut o = parsed.options;
        let c = FileConfig::from_options(parsed.target.as_deref().unwrap_or(""), &mut o)?;
        let _ = o.take_str("ro");
        o.finish()?;
        Ok(c)
    }

    #[test]
    fn defaults_and_options() {
        let c = parse("file:/dev/loop0").unwrap();
        assert_eq!(c, FileConfig::new("/dev/loop0"));
        assert!(c.direct);
        let c = parse(
            "file:/x,engine=psync,direct=0,wait=sleep,fixed_bufs=0,size=1G,workers=8,ro=1,taskrun=coop",
        )
        .unwrap();
        assert_eq!(c.engine, EngineChoice::Psync);
        assert!(!c.direct);
        assert_eq!(c.wait, WaitMode::Sleep);
        assert_eq!(c.fixed_bufs_bytes, 0);
        assert_eq!(c.size_bytes, Some(1 << 30));
        assert_eq!(c.workers, 8);
        assert!(c.read_only);
        assert_eq!(c.taskrun, TaskRun::Coop);
        let c = parse("file:/x,iopoll=1,sqpoll=1,fixed_bufs=16m").unwrap();
        assert!(c.iopoll && c.sqpoll);
        assert_eq!(c.fixed_bufs_bytes, 16 << 20);
        assert!(c.lock, "images are locked by default");
        assert!(!parse("file:/x,lock=off").unwrap().lock);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (s, key) in [
            ("file:/x,engine=aio", "engine="),
            ("file:/x,direct=2", "direct="),
            ("file:/x,wait=spin", "wait="),
            ("file:/x,fixed_bufs=2G", "fixed_bufs="),
            ("file:/x,size=0", "size="),
            ("file:/x,workers=0", "workers="),
            ("file:/x,taskrun=now", "taskrun="),
            ("file:/x,direct=0,iopoll=1", "iopoll="),
            ("file:/x,engine=psync,sqpoll=1", "sqpoll="),
            ("file:/x,create=1", "create="),
            ("file:/x,create=1,size=1G,ro=1", "create="),
            ("file:/x,create=maybe", "create="),
            ("file:/x,lock=maybe", "lock="),
        ] {
            let e = parse(s).unwrap_err().to_string();
            assert!(e.contains(key), "{s}: {e}");
        }
        let e = parse("file:/x,sise=1G").unwrap_err().to_string();
        assert!(e.contains("unknown option `sise`"), "{e}");
    }
}
