//! Each request, by opcode: answered at once (INIT, GETATTR, OPEN,
//! STATFS, LSEEK, ...), or turned into a bio (reads, writes, fsync), or
//! served on the slow path (off the device's blocks, fallocate).

use std::time::SystemTime;

use mqblk_core::{Bio, Op as BioOp};

use super::state::{Pending, Worker, PAGE};
use crate::abi::{fattr, fopen, whence};
use crate::reply::{self, StatFs};
use crate::request::{Header, Op};
use crate::seek::{self, Seek};

impl Worker {
    pub(super) fn aligned(&self, offset: u64, len: u64) -> bool {
        offset.is_multiple_of(self.shared.block) && len.is_multiple_of(self.shared.block)
    }

    pub(super) fn serve(&mut self, slot: u32, h: Header, op: Op) {
        let u = h.unique;
        let ro = self.shared.read_only;
        let cap = self.shared.capacity;
        match op {
            Op::Init {
                major,
                minor,
                flags,
                max_readahead,
            } => {
                if major != crate::abi::KERNEL_VERSION {
                    return self.reply_err(u, libc::EPROTO);
                }
                let mut out = reply::negotiate(minor, flags, self.shared.init);
                out.max_readahead = max_readahead;
                self.reply(u, &reply::init(&out));
            }
            Op::Destroy => self.reply_err(u, 0),
            Op::Forget | Op::Interrupt => {}
            Op::GetAttr => {
                let a = *self.shared.attr.lock().unwrap_or_else(|e| e.into_inner());
                self.reply(u, &reply::attr(&a, 1));
            }
            Op::SetAttr(sa) => {
                if sa.valid & fattr::SIZE != 0 {
                    // The device's size is fixed. qemu-storage-daemon's
                    // export of a node that cannot be resized (null-co)
                    // answers every truncate, even to the same size, with
                    // the block layer's ENOTSUP (EOPNOTSUPP on Linux),
                    // before changing any other attribute: so does this.
                    return self.reply_err(u, libc::EOPNOTSUPP);
                }
                let a = {
                    let mut a = self.shared.attr.lock().unwrap_or_else(|e| e.into_inner());
                    let now = SystemTime::now()
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .unwrap_or_default();
                    let now = (now.as_secs(), now.subsec_nanos());
                    if sa.valid & fattr::MODE != 0 {
                        a.mode = libc::S_IFREG | (sa.mode & 0o7777);
                    }
                    if sa.valid & fattr::UID != 0 {
                        a.uid = sa.uid;
                    }
                    if sa.valid & fattr::GID != 0 {
                        a.gid = sa.gid;
                    }
                    if sa.valid & fattr::ATIME_NOW != 0 {
                        a.atime = now;
                    } else if sa.valid & fattr::ATIME != 0 {
                        a.atime = sa.atime;
                    }
                    if sa.valid & fattr::MTIME_NOW != 0 {
                        a.mtime = now;
                    } else if sa.valid & fattr::MTIME != 0 {
                        a.mtime = sa.mtime;
                    }
                    a.ctime = if sa.valid & fattr::CTIME != 0 {
                        sa.ctime
                    } else {
                        now
                    };
                    *a
                };
                self.reply(u, &reply::attr(&a, 1));
            }
            Op::Open { flags } => {
                if ro && (flags as i32 & libc::O_ACCMODE) != libc::O_RDONLY {
                    return self.reply_err(u, libc::EROFS);
                }
                self.reply(
                    u,
                    &reply::open(fopen::DIRECT_IO | fopen::PARALLEL_DIRECT_WRITES),
                );
            }
            Op::Read { offset, size } => {
                if offset >= cap || size == 0 {
                    return self.reply(u, &[]);
                }
                let len = u64::from(size.min(self.shared.max_write)).min(cap - offset) as u32;
                if self.aligned(offset, u64::from(len)) {
                    self.submit_rw(slot, u, BioOp::Read, offset, len);
                } else {
                    self.slow_read(u, offset, len);
                }
            }
            Op::Write { offset, size } => {
                if ro {
                    return self.reply_err(u, libc::EROFS);
                }
                if size == 0 {
                    return self.reply(u, &reply::write(0));
                }
                if offset >= cap {
                    return self.reply_err(u, libc::ENOSPC);
                }
                let len = u64::from(size).min(cap - offset) as u32;
                if self.aligned(offset, u64::from(len)) {
                    self.aligned_write(slot, u, offset, len);
                } else {
                    self.slow_write(slot, u, offset, len);
                }
            }
            Op::StatFs => {
                let block = self.shared.block.max(PAGE as u64);
                let s = StatFs {
                    blocks: cap / block,
                    bfree: 0,
                    bavail: 0,
                    files: 1,
                    ffree: 0,
                    bsize: block as u32,
                    namelen: 255,
                    frsize: block as u32,
                };
                self.reply(u, &reply::statfs(&s));
            }
            Op::Release => self.reply_err(u, 0),
            // FLUSH comes with every close(2) of a descriptor of the file.
            // qemu-storage-daemon's export answers it as an fsync (a flush
            // of its block node: close reports a write-back error, as
            // libfuse documents FLUSH for), and so does this one.
            Op::Flush | Op::Fsync { .. } => {
                if ro {
                    return self.reply_err(u, 0);
                }
                self.submit_slot(slot, u, Pending::Done, |bio| *bio = Bio::flush());
            }
            Op::Fallocate { offset, len, mode } => {
                let errno = self.fallocate(offset, len, mode);
                self.reply_err(u, errno);
            }
            Op::Lseek { offset, whence } => {
                let kind = match whence {
                    whence::SEEK_DATA => Seek::Data,
                    whence::SEEK_HOLE => Seek::Hole,
                    _ => return self.reply_err(u, libc::EINVAL),
                };
                let dev = &self.shared.dev;
                let r = seek::seek(kind, offset, cap, |o, l| {
                    dev.extents(o, l).map_err(|e| e.status().errno())
                });
                match r {
                    Ok(at) => self.reply(u, &reply::lseek(at)),
                    Err(errno) => self.reply_err(u, errno),
                }
            }
            Op::Unsupported(_) => self.reply_err(u, libc::ENOSYS),
        }
    }
}
