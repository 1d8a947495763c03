//! Admission: the connections open across every I/O thread, counted in
//! and out by peer (an IPv4 address or an IPv6 /64) under the server's
//! limits.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

use crate::server::shared::ConnLimits;

/// Connections open across every I/O thread, by peer address.
#[derive(Default)]
pub(crate) struct Admission {
    total: usize,
    per_peer: HashMap<IpAddr, usize>,
}

impl Admission {
    /// Count a connection from `peer` in under `lim`, or say why not.
    pub(super) fn admit(
        admission: &Mutex<Admission>,
        lim: &ConnLimits,
        peer: Option<IpAddr>,
    ) -> Option<String> {
        let mut a = admission.lock().unwrap_or_else(|p| p.into_inner());
        if a.total >= lim.max_connections {
            return Some(format!(
                "the server is serving its limit of {} connections (--max-connections)",
                lim.max_connections
            ));
        }
        if let Some(ip) = peer.map(peer_key) {
            let n = a.per_peer.get(&ip).copied().unwrap_or(0);
            if n >= lim.max_per_peer {
                let who = match ip {
                    IpAddr::V6(_) => format!("{ip}/64"),
                    IpAddr::V4(_) => ip.to_string(),
                };
                return Some(format!(
                    "{who} already has its limit of {} connections (--max-connections-per-peer)",
                    lim.max_per_peer
                ));
            }
            a.per_peer.insert(ip, n + 1);
        }
        a.total += 1;
        None
    }

    /// Count a connection from `peer` out.
    pub(super) fn release(admission: &Mutex<Admission>, peer: Option<IpAddr>) {
        let mut a = admission.lock().unwrap_or_else(|p| p.into_inner());
        a.total -= 1;
        if let Some(ip) = peer.map(peer_key) {
            if let Some(n) = a.per_peer.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    a.per_peer.remove(&ip);
                }
            }
        }
    }
}

/// The peer a connection is counted against: its IPv4 address (an
/// IPv4-mapped IPv6 one included), or the /64 network of its IPv6 address,
/// since one host commonly holds a whole /64.
fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(
                u128::from(v6) & !((1u128 << 64) - 1),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::peer_key;
    use std::net::IpAddr;

    #[test]
    fn peers_are_ipv4_addresses_or_ipv6_slash_64s() {
        let k = |s: &str| peer_key(s.parse::<IpAddr>().unwrap()).to_string();
        assert_eq!(k("127.0.0.2"), "127.0.0.2");
        assert_eq!(k("::ffff:127.0.0.2"), "127.0.0.2");
        assert_eq!(k("2001:db8:1:2:3:4:5:6"), "2001:db8:1:2::");
        assert_eq!(k("2001:db8:1:2:ffff::1"), "2001:db8:1:2::");
        assert_ne!(k("2001:db8:1:3::1"), k("2001:db8:1:2::1"));
    }
}
