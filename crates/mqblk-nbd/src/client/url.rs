//! NBD URIs as device targets: `nbd://host[:port][/export]` and
//! `nbd+unix:///export?socket=PATH` (the forms of the NBD URI
//! specification that libnbd and qemu accept, without TLS).

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

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUrl {
    /// Where to connect.
    pub address: Address,
    /// Export name (percent-decoded; empty: the default export).
    pub export: String,
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
    for kv in query.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "socket" => socket = Some(percent_decode(v)?),
            other => return Err(format!("unknown URI query parameter `{other}`")),
        }
    }
    match scheme.to_ascii_lowercase().as_str() {
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
            })
        }
        "nbds" | "nbds+unix" => {
            Err("TLS (nbds://) is not supported by the client driver yet".into())
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
                export: "disk".into()
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
                export: "a b".into()
            }
        );
        assert_eq!(
            parse("nbd+unix:///e?socket=/tmp/s").unwrap(),
            NbdUrl {
                address: Address::Unix("/tmp/s".into()),
                export: "e".into()
            }
        );
        assert_eq!(parse("nbd+unix:///?socket=/tmp/s").unwrap().export, "");
        for bad in [
            "nbd+unix:///e",
            "nbd:///e",
            "nbds://h/e",
            "http://x",
            "nbd://h/%zz",
            "nbd+unix://h/?socket=x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
