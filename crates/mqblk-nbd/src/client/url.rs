//! NBD URIs as device targets: `nbd://host[:port][/export]` and
//! `nbd+unix:///export?socket=PATH`, and their TLS forms `nbds://` and
//! `nbds+unix://` with `tls-certificates=DIR` (the forms of the NBD URI
//! specification that libnbd and qemu accept; TLS-PSK is refused, rustls
//! has no PSK cipher suites).

use std::path::PathBuf;

use mqblk_nbd_proto::consts::DEFAULT_PORT;

/// Where an export is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// TCP `host:port`.
    Tcp(String),
    /// A unix socket path.
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(hp) => write!(f, "{hp}"),
            Address::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUrl {
    /// Where to connect.
    pub address: Address,
    /// Export name (percent-decoded; empty: the default export).
    pub export: String,
    /// TLS (`nbds://`, `nbds+unix://`).
    pub tls: Option<UrlTls>,
}

/// The TLS part of an NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrlTls {
    /// `tls-certificates=DIR`: `ca-cert.pem` (and optionally
    /// `client-cert.pem`, `client-key.pem`) in it.
    pub certificates: Option<PathBuf>,
    /// The name the server's certificate must carry: the URI's host, or
    /// `tls-hostname=`, or `localhost` for a unix socket.
    pub hostname: String,
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape in {s:?}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("{s:?} does not decode to UTF-8"))
}

/// Parse an NBD URI.
pub fn parse(url: &str) -> Result<NbdUrl, String> {
    let (scheme, rest) = url.split_once("://").ok_or_else(|| {
        "expected nbd://host:port/export or nbd+unix:///export?socket=PATH".to_string()
    })?;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    let export = percent_decode(path)?;
    let mut socket = None;
    let mut certificates = None;
    let mut hostname = None;
    for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "socket" => socket = Some(percent_decode(v)?),
            "tls-certificates" => certificates = Some(PathBuf::from(percent_decode(v)?)),
            "tls-hostname" => hostname = Some(percent_decode(v)?),
            "tls-psk-file" | "tls-username" => {
                return Err(format!(
                    "`{k}`: TLS-PSK is not supported (rustls has no pre-shared-key cipher \
                     suites); use X.509 certificates with tls-certificates=DIR"
                ))
            }
            other => return Err(format!("unknown URI query parameter `{other}`")),
        }
    }
    let scheme = scheme.to_ascii_lowercase();
    let (scheme, tls) = match scheme.as_str() {
        "nbds" => ("nbd", true),
        "nbds+unix" => ("nbd+unix", true),
        s => (s, false),
    };
    if !tls && (certificates.is_some() || hostname.is_some()) {
        return Err("tls-certificates= and tls-hostname= belong to nbds:// URIs".into());
    }
    let host = authority
        .strip_prefix('[')
        .and_then(|a| a.split_once(']').map(|(h, _)| h))
        .unwrap_or_else(|| authority.rsplit_once(':').map_or(authority, |(h, _)| h));
    let tls = tls.then(|| UrlTls {
        certificates,
        hostname: hostname.unwrap_or_else(|| {
            if host.is_empty() {
                "localhost".into()
            } else {
                host.to_string()
            }
        }),
    });
    match scheme {
        "nbd" => {
            if socket.is_some() {
                return Err("socket= belongs to nbd+unix:// URIs".into());
            }
            if authority.is_empty() {
                return Err("nbd:// needs a host".into());
            }
            let hostport = if authority.starts_with('[') {
                // [v6]:port
                match authority.rsplit_once("]:") {
                    Some((h, p)) => format!("{h}]:{p}"),
                    None => format!("{authority}:{DEFAULT_PORT}"),
                }
            } else if authority.contains(':') {
                authority.to_string()
            } else {
                format!("{authority}:{DEFAULT_PORT}")
            };
            Ok(NbdUrl {
                address: Address::Tcp(hostport),
                export,
                tls,
            })
        }
        "nbd+unix" => {
            if !authority.is_empty() {
                return Err("nbd+unix:// takes no host: use nbd+unix:///export?socket=PATH".into());
            }
            let s = socket.ok_or_else(|| "nbd+unix:// needs ?socket=PATH".to_string())?;
            Ok(NbdUrl {
                address: Address::Unix(PathBuf::from(s)),
                export,
                tls,
            })
        }
        other => Err(format!("unknown NBD URI scheme `{other}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(
            parse("nbd://localhost/disk").unwrap(),
            NbdUrl {
                address: Address::Tcp("localhost:10809".into()),
                export: "disk".into(),
                tls: None,
            }
        );
        assert_eq!(
            parse("nbd://127.0.0.1:1234").unwrap().address,
            Address::Tcp("127.0.0.1:1234".into())
        );
        assert_eq!(
            parse("nbd://[::1]:99/a%20b").unwrap(),
            NbdUrl {
                address: Address::Tcp("[::1]:99".into()),
                export: "a b".into(),
                tls: None,
            }
        );
        assert_eq!(
            parse("nbd+unix:///e?socket=/tmp/s").unwrap(),
            NbdUrl {
                address: Address::Unix("/tmp/s".into()),
                export: "e".into(),
                tls: None,
            }
        );
        assert_eq!(parse("nbd+unix:///?socket=/tmp/s").unwrap().export, "");
        assert_eq!(
            parse("nbds://h.example:99/e?tls-certificates=/c")
                .unwrap()
                .tls,
            Some(UrlTls {
                certificates: Some("/c".into()),
                hostname: "h.example".into()
            })
        );
        assert_eq!(
            parse("nbds+unix:///e?socket=/s")
                .unwrap()
                .tls
                .unwrap()
                .hostname,
            "localhost"
        );
        assert!(parse("nbds://h/e?tls-psk-file=/k")
            .unwrap_err()
            .contains("TLS-PSK is not supported"));
        for bad in [
            "nbd+unix:///e",
            "nbd:///e",
            "nbd://h/e?tls-certificates=/c",
            "http://x",
            "nbd://h/%zz",
            "nbd+unix://h/?socket=x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
