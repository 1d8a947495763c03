//! Reconnecting a dropped connection (`reconnect_ms=N` in the spec), as
//! qemu's NBD client does with `reconnect-delay`, and as Linux's nbd
//! leaves to user space.
//!
//! The hardware queue sees a connection drop in its `poll` (a read fails,
//! or a failed send shut the socket down). It then marks the connection
//! down, so that requests stay parked in their slots, unsent; forgets the
//! zombies (late replies of timed-out requests never come on a new
//! connection); and starts a thread that connects and negotiates again,
//! with a growing pause between tries, for up to the window. The new
//! connection must offer the same export (size and flags). The thread
//! leaves it in the [`Link`] and fires the queue's interrupt line; the
//! queue's next `poll` (or doorbell) takes it and sends every parked
//! request again on a new cookie. If the window passes, the thread says
//! so, and the next `poll` fails every parked request, as it would
//! without reconnecting.
//!
//! A request that was in flight is sent again once per drop: a read reads
//! the same blocks, and a write writes the same data, so the retry is
//! harmless; requests in flight together had no order to keep. A request
//! whose `io_timeout_ms` passes while the connection is down completes
//! with `Timeout` and is not sent again.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::handshake::connect_negotiate;
use super::irq::kick;
use super::queue::lock;
use super::url::NbdUrl;
use crate::transport::ClientTx;

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

/// What the reconnect thread and its hardware queue share.
#[derive(Debug, Default)]
pub(super) struct Link {
    /// The new connection, for the queue to take.
    pub(super) fresh: Mutex<Option<ClientTx>>,
    /// [`PENDING`], [`UP`] or [`GAVE_UP`].
    pub(super) outcome: AtomicU8,
    /// The device is going away: stop trying.
    pub(super) closing: AtomicBool,
}

pub(super) const PENDING: u8 = 0;
pub(super) const UP: u8 = 1;
pub(super) const GAVE_UP: u8 = 2;

/// Pauses between tries: from the first to the longest, doubling.
const PAUSE_FIRST: Duration = Duration::from_millis(10);
const PAUSE_MAX: Duration = Duration::from_millis(500);

/// Start the reconnect thread of a connection lost because of `why`.
pub(super) fn start(
    rc: Arc<Reconnect>,
    link: Arc<Link>,
    kick_fd: OwnedFd,
    why: String,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    link.outcome.store(PENDING, Ordering::Release);
    std::thread::Builder::new()
        .name("nbd-reconnect".into())
        .spawn(move || {
            let got = run(&rc, &link, &why);
            if let Some(tx) = got {
                *lock(&link.fresh) = Some(tx);
                link.outcome.store(UP, Ordering::Release);
            } else {
                link.outcome.store(GAVE_UP, Ordering::Release);
            }
            kick(&kick_fd);
        })
}

fn run(rc: &Reconnect, link: &Link, why: &str) -> Option<ClientTx> {
    let started = Instant::now();
    let deadline = started + rc.window;
    eprintln!(
        "mqblk: nbd {}: connection lost ({why}); reconnecting for up to {} ms",
        rc.url.address,
        rc.window.as_millis()
    );
    let mut pause = PAUSE_FIRST;
    loop {
        if link.closing.load(Ordering::Acquire) {
            return None;
        }
        let failed = match connect_negotiate(&rc.url) {
            Ok((tx, n)) if n.size == rc.size && n.flags == rc.flags => {
                match tx.socket().set_write_timeout(Some(rc.send_timeout)) {
                    Ok(()) => {
                        eprintln!(
                            "mqblk: nbd {}: reconnected after {} ms",
                            rc.url.address,
                            started.elapsed().as_millis()
                        );
                        return Some(tx);
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
