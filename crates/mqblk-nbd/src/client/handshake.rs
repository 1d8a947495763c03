//! The client's side of fixed newstyle negotiation: structured replies,
//! then `OPT_GO` asking for `INFO_BLOCK_SIZE` (falling back to
//! `OPT_EXPORT_NAME` on servers without `OPT_GO`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use mqblk_nbd_proto::consts::{client_flags, handshake_flags, info, opt, rep, BASE_ALLOCATION};
use mqblk_nbd_proto::handshake::{
    decode_greeting, decode_rep_meta_context, encode_option, MetaContextRequest, OptionReplyHeader,
    GREETING_LEN, OPTION_REPLY_HEADER_LEN,
};
use mqblk_nbd_proto::{BlockSize, Info, InfoRequest};

use super::url::{Address, NbdUrl};
use crate::transport::{ClientTx, Socket};

/// What negotiation settled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags.
    pub flags: u16,
    /// Structured replies are on.
    pub structured: bool,
    /// The server's size constraints, if it sent them.
    pub block_size: Option<BlockSize>,
    /// The id of the `base:allocation` meta context, if the server
    /// selected it (then `BLOCK_STATUS` answers where the holes are).
    pub base_allocation: Option<u32>,
}

/// How long each step of negotiation may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

fn read_exact<S: Read>(s: &mut S, buf: &mut [u8]) -> Result<(), String> {
    s.read_exact(buf).map_err(|e| {
        certificate_refused(&e).unwrap_or_else(|| format!("reading from the server: {e}"))
    })
}

/// What to tell the user when the server's TLS alert in `e` says it
/// refused this client's certificate (or its lack of one).
fn certificate_refused(e: &std::io::Error) -> Option<String> {
    use rustls::AlertDescription as A;
    let Some(rustls::Error::AlertReceived(alert)) = e.get_ref()?.downcast_ref::<rustls::Error>()
    else {
        return None;
    };
    matches!(
        alert,
        A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::UnknownCA
            | A::CertificateRequired
            | A::AccessDenied
    )
    .then(|| {
        format!(
            "the server refused this client's TLS certificate (alert {alert:?}): it serves \
             only clients with a certificate its CA signed, read from client-cert.pem and \
             client-key.pem in tls-certificates=DIR"
        )
    })
}

fn read_reply<S: Read>(s: &mut S, want_opt: u32) -> Result<(OptionReplyHeader, Vec<u8>), String> {
    let mut h = [0u8; OPTION_REPLY_HEADER_LEN];
    read_exact(s, &mut h)?;
    let h = OptionReplyHeader::decode(&h).map_err(|e| format!("bad option reply: {e}"))?;
    if h.opt != want_opt {
        return Err(format!(
            "option reply for {} while waiting for {want_opt}",
            h.opt
        ));
    }
    let mut data = vec![0u8; h.len as usize];
    read_exact(s, &mut data)?;
    Ok((h, data))
}

fn send_option<S: Write>(s: &mut S, option: u32, data: &[u8]) -> Result<(), String> {
    let mut v = Vec::with_capacity(16 + data.len());
    encode_option(option, data, &mut v);
    s.write_all(&v)
        .map_err(|e| format!("writing to the server: {e}"))
}

fn rep_error(reply_type: u32, data: &[u8]) -> String {
    let name = match reply_type {
        rep::ERR_UNSUP => "unsupported",
        rep::ERR_POLICY => "refused by policy",
        rep::ERR_INVALID => "invalid",
        rep::ERR_TLS_REQD => "TLS required",
        rep::ERR_UNKNOWN => "no such export",
        rep::ERR_SHUTDOWN => "server shutting down",
        rep::ERR_BLOCK_SIZE_REQD => "block size required",
        _ => "error",
    };
    let msg = String::from_utf8_lossy(data);
    if msg.is_empty() {
        name.to_string()
    } else {
        format!("{name}: {msg}")
    }
}

/// Connect to `addr`.
pub fn connect(addr: &Address) -> std::io::Result<Socket> {
    let s = match addr {
        Address::Tcp(hp) => Socket::Tcp(TcpStream::connect(hp.as_str())?),
        Address::Unix(p) => Socket::Unix(UnixStream::connect(p)?),
    };
    s.set_nodelay();
    Ok(s)
}

/// Negotiate `export` on a connected socket. On success the socket is in
/// the transmission phase.
pub fn negotiate(s: &mut Socket, export: &str) -> Result<Negotiated, String> {
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let no_zeroes = greet(s)?;
    let n = options(s, export, no_zeroes)?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok(n)
}

/// Connect to `url` and negotiate, through TLS if the URL asks for it
/// (`STARTTLS` first, then every option inside TLS).
pub fn connect_negotiate(url: &NbdUrl) -> Result<(ClientTx, Negotiated), String> {
    let mut s = connect(&url.address).map_err(|e| format!("connect: {e}"))?;
    let Some(tls) = &url.tls else {
        let n = negotiate(&mut s, &url.export)?;
        return Ok((ClientTx::Plain(s), n));
    };
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let no_zeroes = greet(&mut s)?;
    send_option(&mut s, opt::STARTTLS, &[])?;
    let (h, data) = read_reply(&mut s, opt::STARTTLS)?;
    if h.reply_type != rep::ACK {
        return Err(format!(
            "the server refused STARTTLS: {}",
            rep_error(h.reply_type, &data)
        ));
    }
    let cfg = crate::tls::client_config(tls.certificates.as_deref())?;
    let name = rustls::pki_types::ServerName::try_from(tls.hostname.clone())
        .map_err(|e| format!("TLS server name {:?}: {e}", tls.hostname))?;
    let mut conn = rustls::ClientConnection::new(cfg, name).map_err(|e| format!("TLS: {e}"))?;
    while conn.is_handshaking() {
        conn.complete_io(&mut s).map_err(|e| {
            certificate_refused(&e).unwrap_or_else(|| format!("TLS handshake: {e}"))
        })?;
    }
    let n = options(
        &mut rustls::Stream::new(&mut conn, &mut s),
        &url.export,
        no_zeroes,
    )?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok((
        ClientTx::Tls {
            sock: s,
            conn: std::sync::Arc::new(std::sync::Mutex::new(conn)),
        },
        n,
    ))
}

/// The greeting and the client's flags; returns whether the server
/// leaves out the zeroes after `OPT_EXPORT_NAME`.
fn greet(s: &mut Socket) -> Result<bool, String> {
    let mut g = [0u8; GREETING_LEN];
    read_exact(s, &mut g)?;
    let hflags = decode_greeting(&g).map_err(|e| format!("not an NBD newstyle server: {e}"))?;
    if hflags & handshake_flags::FIXED_NEWSTYLE == 0 {
        return Err("the server does not speak fixed newstyle negotiation".into());
    }
    let no_zeroes = hflags & handshake_flags::NO_ZEROES != 0;
    let mut cflags = client_flags::C_FIXED_NEWSTYLE;
    if no_zeroes {
        cflags |= client_flags::C_NO_ZEROES;
    }
    s.write_all(&cflags.to_be_bytes())
        .map_err(|e| format!("writing to the server: {e}"))?;
    Ok(no_zeroes)
}

/// The options: structured replies, `base:allocation`, then `OPT_GO`
/// (or `OPT_EXPORT_NAME` on an old server).
fn options<S: Read + Write>(
    s: &mut S,
    export: &str,
    no_zeroes: bool,
) -> Result<Negotiated, String> {
    send_option(s, opt::STRUCTURED_REPLY, &[])?;
    let (h, _) = read_reply(s, opt::STRUCTURED_REPLY)?;
    let structured = h.reply_type == rep::ACK;
    let base_allocation = if structured {
        select_base_allocation(s, export)?
    } else {
        None
    };

    let mut d = Vec::new();
    InfoRequest {
        name: export,
        requests: vec![info::BLOCK_SIZE],
    }
    .encode(&mut d);
    send_option(s, opt::GO, &d)?;
    let mut size_flags = None;
    let mut block_size = None;
    loop {
        let (h, data) = read_reply(s, opt::GO)?;
        match h.reply_type {
            rep::INFO => match Info::decode(&data).map_err(|e| format!("bad NBD_REP_INFO: {e}"))? {
                Info::Export { size, flags } => size_flags = Some((size, flags)),
                Info::BlockSize(b) => {
                    b.check().map_err(|e| format!("server block sizes: {e}"))?;
                    block_size = Some(b);
                }
                _ => {}
            },
            rep::ACK => {
                let (size, flags) =
                    size_flags.ok_or("the server accepted OPT_GO without NBD_INFO_EXPORT")?;
                return Ok(Negotiated {
                    size,
                    flags,
                    structured,
                    block_size,
                    base_allocation,
                });
            }
            rep::ERR_UNSUP => break,
            t if t & rep::FLAG_ERROR != 0 => {
                return Err(format!("export {export:?}: {}", rep_error(t, &data)));
            }
            t => return Err(format!("unexpected reply type {t:#x} to OPT_GO")),
        }
    }
    // An old server: OPT_EXPORT_NAME (no error reply possible).
    send_option(s, opt::EXPORT_NAME, export.as_bytes())?;
    let mut b = [0u8; 10];
    read_exact(s, &mut b).map_err(|e| {
        format!("export {export:?} refused (the server closed after OPT_EXPORT_NAME): {e}")
    })?;
    if !no_zeroes {
        let mut z = [0u8; 124];
        read_exact(s, &mut z)?;
    }
    let size = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let flags = u16::from_be_bytes([b[8], b[9]]);
    Ok(Negotiated {
        size,
        flags,
        structured,
        block_size: None,
        base_allocation,
    })
}

/// `SET_META_CONTEXT base:allocation`: the context id, or `None` if the
/// server does not offer it.
fn select_base_allocation<S: Read + Write>(s: &mut S, export: &str) -> Result<Option<u32>, String> {
    let mut d = Vec::new();
    MetaContextRequest {
        export,
        queries: vec![BASE_ALLOCATION],
    }
    .encode(&mut d);
    send_option(s, opt::SET_META_CONTEXT, &d)?;
    let mut id = None;
    loop {
        let (h, data) = read_reply(s, opt::SET_META_CONTEXT)?;
        match h.reply_type {
            rep::META_CONTEXT => {
                let (i, name) = decode_rep_meta_context(&data)
                    .map_err(|e| format!("bad NBD_REP_META_CONTEXT: {e}"))?;
                if name == BASE_ALLOCATION {
                    id = Some(i);
                }
            }
            rep::ACK => return Ok(id),
            t if t & rep::FLAG_ERROR != 0 => return Ok(None),
            t => return Err(format!("unexpected reply type {t:#x} to SET_META_CONTEXT")),
        }
    }
}
