//! Which addresses outgoing requests may reach: [`non_public_reason`] and the operator's
//! [`AllowList`].
//!
//! An address is refused unless it is public. Not public, with the reason given:
//!
//! | IPv4 range | reason |
//! | --- | --- |
//! | `0.0.0.0/8` | this network (unspecified) |
//! | `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16` | private |
//! | `100.64.0.0/10` | shared address space (CGNAT) |
//! | `127.0.0.0/8` | loopback |
//! | `169.254.0.0/16` | link-local (cloud metadata `169.254.169.254`) |
//! | `192.0.0.0/24` | IETF protocol assignments |
//! | `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24` | documentation |
//! | `192.88.99.0/24` | 6to4 relay anycast |
//! | `198.18.0.0/15` | benchmarking |
//! | `224.0.0.0/4` | multicast |
//! | `240.0.0.0/4` (with `255.255.255.255`) | reserved, broadcast |
//!
//! IPv6: `::` (unspecified), `::1` (loopback), the rest of `::/96` (IPv4-compatible,
//! deprecated), `100::/64` (discard), `64:ff9b:1::/48` (local NAT64), `2001::/23` (IETF
//! special purpose: Teredo, benchmarking, ORCHID…), `2001:db8::/32` and `3fff::/20`
//! (documentation), `5f00::/16` (SRv6), `fc00::/7` (unique local), `fe80::/10` (link-local),
//! `fec0::/10` (site-local), `ff00::/8` (multicast), and anything else outside `2000::/3`
//! (not global unicast). Addresses that carry an IPv4 address are judged by it:
//! `::ffff:0:0/96` (IPv4-mapped), `64:ff9b::/96` (NAT64) and `2002::/16` (6to4).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// Why `ip` is not a public address, or `None` when it is.
pub fn non_public_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_reason(v4),
        IpAddr::V6(v6) => v6_reason(v6),
    }
}

/// Whether `ip` is a public address.
pub fn is_public(ip: IpAddr) -> bool {
    non_public_reason(ip).is_none()
}

fn v4_reason(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let reason = match (a, b, c) {
        (0, ..) => "this network (unspecified)",
        (10, ..) => "private",
        (100, 64..=127, _) => "shared address space (CGNAT)",
        (127, ..) => "loopback",
        (169, 254, _) => "link-local (cloud metadata)",
        (172, 16..=31, _) => "private",
        (192, 0, 0) => "IETF protocol assignments",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (192, 88, 99) => "6to4 relay anycast",
        (192, 168, _) => "private",
        (198, 18 | 19, _) => "benchmarking",
        (224..=239, ..) => "multicast",
        (240..=255, ..) => "reserved or broadcast",
        _ => return None,
    };
    Some(reason)
}

fn v6_reason(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_reason(v4).map(|_| "IPv4-mapped non-public address");
    }
    if s[..6] == [0; 6] {
        return Some("IPv4-compatible (deprecated)");
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_reason(embedded(s[6], s[7])).map(|_| "NAT64 of a non-public address");
    }
    if s[0] == 0x2002 {
        return v4_reason(embedded(s[1], s[2])).map(|_| "6to4 of a non-public address");
    }
    let reason = match s {
        [0x0100, 0, 0, 0, ..] => "discard-only",
        [0x64, 0xff9b, 1, ..] => "local-use NAT64",
        [0x2001, 0x0db8, ..] => "documentation",
        [0x2001, 0..=0x01ff, ..] => "IETF special purpose (Teredo, benchmarking, ORCHID)",
        [0x3fff, 0..=0x0fff, ..] => "documentation",
        [0x5f00, ..] => "SRv6 segment identifiers",
        [0xfc00..=0xfdff, ..] => "unique local (fc00::/7)",
        [0xfe80..=0xfebf, ..] => "link-local",
        [0xfec0..=0xfeff, ..] => "site-local (deprecated)",
        [0xff00..=0xffff, ..] => "multicast",
        [0x2000..=0x3fff, ..] => return None,
        _ => "not global unicast",
    };
    Some(reason)
}

fn embedded(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

/// Hosts and networks outgoing requests may reach although they are not public
/// (`GATEWAY_EGRESS_ALLOW`; empty by default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    hosts: Vec<String>,
    nets: Vec<IpNet>,
}

/// Why an allow-list entry was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid egress allow-list entry {0:?}: expected a host name, an IP address or a CIDR")]
pub struct AllowListError(pub String);

impl AllowList {
    /// Parses entries separated by commas or white space. Each is a CIDR (`10.1.0.0/16`,
    /// `fd00::/8`), an address (`127.0.0.1`, `::1`, `[::1]`: one host) or a host name
    /// (`localhost`, `hooks.internal`: matched exactly, case-insensitively, against the URL's
    /// host, and then every address it resolves to is allowed).
    pub fn parse(text: &str) -> Result<AllowList, AllowListError> {
        let mut list = AllowList::default();
        for entry in text.split(|c: char| c == ',' || c.is_whitespace()).filter(|e| !e.is_empty()) {
            let bare = entry.trim_start_matches('[').trim_end_matches(']');
            if let Ok(net) = bare.parse::<IpNet>() {
                list.nets.push(net.trunc());
            } else if let Ok(ip) = bare.parse::<IpAddr>() {
                list.nets.push(IpNet::from(ip));
            } else if is_host_name(entry) {
                list.hosts.push(entry.trim_end_matches('.').to_ascii_lowercase());
            } else {
                return Err(AllowListError(entry.to_owned()));
            }
        }
        Ok(list)
    }

    /// Whether nothing is allowed beyond public addresses.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.nets.is_empty()
    }

    /// Whether the URL host `host` (a name, not an address) is listed.
    pub fn allows_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    /// Whether `ip` lies in a listed network (an IPv4-mapped address is also judged as IPv4).
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.nets.iter().any(|net| net.contains(&ip) || mapped.is_some_and(|m| net.contains(&m)))
    }

    /// Whether a connection to `ip`, reached through the URL host `host`, is permitted: the
    /// host is listed, the address is listed, or the address is public.
    pub fn permits(&self, host: &str, ip: IpAddr) -> bool {
        self.allows_host(host) || self.allows_ip(ip) || is_public(ip)
    }
}

fn is_host_name(text: &str) -> bool {
    let text = text.trim_end_matches('.');
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests;
