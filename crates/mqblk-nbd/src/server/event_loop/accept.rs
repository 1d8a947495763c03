//! One I/O thread taking connections in: accepting from the listener
//! (resting it after an accept error), counting each connection in under
//! the limits (`admission.rs`), handing it to the least loaded thread
//! (`peer.rs`), and inserting it in this loop's epoll set and slots. Called
//! by the loop (`mod.rs`); works on its state (`state.rs`).

use std::io::Write;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::event::epoll;

use super::admission::Admission;
use super::peer::Peer;
use super::state::{Loop, Slot, CONN_BASE};
use crate::server::conn::{Conn, Limbo};
use crate::server::shared::Listener;
use crate::transport::Socket;

/// How long the listener rests after an accept error.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Refused connections answered at once per thread.
const REFUSING_MAX: usize = 64;

impl Loop<'_> {
    pub(super) fn accept_all(
        &mut self,
        listener: &Listener,
        admission: &Mutex<Admission>,
        now: Instant,
        me: usize,
        peers: &[Peer],
    ) {
        loop {
            let accepted = match listener {
                Listener::Tcp(l) => l.accept().map(|(s, a)| (Socket::Tcp(s), Some(a.ip()))),
                Listener::Unix(c) => c.listener.accept().map(|(s, _)| (Socket::Unix(s), None)),
            };
            let (sock, peer) = match accepted {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors and the like: the listener stays
                    // readable, so it leaves the epoll set for a while
                    // (connections wait in the backlog), and the line is
                    // said at most once a second.
                    self.log.line(
                        now,
                        format_args!(
                            "accept: {e}; accepting again in {} ms",
                            ACCEPT_BACKOFF.as_millis()
                        ),
                    );
                    let _ = epoll::delete(&self.epoll, listener.as_fd());
                    self.accept_resume = Some(now + ACCEPT_BACKOFF);
                    return;
                }
            };
            if sock.set_nonblocking().is_err() {
                continue;
            }
            sock.set_nodelay();
            let refusal = self.admit(peer, admission);
            if let Some(why) = &refusal {
                self.sh.stats.refused.fetch_add(1, Ordering::Relaxed);
                self.log
                    .line(now, format_args!("refused a connection: {why}"));
            } else {
                self.sh.stats.connections.fetch_add(1, Ordering::Relaxed);
            }
            let limbo = Limbo {
                sock,
                peer,
                refusal,
            };
            // The least loaded thread takes it (this one on a tie).
            let mut target = me;
            for (i, p) in peers.iter().enumerate() {
                if p.conns.load(Ordering::Relaxed) < peers[target].conns.load(Ordering::Relaxed) {
                    target = i;
                }
            }
            peers[target].conns.fetch_add(1, Ordering::Relaxed);
            if target == me {
                self.insert(limbo, now, admission);
            } else {
                let p = &peers[target];
                p.inbox
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(limbo);
                let _ = (&p.wake.1).write(&[1]);
            }
        }
    }

    /// Count the connection in, or say why not.
    fn admit(&self, peer: Option<IpAddr>, admission: &Mutex<Admission>) -> Option<String> {
        let refused = Admission::admit(admission, &self.sh.limits, peer);
        if refused.is_none() {
            self.sh.stats.open.fetch_add(1, Ordering::Relaxed);
        }
        refused
    }

    pub(super) fn release(&self, peer: Option<IpAddr>, admission: &Mutex<Admission>) {
        Admission::release(admission, peer);
        self.sh.stats.open.fetch_sub(1, Ordering::Relaxed);
    }

    /// Take a connection in (`me.conns` already counts it).
    pub(super) fn insert(&mut self, limbo: Limbo, now: Instant, admission: &Mutex<Admission>) {
        let refused = limbo.refusal.is_some();
        // Refused connections are answered, but only a bounded number at
        // once: past that they get a bare close.
        if refused && self.refusing >= REFUSING_MAX {
            limbo.sock.shutdown();
            self.me.conns.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    conn: None,
                    generation: 0,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let peer = limbo.peer;
        let conn = Conn::new(limbo, self.sh, now);
        let r = epoll::add(
            &self.epoll,
            conn.fd(),
            epoll::EventData::new_u64(CONN_BASE + u64::from(idx)),
            epoll::EventFlags::IN
                | epoll::EventFlags::OUT
                | epoll::EventFlags::RDHUP
                | epoll::EventFlags::ET,
        );
        if let Err(e) = r {
            eprintln!("mqblk serve: epoll_ctl: {e}");
            if !refused {
                self.release(peer, admission);
            }
            self.me.conns.fetch_sub(1, Ordering::Relaxed);
            self.free.push(idx);
            return;
        }
        let slot = &mut self.slots[idx as usize];
        slot.generation = slot.generation.wrapping_add(1);
        slot.conn = Some(conn);
        if refused {
            self.refusing += 1;
        }
        self.mark_dirty(idx);
    }
}
