//! The requests of one hardware queue (one NBD connection), by tag: the
//! state that the send side (`send.rs`), the receive side (`receive.rs`),
//! the reconnect thread (`reconnect.rs`) and the driver on top of them
//! (`driver.rs`) all use, as Linux's nbd keeps its `nbd_cmd`s in the
//! blk-mq tag set. The bottom of the client: it names none of its sibling
//! files.

use std::sync::{Mutex, MutexGuard};

use mqblk_core::driver::{Completions, RqRef};
use mqblk_core::error::{InvalidKind, Status};
use mqblk_nbd_proto::NbdErrno;

/// Largest error or unknown-chunk payload the client reads.
pub(super) const MAX_CHUNK_META: u32 = 64 * 1024;

/// A timed-out request whose reply is still due: the reply is drained.
#[derive(Clone, Copy, Debug)]
pub(super) struct Zombie {
    pub(super) cookie: u64,
    /// Data bytes a simple reply to it carries (a read's length).
    pub(super) read_len: u64,
}

/// One tag's place on the connection.
#[derive(Default)]
pub(super) struct Slot {
    /// The request waiting for its reply.
    pub(super) rq: Option<RqRef>,
    /// The cookie `rq` was sent with.
    pub(super) cookie: u64,
    /// Submissions on this tag so far (the cookie's high half).
    pub(super) gen: u32,
    /// The first error of `rq`'s reply.
    pub(super) err: Option<Status>,
    pub(super) zombie: Option<Zombie>,
    /// `rq`'s NBD command and command flags, to send it again after a
    /// reconnect.
    pub(super) cmd: u16,
    pub(super) flags: u16,
    /// Timeouts that found the parser inside this request's data.
    pub(super) stalls: u8,
}

/// The cookie of the `gen`-th submission on `tag`.
#[inline]
pub(super) fn cookie_of(tag: usize, gen: u32) -> u64 {
    (u64::from(gen) << 32) | tag as u64
}

/// The requests of one connection, by tag.
pub(super) struct InFlight {
    pub(super) slots: Box<[Slot]>,
    /// Zombies not yet answered.
    pub(super) zombies: u32,
    /// Structured replies were negotiated.
    pub(super) structured: bool,
}

impl InFlight {
    /// The tag a reply's cookie names.
    pub(super) fn tag_of(&self, cookie: u64) -> std::io::Result<u32> {
        let tag = (cookie & 0xffff_ffff) as u32;
        if (tag as usize) < self.slots.len() {
            Ok(tag)
        } else {
            Err(protocol("reply to an unknown cookie"))
        }
    }

    /// The reply to `tag`'s request is whole: complete it.
    pub(super) fn finish(&mut self, tag: u32, done: &mut Completions<'_>) -> usize {
        let slot = &mut self.slots[tag as usize];
        let Some(rq) = slot.rq.take() else { return 0 };
        let status = slot.err.take().unwrap_or(Status::Ok);
        done.complete(rq, status);
        1
    }
}

/// The status of a request the server answered with `e`.
pub(super) fn status_of(e: NbdErrno) -> Status {
    match e {
        NbdErrno::Perm => Status::Invalid(InvalidKind::ReadOnly),
        NbdErrno::NoSpc => Status::NoSpace,
        NbdErrno::Inval | NbdErrno::Overflow => Status::Invalid(InvalidKind::Driver),
        NbdErrno::NotSup => Status::NotSupported,
        NbdErrno::Shutdown => Status::Shutdown,
        NbdErrno::Io | NbdErrno::NoMem => Status::IoError,
    }
}

/// The server broke the protocol: the connection cannot be followed.
pub(super) fn protocol(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

/// Lock `m`, whether or not a thread panicked holding it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
