//! One message from `/dev/fuse` read as a request (the kernel's
//! `fuse_in_header` and the body its opcode names): what to do, or why it
//! cannot be read. The protocol half: it never touches a device and makes
//! no system call, so the fuzz target and the unit tests drive it alone.

use crate::abi::{body_len, opcode, IN_HEADER_LEN, WRITE_IN_LEN};

/// The header every message starts with (`fuse_in_header`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The message's length, header included, as the kernel states it.
    pub len: u32,
    /// Its opcode (see [`crate::abi::opcode`]).
    pub opcode: u32,
    /// The id its reply carries.
    pub unique: u64,
    /// The node it is about (the root, the one file, is 1).
    pub nodeid: u64,
}

/// `fuse_setattr_in`, the fields this export acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SetAttr {
    /// Which fields are set (`FATTR_*`).
    pub valid: u32,
    /// New size (`FATTR_SIZE`).
    pub size: u64,
    /// New access time, seconds and nanoseconds.
    pub atime: (u64, u32),
    /// New modification time, seconds and nanoseconds.
    pub mtime: (u64, u32),
    /// New change time, seconds and nanoseconds.
    pub ctime: (u64, u32),
    /// New mode (`FATTR_MODE`).
    pub mode: u32,
    /// New owner (`FATTR_UID`).
    pub uid: u32,
    /// New group (`FATTR_GID`).
    pub gid: u32,
}

/// What a request asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Start the session: the kernel's version, readahead and flags.
    Init {
        /// Protocol major version.
        major: u32,
        /// Protocol minor version.
        minor: u32,
        /// The kernel's readahead, in bytes.
        max_readahead: u32,
        /// `flags | flags2 << 32`.
        flags: u64,
    },
    /// The session ends (no reply is read after the unmount).
    Destroy,
    /// Drop lookups (no reply).
    Forget,
    /// Stop waiting for a request (no reply: every request here ends on
    /// its own, soon).
    Interrupt,
    /// The file's attributes.
    GetAttr,
    /// Change the file's attributes.
    SetAttr(SetAttr),
    /// Open the file with `flags` (`O_RDONLY`, `O_RDWR`, ...).
    Open {
        /// The open(2) flags.
        flags: u32,
    },
    /// Read `size` bytes at `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Bytes asked for.
        size: u32,
    },
    /// Write the `size` bytes that follow the body (at
    /// [`crate::abi::WRITE_PREFIX_LEN`] in the message) at `offset`.
    Write {
        /// Byte offset.
        offset: u64,
        /// Bytes of data in the message.
        size: u32,
    },
    /// File system statistics.
    StatFs,
    /// The last descriptor of an open closed.
    Release,
    /// A descriptor closed.
    Flush,
    /// Make written data durable (fsync, or fdatasync with `datasync`).
    Fsync {
        /// fdatasync rather than fsync.
        datasync: bool,
    },
    /// fallocate(2) with `mode` on `[offset, offset + len)`.
    Fallocate {
        /// Byte offset.
        offset: u64,
        /// Bytes.
        len: u64,
        /// `FALLOC_FL_*`.
        mode: u32,
    },
    /// lseek(2) with SEEK_DATA or SEEK_HOLE.
    Lseek {
        /// Where to look from.
        offset: u64,
        /// `SEEK_DATA` or `SEEK_HOLE` (others are the kernel's own).
        whence: u32,
    },
    /// An opcode this export does not serve (answered ENOSYS).
    Unsupported(u32),
}

/// A message read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A request to serve.
    Request(Header, Op),
    /// A request whose body is too short for its opcode: answered EINVAL.
    Malformed(Header, &'static str),
    /// Not even a header, or a length that disagrees with what was read:
    /// no reply can be addressed.
    Broken(&'static str),
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(v)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(v)
}

/// Read the header of `msg`, the bytes one read(2) of `/dev/fuse` gave.
pub fn header(msg: &[u8]) -> Result<Header, &'static str> {
    if msg.len() < IN_HEADER_LEN {
        return Err("shorter than a fuse_in_header");
    }
    let h = Header {
        len: u32_at(msg, 0),
        opcode: u32_at(msg, 4),
        unique: u64_at(msg, 8),
        nodeid: u64_at(msg, 16),
    };
    if h.len as usize != msg.len() {
        return Err("the header's length is not the length read");
    }
    Ok(h)
}

/// Read `msg`, the bytes one read(2) of `/dev/fuse` gave.
pub fn parse(msg: &[u8]) -> Parsed {
    let h = match header(msg) {
        Ok(h) => h,
        Err(why) => return Parsed::Broken(why),
    };
    let body = &msg[IN_HEADER_LEN..];
    let need = |n: usize, why: &'static str| if body.len() < n { Err(why) } else { Ok(()) };
    let op = match h.opcode {
        opcode::INIT => need(body_len::INIT_IN_MIN, "INIT shorter than fuse_init_in").map(|()| {
            let flags2 = if body.len() >= body_len::INIT_IN_EXT {
                u32_at(body, 16)
            } else {
                0
            };
            Op::Init {
                major: u32_at(body, 0),
                minor: u32_at(body, 4),
                max_readahead: u32_at(body, 8),
                flags: u64::from(u32_at(body, 12)) | u64::from(flags2) << 32,
            }
        }),
        opcode::DESTROY => Ok(Op::Destroy),
        opcode::FORGET | opcode::BATCH_FORGET => Ok(Op::Forget),
        opcode::INTERRUPT => Ok(Op::Interrupt),
        // Protocol 7.9 on sends fuse_getattr_in; what it holds (a file
        // handle) changes nothing here.
        opcode::GETATTR => Ok(Op::GetAttr),
        opcode::SETATTR => {
            need(body_len::SETATTR_IN, "SETATTR shorter than fuse_setattr_in").map(|()| {
                Op::SetAttr(SetAttr {
                    valid: u32_at(body, 0),
                    size: u64_at(body, 16),
                    atime: (u64_at(body, 32), u32_at(body, 56)),
                    mtime: (u64_at(body, 40), u32_at(body, 60)),
                    ctime: (u64_at(body, 48), u32_at(body, 64)),
                    mode: u32_at(body, 68),
                    uid: u32_at(body, 76),
                    gid: u32_at(body, 80),
                })
            })
        }
        opcode::OPEN => {
            need(body_len::OPEN_IN, "OPEN shorter than fuse_open_in").map(|()| Op::Open {
                flags: u32_at(body, 0),
            })
        }
        opcode::READ => {
            need(body_len::READ_IN, "READ shorter than fuse_read_in").map(|()| Op::Read {
                offset: u64_at(body, 8),
                size: u32_at(body, 16),
            })
        }
        opcode::WRITE => need(WRITE_IN_LEN, "WRITE shorter than fuse_write_in").and_then(|()| {
            let size = u32_at(body, 16);
            if (body.len() - WRITE_IN_LEN) as u64 != u64::from(size) {
                return Err("WRITE's size is not the data that follows");
            }
            Ok(Op::Write {
                offset: u64_at(body, 8),
                size,
            })
        }),
        opcode::STATFS => Ok(Op::StatFs),
        opcode::RELEASE => Ok(Op::Release),
        opcode::FLUSH => Ok(Op::Flush),
        opcode::FSYNC => {
            need(body_len::FSYNC_IN, "FSYNC shorter than fuse_fsync_in").map(|()| Op::Fsync {
                datasync: u32_at(body, 8) & crate::abi::FSYNC_FDATASYNC != 0,
            })
        }
        opcode::FALLOCATE => need(
            body_len::FALLOCATE_IN,
            "FALLOCATE shorter than fuse_fallocate_in",
        )
        .map(|()| Op::Fallocate {
            offset: u64_at(body, 8),
            len: u64_at(body, 16),
            mode: u32_at(body, 24),
        }),
        opcode::LSEEK => {
            need(body_len::LSEEK_IN, "LSEEK shorter than fuse_lseek_in").map(|()| Op::Lseek {
                offset: u64_at(body, 8),
                whence: u32_at(body, 16),
            })
        }
        other => Ok(Op::Unsupported(other)),
    };
    match op {
        Ok(op) => Parsed::Request(h, op),
        Err(why) => Parsed::Malformed(h, why),
    }
}

/// Whether the kernel waits for a reply to `op` (FORGET and INTERRUPT get
/// none).
pub fn wants_reply(op: &Op) -> bool {
    !matches!(op, Op::Forget | Op::Interrupt)
}

#[cfg(test)]
mod tests;
