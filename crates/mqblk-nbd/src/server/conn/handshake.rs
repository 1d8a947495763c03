//! A server connection's negotiation (fixed newstyle, through
//! [`mqblk_nbd_proto::Negotiation`]), with `STARTTLS` started through rustls's
//! non-blocking API. Called by the connection's face (`mod.rs`) until
//! transmission starts; below it are only the state (`state.rs`), the
//! reply queue (`out.rs`), which takes the handshake's last reply, and the
//! wire (`wire.rs`).

use std::io::{self, IoSlice};
use std::time::Instant;

use mqblk_nbd_proto::consts::{opt, rep};
use mqblk_nbd_proto::handshake::{encode_option_reply, OptionHeader, OPTION_HEADER_LEN};
use mqblk_nbd_proto::Step;

use super::state::{Closing, Conn, End, Phase};
use super::wire::would_block;

impl Conn<'_> {
    fn flush_hs(&mut self, now: Instant) -> Result<bool, End> {
        while !self.hs_out.is_empty() {
            let buf = std::mem::take(&mut self.hs_out);
            let r = self.wire.send(&[IoSlice::new(&buf)]);
            self.hs_out = buf;
            match r {
                Ok(0) => return Err(End::Closed),
                Ok(n) => {
                    self.hs_out.drain(..n);
                }
                Err(e) if would_block(&e) => {
                    self.writable = false;
                    self.blocked_since.get_or_insert(now);
                    return Ok(false);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Io(e)),
            }
        }
        let out = self.wire.push_tls().map_err(End::Io)?;
        if out {
            self.blocked_since = None;
        }
        Ok(out)
    }

    pub(super) fn negotiate(&mut self, now: Instant) -> Result<(), End> {
        loop {
            if !self.flush_hs(now)? {
                return Ok(());
            }
            if self.closing == Some(Closing::Graceful) {
                return Ok(());
            }
            if let Phase::Handshake { tls_next, .. } = &mut self.phase {
                if *tls_next {
                    *tls_next = false;
                    self.start_tls()?;
                }
            }
            if self.parse_option(now)? {
                if matches!(self.phase, Phase::Transmission(_)) {
                    return Ok(());
                }
                continue;
            }
            // Need more input.
            if !self.readable {
                return Ok(());
            }
            let mut tmp = [0u8; 4096];
            match self.wire.recv(&mut tmp) {
                Ok(0) => return Err(End::Closed),
                Ok(n) => self.stash.extend_from_slice(&tmp[..n]),
                Err(e) if would_block(&e) => {
                    self.readable = false;
                    // TLS may have handshake bytes to send.
                    self.wire.push_tls().map_err(End::Io)?;
                    return Ok(());
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(End::Io(e)),
            }
        }
    }

    fn start_tls(&mut self) -> Result<(), End> {
        let Phase::Handshake { .. } = &self.phase else {
            return Err(End::Dropped("TLS outside negotiation".into()));
        };
        if self.wire.tls.is_some() {
            return Err(End::Dropped("TLS is already running".into()));
        }
        let Some(cfg) = self.sh.tls.clone() else {
            return Err(End::Dropped("TLS requested without a configuration".into()));
        };
        let mut conn =
            rustls::ServerConnection::new(cfg).map_err(|e| End::Dropped(e.to_string()))?;
        // The client may have sent its hello right behind STARTTLS.
        let early = std::mem::take(&mut self.stash);
        let mut rd: &[u8] = &early;
        while !rd.is_empty() {
            match conn.read_tls(&mut rd) {
                Ok(_) => {
                    conn.process_new_packets()
                        .map_err(|e| End::Io(io::Error::new(io::ErrorKind::InvalidData, e)))?;
                }
                Err(e) => return Err(End::Dropped(format!("TLS: {e}"))),
            }
        }
        self.wire.tls = Some(Box::new(conn));
        if let Phase::Handshake { neg, .. } = &mut self.phase {
            neg.tls_started();
        }
        self.readable = true;
        Ok(())
    }

    /// Handle one negotiation message from `stash` if it is all there.
    /// Returns false when more input is needed.
    fn parse_option(&mut self, now: Instant) -> Result<bool, End> {
        let got_flags = match &self.phase {
            Phase::Handshake { got_flags, .. } | Phase::Refusing { got_flags, .. } => *got_flags,
            Phase::Transmission(_) => return Ok(false),
        };
        if !got_flags {
            if self.stash.len() < 4 {
                return Ok(false);
            }
            let flags: [u8; 4] = self.stash[..4].try_into().expect("4 bytes");
            self.stash.drain(..4);
            match &mut self.phase {
                Phase::Handshake { neg, got_flags, .. } => {
                    neg.client_flags(&flags)
                        .map_err(|e| End::Dropped(e.to_string()))?;
                    *got_flags = true;
                }
                Phase::Refusing { got_flags, .. } => *got_flags = true,
                Phase::Transmission(_) => {}
            }
            return Ok(true);
        }
        if self.stash.len() < OPTION_HEADER_LEN {
            return Ok(false);
        }
        let h = OptionHeader::decode(&self.stash[..OPTION_HEADER_LEN])
            .map_err(|e| End::Dropped(e.to_string()))?;
        let total = OPTION_HEADER_LEN + h.len as usize;
        if self.stash.len() < total {
            return Ok(false);
        }
        let stash = std::mem::take(&mut self.stash);
        let data = &stash[OPTION_HEADER_LEN..total];
        let mut out = std::mem::take(&mut self.hs_out);
        let result = match &mut self.phase {
            Phase::Refusing { reason, .. } => {
                if h.opt == opt::EXPORT_NAME {
                    Err(End::Dropped("refused".into()))
                } else {
                    let msg = format!("mqblk serve: connection refused: {reason}");
                    encode_option_reply(h.opt, rep::ERR_POLICY, msg.as_bytes(), &mut out);
                    self.closing = Some(Closing::Graceful);
                    Ok(())
                }
            }
            Phase::Handshake { neg, tls_next, .. } => {
                match neg.handle_option(h.opt, data, &mut out) {
                    Step::Continue => Ok(()),
                    Step::Abort => {
                        self.closing = Some(Closing::Graceful);
                        Ok(())
                    }
                    Step::Close(why) => Err(End::Dropped(why.into())),
                    Step::StartTls => {
                        *tls_next = true;
                        Ok(())
                    }
                    Step::Transmission(s) => {
                        self.phase = Phase::Transmission(s);
                        self.last_active = now;
                        self.blocked_since = None;
                        Ok(())
                    }
                }
            }
            Phase::Transmission(_) => Ok(()),
        };
        self.hs_out = out;
        self.stash = stash;
        self.stash.drain(..total);
        result?;
        if let Phase::Transmission(s) = &self.phase {
            // The handshake's last reply goes out with the first replies.
            self.device = Some(self.sh.exports[s.export].device.clone());
            self.move_hs_out();
        }
        Ok(true)
    }

    /// Negotiation bytes still unsent become the first reply.
    fn move_hs_out(&mut self) {
        if !self.hs_out.is_empty() {
            let v = std::mem::take(&mut self.hs_out);
            self.out.push_bytes(v);
        }
    }
}
