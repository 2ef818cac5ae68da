//! HTTP origin patterns (`scheme://host[:port]`, `*.suffix`, `:*`): parsing an operator's or a
//! guest's origin, and matching a request's scheme, host and port against it.

use std::fmt;
use std::net::IpAddr;

use kubewasm_apimachinery::validation::validate_dns1123_subdomain;
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
}

/// A granted (or asked-for) HTTP origin: scheme, host or subdomain wildcard, port or any port.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct OriginPattern {
    https: bool,
    host: HostPattern,
    /// `None` = any port.
    port: Option<u16>,
}

impl TryFrom<String> for OriginPattern {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        OriginPattern::parse(&s)
    }
}

impl From<OriginPattern> for String {
    fn from(o: OriginPattern) -> String {
        o.to_string()
    }
}

impl OriginPattern {
    /// Parses `scheme://host[:port]` as documented in the module; the error quotes the input
    /// (cut to a bounded length) and says what is wrong.
    pub fn parse(s: &str) -> Result<OriginPattern, String> {
        let shown = Quoted(s);
        if s.len() > MAX_ORIGIN_LEN {
            return Err(format!(
                "origin {shown}: longer than {MAX_ORIGIN_LEN} bytes"
            ));
        }
        let bad = |why: &str| {
            format!(
                "origin {shown}: {why} (expected scheme://host[:port], e.g. https://lb.example.com)"
            )
        };
        let (scheme, _) = s.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "https" => true,
            "http" => false,
            _ => return Err(bad("the scheme must be http or https")),
        };
        // The url crate parses the host (IDNA, IP literals in every notation); it knows no
        // port wildcard, so `:*` is taken off first.
        let (text, any_port) = match s.strip_suffix(":*") {
            Some(t) => (t, true),
            None => (s, false),
        };
        let url = url::Url::parse(text).map_err(|e| bad(&e.to_string()))?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(bad("user info is not allowed"));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(bad("an origin has no path, query or fragment"));
        }
        let host = match url.host() {
            Some(url::Host::Ipv4(ip)) => HostPattern::Ip(ip.into()),
            Some(url::Host::Ipv6(ip)) => HostPattern::Ip(ip.into()),
            Some(url::Host::Domain(d)) => match d.strip_prefix("*.") {
                Some(below) => {
                    if below.parse::<IpAddr>().is_ok() {
                        return Err(bad("a wildcard covers DNS names, not IP addresses"));
                    }
                    validate_dns1123_subdomain(below).map_err(|e| bad(&e.to_string()))?;
                    HostPattern::Below(below.to_string())
                }
                None => {
                    validate_dns1123_subdomain(d).map_err(|e| {
                        bad(&format!("{e}; a wildcard is only `*.` before a domain"))
                    })?;
                    HostPattern::Name(d.to_string())
                }
            },
            None => return Err(bad("no host")),
        };
        let port = if any_port {
            if url.port().is_some() {
                return Err(bad("two ports"));
            }
            None
        } else {
            Some(
                url.port_or_known_default()
                    .unwrap_or(if https { 443 } else { 80 }),
            )
        };
        Ok(OriginPattern { https, host, port })
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
            (_, Ok(_)) | (HostPattern::Ip(_), Err(_)) => false,
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
        }
        let default = if self.https { 443 } else { 80 };
        match self.port {
            None => f.write_str(":*"),
            Some(p) if p == default => Ok(()),
            Some(p) => write!(f, ":{p}"),
        }
    }
}
