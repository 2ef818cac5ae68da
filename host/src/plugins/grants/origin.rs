//! HTTP origin patterns (`scheme://host[:port]`, `*.suffix`, `:*`, a CIDR such as
//! `http://10.0.0.0/8:*`, and the table form `{ origin = "…", private = true }`): parsing an
//! operator's or a guest's origin, and matching a request's scheme, host and port, or an
//! address its name resolved to, against it.

use std::fmt;
use std::net::IpAddr;

use kubewasm_apimachinery::validation::{ValidationError, validate_dns1123_subdomain};
use serde::{Deserialize, Serialize};

use super::*;

/// The host part of an origin pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum HostPattern {
    /// Exactly this DNS name (lowercase).
    Name(String),
    /// Exactly this address.
    Ip(IpAddr),
    /// One or more labels below this DNS name (`*.suffix`).
    Below(String),
    /// Every address of this network (`10.0.0.0/8`): the address and its prefix length.
    Cidr(IpAddr, u8),
}

/// A granted (or asked-for) HTTP origin: scheme, host or subdomain wildcard, port or any port.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "OriginEntry", into = "OriginEntry")]
pub struct OriginPattern {
    https: bool,
    host: HostPattern,
    /// `None` = any port.
    port: Option<u16>,
    /// The operator marked it `private`: its name may resolve to internal addresses.
    private: bool,
}

/// Why a text is not an origin pattern. The origin is quoted (escaped, cut to a bounded
/// length), since a guest's `describe()` may be what wrote it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// Longer than any origin.
    #[error("origin {0}: longer than {MAX_ORIGIN_LEN} bytes")]
    TooLong(String),
    /// Not `scheme://host[:port]` or a CIDR.
    #[error(
        "origin {origin}: {problem} (expected scheme://host[:port], e.g. https://lb.example.com)"
    )]
    Syntax {
        /// The origin, quoted.
        origin: String,
        /// What is wrong.
        #[source]
        problem: OriginProblem,
    },
    /// `private = true` on an address or network.
    #[error(
        "origin {0}: `private` is for DNS names (an address or a CIDR already names what it \
         reaches)"
    )]
    PrivateAddress(String),
}

/// What is wrong with an origin's syntax.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OriginProblem {
    /// No `://`.
    #[error("no scheme")]
    NoScheme,
    /// Neither http nor https.
    #[error("the scheme must be http or https")]
    Scheme,
    /// Not a URL.
    #[error("{0}")]
    Url(#[source] url::ParseError),
    /// `user@` or `user:password@`.
    #[error("user info is not allowed")]
    UserInfo,
    /// A path, query or fragment.
    #[error("an origin has no path, query or fragment")]
    Path,
    /// `*.` before an IP address.
    #[error("a wildcard covers DNS names, not IP addresses")]
    WildcardAddress,
    /// What follows `*.` is not a DNS name.
    #[error("{0}")]
    WildcardDomain(#[source] ValidationError),
    /// Not a DNS name (a `*` anywhere but in front, say).
    #[error("{0}; a wildcard is only `*.` before a domain")]
    Name(#[source] ValidationError),
    /// No host.
    #[error("no host")]
    NoHost,
    /// A port and `:*`.
    #[error("two ports")]
    TwoPorts,
    /// A CIDR whose network part is not an address.
    #[error("a CIDR needs an IP address before the `/`")]
    CidrAddress,
    /// An IPv6 network without brackets, or an IPv4 one with them.
    #[error("an IPv6 network is written in brackets, an IPv4 one without")]
    CidrBrackets,
    /// A CIDR's port that is neither a number nor `*`.
    #[error("port {0:?} is not a port number or `*`")]
    CidrPort(String),
    /// A prefix length out of range.
    #[error("prefix length {len:?} is not a number from 0 to {max}")]
    PrefixLength {
        /// As written.
        len: String,
        /// 32 or 128.
        max: u8,
    },
    /// An address with host bits below the prefix.
    #[error("{addr}/{len} has host bits set (the network is {network}/{len})")]
    HostBits {
        /// The address written.
        addr: IpAddr,
        /// The prefix length.
        len: u8,
        /// The network's first address.
        network: IpAddr,
    },
}

/// An origin as written in `[grants]`: a string, or a table that can mark it `private`.
#[derive(Deserialize, Serialize)]
#[serde(untagged)]
enum OriginEntry {
    Plain(String),
    Table(OriginTable),
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct OriginTable {
    origin: String,
    #[serde(default)]
    private: bool,
}

impl TryFrom<OriginEntry> for OriginPattern {
    type Error = OriginError;
    fn try_from(entry: OriginEntry) -> Result<Self, OriginError> {
        match entry {
            OriginEntry::Plain(s) => OriginPattern::parse(&s),
            OriginEntry::Table(t) => {
                let mut o = OriginPattern::parse(&t.origin)?;
                if t.private && matches!(o.host, HostPattern::Ip(_) | HostPattern::Cidr(..)) {
                    return Err(OriginError::PrivateAddress(Quoted(&t.origin).to_string()));
                }
                o.private = t.private;
                Ok(o)
            }
        }
    }
}

impl From<OriginPattern> for OriginEntry {
    fn from(o: OriginPattern) -> OriginEntry {
        if o.private {
            OriginEntry::Table(OriginTable {
                origin: o.to_string(),
                private: true,
            })
        } else {
            OriginEntry::Plain(o.to_string())
        }
    }
}

impl OriginPattern {
    /// Parses `scheme://host[:port]` as documented in the module; the error quotes the input
    /// (cut to a bounded length) and says what is wrong.
    pub fn parse(s: &str) -> Result<OriginPattern, OriginError> {
        if s.len() > MAX_ORIGIN_LEN {
            return Err(OriginError::TooLong(Quoted(s).to_string()));
        }
        let bad = |problem| OriginError::Syntax {
            origin: Quoted(s).to_string(),
            problem,
        };
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| bad(OriginProblem::NoScheme))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad(OriginProblem::Scheme)),
        };
        if let Some((net, tail)) = rest.split_once('/')
            && !tail.is_empty()
            && tail.as_bytes()[0].is_ascii_digit()
        {
            return parse_cidr(https, net, tail).map_err(bad);
        }
        // The url crate parses the host (IDNA, IP literals in every notation); it knows no
        // port wildcard, so `:*` is taken off first.
        let (text, any_port) = match s.strip_suffix(":*") {
            Some(t) => (t, true),
            None => (s, false),
        };
        let url = url::Url::parse(text).map_err(|e| bad(OriginProblem::Url(e)))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad(OriginProblem::UserInfo));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(bad(OriginProblem::Path));
        }
        let host = match url.host() {
            Some(url::Host::Ipv4(ip)) => HostPattern::Ip(ip.into()),
            Some(url::Host::Ipv6(ip)) => HostPattern::Ip(ip.into()),
            Some(url::Host::Domain(d)) => match d.strip_prefix("*.") {
                Some(below) => {
                    if below.parse::<IpAddr>().is_ok() {
                        return Err(bad(OriginProblem::WildcardAddress));
                    }
                    validate_dns1123_subdomain(below)
                        .map_err(|e| bad(OriginProblem::WildcardDomain(e)))?;
                    HostPattern::Below(below.to_string())
                }
                None => {
                    validate_dns1123_subdomain(d).map_err(|e| bad(OriginProblem::Name(e)))?;
                    HostPattern::Name(d.to_string())
                }
            },
            None => return Err(bad(OriginProblem::NoHost)),
        };
        let port = if any_port {
            if url.port().is_some() {
                return Err(bad(OriginProblem::TwoPorts));
            }
            None
        } else {
            Some(
                url.port_or_known_default()
                    .unwrap_or(if https { 443 } else { 80 }),
            )
        };
        Ok(OriginPattern {
            https,
            host,
            port,
            private: false,
        })
    }

    /// Whether the operator marked this origin `private`.
    pub fn private(&self) -> bool {
        self.private
    }

    /// Whether this pattern names `addr` (on `port`, for `scheme`) by address: exactly, or, when
    /// not `exact`, as a CIDR holding it.
    pub fn reaches_address(&self, scheme: &str, addr: IpAddr, port: u16, exact: bool) -> bool {
        let addr = unmapped(addr);
        let host_ok = match &self.host {
            HostPattern::Ip(a) => unmapped(*a) == addr,
            HostPattern::Cidr(net, len) => !exact && in_network(addr, *net, *len),
            HostPattern::Name(_) | HostPattern::Below(_) => false,
        };
        host_ok && self.scheme_ok(scheme) && self.port.is_none_or(|p| p == port)
    }

    fn scheme_ok(&self, scheme: &str) -> bool {
        match scheme {
            "https" => self.https,
            "http" => !self.https,
            _ => false,
        }
    }

    /// Whether a request to `scheme://host:port` is within this pattern. `host` is lowercase,
    /// an IP literal without brackets.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let scheme_ok = match scheme {
            "https" => self.https,
            "http" => !self.https,
            _ => false,
        };
        let host_ok = match (&self.host, host.parse::<IpAddr>()) {
            (HostPattern::Ip(a), Ok(b)) => *a == b,
            (HostPattern::Cidr(net, len), Ok(b)) => in_network(unmapped(b), *net, *len),
            (_, Ok(_)) | (HostPattern::Ip(_) | HostPattern::Cidr(..), Err(_)) => false,
            (HostPattern::Name(n), Err(_)) => n == host,
            (HostPattern::Below(s), Err(_)) => strictly_below(host, s),
        };
        scheme_ok && host_ok && self.port.is_none_or(|p| p == port)
    }

    /// Whether every origin `asked` matches is also matched by this pattern.
    pub(super) fn covers(&self, asked: &OriginPattern) -> bool {
        let port_ok = match (self.port, asked.port) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        let host_ok = match (&self.host, &asked.host) {
            (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
            (HostPattern::Cidr(net, len), HostPattern::Ip(b)) => in_network(*b, *net, *len),
            (HostPattern::Cidr(net, len), HostPattern::Cidr(b, blen)) => {
                blen >= len && in_network(*b, *net, *len)
            }
            (HostPattern::Name(a), HostPattern::Name(b)) => a == b,
            (HostPattern::Below(s), HostPattern::Name(n)) => strictly_below(n, s),
            (HostPattern::Below(s), HostPattern::Below(t)) => s == t || strictly_below(t, s),
            _ => false,
        };
        self.https == asked.https && port_ok && host_ok
    }
}

/// `host` is one or more labels below `suffix`.
pub(super) fn strictly_below(host: &str, suffix: &str) -> bool {
    host.strip_suffix(suffix)
        .and_then(|p| p.strip_suffix('.'))
        .is_some_and(|labels| !labels.is_empty() && !labels.ends_with('.'))
}

impl fmt::Display for OriginPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.https { "https://" } else { "http://" })?;
        match &self.host {
            HostPattern::Name(n) => f.write_str(n)?,
            HostPattern::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostPattern::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
            HostPattern::Below(s) => write!(f, "*.{s}")?,
            HostPattern::Cidr(IpAddr::V4(ip), len) => write!(f, "{ip}/{len}")?,
            HostPattern::Cidr(IpAddr::V6(ip), len) => write!(f, "[{ip}]/{len}")?,
        }
        let default = if self.https { 443 } else { 80 };
        match self.port {
            None => f.write_str(":*"),
            Some(p) if p == default => Ok(()),
            Some(p) => write!(f, ":{p}"),
        }
    }
}

/// Parses the `net/len[:port]` of a CIDR origin (`10.0.0.0/8:*`, `[fc00::]/7:8080`); the
/// address must be the network's first (no host bits), so the grant reads as what it covers.
fn parse_cidr(https: bool, net: &str, tail: &str) -> Result<OriginPattern, OriginProblem> {
    let bare = net
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(net);
    let addr: IpAddr = bare.parse().map_err(|_| OriginProblem::CidrAddress)?;
    if matches!(addr, IpAddr::V6(_)) != net.starts_with('[') {
        return Err(OriginProblem::CidrBrackets);
    }
    let (len, port) = match tail.split_once(':') {
        Some((len, "*")) => (len, None),
        Some((len, port)) => (
            len,
            Some(
                port.parse::<u16>()
                    .map_err(|_| OriginProblem::CidrPort(port.to_string()))?,
            ),
        ),
        None => (tail, Some(if https { 443 } else { 80 })),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len: u8 =
        len.parse()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| OriginProblem::PrefixLength {
                len: len.to_string(),
                max,
            })?;
    if network(addr, len) != bits(addr) {
        return Err(OriginProblem::HostBits {
            addr,
            len,
            network: from_bits(addr, network(addr, len)),
        });
    }
    Ok(OriginPattern {
        https,
        host: HostPattern::Cidr(addr, len),
        port,
        private: false,
    })
}

/// An IPv4-mapped IPv6 address as the IPv4 address it reaches.
fn unmapped(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

fn from_bits(like: IpAddr, bits: u128) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4((bits as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(bits.into()),
    }
}

/// `addr` with all but the first `len` bits cleared.
fn network(addr: IpAddr, len: u8) -> u128 {
    let width = if addr.is_ipv4() { 32 } else { 128 };
    let host_bits = u32::from(width - len);
    let mask = u128::MAX.checked_shl(host_bits).unwrap_or(0);
    bits(addr) & mask
}

/// Whether `addr` is in `net/len` (same family only).
fn in_network(addr: IpAddr, net: IpAddr, len: u8) -> bool {
    addr.is_ipv4() == net.is_ipv4() && network(addr, len) == network(net, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> OriginPattern {
        OriginPattern::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn cidr_origins_parse_print_and_match_addresses_only() {
        let net = p("http://10.0.0.0/8:*");
        assert_eq!(net.to_string(), "http://10.0.0.0/8:*");
        assert!(net.matches("http", "10.1.2.3", 8080));
        assert!(net.matches("http", "::ffff:10.1.2.3", 80));
        assert!(!net.matches("http", "11.0.0.1", 80));
        assert!(!net.matches("https", "10.0.0.1", 443));
        assert!(!net.matches("http", "ten.example", 80));
        assert!(net.reaches_address("http", "10.9.9.9".parse().unwrap(), 1, false));
        assert!(!net.reaches_address("http", "10.9.9.9".parse().unwrap(), 1, true));
        let v6 = p("https://[fc00::]/7:8443");
        assert_eq!(v6.to_string(), "https://[fc00::]/7:8443");
        assert!(v6.matches("https", "fd12::1", 8443));
        assert!(!v6.matches("https", "fd12::1", 443));
        assert_eq!(
            p("http://192.168.0.0/16").to_string(),
            "http://192.168.0.0/16"
        );
        assert!(net.covers(&p("http://10.2.0.0/16:80")));
        assert!(net.covers(&p("http://10.2.3.4:80")));
        assert!(!p("http://10.2.0.0/16:*").covers(&net));
        for bad in [
            "http://10.0.0.1/8",
            "http://10.0.0.0/33",
            "http://fc00::/7",
            "http://[10.0.0.0]/8",
            "http://ten/8",
            "http://10.0.0.0/8:x",
        ] {
            assert!(OriginPattern::parse(bad).is_err(), "{bad}");
        }
        assert!(
            OriginPattern::parse("http://10.0.0.1/8")
                .unwrap_err()
                .to_string()
                .contains("10.0.0.0/8")
        );
    }

    #[test]
    fn exact_address_grants_reach_only_that_address() {
        let meta = p("http://169.254.169.254");
        let addr = "169.254.169.254".parse().unwrap();
        assert!(meta.reaches_address("http", addr, 80, true));
        assert!(!meta.reaches_address("http", addr, 81, true));
        assert!(!p("http://169.254.0.0/16").reaches_address("http", addr, 80, true));
        assert!(!p("http://*.example.com").reaches_address("http", addr, 80, false));
    }

    #[test]
    fn the_table_form_marks_a_name_private() {
        #[derive(Deserialize)]
        struct G {
            http: Vec<OriginPattern>,
        }
        let g: G = toml::from_str(
            "http = [\"https://a.example\", { origin = \"http://svc.ns.svc:8080\", private = true }]",
        )
        .unwrap();
        assert!(!g.http[0].private());
        assert!(g.http[1].private());
        assert!(g.http[1].matches("http", "svc.ns.svc", 8080));
        for bad in [
            "http = [{ origin = \"http://10.0.0.0/8\", private = true }]",
            "http = [{ origin = \"http://svc\", privat = true }]",
        ] {
            assert!(toml::from_str::<G>(bad).is_err(), "{bad}");
        }
    }
}
