//! The wire layout of the FUSE protocol (Linux `include/uapi/linux/fuse.h`,
//! protocol 7.x): opcodes, flags and the sizes of the structures this
//! export reads and writes. Every field is in the host's byte order, as the
//! kernel writes it.

/// The protocol's major version; a kernel with another one is refused.
pub const KERNEL_VERSION: u32 = 7;
/// The minor version this export speaks (FOPEN_PARALLEL_DIRECT_WRITES came
/// with 7.36).
pub const KERNEL_MINOR_VERSION: u32 = 38;

/// `struct fuse_in_header`: len, opcode, unique, nodeid, uid, gid, pid,
/// total_extlen, padding.
pub const IN_HEADER_LEN: usize = 40;
/// `struct fuse_out_header`: len, error, unique.
pub const OUT_HEADER_LEN: usize = 16;
/// `struct fuse_write_in`, which comes between the header and a write's data.
pub const WRITE_IN_LEN: usize = 40;
/// Header and `fuse_write_in` of a write, before its data.
pub const WRITE_PREFIX_LEN: usize = IN_HEADER_LEN + WRITE_IN_LEN;
/// The smallest read buffer the kernel accepts (`FUSE_MIN_READ_BUFFER`).
pub const MIN_READ_BUFFER: usize = 8192;
/// The root node, the one file of this file system.
pub const ROOT_ID: u64 = 1;

/// The opcodes (`enum fuse_opcode`) this export tells apart.
#[allow(missing_docs)]
pub mod opcode {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const LSEEK: u32 = 46;
}

/// `fuse_init_in.flags` and `fuse_init_out.flags` (the low 32 bits; the
/// high ones travel in `flags2` once `INIT_EXT` is agreed).
#[allow(missing_docs)]
pub mod init_flags {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const ASYNC_DIO: u64 = 1 << 15;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const INIT_EXT: u64 = 1 << 30;
}

/// `fuse_open_out.open_flags`.
#[allow(missing_docs)]
pub mod fopen {
    pub const DIRECT_IO: u32 = 1 << 0;
    pub const PARALLEL_DIRECT_WRITES: u32 = 1 << 6;
}

/// `fuse_setattr_in.valid`.
#[allow(missing_docs)]
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
}

/// `fuse_fsync_in.fsync_flags`: only the data (fdatasync).
pub const FSYNC_FDATASYNC: u32 = 1;

/// `fallocate(2)` modes the export serves.
#[allow(missing_docs)]
pub mod falloc {
    pub const KEEP_SIZE: u32 = 0x01;
    pub const PUNCH_HOLE: u32 = 0x02;
    pub const ZERO_RANGE: u32 = 0x10;
}

/// `lseek(2)` whence values the kernel passes on (the others it answers
/// itself).
#[allow(missing_docs)]
pub mod whence {
    pub const SEEK_DATA: u32 = 3;
    pub const SEEK_HOLE: u32 = 4;
}

/// `FUSE_DEV_IOC_CLONE`: `_IOR(229, 0, uint32_t)`.
pub const DEV_IOC_CLONE: u64 = 0x8004_e500;

/// Bodies' sizes (the kernel may send more, from a newer protocol: the
/// parser reads the fields it knows and ignores the rest).
#[allow(missing_docs)]
pub mod body_len {
    /// Protocol 7.6 to 7.35: major, minor, max_readahead, flags.
    pub const INIT_IN_MIN: usize = 16;
    /// With `flags2` (7.36).
    pub const INIT_IN_EXT: usize = 20;
    pub const INIT_OUT: usize = 64;
    pub const GETATTR_IN: usize = 16;
    pub const SETATTR_IN: usize = 88;
    pub const OPEN_IN: usize = 8;
    pub const OPEN_OUT: usize = 16;
    pub const READ_IN: usize = 40;
    pub const WRITE_OUT: usize = 8;
    pub const ATTR_OUT: usize = 104;
    pub const STATFS_OUT: usize = 80;
    pub const FSYNC_IN: usize = 16;
    pub const FALLOCATE_IN: usize = 32;
    pub const LSEEK_IN: usize = 24;
    pub const LSEEK_OUT: usize = 8;
}
