//! Listeners seen in a pod, and which dialed address a listener serves.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listener {
    pub addr: SocketAddr,
    pub container_id: Option<String>,
    /// None when the agent only saw it go away (it listened before the agent started).
    pub up_at: Option<u64>,
    pub down_at: Option<u64>,
}

/// IPv4-mapped IPv6 addresses are their IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

pub fn is_loopback(ip: IpAddr) -> bool {
    canonical(ip).is_loopback()
}

/// Whether a socket listening on `listen` accepts a connect to `dialed`: same port,
/// and `::` (dual-stack) takes everything, `0.0.0.0` every IPv4 address, anything
/// else only itself.
pub fn covers(listen: SocketAddr, dialed: SocketAddr) -> bool {
    if listen.port() != dialed.port() {
        return false;
    }
    let (l, d) = (canonical(listen.ip()), canonical(dialed.ip()));
    match l {
        IpAddr::V6(v6) if v6.is_unspecified() => true,
        IpAddr::V4(v4) if v4.is_unspecified() => d.is_ipv4(),
        _ => l == d,
    }
}

impl Listener {
    pub fn is_up_at(&self, ts: u64) -> bool {
        self.up_at.is_some_and(|up| up <= ts) && self.down_at.is_none_or(|down| down > ts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn wildcard_and_specific_listeners() {
        assert!(covers(a("0.0.0.0:15001"), a("127.0.0.1:15001")));
        assert!(covers(a("0.0.0.0:15001"), a("10.1.2.3:15001")));
        assert!(!covers(a("0.0.0.0:15001"), a("[::1]:15001")));
        assert!(covers(a("[::]:15001"), a("[::1]:15001")));
        assert!(covers(a("[::]:15001"), a("127.0.0.1:15001")));
        assert!(covers(a("127.0.0.1:15001"), a("127.0.0.1:15001")));
        assert!(covers(a("127.0.0.1:15001"), a("[::ffff:127.0.0.1]:15001")));
        assert!(!covers(a("127.0.0.1:15001"), a("10.1.2.3:15001")));
        assert!(!covers(a("127.0.0.1:15001"), a("127.0.0.1:15002")));
        assert!(is_loopback("::ffff:127.0.0.9".parse().unwrap()));
    }
}
