//! [`AddressClass`]: which addresses a request someone else directs may reach.
//!
//! One classifier for every outbound request whose destination is not the operator's own
//! choice: a plugin's HTTP request (a grant by DNS name reaches public addresses; internal ones
//! only when the grant says so, see `runtime::http_policy`) and a registry's redirect or auth
//! realm (the registry's own host or public addresses, see `registry::fetch`). Internal is the
//! host itself and its link, private networks, the cluster's own API service, cloud metadata
//! services: what a name's owner (or whoever answers its DNS) could point a request at. IPv4
//! addresses written as IPv6 (mapped, compatible, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`)
//! are judged by the IPv4 address they reach.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an address is, as far as the grant rule goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddressClass {
    /// Reachable through any granted origin.
    Public,
    /// Reachable through an origin granted by this address, by a CIDR holding it, or marked
    /// `private`; the text says which kind of internal address it is.
    Internal(&'static str),
    /// A cloud metadata or wireserver address: reachable only through an origin granted by this
    /// very address.
    Metadata,
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AddressClass::Public => f.write_str("public"),
            AddressClass::Internal(what) => f.write_str(what),
            AddressClass::Metadata => f.write_str("cloud metadata"),
        }
    }
}

/// Metadata and wireserver addresses of the clouds kubewasm may run on (AWS IMDS and its IPv6
/// and DNS-resolver siblings, GCP, Azure, Alibaba, Oracle, OpenStack share 169.254.169.254).
const METADATA_V4: [Ipv4Addr; 6] = [
    Ipv4Addr::new(169, 254, 169, 254), // AWS, GCP, Azure IMDS, OpenStack, DigitalOcean, Oracle
    Ipv4Addr::new(169, 254, 169, 253), // AWS DNS resolver
    Ipv4Addr::new(169, 254, 169, 123), // AWS time sync
    Ipv4Addr::new(168, 63, 129, 16),   // Azure wireserver
    Ipv4Addr::new(100, 100, 100, 200), // Alibaba Cloud
    Ipv4Addr::new(192, 0, 0, 192),     // Oracle Cloud (classic)
];
const METADATA_V6: [Ipv6Addr; 3] = [
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), // AWS IMDS over IPv6
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253), // AWS DNS resolver over IPv6
    Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x123), // AWS time sync over IPv6
];

/// The class of `addr`; `cluster_api` are the addresses of the cluster's own API service.
pub(crate) fn classify(addr: IpAddr, cluster_api: &[IpAddr]) -> AddressClass {
    let addr = canonical(addr);
    if cluster_api.iter().any(|a| canonical(*a) == addr) {
        return AddressClass::Internal("the cluster's API server");
    }
    match addr {
        IpAddr::V4(v4) if METADATA_V4.contains(&v4) => AddressClass::Metadata,
        IpAddr::V6(v6) if METADATA_V6.contains(&v6) => AddressClass::Metadata,
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(v4: Ipv4Addr) -> AddressClass {
    let [a, b, c, _] = v4.octets();
    let internal = if v4.is_loopback() {
        "loopback"
    } else if v4.is_link_local() {
        "link-local"
    } else if a == 0 {
        // "This network": 0.0.0.0 reaches the host itself on Linux.
        "unspecified"
    } else if v4.is_multicast() || v4.is_broadcast() {
        "multicast or broadcast"
    } else if v4.is_private() {
        "private (RFC 1918)"
    } else if a == 100 && b & 0xc0 == 64 {
        "shared address space (100.64.0.0/10)"
    } else if a == 192 && b == 0 && c == 0 {
        "IETF protocol assignment (192.0.0.0/24)"
    } else if a == 198 && b & 0xfe == 18 {
        "benchmarking (198.18.0.0/15)"
    } else if a >= 240 {
        "reserved (240.0.0.0/4)"
    } else {
        return AddressClass::Public;
    };
    AddressClass::Internal(internal)
}

fn classify_v6(v6: Ipv6Addr) -> AddressClass {
    let s = v6.segments();
    let internal = if v6.is_loopback() {
        "loopback"
    } else if v6.is_unspecified() {
        "unspecified"
    } else if v6.is_multicast() {
        "multicast or broadcast"
    } else if s[0] & 0xffc0 == 0xfe80 {
        "link-local"
    } else if s[0] & 0xffc0 == 0xfec0 {
        "site-local (fec0::/10)"
    } else if s[0] & 0xfe00 == 0xfc00 {
        "unique local (fc00::/7)"
    } else if s[0] == 0x0100 && s[1..4] == [0, 0, 0] {
        "discard (100::/64)"
    } else if s[0] == 0x64 && s[1] == 0xff9b {
        // NAT64 prefixes whose embedded address `canonical` could not take out.
        "NAT64 (64:ff9b::/32)"
    } else {
        return AddressClass::Public;
    };
    AddressClass::Internal(internal)
}

/// IPv4 addresses written as IPv6 (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64
/// `64:ff9b::a.b.c.d` and the local-use `64:ff9b:1::/48`) as the IPv4 address they reach.
pub(crate) fn canonical(addr: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = addr else { return addr };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = Ipv4Addr::from(u128::from(v6) as u32);
    let compatible = s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    // RFC 8215 leaves the layout of 64:ff9b:1::/48 to the operator; the last 32 bits are
    // where every translator in use puts the IPv4 address.
    let local_nat64 = s[..3] == [0x64, 0xff9b, 1];
    if compatible || nat64 || local_nat64 {
        IpAddr::V4(embedded)
    } else {
        addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(addr: &str) -> AddressClass {
        classify(addr.parse().unwrap(), &["10.96.0.1".parse().unwrap()])
    }

    #[test]
    fn every_metadata_address_in_every_spelling_is_metadata() {
        for addr in [
            "169.254.169.254",
            "169.254.169.253",
            "169.254.169.123",
            "168.63.129.16",
            "100.100.100.200",
            "192.0.0.192",
            "fd00:ec2::254",
            "fd00:ec2::253",
            "fd00:ec2::123",
            "::ffff:169.254.169.254",
            "::169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a9fe:a9fe",
            "64:ff9b::a83f:8110",
            "::ffff:100.100.100.200",
        ] {
            assert_eq!(class(addr), AddressClass::Metadata, "{addr}");
        }
    }

    #[test]
    fn internal_ranges_are_internal_whatever_the_spelling() {
        for (addr, what) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "loopback"),
            ("64:ff9b::7f00:1", "loopback"),
            ("169.254.1.1", "link-local"),
            ("fe80::1", "link-local"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("224.0.0.1", "multicast or broadcast"),
            ("255.255.255.255", "multicast or broadcast"),
            ("ff02::1", "multicast or broadcast"),
            ("10.0.0.7", "private (RFC 1918)"),
            ("172.16.0.1", "private (RFC 1918)"),
            ("172.31.255.255", "private (RFC 1918)"),
            ("192.168.1.1", "private (RFC 1918)"),
            ("::ffff:10.1.2.3", "private (RFC 1918)"),
            ("64:ff9b:1::a00:1", "private (RFC 1918)"),
            ("100.64.0.1", "shared address space (100.64.0.0/10)"),
            ("100.127.255.254", "shared address space (100.64.0.0/10)"),
            ("192.0.0.8", "IETF protocol assignment (192.0.0.0/24)"),
            ("198.18.0.1", "benchmarking (198.18.0.0/15)"),
            ("198.19.255.1", "benchmarking (198.18.0.0/15)"),
            ("240.0.0.1", "reserved (240.0.0.0/4)"),
            ("fc00::1", "unique local (fc00::/7)"),
            ("fdff:1::1", "unique local (fc00::/7)"),
            ("fec0::1", "site-local (fec0::/10)"),
            ("100::1", "discard (100::/64)"),
            ("64:ff9b:2::1", "NAT64 (64:ff9b::/32)"),
            ("10.96.0.1", "the cluster's API server"),
            ("::ffff:10.96.0.1", "the cluster's API server"),
        ] {
            assert_eq!(class(addr), AddressClass::Internal(what), "{addr}");
        }
    }

    #[test]
    fn public_addresses_are_public() {
        for addr in [
            "93.184.215.14",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.15.255.255",
            "172.32.0.1",
            "192.0.1.1",
            "192.169.0.1",
            "198.17.255.255",
            "198.20.0.1",
            "169.255.0.1",
            "2606:4700::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2001:db9::1",
        ] {
            assert_eq!(class(addr), AddressClass::Public, "{addr}");
        }
    }
}
