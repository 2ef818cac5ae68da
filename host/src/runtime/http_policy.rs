//! What a plugin's outbound HTTP may reach: the operator's origin grants (seen through
//! [`HttpGate`]), the limits of one exchange, and the rule for addresses a host name resolves to.

use std::collections::HashSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;

use super::http_bounds::{DEFAULT_HTTP_MAX_INFLIGHT, OpenCount};
use crate::address::{AddressClass, canonical, classify};

/// Decides which HTTP origins a plugin may reach; implemented by the plugins layer from the operator's grants.
pub trait HttpGate: Send + Sync + 'static {
    /// `scheme` is "http" or "https", `host` lowercase (IP literals without brackets), `port` explicit or the scheme default.
    fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool;

    /// Whether an origin granted by address reaches `addr` (canonical, IPv4 as IPv4) on `port`:
    /// only an origin naming that very address when `exact`, also a CIDR holding it otherwise.
    fn allows_address(&self, scheme: &str, addr: IpAddr, port: u16, exact: bool) -> bool {
        let _ = exact;
        self.allows_origin(scheme, &addr.to_string(), port)
    }

    /// Whether the grant of `scheme://host:port` is marked `private`: its name may resolve to
    /// internal addresses (not metadata ones).
    fn private_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        let _ = (scheme, host, port);
        false
    }
}

/// Answers the name lookups of outgoing requests before the system resolver does.
pub trait Resolver: Send + Sync + 'static {
    /// The addresses of `host`, or `None` to ask the system resolver.
    fn resolve(&self, host: &str) -> Option<Vec<IpAddr>>;
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
    /// Most requests the plugin (all its instances) may have open at once, from before the
    /// DNS lookup until the connection closes; over it a request fails with
    /// `internal-error("connection limit reached: …")`.
    pub max_inflight: usize,
    /// Answers name lookups before the system resolver (set from the runtime's configuration).
    pub resolver: Option<Arc<dyn Resolver>>,
    /// The host-wide count of open requests (set by the runtime).
    pub(crate) host_connections: Option<OpenCount>,
    /// Addresses of the cluster's API service (set by the runtime).
    pub(crate) cluster_api: Arc<[IpAddr]>,
    /// Whether requests take connection permits and end with their call; `false` only for a
    /// benchmark's baseline (see `HandlerInstance::without_bounds_for_benchmarks`).
    pub(crate) bounded: bool,
    /// This plugin's count of open requests, made at first use with `max_inflight`.
    inflight: Arc<OnceLock<OpenCount>>,
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
            max_inflight: DEFAULT_HTTP_MAX_INFLIGHT,
            resolver: None,
            host_connections: None,
            cluster_api: Arc::from([]),
            bounded: true,
            inflight: Arc::default(),
            origin_labels: Arc::default(),
        }
    }

    /// The plugin's count of open requests.
    pub(crate) fn inflight(&self) -> &OpenCount {
        self.inflight
            .get_or_init(|| OpenCount::new(self.max_inflight.max(1)))
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
            .field("max_inflight", &self.max_inflight)
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
    /// resolved to; `Err` names the class of address refused. Public addresses: always.
    /// Internal ones (the host itself, its link, private networks, the cluster's API service,
    /// see [`classify`]): only through an origin granted by that address or a CIDR holding it,
    /// or a grant marked `private`. Metadata addresses: only through an origin granted by that
    /// very address. So a granted DNS name cannot be pointed at them (DNS rebinding,
    /// `localhost`).
    pub(crate) fn may_reach(
        &self,
        addr: IpAddr,
        gate: &dyn HttpGate,
        cluster_api: &[IpAddr],
    ) -> Result<(), AddressClass> {
        let class = classify(addr, cluster_api);
        let addr = canonical(addr);
        let scheme = self.scheme();
        let allowed = match class {
            AddressClass::Public => true,
            AddressClass::Metadata => gate.allows_address(scheme, addr, self.port, true),
            AddressClass::Internal(_) => {
                gate.allows_address(scheme, addr, self.port, false)
                    || gate.private_origin(scheme, &self.host, self.port)
            }
        };
        if allowed { Ok(()) } else { Err(class) }
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

    /// Grants by address (exact) or by 10.0.0.0/8, and names marked private.
    struct Wide {
        exact: &'static [&'static str],
        private: &'static [&'static str],
    }

    impl HttpGate for Wide {
        fn allows_origin(&self, _: &str, _: &str, _: u16) -> bool {
            true
        }
        fn allows_address(&self, _: &str, addr: IpAddr, _: u16, exact: bool) -> bool {
            let text = addr.to_string();
            self.exact.contains(&text.as_str())
                || (!exact && matches!(addr, IpAddr::V4(v4) if v4.octets()[0] == 10))
        }
        fn private_origin(&self, _: &str, host: &str, _: u16) -> bool {
            self.private.contains(&host)
        }
    }

    #[test]
    fn internal_addresses_need_an_address_a_cidr_or_private_and_metadata_its_address() {
        let gate = Wide {
            exact: &["169.254.169.254", "192.168.1.1"],
            private: &["svc.ns.svc"],
        };
        let api: Vec<IpAddr> = vec!["10.96.0.1".parse().unwrap()];
        let by_name = origin("http://x.example.test/").unwrap();
        let reach = |o: &Origin, a: &str| o.may_reach(a.parse().unwrap(), &gate, &api);
        assert_eq!(reach(&by_name, "93.184.215.14"), Ok(()));
        assert_eq!(reach(&by_name, "10.1.2.3"), Ok(()), "by CIDR");
        assert_eq!(
            reach(&by_name, "::ffff:10.1.2.3"),
            Ok(()),
            "mapped, by CIDR"
        );
        assert_eq!(
            reach(&by_name, "10.96.0.1"),
            Ok(()),
            "the API service, by CIDR"
        );
        assert_eq!(reach(&by_name, "192.168.1.1"), Ok(()), "by address");
        assert_eq!(
            reach(&by_name, "169.254.169.254"),
            Ok(()),
            "metadata by address"
        );
        for (addr, class) in [
            ("172.16.0.1", AddressClass::Internal("private (RFC 1918)")),
            ("fc00::1", AddressClass::Internal("unique local (fc00::/7)")),
            (
                "100.64.0.1",
                AddressClass::Internal("shared address space (100.64.0.0/10)"),
            ),
            ("fd00:ec2::254", AddressClass::Metadata),
            ("100.100.100.200", AddressClass::Metadata),
            ("168.63.129.16", AddressClass::Metadata),
            ("64:ff9b:1::a9fe:a9fd", AddressClass::Metadata),
        ] {
            assert_eq!(reach(&by_name, addr), Err(class), "{addr}");
        }
        let private = origin("http://svc.ns.svc/").unwrap();
        assert_eq!(reach(&private, "172.16.0.1"), Ok(()));
        assert_eq!(reach(&private, "fc00::1"), Ok(()));
        assert_eq!(reach(&private, "127.0.0.1"), Ok(()));
        assert_eq!(
            reach(&private, "fd00:ec2::254"),
            Err(AddressClass::Metadata),
            "private never covers metadata"
        );
        let cidr_only = Wide {
            exact: &[],
            private: &[],
        };
        assert_eq!(
            by_name.may_reach("10.0.0.1".parse().unwrap(), &cidr_only, &api),
            Ok(())
        );
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
            assert!(
                o.may_reach(addr.parse().unwrap(), &by_name, &[]).is_err(),
                "{addr}"
            );
        }
        assert!(
            o.may_reach("93.184.215.14".parse().unwrap(), &by_name, &[])
                .is_ok()
        );
        assert!(
            o.may_reach("10.0.0.7".parse().unwrap(), &by_name, &[])
                .is_err()
        );
        let by_address = Grants(&["http://localhost:80", "http://127.0.0.1:80"]);
        assert!(
            o.may_reach("127.0.0.1".parse().unwrap(), &by_address, &[])
                .is_ok()
        );
        assert!(
            o.may_reach("::ffff:127.0.0.1".parse().unwrap(), &by_address, &[])
                .is_ok()
        );
        assert!(
            o.may_reach("::1".parse().unwrap(), &by_address, &[])
                .is_err()
        );
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
