//! One server connection as a non-blocking state machine, driven by its
//! I/O thread's event loop: negotiation (with TLS through rustls's
//! non-blocking API), then transmission.
//!
//! Transmission: requests are parsed in batches from the thread's scratch
//! buffer (bytes of a partial header wait in `stash`; a write payload that
//! has not all arrived is read straight into its own data buffer), each
//! becomes a bio on the thread's context for the export (`bio.private` =
//! connection index << 32 | slot), and completions come back through
//! [`Conn::complete`] as replies queued in completion order. Replies go out
//! with one `writev` per batch of up to [`out::IOV_BATCH`] slices, read data
//! straight from the bio's buffer.
//!
//! Bounds: at most `max_requests` requests and `max_bytes` of buffers per
//! connection; past them the connection stops reading its socket (the
//! client waits in TCP). Every buffer is also paid for from the server's
//! memory budget (`memory.rs`): when that is past its soft mark, a
//! connection that holds more than its share stops reading too, until
//! memory frees. A client that stops mid-message, or stops reading
//! replies, for `stall_timeout` is dropped; so is one that has not
//! finished negotiating within `handshake_timeout`, or (if set) one idle
//! for `idle_timeout`.
//!
//! The files, by call order: each uses only those below it.
//!
//! - `mod.rs` (this file): the connection's face to the event loop: made
//!   from an accepted socket, driven, timed out, closed.
//! - `handshake.rs`: negotiation, and `STARTTLS`.
//! - `request.rs`: transmission's input: reading and parsing requests,
//!   checking them, and submitting their bios.
//! - `reply.rs`: completions become replies; replies go out.
//! - `state.rs`: the connection's state, its request slots and buffers.
//! - `out.rs`: the queue of replies not yet written.
//! - `wire.rs`: bytes in and out, plain or TLS.

// By call order, from the top down (see above).
mod handshake;

mod request;

mod reply;

mod state;

mod out;

mod wire;

use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use mqblk_core::Context;
use mqblk_nbd_proto::handshake::encode_greeting;
use mqblk_nbd_proto::Negotiation;

pub(crate) use reply::Done;
pub(crate) use state::{Conn, End};

use crate::server::shared::Shared;
use crate::transport::Socket;
use out::OutQueue;
use state::{Closing, Phase};
use wire::Wire;

/// The TLS error inside `e`, if it says the client's certificate was
/// missing or not signed by the CA the server trusts.
fn refused_certificate(e: &std::io::Error) -> Option<&rustls::Error> {
    let tls = e.get_ref()?.downcast_ref::<rustls::Error>()?;
    matches!(
        tls,
        rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
    )
    .then_some(tls)
}

/// An accepted socket, before it is a connection.
pub(crate) struct Limbo {
    pub(crate) sock: Socket,
    pub(crate) peer: Option<IpAddr>,
    /// Why the server will not serve it (answered, then closed).
    pub(crate) refusal: Option<String>,
}

impl<'s> Conn<'s> {
    pub(crate) fn new(limbo: Limbo, sh: &'s Shared, now: Instant) -> Conn<'s> {
        let greeting;
        let phase = match limbo.refusal {
            Some(reason) => {
                greeting = encode_greeting(Negotiation::HANDSHAKE_FLAGS);
                Phase::Refusing {
                    reason,
                    got_flags: false,
                }
            }
            None => {
                let neg = Negotiation::new(&sh.infos, sh.tls_mode);
                greeting = neg.greeting();
                Phase::Handshake {
                    neg: Box::new(neg),
                    got_flags: false,
                    tls_next: false,
                }
            }
        };
        Conn {
            sh,
            wire: Wire::new(limbo.sock),
            phase,
            peer: limbo.peer,
            limits: sh.limits,
            stash: Vec::new(),
            pending: None,
            hs_out: greeting.to_vec(),
            out: OutQueue::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            cache: Default::default(),
            cached_bytes: 0,
            held_bytes: 0,
            prepaid_bytes: 0,
            meta_charged: 0,
            submitted: 0,
            busy_slots: 0,
            device: None,
            readable: true,
            peer_closed: false,
            writable: true,
            dirty: false,
            timer_at: None,
            more: false,
            stalled: false,
            waiting: false,
            over_budget: false,
            budget_waiting: false,
            accepted_at: now,
            last_active: now,
            partial_since: None,
            blocked_since: None,
            draining: false,
            closing: None,
            requests: 0,
            errors: 0,
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.wire.fd()
    }

    pub(crate) fn peer(&self) -> Option<IpAddr> {
        self.peer
    }

    pub(crate) fn is_refusal(&self) -> bool {
        matches!(self.phase, Phase::Refusing { .. })
    }

    /// The export served, once in transmission.
    pub(crate) fn export(&self) -> Option<usize> {
        match &self.phase {
            Phase::Transmission(s) if self.closing != Some(Closing::Abort) => Some(s.export),
            _ => None,
        }
    }

    /// Done: closing, nothing in flight, nothing left to send.
    pub(crate) fn finished(&self) -> bool {
        match self.closing {
            None => false,
            Some(Closing::Abort) => self.submitted == 0,
            Some(Closing::Graceful) => {
                self.submitted == 0 && self.out.is_empty() && self.hs_out.is_empty()
            }
        }
    }

    /// When the loop must look at this connection again, whatever
    /// happens on its socket.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        let lim = &self.limits;
        if self.closing == Some(Closing::Abort) {
            return None;
        }
        if !matches!(self.phase, Phase::Transmission(_)) {
            return Some(self.accepted_at + lim.handshake_timeout);
        }
        let mut d: Option<Instant> = None;
        let mut at = |t: Instant| d = Some(d.map_or(t, |x| x.min(t)));
        if let Some(t) = self.partial_since {
            at(t + lim.stall_timeout);
        }
        if let Some(t) = self.blocked_since {
            at(t + lim.stall_timeout);
        }
        if let Some(idle) = lim.idle_timeout {
            if self.submitted == 0 && self.out.is_empty() && self.partial_since.is_none() {
                at(self.last_active + idle);
            }
        }
        d
    }

    /// The deadline passed: drop the connection, and return the line that
    /// says why (the event loop logs it, at its rate).
    pub(crate) fn expired(&mut self, sh: &Shared) -> String {
        let lim = &self.limits;
        let why = if !matches!(self.phase, Phase::Transmission(_)) {
            format!(
                "negotiation not finished within {} ms (handshake timeout)",
                lim.handshake_timeout.as_millis()
            )
        } else if self.partial_since.is_some() {
            format!(
                "stalled mid-request for {} ms (stall timeout)",
                lim.stall_timeout.as_millis()
            )
        } else if self.blocked_since.is_some() {
            format!(
                "not reading replies for {} ms (stall timeout)",
                lim.stall_timeout.as_millis()
            )
        } else {
            format!(
                "idle for {} ms (idle timeout)",
                lim.idle_timeout.unwrap_or_default().as_millis()
            )
        };
        sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
        self.abort();
        format!("dropping {}: {why}", self.who())
    }

    fn who(&self) -> String {
        match self.peer {
            Some(ip) => format!("a connection from {ip}"),
            None => "a connection".into(),
        }
    }

    fn abort(&mut self) {
        self.closing = Some(Closing::Abort);
        self.wire.sock.shutdown();
        self.stash = Vec::new();
        if let Some(p) = self.pending.take() {
            self.put_buf(p.buf);
        }
        while let Some(o) = self.out.pop_front() {
            self.drop_out(o);
        }
        self.settle_meta_budget();
        self.hs_out = Vec::new();
    }

    /// The connection failed: count it, and close it. Returns the line
    /// to log (the event loop logs it, at its rate) when the failure is
    /// one an operator wants to see: a client certificate refused.
    pub(crate) fn fail(&mut self, end: End, sh: &Shared) -> Option<String> {
        let mut line = None;
        match end {
            End::Closed => {}
            End::Dropped(why) => {
                sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("MQBLK_NBD_DEBUG").is_some() {
                    eprintln!("mqblk serve: connection dropped: {why}");
                }
            }
            End::Io(e) => {
                sh.stats.dropped.fetch_add(1, Ordering::Relaxed);
                if let Some(why) = refused_certificate(&e) {
                    line = Some(format!(
                        "refused {}: its TLS client certificate: {why}",
                        self.who()
                    ));
                } else if std::env::var_os("MQBLK_NBD_DEBUG").is_some() {
                    eprintln!("mqblk serve: connection failed: {e}");
                }
            }
        }
        self.abort();
        line
    }

    /// The server is stopping: finish what is in flight, then close.
    pub(crate) fn start_drain(&mut self) {
        self.draining = true;
        if !matches!(self.phase, Phase::Transmission(_)) {
            self.abort();
        }
    }

    /// Last words: counters, TLS close_notify, and the socket.
    pub(crate) fn close(&mut self, sh: &Shared) {
        debug_assert!(self.submitted == 0);
        if self.closing == Some(Closing::Graceful) {
            if let Some(t) = self.wire.tls.as_mut() {
                t.send_close_notify();
                let _ = t.write_tls(&mut self.wire.sock);
            }
        }
        sh.stats
            .requests
            .fetch_add(self.requests, Ordering::Relaxed);
        sh.stats.errors.fetch_add(self.errors, Ordering::Relaxed);
        self.wire.sock.shutdown();
        self.release_budget();
    }

    /// Make all the progress possible without blocking.
    pub(crate) fn drive(
        &mut self,
        ctx: Option<(&mut Context, &mut Vec<Done>)>,
        idx: u32,
        scratch: &mut [u8],
        now: Instant,
    ) -> Result<(), End> {
        self.more = false;
        if self.closing == Some(Closing::Abort) {
            return Ok(());
        }
        match &self.phase {
            Phase::Transmission(_) => {
                if let Some((ctx, done)) = ctx {
                    self.transmit(ctx, done, idx, scratch, now)?;
                }
            }
            Phase::Handshake { .. } | Phase::Refusing { .. } => self.negotiate(now)?,
        }
        Ok(())
    }
}
