//! Checking a transmission request against the negotiated session: the
//! framing rule (how many payload bytes follow, or close) and the command
//! rules (flags, range, alignment, read-only), each answered with the NBD
//! error the protocol names.

use crate::consts::{cmd, cmd_flags, transmission_flags as tf};
use crate::error::{NbdErrno, WireError};
use crate::negotiate::Session;
use crate::transmission::Request;

/// A request that passed every check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Read `len` bytes at `offset`.
    Read {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// Write `len` bytes at `offset`; the payload has been read.
    Write {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Flush.
    Flush,
    /// Discard.
    Trim {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u32,
        /// Force unit access.
        fua: bool,
    },
    /// Write zeroes.
    WriteZeroes {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u32,
        /// Force unit access.
        fua: bool,
        /// The client asked for no hole.
        no_hole: bool,
        /// The client asked to fail unless fast.
        fast: bool,
    },
    /// Prefetch hint.
    Cache {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u32,
    },
    /// Block status of `base:allocation`.
    BlockStatus {
        /// Byte offset.
        offset: u64,
        /// Length.
        len: u32,
        /// One extent only.
        req_one: bool,
        /// Context id to answer with.
        ctx_id: u32,
    },
    /// A zero-length read, write, trim, zero or cache: nothing to do but
    /// succeed.
    Nop,
    /// Disconnect.
    Disc,
}

/// Payload bytes that follow the request header. A write longer than the
/// maximum payload breaks the framing: the server closes the connection
/// rather than read (or skip) an unbounded amount.
pub fn payload_len(s: &Session, r: &Request) -> Result<u32, WireError> {
    if r.cmd != cmd::WRITE {
        return Ok(0);
    }
    if r.len > s.block_size.max_payload {
        return Err(WireError::TooLong {
            what: "write payload",
            len: r.len.into(),
            max: s.block_size.max_payload.into(),
        });
    }
    Ok(r.len)
}

/// Check a request. `Err` carries the error to reply with; the connection
/// stays up.
pub fn check(s: &Session, r: &Request) -> Result<Command, NbdErrno> {
    let has = |f: u16| s.flags & f != 0;
    let mut allowed = 0u16;
    if has(tf::SEND_FUA) {
        allowed |= cmd_flags::FUA;
    }
    let (offset, len) = (r.offset, r.len);
    let writes = matches!(r.cmd, cmd::WRITE | cmd::TRIM | cmd::WRITE_ZEROES);
    // A read-only export refuses every write as such (EPERM, as qemu-nbd
    // and nbdkit answer), even one whose kind it does not advertise.
    if writes && has(tf::READ_ONLY) {
        return Err(NbdErrno::Perm);
    }
    match r.cmd {
        cmd::READ => {
            if has(tf::SEND_DF) {
                allowed |= cmd_flags::DF;
            }
        }
        cmd::WRITE => {}
        cmd::DISC | cmd::FLUSH => {}
        cmd::TRIM if has(tf::SEND_TRIM) => {}
        cmd::WRITE_ZEROES if has(tf::SEND_WRITE_ZEROES) => {
            allowed |= cmd_flags::NO_HOLE;
            if has(tf::SEND_FAST_ZERO) {
                allowed |= cmd_flags::FAST_ZERO;
            }
        }
        cmd::CACHE => {}
        cmd::BLOCK_STATUS if s.base_allocation.is_some() => allowed |= cmd_flags::REQ_ONE,
        _ => return Err(NbdErrno::Inval),
    }
    if r.flags & !allowed != 0 {
        return Err(NbdErrno::Inval);
    }
    let fua = r.flags & cmd_flags::FUA != 0;
    if r.cmd == cmd::DISC {
        return Ok(Command::Disc);
    }
    if r.cmd == cmd::FLUSH {
        if offset != 0 || len != 0 {
            return Err(NbdErrno::Inval);
        }
        return Ok(Command::Flush);
    }
    let end = offset.checked_add(u64::from(len));
    if end.is_none_or(|e| e > s.size) {
        return Err(if matches!(r.cmd, cmd::WRITE | cmd::WRITE_ZEROES) {
            NbdErrno::NoSpc
        } else {
            NbdErrno::Inval
        });
    }
    let min = u64::from(s.block_size.min.max(1));
    if offset % min != 0 || u64::from(len) % min != 0 {
        return Err(NbdErrno::Inval);
    }
    if r.cmd == cmd::READ && len > s.block_size.max_payload {
        return Err(NbdErrno::Inval);
    }
    if len == 0 && r.cmd != cmd::BLOCK_STATUS {
        return Ok(Command::Nop);
    }
    Ok(match r.cmd {
        cmd::READ => Command::Read { offset, len },
        cmd::WRITE => Command::Write { offset, len, fua },
        cmd::TRIM => Command::Trim { offset, len, fua },
        cmd::WRITE_ZEROES => Command::WriteZeroes {
            offset,
            len,
            fua,
            no_hole: r.flags & cmd_flags::NO_HOLE != 0,
            fast: r.flags & cmd_flags::FAST_ZERO != 0,
        },
        cmd::CACHE => Command::Cache { offset, len },
        cmd::BLOCK_STATUS => {
            if len == 0 {
                return Err(NbdErrno::Inval);
            }
            Command::BlockStatus {
                offset,
                len,
                req_one: r.flags & cmd_flags::REQ_ONE != 0,
                ctx_id: s.base_allocation.unwrap_or(0),
            }
        }
        _ => return Err(NbdErrno::Inval),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::BlockSize;

    fn session(flags: u16) -> Session {
        Session {
            export: 0,
            size: 1 << 20,
            flags: tf::HAS_FLAGS | flags,
            structured: true,
            base_allocation: Some(1),
            block_size: BlockSize {
                min: 512,
                preferred: 4096,
                max_payload: 1 << 16,
            },
        }
    }

    fn req(cmd: u16, flags: u16, offset: u64, len: u32) -> Request {
        Request {
            flags,
            cmd,
            cookie: 1,
            offset,
            len,
        }
    }

    #[test]
    fn errors_follow_the_protocol() {
        let s = session(tf::SEND_FUA | tf::SEND_TRIM | tf::SEND_WRITE_ZEROES);
        assert_eq!(
            check(&s, &req(cmd::READ, 0, 1 << 20, 512)),
            Err(NbdErrno::Inval)
        );
        assert_eq!(
            check(&s, &req(cmd::WRITE, 0, 1 << 20, 512)),
            Err(NbdErrno::NoSpc)
        );
        assert_eq!(
            check(&s, &req(cmd::WRITE_ZEROES, 0, u64::MAX, 512)),
            Err(NbdErrno::NoSpc)
        );
        assert_eq!(
            check(&s, &req(cmd::READ, 0, 100, 512)),
            Err(NbdErrno::Inval)
        );
        assert_eq!(
            check(&s, &req(cmd::READ, 0, 0, 1 << 17)),
            Err(NbdErrno::Inval)
        );
        assert_eq!(check(&s, &req(99, 0, 0, 512)), Err(NbdErrno::Inval));
        assert_eq!(
            check(&s, &req(cmd::READ, 1 << 9, 0, 512)),
            Err(NbdErrno::Inval)
        );
        assert_eq!(check(&s, &req(cmd::FLUSH, 0, 8, 0)), Err(NbdErrno::Inval));
        let ro = session(tf::READ_ONLY | tf::SEND_TRIM);
        assert_eq!(check(&ro, &req(cmd::WRITE, 0, 0, 512)), Err(NbdErrno::Perm));
        assert_eq!(check(&ro, &req(cmd::TRIM, 0, 0, 512)), Err(NbdErrno::Perm));
        // A read-only export does not advertise trim or write-zeroes; they
        // are refused as writes all the same, not as unknown commands.
        let bare_ro = session(tf::READ_ONLY);
        assert_eq!(
            check(&bare_ro, &req(cmd::TRIM, 0, 0, 512)),
            Err(NbdErrno::Perm)
        );
        assert_eq!(
            check(&bare_ro, &req(cmd::WRITE_ZEROES, 0, 0, 512)),
            Err(NbdErrno::Perm)
        );
        assert_eq!(
            check(&s, &req(cmd::WRITE, cmd_flags::FUA, 512, 512)),
            Ok(Command::Write {
                offset: 512,
                len: 512,
                fua: true
            })
        );
        // Trim is refused when not advertised.
        let plain = session(0);
        assert_eq!(
            check(&plain, &req(cmd::TRIM, 0, 0, 512)),
            Err(NbdErrno::Inval)
        );
    }

    #[test]
    fn oversized_write_breaks_framing() {
        let s = session(0);
        assert!(payload_len(&s, &req(cmd::WRITE, 0, 0, 1 << 16)).is_ok());
        assert!(payload_len(&s, &req(cmd::WRITE, 0, 0, (1 << 16) + 512)).is_err());
        assert_eq!(payload_len(&s, &req(cmd::READ, 0, 0, u32::MAX)), Ok(0));
    }
}
