//! What a plugin's outbound HTTP may reach: the operator's origin grants (seen through
//! [`HttpGate`]), the limits of one exchange, and the rule for addresses a host name resolves to.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

/// Decides which HTTP origins a plugin may reach; implemented by the plugins layer from the operator's grants.
pub trait HttpGate: Send + Sync + 'static {
    /// `scheme` is "http" or "https", `host` lowercase (IP literals without brackets), `port` explicit or the scheme default.
    fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool;
}

/// The gate of a plugin without HTTP grants.
struct DenyAll;

impl HttpGate for DenyAll {
    fn allows_origin(&self, _scheme: &str, _host: &str, _port: u16) -> bool {
        false
    }
}

/// Default for [`HttpPolicy::timeout`].
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default for [`HttpPolicy::max_response_bytes`].
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1 << 20;
/// Distinct `origin` label values one plugin's HTTP metrics may take; later origins are counted
/// as `other`. Origins are granted, but a wildcard grant would otherwise let a guest mint labels.
const MAX_ORIGIN_LABELS: usize = 64;

/// One plugin's outbound HTTP policy; cheap to clone (its instances share it).
#[derive(Clone)]
pub struct HttpPolicy {
    /// The operator's origin grants.
    pub gate: Arc<dyn HttpGate>,
    /// Bounds each step of an exchange separately: DNS plus connect plus TLS, the wait for the
    /// response headers, and the wait between two pieces of the body. A guest's
    /// `request-options` may shorten these, never lengthen them.
    pub timeout: Duration,
    /// Most bytes of one response body a guest may receive; reading past it fails with
    /// `HTTP-response-body-size` (a declared `Content-Length` over it fails at the headers).
    pub max_response_bytes: u64,
    /// Refuse every request but GET and HEAD (the plugin or the host runs in dry-run mode).
    pub dry_run: bool,
    /// Answer granted requests from this stub instead of the network (`kubewasm test`).
    pub stub: Option<Arc<dyn super::HttpStub>>,
    origin_labels: Arc<Mutex<HashSet<String>>>,
}

impl HttpPolicy {
    /// `gate` with the default limits ([`DEFAULT_HTTP_TIMEOUT`], [`DEFAULT_MAX_RESPONSE_BYTES`])
    /// and no dry run.
    pub fn new(gate: Arc<dyn HttpGate>) -> Self {
        Self {
            gate,
            timeout: DEFAULT_HTTP_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            dry_run: false,
            stub: None,
            origin_labels: Arc::default(),
        }
    }

    /// No origin granted: every request fails with `HTTP-request-denied`.
    pub fn deny_all() -> Self {
        Self::new(Arc::new(DenyAll))
    }

    /// The metric label for a granted `origin`: itself while the plugin has used fewer than
    /// [`MAX_ORIGIN_LABELS`] origins, `other` after.
    pub(crate) fn origin_label(&self, origin: &Origin) -> String {
        let text = origin.to_string();
        let mut seen = self.origin_labels.lock();
        if seen.contains(&text) || (seen.len() < MAX_ORIGIN_LABELS && seen.insert(text.clone())) {
            text
        } else {
            "other".to_owned()
        }
    }
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self::deny_all()
    }
}

impl fmt::Debug for HttpPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpPolicy")
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

/// Scheme, host and port of a request, checked to be safe to log and to label metrics with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Origin {
    pub https: bool,
    /// Lowercase DNS name or IP literal (IPv6 without brackets).
    pub host: String,
    /// Literal address, when `host` is one.
    pub ip: Option<IpAddr>,
    pub port: u16,
}

/// Why a request URI has no usable origin. Never carries the guest's string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadUri {
    /// Not http or https.
    Scheme,
    /// No host, user info, or characters no host name has.
    Host,
}

impl Origin {
    /// The origin of `uri`, or why it has none.
    pub(crate) fn of(uri: &http::Uri) -> Result<Self, BadUri> {
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(BadUri::Scheme),
        };
        let authority = uri.authority().ok_or(BadUri::Host)?;
        if authority.as_str().contains('@') {
            return Err(BadUri::Host);
        }
        let host = authority.host();
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let ip = bare.parse::<IpAddr>().ok();
        if host.starts_with('[') && !matches!(ip, Some(IpAddr::V6(_))) {
            return Err(BadUri::Host);
        }
        let host = match ip {
            Some(ip) => ip.to_string(),
            None => {
                let ok = !bare.is_empty()
                    && bare.len() <= 253
                    && bare
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
                if !ok {
                    return Err(BadUri::Host);
                }
                bare.to_ascii_lowercase()
            }
        };
        let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Self {
            https,
            host,
            ip,
            port,
        })
    }

    pub(crate) fn scheme(&self) -> &'static str {
        if self.https { "https" } else { "http" }
    }

    /// Whether `gate` grants this origin.
    pub(crate) fn granted(&self, gate: &dyn HttpGate) -> bool {
        gate.allows_origin(self.scheme(), &self.host, self.port)
    }

    /// Whether `gate` lets this origin's requests reach `addr`, one of the addresses its host
    /// resolved to. Addresses that reach the host itself or its link (loopback, link-local
    /// including the cloud metadata endpoint 169.254.169.254, unspecified, multicast,
    /// broadcast, and their IPv6 spellings) need the origin granted by that very address, so a
    /// granted DNS name cannot be pointed at them (DNS rebinding, `localhost`).
    pub(crate) fn may_reach(&self, addr: IpAddr, gate: &dyn HttpGate) -> bool {
        let addr = canonical(addr);
        !is_local(addr) || gate.allows_origin(self.scheme(), &addr.to_string(), self.port)
    }

    /// The value of the `Host` header: the host, bracketed if IPv6, with the port unless it is
    /// the scheme's default.
    pub(crate) fn host_header(&self) -> String {
        let host = match self.ip {
            Some(IpAddr::V6(_)) => format!("[{}]", self.host),
            _ => self.host.clone(),
        };
        let default = if self.https { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ip {
            Some(IpAddr::V6(_)) => write!(f, "{}://[{}]:{}", self.scheme(), self.host, self.port),
            _ => write!(f, "{}://{}:{}", self.scheme(), self.host, self.port),
        }
    }
}

/// IPv4 addresses written as IPv6 (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`, NAT64
/// `64:ff9b::a.b.c.d`) as the IPv4 address they reach.
fn canonical(addr: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = addr else { return addr };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = Ipv4Addr::from(u128::from(v6) as u32);
    let compatible = s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified();
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    if compatible || nat64 {
        IpAddr::V4(embedded)
    } else {
        addr
    }
}

/// Loopback, link-local, unspecified, multicast or broadcast.
fn is_local(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
                // "This network" (0.0.0.0/8) reaches the host itself on Linux.
                || v4.octets()[0] == 0
        }
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || is_unicast_link_local(v6)
        }
    }
}

fn is_unicast_link_local(v6: Ipv6Addr) -> bool {
    v6.segments()[0] & 0xffc0 == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Grants(&'static [&'static str]);

    impl HttpGate for Grants {
        fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
            self.0
                .contains(&format!("{scheme}://{host}:{port}").as_str())
        }
    }

    fn origin(uri: &str) -> Result<Origin, BadUri> {
        Origin::of(&uri.parse().unwrap())
    }

    #[test]
    fn origins_are_parsed_and_normalised() {
        let o = origin("https://LB.Example.com/x?y=1").unwrap();
        assert_eq!(o.to_string(), "https://lb.example.com:443");
        assert_eq!(o.host_header(), "lb.example.com");
        let o = origin("http://[::1]:8080/").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("::1", 8080));
        assert_eq!(o.to_string(), "http://[::1]:8080");
        assert_eq!(o.host_header(), "[::1]:8080");
        assert_eq!(origin("ftp://a/"), Err(BadUri::Scheme));
        assert_eq!(origin("http://user:pw@a/"), Err(BadUri::Host));
    }

    #[test]
    fn local_addresses_need_a_grant_by_address() {
        let by_name = Grants(&["http://localhost:80", "http://metadata:80"]);
        let o = origin("http://localhost/").unwrap();
        assert!(o.granted(&by_name));
        for addr in [
            "127.0.0.1",
            "::1",
            "::ffff:127.0.0.1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "255.255.255.255",
            "64:ff9b::7f00:1",
        ] {
            assert!(!o.may_reach(addr.parse().unwrap(), &by_name), "{addr}");
        }
        assert!(o.may_reach("93.184.215.14".parse().unwrap(), &by_name));
        assert!(o.may_reach("10.0.0.7".parse().unwrap(), &by_name));
        let by_address = Grants(&["http://localhost:80", "http://127.0.0.1:80"]);
        assert!(o.may_reach("127.0.0.1".parse().unwrap(), &by_address));
        assert!(o.may_reach("::ffff:127.0.0.1".parse().unwrap(), &by_address));
        assert!(!o.may_reach("::1".parse().unwrap(), &by_address));
    }

    #[test]
    fn origin_labels_are_bounded_per_plugin() {
        let policy = HttpPolicy::deny_all();
        for port in 1..=MAX_ORIGIN_LABELS as u16 {
            let o = origin(&format!("http://a.example:{port}/")).unwrap();
            assert_eq!(policy.origin_label(&o), o.to_string());
        }
        let late = origin("http://b.example/").unwrap();
        assert_eq!(policy.origin_label(&late), "other");
        let early = origin("http://a.example:1/").unwrap();
        assert_eq!(policy.origin_label(&early), "http://a.example:1");
    }
}
