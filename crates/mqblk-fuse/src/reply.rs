//! Replies as the kernel reads them (`fuse_out_header` and the bodies
//! that follow it), built into fixed arrays: no allocation, no system
//! call. The data half sends each as one vectored write, a read's data
//! as the last piece, straight from the bio's buffer (a reap's data
//! replies together, in one io_uring submission).

use crate::abi::{body_len, init_flags, KERNEL_MINOR_VERSION, KERNEL_VERSION, OUT_HEADER_LEN};

/// The file's attributes (`struct fuse_attr`), as GETATTR and SETATTR
/// answer them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// Size in bytes: the device's capacity.
    pub size: u64,
    /// 512-byte blocks.
    pub blocks: u64,
    /// Access time, seconds and nanoseconds.
    pub atime: (u64, u32),
    /// Modification time.
    pub mtime: (u64, u32),
    /// Change time.
    pub ctime: (u64, u32),
    /// Type and permissions (`S_IFREG | 0644`).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Preferred I/O size.
    pub blksize: u32,
}

/// `struct fuse_kstatfs`, as STATFS answers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StatFs {
    /// Blocks of `frsize` bytes.
    pub blocks: u64,
    /// Free blocks.
    pub bfree: u64,
    /// Free blocks for anyone.
    pub bavail: u64,
    /// Inodes.
    pub files: u64,
    /// Free inodes.
    pub ffree: u64,
    /// Preferred block size.
    pub bsize: u32,
    /// Longest name.
    pub namelen: u32,
    /// Fragment size.
    pub frsize: u32,
}

/// What the export answers INIT with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitOut {
    /// The minor version agreed.
    pub minor: u32,
    /// Readahead (the kernel's own: FOPEN_DIRECT_IO makes none anyway).
    pub max_readahead: u32,
    /// Flags agreed (`flags | flags2 << 32`).
    pub flags: u64,
    /// Asynchronous requests the kernel may have outstanding.
    pub max_background: u16,
    /// Past this many, the kernel counts the connection congested.
    pub congestion_threshold: u16,
    /// The largest write, in bytes.
    pub max_write: u32,
    /// The largest request, in pages (with `MAX_PAGES`).
    pub max_pages: u16,
}

/// The flags this export asks for: reads in parallel, writes of up to
/// `max_write`, requests of up to `max_pages`, and direct I/O from
/// io_uring and aio sent as asynchronous requests (so that one reader's
/// queue depth reaches the device).
pub const WANTED_FLAGS: u64 = init_flags::ASYNC_READ
    | init_flags::BIG_WRITES
    | init_flags::ASYNC_DIO
    | init_flags::PARALLEL_DIROPS
    | init_flags::MAX_PAGES
    | init_flags::INIT_EXT;

/// Agree on INIT: the kernel's minor version if older than ours, and the
/// flags both sides have.
pub fn negotiate(kernel_minor: u32, kernel_flags: u64, mut out: InitOut) -> InitOut {
    out.minor = kernel_minor.min(KERNEL_MINOR_VERSION);
    out.flags = kernel_flags & WANTED_FLAGS;
    out
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

/// `fuse_out_header` for a reply of `body_len` bytes after it, with
/// `errno` (0, or a positive errno the header carries negated).
pub fn header(unique: u64, errno: i32, body_len: usize) -> [u8; OUT_HEADER_LEN] {
    let mut b = [0u8; OUT_HEADER_LEN];
    put32(&mut b, 0, (OUT_HEADER_LEN + body_len) as u32);
    put32(&mut b, 4, (-errno) as u32);
    put64(&mut b, 8, unique);
    b
}

/// `fuse_init_out`.
pub fn init(o: &InitOut) -> [u8; body_len::INIT_OUT] {
    let mut b = [0u8; body_len::INIT_OUT];
    put32(&mut b, 0, KERNEL_VERSION);
    put32(&mut b, 4, o.minor);
    put32(&mut b, 8, o.max_readahead);
    put32(&mut b, 12, o.flags as u32);
    b[16..18].copy_from_slice(&o.max_background.to_ne_bytes());
    b[18..20].copy_from_slice(&o.congestion_threshold.to_ne_bytes());
    put32(&mut b, 20, o.max_write);
    // time_gran: nanoseconds.
    put32(&mut b, 24, 1);
    b[28..30].copy_from_slice(&o.max_pages.to_ne_bytes());
    put32(&mut b, 32, (o.flags >> 32) as u32);
    b
}

/// `fuse_attr_out`: the attributes, valid for `valid_secs`.
pub fn attr(a: &Attr, valid_secs: u64) -> [u8; body_len::ATTR_OUT] {
    let mut b = [0u8; body_len::ATTR_OUT];
    put64(&mut b, 0, valid_secs);
    // attr_valid_nsec and dummy stay 0; fuse_attr starts at 16.
    let f = 16;
    put64(&mut b, f, a.ino);
    put64(&mut b, f + 8, a.size);
    put64(&mut b, f + 16, a.blocks);
    put64(&mut b, f + 24, a.atime.0);
    put64(&mut b, f + 32, a.mtime.0);
    put64(&mut b, f + 40, a.ctime.0);
    put32(&mut b, f + 48, a.atime.1);
    put32(&mut b, f + 52, a.mtime.1);
    put32(&mut b, f + 56, a.ctime.1);
    put32(&mut b, f + 60, a.mode);
    // nlink
    put32(&mut b, f + 64, 1);
    put32(&mut b, f + 68, a.uid);
    put32(&mut b, f + 72, a.gid);
    // rdev stays 0.
    put32(&mut b, f + 80, a.blksize);
    b
}

/// `fuse_open_out`: no handle, and `open_flags`.
pub fn open(open_flags: u32) -> [u8; body_len::OPEN_OUT] {
    let mut b = [0u8; body_len::OPEN_OUT];
    put32(&mut b, 8, open_flags);
    b
}

/// `fuse_write_out`: bytes written.
pub fn write(size: u32) -> [u8; body_len::WRITE_OUT] {
    let mut b = [0u8; body_len::WRITE_OUT];
    put32(&mut b, 0, size);
    b
}

/// `fuse_statfs_out`.
pub fn statfs(s: &StatFs) -> [u8; body_len::STATFS_OUT] {
    let mut b = [0u8; body_len::STATFS_OUT];
    put64(&mut b, 0, s.blocks);
    put64(&mut b, 8, s.bfree);
    put64(&mut b, 16, s.bavail);
    put64(&mut b, 24, s.files);
    put64(&mut b, 32, s.ffree);
    put32(&mut b, 40, s.bsize);
    put32(&mut b, 44, s.namelen);
    put32(&mut b, 48, s.frsize);
    b
}

/// `fuse_lseek_out`.
pub fn lseek(offset: u64) -> [u8; body_len::LSEEK_OUT] {
    offset.to_ne_bytes()
}
