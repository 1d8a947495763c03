//! Reconnecting a dropped connection (`reconnect_ms=N` in the spec), as
//! qemu's NBD client does with `reconnect-delay`, and as Linux's nbd
//! leaves to user space.
//!
//! The receive thread is the one that sees a connection drop (its read
//! fails; a failed send shuts the socket down so that it does). It then:
//! marks the connection down, so that new requests are parked in their
//! slots and not sent; forgets the zombies (late replies of timed-out
//! requests never come on a new connection); and connects and negotiates
//! again, with a growing pause between tries, for up to the window. The
//! new connection must offer the same export (size and flags). Its sending
//! half is handed to the submit side, which, at its next doorbell or poll,
//! takes it and sends every parked request again on a new cookie; the
//! receive thread reads the new connection's replies. If the window
//! passes, every parked request fails, as without reconnecting.
//!
//! A request that was in flight is sent twice at most once per drop: a
//! read reads the same blocks, and a write writes the same data, so the
//! retry is harmless; requests in flight together had no order to keep.
//! A request whose `io_timeout_ms` passes while the connection is down
//! completes with `Timeout` (and is not sent again).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::driver::{lock, ConnShared};
use super::url::NbdUrl;
use crate::transport::ClientRx;

/// Where and how long to reconnect.
#[derive(Debug)]
pub(crate) struct Reconnect {
    pub(super) url: NbdUrl,
    /// How long to keep trying after a drop.
    pub(super) window: Duration,
    /// The send timeout of a new connection.
    pub(super) send_timeout: Duration,
    /// What the export must still be.
    pub(super) size: u64,
    pub(super) flags: u16,
}

/// Pauses between tries: from the first to the longest, doubling.
const PAUSE_FIRST: Duration = Duration::from_millis(10);
const PAUSE_MAX: Duration = Duration::from_millis(500);

/// After a drop: park everything and get a new connection. Returns its
/// receiving half, or `None` if the connection stays lost (the window
/// passed, the export changed, or the device is going away).
pub(super) fn reconnect(sh: &ConnShared, why: &std::io::Error) -> Option<ClientRx> {
    let rc = sh.reconnect.as_ref()?;
    if sh.dead.load(Ordering::Acquire) {
        return None;
    }
    sh.down.store(true, Ordering::Release);
    for slot in sh.slots.iter() {
        lock(slot).zombie = None;
    }
    sh.zombies.store(0, Ordering::Release);
    let started = Instant::now();
    let deadline = started + rc.window;
    eprintln!(
        "mqblk: nbd {}: connection lost ({why}); reconnecting for up to {} ms",
        rc.url.address,
        rc.window.as_millis()
    );
    let mut pause = PAUSE_FIRST;
    loop {
        if sh.dead.load(Ordering::Acquire) {
            return None;
        }
        let failed = match super::connect_negotiate(&rc.url) {
            Ok((tx, n)) if n.size == rc.size && n.flags == rc.flags => {
                let rx = tx
                    .socket()
                    .set_write_timeout(Some(rc.send_timeout))
                    .and_then(|()| tx.receiver());
                match rx {
                    Ok(rx) => {
                        // Replaces (and so closes) a connection the submit
                        // side never took.
                        *lock(&sh.fresh) = Some(tx);
                        sh.resend.store(true, Ordering::Release);
                        eprintln!(
                            "mqblk: nbd {}: reconnected after {} ms",
                            rc.url.address,
                            started.elapsed().as_millis()
                        );
                        // Waiters poll, and the poll sends the parked
                        // requests.
                        sh.notifier.notify();
                        return Some(rx);
                    }
                    Err(e) => {
                        tx.shutdown();
                        e.to_string()
                    }
                }
            }
            Ok((tx, n)) => {
                tx.shutdown();
                eprintln!(
                    "mqblk: nbd {}: the export changed (size {} flags {:#x}, was {} {:#x}); giving up",
                    rc.url.address, n.size, n.flags, rc.size, rc.flags
                );
                return None;
            }
            Err(e) => e,
        };
        let now = Instant::now();
        if now >= deadline {
            eprintln!(
                "mqblk: nbd {}: could not reconnect in {} ms: {failed}",
                rc.url.address,
                rc.window.as_millis()
            );
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(PAUSE_MAX);
    }
}
