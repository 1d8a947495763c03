//! The server's side of fixed newstyle negotiation, as a state machine
//! without I/O: the connection code reads an option, hands it to
//! [`Negotiation::handle_option`], writes the bytes it produced, and acts
//! on the returned [`Step`]. Every option this server does not know is
//! answered `NBD_REP_ERR_UNSUP` and negotiation goes on.

use crate::consts::{
    client_flags, handshake_flags, info, opt, rep, transmission_flags, BASE_ALLOCATION,
};
use crate::error::WireError;
use crate::handshake::{
    decode_client_flags, encode_export_name_reply, encode_option_reply, encode_rep_meta_context,
    encode_rep_server, BlockSize, Info, InfoRequest, MetaContextRequest,
};

/// What the server says about one export.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// Name (the first export also answers to the empty name).
    pub name: String,
    /// Human-readable description (may be empty).
    pub description: String,
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags, without `SEND_DF` (added when structured
    /// replies are negotiated).
    pub flags: u16,
    /// Size constraints.
    pub block_size: BlockSize,
}

/// How the server treats TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// NOTLS: `STARTTLS` is refused by policy.
    #[default]
    Off,
    /// SELECTIVETLS with no TLS-only export: the client may upgrade.
    On,
    /// FORCEDTLS: every option but `STARTTLS` and `ABORT` is refused until
    /// TLS is up.
    Require,
}

/// What the connection does after an option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write the reply and read the next option.
    Continue,
    /// Write the reply (an ACK), then run the TLS handshake.
    StartTls,
    /// Write the reply, then close: the client aborted.
    Abort,
    /// Write the reply, then enter transmission.
    Transmission(Session),
    /// Close without writing anything more (the client broke a rule, or
    /// `OPT_EXPORT_NAME` named an export we cannot serve).
    Close(&'static str),
}

/// What transmission needs to know, fixed at the end of negotiation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Index of the export in the table given to [`Negotiation::new`].
    pub export: usize,
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags sent to the client.
    pub flags: u16,
    /// Structured replies negotiated.
    pub structured: bool,
    /// Context id of `base:allocation`, if the client selected it for
    /// this export.
    pub base_allocation: Option<u32>,
    /// Size constraints.
    pub block_size: BlockSize,
}

/// The id we give `base:allocation` in `SET_META_CONTEXT`.
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Options a client may send before the server calls it a denial of
/// service.
pub const MAX_OPTIONS: u32 = 1024;

/// The negotiation state of one connection.
#[derive(Debug)]
pub struct Negotiation<'a> {
    exports: &'a [ExportInfo],
    tls: TlsMode,
    tls_active: bool,
    no_zeroes: bool,
    structured: bool,
    /// Export name and whether `base:allocation` was selected for it.
    meta: Option<(String, bool)>,
    options_seen: u32,
}

impl<'a> Negotiation<'a> {
    /// Handshake flags the server offers.
    pub const HANDSHAKE_FLAGS: u16 = handshake_flags::FIXED_NEWSTYLE | handshake_flags::NO_ZEROES;

    /// A negotiation over `exports` (the first is the default export).
    pub fn new(exports: &'a [ExportInfo], tls: TlsMode) -> Self {
        Negotiation {
            exports,
            tls,
            tls_active: false,
            no_zeroes: false,
            structured: false,
            meta: None,
            options_seen: 0,
        }
    }

    /// The greeting to send first.
    pub fn greeting(&self) -> [u8; crate::handshake::GREETING_LEN] {
        crate::handshake::encode_greeting(Self::HANDSHAKE_FLAGS)
    }

    /// Take the client's flags (4 bytes). An error means: close.
    pub fn client_flags(&mut self, b: &[u8]) -> Result<(), WireError> {
        let f = decode_client_flags(b, Self::HANDSHAKE_FLAGS)?;
        self.no_zeroes = f & client_flags::C_NO_ZEROES != 0;
        Ok(())
    }

    /// True once TLS is running (the connection calls [`Self::tls_started`]).
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The TLS handshake succeeded: forget what was negotiated before it,
    /// as the protocol requires.
    pub fn tls_started(&mut self) {
        self.tls_active = true;
        self.structured = false;
        self.meta = None;
    }

    fn find(&self, name: &str) -> Option<usize> {
        if name.is_empty() && !self.exports.is_empty() {
            return Some(0);
        }
        self.exports.iter().position(|e| e.name == name)
    }

    fn flags_for(&self, e: &ExportInfo) -> u16 {
        let mut f = e.flags | transmission_flags::HAS_FLAGS;
        if self.structured {
            f |= transmission_flags::SEND_DF;
        }
        f
    }

    fn session(&self, idx: usize, name: &str) -> Session {
        let e = &self.exports[idx];
        let base_allocation = match &self.meta {
            Some((n, true)) if self.structured && self.find(n) == Some(idx) && n == name => {
                Some(BASE_ALLOCATION_ID)
            }
            _ => None,
        };
        Session {
            export: idx,
            size: e.size,
            flags: self.flags_for(e),
            structured: self.structured,
            base_allocation,
            block_size: e.block_size,
        }
    }

    /// Answer one option: append the reply bytes to `out` and say what to
    /// do next.
    pub fn handle_option(&mut self, option: u32, data: &[u8], out: &mut Vec<u8>) -> Step {
        self.options_seen += 1;
        if self.options_seen > MAX_OPTIONS {
            return Step::Close("too many options");
        }
        let err = |out: &mut Vec<u8>, t: u32, msg: &str| {
            encode_option_reply(option, t, msg.as_bytes(), out);
            Step::Continue
        };
        if self.tls == TlsMode::Require && !self.tls_active {
            match option {
                opt::STARTTLS | opt::ABORT => {}
                opt::EXPORT_NAME => return Step::Close("TLS required before OPT_EXPORT_NAME"),
                _ => {
                    return err(
                        out,
                        rep::ERR_TLS_REQD,
                        "this server requires TLS: send NBD_OPT_STARTTLS first",
                    )
                }
            }
        }
        match option {
            opt::ABORT => {
                encode_option_reply(option, rep::ACK, &[], out);
                Step::Abort
            }
            opt::LIST => {
                if !data.is_empty() {
                    return err(out, rep::ERR_INVALID, "NBD_OPT_LIST takes no data");
                }
                let mut d = Vec::new();
                for e in self.exports {
                    d.clear();
                    encode_rep_server(&e.name, &e.description, &mut d);
                    encode_option_reply(option, rep::SERVER, &d, out);
                }
                encode_option_reply(option, rep::ACK, &[], out);
                Step::Continue
            }
            opt::STARTTLS => {
                if !data.is_empty() {
                    return err(out, rep::ERR_INVALID, "NBD_OPT_STARTTLS takes no data");
                }
                if self.tls_active {
                    return err(out, rep::ERR_INVALID, "TLS is already running");
                }
                if self.tls == TlsMode::Off {
                    return err(out, rep::ERR_POLICY, "TLS is not enabled on this server");
                }
                encode_option_reply(option, rep::ACK, &[], out);
                Step::StartTls
            }
            opt::STRUCTURED_REPLY => {
                if !data.is_empty() {
                    return err(
                        out,
                        rep::ERR_INVALID,
                        "NBD_OPT_STRUCTURED_REPLY takes no data",
                    );
                }
                self.structured = true;
                encode_option_reply(option, rep::ACK, &[], out);
                Step::Continue
            }
            opt::INFO | opt::GO => self.info_or_go(option, data, out),
            opt::LIST_META_CONTEXT | opt::SET_META_CONTEXT => self.meta_context(option, data, out),
            opt::EXPORT_NAME => {
                let Ok(name) = std::str::from_utf8(data) else {
                    return Step::Close("export name is not UTF-8");
                };
                let Some(idx) = self.find(name) else {
                    return Step::Close("no such export");
                };
                let s = self.session(idx, name);
                encode_export_name_reply(s.size, s.flags, self.no_zeroes, out);
                Step::Transmission(s)
            }
            _ => err(out, rep::ERR_UNSUP, "option not supported by this server"),
        }
    }

    fn info_or_go(&mut self, option: u32, data: &[u8], out: &mut Vec<u8>) -> Step {
        let req = match InfoRequest::decode(data) {
            Ok(r) => r,
            Err(_) => {
                encode_option_reply(
                    option,
                    rep::ERR_INVALID,
                    b"malformed NBD_OPT_INFO/GO data",
                    out,
                );
                return Step::Continue;
            }
        };
        let Some(idx) = self.find(req.name) else {
            let msg = format!("no export named {:?}", req.name);
            encode_option_reply(option, rep::ERR_UNKNOWN, msg.as_bytes(), out);
            return Step::Continue;
        };
        let e = &self.exports[idx];
        let mut d = Vec::with_capacity(32);
        let mut send = |i: Info<'_>, out: &mut Vec<u8>| {
            d.clear();
            i.encode(&mut d);
            encode_option_reply(option, rep::INFO, &d, out);
        };
        send(
            Info::Export {
                size: e.size,
                flags: self.flags_for(e),
            },
            out,
        );
        // Block size is sent whether asked or not: we enforce a minimum
        // block size above 1, so clients should know it.
        send(Info::BlockSize(e.block_size), out);
        if req.requests.contains(&info::NAME) {
            send(Info::Name(&e.name), out);
        }
        if req.requests.contains(&info::DESCRIPTION) && !e.description.is_empty() {
            send(Info::Description(&e.description), out);
        }
        encode_option_reply(option, rep::ACK, &[], out);
        if option == opt::GO {
            Step::Transmission(self.session(idx, req.name))
        } else {
            Step::Continue
        }
    }

    fn meta_context(&mut self, option: u32, data: &[u8], out: &mut Vec<u8>) -> Step {
        let set = option == opt::SET_META_CONTEXT;
        if set {
            // Replaced even when this request fails.
            self.meta = None;
        }
        if !self.structured {
            encode_option_reply(
                option,
                rep::ERR_INVALID,
                b"negotiate structured replies first",
                out,
            );
            return Step::Continue;
        }
        let req = match MetaContextRequest::decode(data) {
            Ok(r) => r,
            Err(_) => {
                encode_option_reply(
                    option,
                    rep::ERR_INVALID,
                    b"malformed meta context request",
                    out,
                );
                return Step::Continue;
            }
        };
        if self.find(req.export).is_none() {
            let msg = format!("no export named {:?}", req.export);
            encode_option_reply(option, rep::ERR_UNKNOWN, msg.as_bytes(), out);
            return Step::Continue;
        }
        let matches = |q: &str| {
            if set {
                q == BASE_ALLOCATION
            } else {
                q == BASE_ALLOCATION || q == "base:"
            }
        };
        let selected = if !set && req.queries.is_empty() {
            true
        } else {
            req.queries.iter().any(|q| matches(q))
        };
        if selected {
            let mut d = Vec::new();
            let id = if set { BASE_ALLOCATION_ID } else { 0 };
            encode_rep_meta_context(id, BASE_ALLOCATION, &mut d);
            encode_option_reply(option, rep::META_CONTEXT, &d, out);
        }
        if set {
            self.meta = Some((req.export.to_string(), selected));
        }
        encode_option_reply(option, rep::ACK, &[], out);
        Step::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::{encode_option, OptionReplyHeader, OPTION_REPLY_HEADER_LEN};

    fn exports() -> Vec<ExportInfo> {
        let bs = BlockSize {
            min: 512,
            preferred: 4096,
            max_payload: 1 << 25,
        };
        vec![
            ExportInfo {
                name: "a".into(),
                description: "first".into(),
                size: 1 << 20,
                flags: transmission_flags::SEND_FLUSH,
                block_size: bs,
            },
            ExportInfo {
                name: "b".into(),
                description: String::new(),
                size: 1 << 21,
                flags: 0,
                block_size: bs,
            },
        ]
    }

    fn replies(mut b: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut v = Vec::new();
        while !b.is_empty() {
            let h = OptionReplyHeader::decode(&b[..OPTION_REPLY_HEADER_LEN]).unwrap();
            let end = OPTION_REPLY_HEADER_LEN + h.len as usize;
            v.push((h.reply_type, b[OPTION_REPLY_HEADER_LEN..end].to_vec()));
            b = &b[end..];
        }
        v
    }

    #[test]
    fn unknown_option_is_unsup_and_negotiation_goes_on() {
        let ex = exports();
        let mut n = Negotiation::new(&ex, TlsMode::Off);
        let mut out = Vec::new();
        assert_eq!(n.handle_option(999, b"xyz", &mut out), Step::Continue);
        assert_eq!(replies(&out)[0].0, rep::ERR_UNSUP);
        out.clear();
        assert_eq!(n.handle_option(opt::LIST, &[], &mut out), Step::Continue);
        let r = replies(&out);
        assert_eq!(r.len(), 3);
        assert_eq!(r[2].0, rep::ACK);
    }

    #[test]
    fn go_with_meta_context_selects_base_allocation() {
        let ex = exports();
        let mut n = Negotiation::new(&ex, TlsMode::Off);
        let mut out = Vec::new();
        n.handle_option(opt::STRUCTURED_REPLY, &[], &mut out);
        let mut d = Vec::new();
        MetaContextRequest {
            export: "b",
            queries: vec![BASE_ALLOCATION],
        }
        .encode(&mut d);
        out.clear();
        n.handle_option(opt::SET_META_CONTEXT, &d, &mut out);
        assert_eq!(replies(&out)[0].0, rep::META_CONTEXT);
        let mut d = Vec::new();
        InfoRequest {
            name: "b",
            requests: vec![info::BLOCK_SIZE],
        }
        .encode(&mut d);
        out.clear();
        let Step::Transmission(s) = n.handle_option(opt::GO, &d, &mut out) else {
            panic!("GO must enter transmission");
        };
        assert_eq!(s.export, 1);
        assert_eq!(s.base_allocation, Some(BASE_ALLOCATION_ID));
        assert!(s.flags & transmission_flags::SEND_DF != 0);
        let _ = encode_option; // keep the helper in scope for other tests
    }

    #[test]
    fn tls_require_refuses_plaintext_options() {
        let ex = exports();
        let mut n = Negotiation::new(&ex, TlsMode::Require);
        let mut out = Vec::new();
        n.handle_option(opt::LIST, &[], &mut out);
        assert_eq!(replies(&out)[0].0, rep::ERR_TLS_REQD);
        assert!(matches!(
            n.handle_option(opt::EXPORT_NAME, b"a", &mut out),
            Step::Close(_)
        ));
        out.clear();
        assert_eq!(
            n.handle_option(opt::STARTTLS, &[], &mut out),
            Step::StartTls
        );
        n.tls_started();
        out.clear();
        n.handle_option(opt::LIST, &[], &mut out);
        assert_eq!(replies(&out).last().unwrap().0, rep::ACK);
    }
}
