//! What the operator grants one plugin, and whether that covers what its `describe()` asks for.
//!
//! Deny by default: a plugin gets nothing nobody granted. The grants come from the `[grants]`
//! table of the plugin's `NAME.toml`; a plugin whose manifest has no `[grants]` table gets the
//! host-wide default (`--default-grants FILE`, a TOML file holding one `[grants]` table), or,
//! without that flag, the built-in default: **watch and read anything except Secrets; no
//! writes, no Events, no HTTP**. `kubewasm dev` instead grants each plugin what it asks for.
//! A `[grants]` table replaces the default as a whole: keys it leaves out grant nothing.
//!
//! ```toml
//! [grants]
//! # Watch (subscribe) and read (cache, kube.get): apiVersion + kind, optionally namespaces.
//! watch = [
//!   { api-version = "v1", kind = "Service" },
//!   { api-version = "apps/*", kind = "*", namespaces = ["web", "shop"] },
//! ]
//! # Writes: kind × verbs × namespaces. Verbs: create, update, patch, delete, apply.
//! write = [{ api-version = "v1", kind = "Service", verbs = ["patch", "update"], namespaces = ["default"] }]
//! events = true                       # may record Events (events.k8s.io/v1)
//! http = ["https://lb.example.com", "http://127.0.0.1:9000", "https://*.lb.example.com", "http://127.0.0.1:*"]
//! ```
//!
//! Resources: `api-version` is `v1`, `group/version`, `group/*` (every version of a group) or
//! `*`; `kind` is a kind or `*`. **`kind = "*"` never covers Secrets** (`v1` `Secret`): they
//! are granted only by naming them. `namespaces` is a list of namespaces; left out, the grant
//! covers every namespace and cluster-scoped objects (a request without a namespace needs it).
//!
//! Verbs are the guest's operations: `create` (`kube.create`), `update` (`kube.replace`),
//! `patch` (`kube.patch`), `delete` (`kube.delete`) and `apply` (`kube.apply`, server-side
//! apply). `apply` is its own grant because it may create the object; in RBAC it needs both
//! `patch` and `create` (see `kubewasm rbac`). Reads (`get`, `list`, `watch`) are covered by
//! `watch`. A write grant also covers the kind's subresources (`status`).
//!
//! HTTP origins: `scheme://host[:port]`, scheme `http` or `https`, no path, query, fragment or
//! user info; an omitted port means the scheme's default (80 or 443). `https://*.example.com`
//! matches one or more labels below `example.com` (`a.example.com`, `a.b.example.com`), never
//! `example.com` itself (list it too) and never an IP address. `:*` matches any port
//! (`http://127.0.0.1:*`). IPv6 literals are written in brackets (`http://[::1]:8080`).
//!
//! Writes are also rate limited per plugin by a token bucket, `write-qps` (default
//! [`DEFAULT_WRITE_QPS`]) and `write-burst` (default [`DEFAULT_WRITE_BURST`]) in `NAME.toml`,
//! the defaults of client-go's client rate limiter; `dry-run = true` sends every write as a
//! dry run.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use kubewasm_apimachinery::validation::{
    validate_api_version, validate_dns1123_label, validate_dns1123_subdomain, validate_kind,
};
use serde::{Deserialize, Serialize};

use super::manifest::{Manifest, ManifestError};
use crate::runtime::{Permission, PluginInfo, Subscription};

/// Default sustained writes per second of one plugin (client-go's default client QPS).
pub const DEFAULT_WRITE_QPS: f64 = 5.0;
/// Default burst of writes of one plugin (client-go's default client burst).
pub const DEFAULT_WRITE_BURST: u32 = 10;
/// Most permissions one `describe()` may ask for.
pub const MAX_PERMISSIONS: usize = 64;
/// Most HTTP origins one `describe()` may ask for.
pub const MAX_HTTP_ORIGINS: usize = 32;
/// Longest origin string accepted (a guest's or the operator's).
const MAX_ORIGIN_LEN: usize = 512;

/// Verbs a plugin may ask for that are covered by the `watch` grants.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// A write operation, as granted and as the guest's `kube` calls map to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// `kube.create`.
    Create,
    /// `kube.replace`.
    Update,
    /// `kube.patch`.
    Patch,
    /// `kube.delete`.
    Delete,
    /// `kube.apply` (server-side apply; RBAC `patch` and `create`).
    Apply,
}

impl Verb {
    /// Every write verb, in RBAC order.
    pub const ALL: [Verb; 5] = [
        Verb::Create,
        Verb::Update,
        Verb::Patch,
        Verb::Delete,
        Verb::Apply,
    ];

    /// The verb's name as granted and as `describe()` asks for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::Apply => "apply",
        }
    }

    /// Parses a verb name; `None` for anything else (read verbs included).
    pub fn parse(s: &str) -> Option<Verb> {
        Verb::ALL.into_iter().find(|v| v.as_str() == s)
    }

    /// The RBAC verbs the host's ServiceAccount needs to perform this write.
    pub fn rbac_verbs(self) -> &'static [&'static str] {
        match self {
            Verb::Create => &["create"],
            Verb::Update => &["update"],
            Verb::Patch => &["patch"],
            Verb::Delete => &["delete"],
            // Server-side apply is authorised as a patch, and as a create when the object does
            // not exist yet.
            Verb::Apply => &["create", "patch"],
        }
    }
}

/// `api-version` of a grant: exact, `group/*` or `*`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ApiVersionPattern(String);

impl TryFrom<String> for ApiVersionPattern {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s == "*" {
            return Ok(Self(s));
        }
        if let Some(group) = s.strip_suffix("/*") {
            validate_dns1123_subdomain(group).map_err(|e| format!("api-version {s:?}: {e}"))?;
            return Ok(Self(s));
        }
        validate_api_version(&s).map_err(|e| {
            format!("api-version {s:?}: {e} (or `group/*` for every version, `*` for any)")
        })?;
        Ok(Self(s))
    }
}

impl From<ApiVersionPattern> for String {
    fn from(p: ApiVersionPattern) -> String {
        p.0
    }
}

impl ApiVersionPattern {
    fn matches(&self, api_version: &str) -> bool {
        if self.0 == "*" {
            return true;
        }
        match self.0.strip_suffix("/*") {
            Some(group) => api_version.split_once('/').is_some_and(|(g, _)| g == group),
            None => self.0 == api_version,
        }
    }
}

/// `kind` of a grant: exact or `*` (which never covers Secrets).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct KindPattern(String);

impl TryFrom<String> for KindPattern {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s != "*" {
            validate_kind(&s).map_err(|e| format!("kind {s:?}: {e} (or `*` for any)"))?;
        }
        Ok(Self(s))
    }
}

impl From<KindPattern> for String {
    fn from(p: KindPattern) -> String {
        p.0
    }
}

/// Whether `api_version`/`kind` is a core Secret, which wildcards never cover.
fn is_secret(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Secret"
}

/// A namespace named in a grant (a DNS-1123 label).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NamespaceName(String);

impl TryFrom<String> for NamespaceName {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        validate_dns1123_label(&s).map_err(|e| format!("namespace {s:?}: {e}"))?;
        Ok(Self(s))
    }
}

impl From<NamespaceName> for String {
    fn from(n: NamespaceName) -> String {
        n.0
    }
}

/// A non-empty list of namespaces (an empty one would grant nothing, surely not the intent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<NamespaceName>")]
pub struct NamespaceList(Vec<NamespaceName>);

impl TryFrom<Vec<NamespaceName>> for NamespaceList {
    type Error = String;
    fn try_from(v: Vec<NamespaceName>) -> Result<Self, String> {
        if v.is_empty() {
            return Err(
                "namespaces = [] grants nothing; leave `namespaces` out to grant every \
                 namespace"
                    .into(),
            );
        }
        Ok(Self(v))
    }
}

/// A non-empty set of write verbs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Verb>")]
pub struct VerbList(Vec<Verb>);

impl TryFrom<Vec<Verb>> for VerbList {
    type Error = String;
    fn try_from(mut v: Vec<Verb>) -> Result<Self, String> {
        if v.is_empty() {
            return Err(
                "verbs = [] grants nothing; name at least one of create, update, \
                        patch, delete, apply"
                    .into(),
            );
        }
        v.sort();
        v.dedup();
        Ok(Self(v))
    }
}

/// Leave a namespace list out (every namespace) or name the namespaces.
fn covers_namespace(list: &Option<NamespaceList>, namespace: Option<&str>) -> bool {
    match list {
        None => true,
        Some(l) => namespace.is_some_and(|ns| l.0.iter().any(|n| n.0 == ns)),
    }
}

/// A `watch` entry: resources the plugin may watch and read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all(serialize = "snake_case", deserialize = "kebab-case")
)]
pub struct ResourceGrant {
    /// `v1`, `group/version`, `group/*` or `*`.
    pub api_version: ApiVersionPattern,
    /// A kind or `*` (not Secrets).
    pub kind: KindPattern,
    /// The namespaces covered; every namespace (and cluster scope) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespaceList>,
}

impl ResourceGrant {
    fn covers(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> bool {
        covers_resource(
            &self.api_version,
            &self.kind,
            &self.namespaces,
            (api_version, kind, namespace),
        )
    }
}

/// The one resource-matching rule of `watch` and `write` entries.
fn covers_resource(
    api: &ApiVersionPattern,
    kind: &KindPattern,
    namespaces: &Option<NamespaceList>,
    (api_version, asked_kind, namespace): (&str, &str, Option<&str>),
) -> bool {
    let kind_ok = kind.0 == asked_kind || (kind.0 == "*" && !is_secret(api_version, asked_kind));
    kind_ok && api.matches(api_version) && covers_namespace(namespaces, namespace)
}

/// A `write` entry: kind × verbs × namespaces.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all(serialize = "snake_case", deserialize = "kebab-case")
)]
pub struct WriteGrant {
    /// `v1`, `group/version`, `group/*` or `*`.
    pub api_version: ApiVersionPattern,
    /// A kind or `*` (not Secrets).
    pub kind: KindPattern,
    /// The write verbs granted.
    pub verbs: VerbList,
    /// The namespaces covered; every namespace (and cluster scope) when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<NamespaceList>,
}

/// The host part of an origin pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
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
                    validate_dns1123_subdomain(below).map_err(|e| bad(&e))?;
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
    fn covers(&self, asked: &OriginPattern) -> bool {
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
fn strictly_below(host: &str, suffix: &str) -> bool {
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

/// The `[grants]` table as written in `NAME.toml` or a `--default-grants` file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct GrantsTable {
    /// Resources the plugin may watch and read.
    #[serde(default)]
    pub watch: Vec<ResourceGrant>,
    /// Writes the plugin may make.
    #[serde(default)]
    pub write: Vec<WriteGrant>,
    /// Whether the plugin may record Events.
    #[serde(default)]
    pub events: bool,
    /// HTTP origins the plugin may call.
    #[serde(default)]
    pub http: Vec<OriginPattern>,
}

/// Where a plugin's grants came from; error messages and `/plugins` say it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "from", rename_all = "kebab-case")]
pub enum GrantSource {
    /// The `[grants]` table of the plugin's manifest.
    Manifest {
        /// The manifest.
        path: PathBuf,
    },
    /// The `--default-grants` file (the manifest has no `[grants]`).
    DefaultFile {
        /// The file.
        path: PathBuf,
    },
    /// The built-in default (the manifest has no `[grants]`, no `--default-grants`).
    BuiltIn,
    /// `kubewasm dev`: everything the plugin asked for.
    EverythingAsked,
}

impl fmt::Display for GrantSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GrantSource::Manifest { path } => write!(f, "the [grants] table of {}", path.display()),
            GrantSource::DefaultFile { path } => write!(
                f,
                "the default grants of {} (the plugin's manifest has no [grants] table)",
                path.display()
            ),
            GrantSource::BuiltIn => f.write_str(
                "the built-in default (watch and read anything except Secrets; no writes, no \
                 Events, no HTTP) as the plugin's manifest has no [grants] table",
            ),
            GrantSource::EverythingAsked => f.write_str("kubewasm dev: everything asked for"),
        }
    }
}

/// What one running version of a plugin is granted; the capability code asks it before every
/// kube call, Event and HTTP request.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Grants {
    watch: Vec<ResourceGrant>,
    write: Vec<WriteGrant>,
    events: bool,
    http: Vec<OriginPattern>,
    write_qps: f64,
    write_burst: u32,
    dry_run: bool,
    source: GrantSource,
}

impl Grants {
    /// Grants exactly what `table` says.
    pub fn from_table(table: GrantsTable, source: GrantSource) -> Grants {
        Grants {
            watch: table.watch,
            write: table.write,
            events: table.events,
            http: table.http,
            write_qps: DEFAULT_WRITE_QPS,
            write_burst: DEFAULT_WRITE_BURST,
            dry_run: false,
            source,
        }
    }

    /// The built-in default: watch and read anything except Secrets; nothing else.
    pub fn builtin_default() -> Grants {
        Grants::from_table(
            GrantsTable {
                watch: vec![ResourceGrant {
                    api_version: ApiVersionPattern("*".into()),
                    kind: KindPattern("*".into()),
                    namespaces: None,
                }],
                ..GrantsTable::default()
            },
            GrantSource::BuiltIn,
        )
    }

    /// Everything `info` asks for and nothing more (`kubewasm dev`). Asks that are not valid
    /// are left out; [`Grants::check`] refuses them anyway.
    pub fn everything_asked(info: &PluginInfo) -> Grants {
        let namespaces = |ns: &Option<String>| {
            ns.as_ref()
                .and_then(|n| NamespaceName::try_from(n.clone()).ok())
                .map(|n| NamespaceList(vec![n]))
        };
        let resource = |api: &str, kind: &str| {
            Some((
                ApiVersionPattern::try_from(api.to_string()).ok()?,
                KindPattern::try_from(kind.to_string()).ok()?,
            ))
        };
        let mut table = GrantsTable {
            events: info.events,
            http: info
                .http_origins
                .iter()
                .filter_map(|o| OriginPattern::parse(o).ok())
                .collect(),
            ..GrantsTable::default()
        };
        for s in &info.subscriptions {
            if let Some((api_version, kind)) = resource(&s.api_version, &s.kind) {
                table.watch.push(ResourceGrant {
                    api_version,
                    kind,
                    namespaces: namespaces(&s.namespace),
                });
            }
        }
        for p in &info.permissions {
            let Some((api_version, kind)) = resource(&p.api_version, &p.kind) else {
                continue;
            };
            if p.verbs.iter().any(|v| READ_VERBS.contains(&v.as_str())) {
                table.watch.push(ResourceGrant {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    namespaces: namespaces(&p.namespace),
                });
            }
            let verbs: Vec<Verb> = p.verbs.iter().filter_map(|v| Verb::parse(v)).collect();
            if let Ok(verbs) = VerbList::try_from(verbs) {
                table.write.push(WriteGrant {
                    api_version,
                    kind,
                    verbs,
                    namespaces: namespaces(&p.namespace),
                });
            }
        }
        Grants::from_table(table, GrantSource::EverythingAsked)
    }

    /// Applies the manifest's write rate and dry-run settings.
    fn with_manifest_settings(mut self, manifest: &Manifest) -> Grants {
        self.write_qps = manifest.write_qps.unwrap_or(DEFAULT_WRITE_QPS);
        self.write_burst = manifest.write_burst.unwrap_or(DEFAULT_WRITE_BURST);
        self.dry_run = manifest.dry_run.unwrap_or(false);
        self
    }

    /// May the plugin watch or read (`get`, `list`, `watch`) `kind` of `api_version` in
    /// `namespace` (`None`: every namespace, or a cluster-scoped kind)?
    pub fn allows_read(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> bool {
        self.watch
            .iter()
            .any(|g| g.covers(api_version, kind, namespace))
    }

    /// May the plugin perform the write `verb` (`create`, `update`, `patch`, `delete`,
    /// `apply`) on `kind` of `api_version` in `namespace`? Any other verb is refused.
    pub fn allows_write(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        verb: &str,
    ) -> bool {
        let Some(verb) = Verb::parse(verb) else {
            return false;
        };
        self.write.iter().any(|g| {
            g.verbs.0.contains(&verb)
                && covers_resource(
                    &g.api_version,
                    &g.kind,
                    &g.namespaces,
                    (api_version, kind, namespace),
                )
        })
    }

    /// May the plugin record Events?
    pub fn events(&self) -> bool {
        self.events
    }

    /// May the plugin send an HTTP request to `scheme://host:port`? `host` is lowercase; an
    /// IP literal comes without brackets. The sender checks the resolved address too.
    pub fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.http.iter().any(|o| o.matches(scheme, host, port))
    }

    /// Sustained writes per second (token bucket refill rate).
    pub fn write_qps(&self) -> f64 {
        self.write_qps
    }

    /// Writes allowed at once (token bucket size).
    pub fn write_burst(&self) -> u32 {
        self.write_burst
    }

    /// Whether every write is sent as a dry run (`dryRun=All`), and non-GET HTTP refused.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Where these grants came from.
    pub fn source(&self) -> &GrantSource {
        &self.source
    }

    /// The `write` entries, for `kubewasm rbac`.
    pub fn write_grants(&self) -> &[WriteGrant] {
        &self.write
    }

    /// Checks `info` (after subscription validation) against these grants: every subscription
    /// must be watchable, every permission's verbs granted, Events and every origin granted.
    /// Asks that are not valid are refused before anything is compared.
    pub fn check(&self, info: &PluginInfo) -> Result<(), GrantError> {
        let asks = Asks::validate(info).map_err(GrantError::InvalidAsk)?;
        let mut missing = Vec::new();
        for s in &info.subscriptions {
            if !self.allows_read(&s.api_version, &s.kind, s.namespace.as_deref()) {
                missing.push(Missing::Watch(s.clone()));
            }
        }
        for p in &info.permissions {
            let ns = p.namespace.as_deref();
            let reads: Vec<String> = p
                .verbs
                .iter()
                .filter(|v| READ_VERBS.contains(&v.as_str()))
                .cloned()
                .collect();
            if !reads.is_empty() && !self.allows_read(&p.api_version, &p.kind, ns) {
                missing.push(Missing::Read(Permission {
                    verbs: reads,
                    ..p.clone()
                }));
            }
            let writes: Vec<String> = p
                .verbs
                .iter()
                .filter(|v| {
                    Verb::parse(v).is_some() && !self.allows_write(&p.api_version, &p.kind, ns, v)
                })
                .cloned()
                .collect();
            if !writes.is_empty() {
                missing.push(Missing::Write(Permission {
                    verbs: writes,
                    ..p.clone()
                }));
            }
        }
        if info.events && !self.events {
            missing.push(Missing::Events);
        }
        for o in asks.origins {
            if !self.http.iter().any(|g| g.covers(&o)) {
                missing.push(Missing::Http(o));
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(GrantError::Missing(missing))
        }
    }
}

/// What `describe()` asks for, validated.
struct Asks {
    origins: Vec<OriginPattern>,
}

impl Asks {
    fn validate(info: &PluginInfo) -> Result<Asks, String> {
        if info.permissions.len() > MAX_PERMISSIONS {
            return Err(format!(
                "describe() asks for {} permissions, more than {MAX_PERMISSIONS}",
                info.permissions.len()
            ));
        }
        if info.http_origins.len() > MAX_HTTP_ORIGINS {
            return Err(format!(
                "describe() asks for {} HTTP origins, more than {MAX_HTTP_ORIGINS}",
                info.http_origins.len()
            ));
        }
        for (i, p) in info.permissions.iter().enumerate() {
            let bad = |field: &str, value: &str, why: String| {
                format!("permission {i}: {field} {}: {why}", Quoted(value))
            };
            validate_api_version(&p.api_version)
                .map_err(|e| bad("api-version", &p.api_version, e))?;
            validate_kind(&p.kind).map_err(|e| bad("kind", &p.kind, e))?;
            if let Some(ns) = &p.namespace {
                validate_dns1123_label(ns).map_err(|e| bad("namespace", ns, e))?;
            }
            if p.verbs.is_empty() {
                return Err(format!("permission {i}: no verbs"));
            }
            if p.verbs.len() > READ_VERBS.len() + Verb::ALL.len() {
                return Err(format!("permission {i}: {} verbs", p.verbs.len()));
            }
            for v in &p.verbs {
                if !READ_VERBS.contains(&v.as_str()) && Verb::parse(v).is_none() {
                    return Err(bad(
                        "verb",
                        v,
                        "not one of get, list, watch, create, update, patch, delete, apply".into(),
                    ));
                }
            }
        }
        let origins = info
            .http_origins
            .iter()
            .map(|o| OriginPattern::parse(o).map_err(|e| format!("http-origins: {e}")))
            .collect::<Result<_, _>>()?;
        Ok(Asks { origins })
    }
}

/// One thing `describe()` asks for that the grants do not cover.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Missing {
    /// A subscription outside the `watch` grants.
    Watch(Subscription),
    /// A permission's read verbs outside the `watch` grants.
    Read(Permission),
    /// A permission's write verbs (only the missing ones) outside the `write` grants.
    Write(Permission),
    /// Events asked for, not granted.
    Events,
    /// An HTTP origin no granted origin covers.
    Http(OriginPattern),
}

fn where_(ns: &Option<String>) -> String {
    match ns {
        Some(n) => format!("in namespace {n}"),
        None => "in every namespace".into(),
    }
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Missing::Watch(s) => write!(
                f,
                "watch {} {} {}",
                s.api_version,
                s.kind,
                where_(&s.namespace)
            ),
            Missing::Read(p) | Missing::Write(p) => write!(
                f,
                "{} {} {} {}",
                p.verbs.join(", "),
                p.api_version,
                p.kind,
                where_(&p.namespace)
            ),
            Missing::Events => f.write_str("record Events"),
            Missing::Http(o) => write!(f, "HTTP to {o}"),
        }
    }
}

/// Why [`Grants::check`] refused a plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GrantError {
    /// `describe()` asked for something malformed (names the entry and value).
    InvalidAsk(String),
    /// Asks the grants do not cover.
    Missing(Vec<Missing>),
}

/// The `[grants]` lines that would grant `missing`, as TOML (for error messages and
/// `kubewasm check`).
pub fn toml_lines(missing: &[Missing]) -> Vec<String> {
    let q = |s: &str| toml::Value::String(s.to_string()).to_string();
    let ns = |n: &Option<String>| match n {
        Some(n) => format!(", namespaces = [{}]", q(n)),
        None => String::new(),
    };
    let (mut watch, mut write, mut http, mut events) = (Vec::new(), Vec::new(), Vec::new(), false);
    for m in missing {
        match m {
            Missing::Watch(s) => watch.push(format!(
                "{{ api-version = {}, kind = {}{} }}",
                q(&s.api_version),
                q(&s.kind),
                ns(&s.namespace)
            )),
            Missing::Read(p) => watch.push(format!(
                "{{ api-version = {}, kind = {}{} }}",
                q(&p.api_version),
                q(&p.kind),
                ns(&p.namespace)
            )),
            Missing::Write(p) => write.push(format!(
                "{{ api-version = {}, kind = {}, verbs = [{}]{} }}",
                q(&p.api_version),
                q(&p.kind),
                p.verbs.iter().map(|v| q(v)).collect::<Vec<_>>().join(", "),
                ns(&p.namespace)
            )),
            Missing::Events => events = true,
            Missing::Http(o) => http.push(q(&o.to_string())),
        }
    }
    let mut seen = std::collections::HashSet::new();
    watch.retain(|w| seen.insert(w.clone()));
    fn list(lines: &mut Vec<String>, key: &str, items: Vec<String>) {
        match items.len() {
            0 => {}
            1 => lines.push(format!("{key} = [{}]", items[0])),
            _ => {
                lines.push(format!("{key} = ["));
                lines.extend(items.into_iter().map(|i| format!("  {i},")));
                lines.push("]".into());
            }
        }
    }
    let mut lines = vec!["[grants]".to_string()];
    list(&mut lines, "watch", watch);
    list(&mut lines, "write", write);
    if events {
        lines.push("events = true".into());
    }
    list(&mut lines, "http", http);
    lines
}

impl GrantError {
    /// The `[grants]` lines that would let the plugin load: what is missing when the grants
    /// came from its manifest; everything it asks for when they came from a default (a
    /// `[grants]` table replaces the default as a whole). Empty when nothing is missing.
    pub fn suggestion(&self, grants: &Grants, info: &PluginInfo) -> Vec<String> {
        let GrantError::Missing(missing) = self else {
            return Vec::new();
        };
        if matches!(grants.source(), GrantSource::Manifest { .. }) {
            return toml_lines(missing);
        }
        let nothing = Grants::from_table(GrantsTable::default(), GrantSource::BuiltIn);
        match nothing.check(info) {
            Err(GrantError::Missing(all)) => toml_lines(&all),
            _ => toml_lines(missing),
        }
    }

    /// The load error's message: each missing grant, then the `NAME.toml` lines that would
    /// grant it. A `[grants]` table replaces the default entirely, so when the grants came
    /// from a default the suggested table grants everything the plugin asks for.
    pub fn message(
        &self,
        name: &str,
        grants: &Grants,
        manifest: &Path,
        info: &PluginInfo,
    ) -> String {
        let missing = match self {
            GrantError::InvalidAsk(m) => return format!("describe() of plugin {name}: {m}"),
            GrantError::Missing(m) => m,
        };
        let mut out = format!(
            "describe() of plugin {name} asks for more than it is granted by {}:",
            grants.source()
        );
        for m in missing {
            out.push_str(&format!("\n  - not granted: {m}"));
        }
        out.push_str(&match grants.source() {
            GrantSource::Manifest { .. } => format!(
                "\nto grant it, add to the [grants] table of {} (merging into arrays already there):",
                manifest.display()
            ),
            _ => format!(
                "\nto grant it, put this table in {} (a [grants] table replaces the default, so it lists everything the plugin asks for):",
                manifest.display()
            ),
        });
        for l in self.suggestion(grants, info) {
            out.push_str("\n    ");
            out.push_str(&l);
        }
        out
    }
}

/// How the host decides a plugin's grants.
#[derive(Clone, Debug)]
pub enum GrantPolicy {
    /// Production: the manifest's `[grants]`, or these defaults without one.
    Operator(std::sync::Arc<Grants>),
    /// `kubewasm dev`: whatever the plugin asks for.
    EverythingAsked,
}

impl Default for GrantPolicy {
    fn default() -> Self {
        GrantPolicy::Operator(std::sync::Arc::new(Grants::builtin_default()))
    }
}

/// A `--default-grants` file: one `[grants]` table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DefaultGrantsFile {
    grants: GrantsTable,
}

impl GrantPolicy {
    /// Operator grants with the defaults of `--default-grants FILE` (or the built-in ones).
    pub fn operator(default_grants: Option<&Path>) -> Result<GrantPolicy, ManifestError> {
        let Some(path) = default_grants else {
            return Ok(GrantPolicy::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let file: DefaultGrantsFile =
            toml::from_str(&text).map_err(|e| ManifestError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string().trim().to_string(),
            })?;
        Ok(GrantPolicy::Operator(std::sync::Arc::new(
            Grants::from_table(
                file.grants,
                GrantSource::DefaultFile {
                    path: path.to_path_buf(),
                },
            ),
        )))
    }

    /// The grants of one plugin version: `manifest` (at `manifest_path`) and what `info` asks.
    pub fn grants_for(
        &self,
        manifest: &Manifest,
        manifest_path: &Path,
        info: &PluginInfo,
    ) -> Grants {
        let base = match (self, &manifest.grants) {
            (GrantPolicy::EverythingAsked, _) => Grants::everything_asked(info),
            (GrantPolicy::Operator(_), Some(table)) => Grants::from_table(
                table.clone(),
                GrantSource::Manifest {
                    path: manifest_path.to_path_buf(),
                },
            ),
            (GrantPolicy::Operator(default), None) => (**default).clone(),
        };
        base.with_manifest_settings(manifest)
    }
}

/// A guest or operator string in a message: debug-quoted (control characters escaped) and cut
/// to a bounded length.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut end = self.0.len().min(128);
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(f, "{:?}", &self.0[..end])?;
        if end < self.0.len() {
            write!(f, "…")?;
        }
        Ok(())
    }
}

/// The runtime's view of the HTTP grants: the sender asks before every request (and again for
/// every loopback or link-local address a name resolves to).
impl crate::runtime::HttpGate for Grants {
    fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        Grants::allows_origin(self, scheme, host, port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Result<GrantsTable, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            grants: GrantsTable,
        }
        toml::from_str::<File>(text)
            .map(|f| f.grants)
            .map_err(|e| e.to_string())
    }

    fn grants(text: &str) -> Grants {
        Grants::from_table(table(text).unwrap(), GrantSource::BuiltIn)
    }

    fn sub(api_version: &str, kind: &str, namespace: Option<&str>) -> Subscription {
        Subscription {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            label_selector: None,
            field_selector: None,
            resync_period_ms: 0,
            metadata_only: false,
            fields: Vec::new(),
        }
    }

    fn info(subs: Vec<Subscription>) -> PluginInfo {
        PluginInfo {
            name: "p".into(),
            subscriptions: subs,
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: false,
        }
    }

    fn perm(api_version: &str, kind: &str, namespace: Option<&str>, verbs: &[&str]) -> Permission {
        Permission {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.map(str::to_string),
            verbs: verbs.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn builtin_default_reads_everything_but_secrets_and_grants_nothing_else() {
        let g = Grants::builtin_default();
        assert!(g.allows_read("v1", "ConfigMap", None));
        assert!(g.allows_read("apps/v1", "Deployment", Some("web")));
        assert!(
            g.allows_read("example.com/v1", "Secret", None),
            "only core Secrets"
        );
        assert!(!g.allows_read("v1", "Secret", None));
        assert!(!g.allows_read("v1", "Secret", Some("default")));
        assert!(!g.allows_write("v1", "ConfigMap", Some("default"), "patch"));
        assert!(!g.events());
        assert!(!g.allows_origin("http", "127.0.0.1", 80));
        assert_eq!(g.write_qps(), DEFAULT_WRITE_QPS);
        assert_eq!(g.write_burst(), DEFAULT_WRITE_BURST);
        assert!(!g.dry_run());
    }

    #[test]
    fn secrets_are_granted_only_by_name() {
        let g = grants(
            "[grants]\nwatch = [{ api-version = \"*\", kind = \"*\" }, \
             { api-version = \"v1\", kind = \"Secret\", namespaces = [\"vault\"] }]\n\
             write = [{ api-version = \"v1\", kind = \"*\", verbs = [\"create\"] }]",
        );
        assert!(g.allows_read("v1", "Secret", Some("vault")));
        assert!(!g.allows_read("v1", "Secret", Some("default")));
        assert!(!g.allows_read("v1", "Secret", None));
        assert!(g.allows_write("v1", "ConfigMap", None, "create"));
        assert!(!g.allows_write("v1", "Secret", Some("vault"), "create"));
    }

    #[test]
    fn resources_match_by_api_version_pattern_kind_and_namespace() {
        let g = grants(
            "[grants]\nwatch = [{ api-version = \"apps/*\", kind = \"Deployment\", namespaces = [\"a\", \"b\"] }, \
             { api-version = \"v1\", kind = \"Service\" }]",
        );
        assert!(g.allows_read("apps/v1", "Deployment", Some("a")));
        assert!(g.allows_read("apps/v1beta2", "Deployment", Some("b")));
        assert!(!g.allows_read("apps/v1", "Deployment", Some("c")));
        assert!(
            !g.allows_read("apps/v1", "Deployment", None),
            "all namespaces needs an unrestricted grant"
        );
        assert!(!g.allows_read("extensions/v1beta1", "Deployment", Some("a")));
        assert!(!g.allows_read("apps/v1", "StatefulSet", Some("a")));
        assert!(g.allows_read("v1", "Service", None));
        assert!(g.allows_read("v1", "Service", Some("x")));
        assert!(!g.allows_read("v2", "Service", None));
    }

    #[test]
    fn writes_need_kind_verb_and_namespace() {
        let g = grants(
            "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"patch\", \"update\"], namespaces = [\"default\"] }]",
        );
        assert!(g.allows_write("v1", "Service", Some("default"), "patch"));
        assert!(g.allows_write("v1", "Service", Some("default"), "update"));
        assert!(!g.allows_write("v1", "Service", Some("other"), "patch"));
        assert!(!g.allows_write("v1", "Service", None, "patch"));
        assert!(!g.allows_write("v1", "Service", Some("default"), "delete"));
        assert!(!g.allows_write("v1", "Service", Some("default"), "apply"));
        assert!(!g.allows_write("v1", "Service", Some("default"), "get"));
        assert!(!g.allows_write("v1", "Service", Some("default"), "PATCH"));
        assert!(!g.allows_write("v1", "Endpoints", Some("default"), "patch"));
        assert!(
            !g.allows_read("v1", "Service", Some("default")),
            "a write grant is not a watch grant"
        );
    }

    #[test]
    fn apply_needs_patch_and_create_in_rbac() {
        assert_eq!(Verb::Apply.rbac_verbs(), &["create", "patch"]);
        assert_eq!(Verb::Update.rbac_verbs(), &["update"]);
    }

    #[test]
    fn origins_exact_default_ports_and_any_port() {
        let g = grants(
            "[grants]\nhttp = [\"https://lb.example.com\", \"http://127.0.0.1:9000\", \"http://10.0.0.1:*\", \"http://[::1]:8080\"]",
        );
        assert!(g.allows_origin("https", "lb.example.com", 443));
        assert!(!g.allows_origin("https", "lb.example.com", 8443));
        assert!(!g.allows_origin("http", "lb.example.com", 443), "scheme");
        assert!(!g.allows_origin("http", "lb.example.com", 80));
        assert!(!g.allows_origin("https", "x.lb.example.com", 443));
        assert!(g.allows_origin("http", "127.0.0.1", 9000));
        assert!(!g.allows_origin("http", "127.0.0.1", 9001));
        assert!(
            !g.allows_origin("http", "localhost", 9000),
            "no name for an IP"
        );
        assert!(g.allows_origin("http", "10.0.0.1", 1));
        assert!(g.allows_origin("http", "10.0.0.1", 65535));
        assert!(g.allows_origin("http", "::1", 8080));
        assert!(
            g.allows_origin("http", "0:0:0:0:0:0:0:1", 8080),
            "IPv6 compared as addresses"
        );
        assert!(!g.allows_origin("ftp", "127.0.0.1", 9000));
    }

    #[test]
    fn subdomain_wildcards_cover_labels_below_never_the_apex_or_an_ip() {
        let g = grants("[grants]\nhttp = [\"https://*.example.com\"]");
        assert!(g.allows_origin("https", "a.example.com", 443));
        assert!(g.allows_origin("https", "a.b.example.com", 443));
        assert!(!g.allows_origin("https", "example.com", 443));
        assert!(!g.allows_origin("https", "badexample.com", 443));
        assert!(!g.allows_origin("https", ".example.com", 443));
        assert!(!g.allows_origin("https", "example.com.evil.org", 443));
        assert!(!g.allows_origin("https", "a.example.com", 8443));
        assert!(
            !g.allows_origin("https", "1.2.3.4", 443),
            "never an IP literal"
        );
        assert!(OriginPattern::parse("http://*.0.0.1:*").is_err());
        let deep = grants("[grants]\nhttp = [\"https://*.lb.example.com\"]");
        let asked = |o: &str| OriginPattern::parse(o).unwrap();
        let wide = OriginPattern::parse("https://*.example.com").unwrap();
        assert!(wide.covers(&asked("https://*.lb.example.com")));
        assert!(wide.covers(&asked("https://*.example.com")));
        assert!(
            !deep.http[0].covers(&wide),
            "a narrower wildcard does not cover a wider one"
        );
        assert!(!wide.covers(&asked("https://example.com")));
        assert!(
            !wide.covers(&asked("https://a.example.com:*")),
            "any port needs any port"
        );
    }

    #[test]
    fn bad_origins_are_refused_with_the_reason() {
        for (origin, why) in [
            ("ftp://a.example.com", "scheme"),
            ("https://a.example.com/path", "no path"),
            ("https://a.example.com?q=1", "query"),
            ("https://user:pw@a.example.com", "user info"),
            ("https://*.1.2.3.4", "IP"),
            ("https://a.*.example.com", "wildcard"),
            ("https://*", "wildcard"),
            ("lb.example.com", "no scheme"),
            ("https://a.example.com:99999", "port"),
            ("https://a.example.com:80:*", "port"),
        ] {
            let err = OriginPattern::parse(origin).unwrap_err();
            assert!(
                err.to_lowercase().contains(&why.to_lowercase()) || err.contains("invalid"),
                "{origin}: {err}"
            );
            assert!(
                err.contains(&format!("{origin:?}")),
                "quotes the value: {err}"
            );
        }
        assert_eq!(
            OriginPattern::parse("HTTPS://LB.Example.COM:443/")
                .unwrap()
                .to_string(),
            "https://lb.example.com",
            "canonical: lowercase, default port left out"
        );
        assert!(OriginPattern::parse(&format!("https://{}.com", "a".repeat(600))).is_err());
    }

    #[test]
    fn table_errors_name_the_line() {
        for (text, needle) in [
            (
                "[grants]\nevents = true\nwatch = [{ api-version = \"v1\", knd = \"Service\" }]",
                "line 3",
            ),
            (
                "[grants]\nwatch = [{ api-version = \"v1/x/y\", kind = \"Service\" }]",
                "line 2",
            ),
            (
                "[grants]\nwatch = [{ api-version = \"v1\", kind = \"Ser vice\" }]",
                "line 2",
            ),
            (
                "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Service\", verbs = [] }]",
                "verbs = []",
            ),
            (
                "[grants]\nwrite = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"get\"] }]",
                "unknown variant",
            ),
            (
                "[grants]\nwatch = [{ api-version = \"v1\", kind = \"S\", namespaces = [\"Bad_NS\"] }]",
                "Bad_NS",
            ),
            ("[grants]\nhttps = []", "unknown field"),
        ] {
            let err = table(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn check_lists_every_missing_grant() {
        let g = grants(
            "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\" }]\n\
             write = [{ api-version = \"v1\", kind = \"Service\", verbs = [\"patch\"] }]\n\
             http = [\"https://*.example.com\"]",
        );
        let mut i = info(vec![
            sub("v1", "ConfigMap", None),
            sub("v1", "Secret", Some("x")),
        ]);
        i.permissions = vec![
            perm(
                "v1",
                "Service",
                Some("default"),
                &["get", "patch", "update"],
            ),
            perm("v1", "ConfigMap", None, &["get"]),
        ];
        i.http_origins = vec![
            "https://a.example.com".into(),
            "https://example.com".into(),
            "https://*.b.example.com".into(),
        ];
        i.events = true;
        let Err(GrantError::Missing(missing)) = g.check(&i) else {
            panic!("must miss grants");
        };
        let shown: Vec<String> = missing.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "watch v1 Secret in namespace x",
                "get v1 Service in namespace default",
                "update v1 Service in namespace default",
                "record Events",
                "HTTP to https://example.com",
            ]
        );
        let lines = toml_lines(&missing).join("\n");
        let granted = Grants::from_table(table(&lines).expect(&lines), GrantSource::BuiltIn);
        let mut rest = i.clone();
        rest.subscriptions.retain(|s| s.kind == "Secret");
        rest.permissions = vec![perm("v1", "Service", Some("default"), &["get", "update"])];
        rest.http_origins = vec!["https://example.com".into()];
        assert_eq!(
            granted.check(&rest),
            Ok(()),
            "the suggested lines grant what is missing:\n{lines}"
        );
    }

    #[test]
    fn invalid_asks_are_refused_before_comparing() {
        let g = Grants::builtin_default();
        let mut i = info(vec![sub("v1", "ConfigMap", None)]);
        i.permissions = vec![perm("v1", "Service", None, &["escalate"])];
        assert!(matches!(g.check(&i), Err(GrantError::InvalidAsk(m)) if m.contains("escalate")));
        i.permissions = vec![perm("v1", "Service", Some("../x"), &["get"])];
        assert!(matches!(g.check(&i), Err(GrantError::InvalidAsk(m)) if m.contains("namespace")));
        i.permissions.clear();
        i.http_origins = vec!["https://evil.example.com/\u{1b}[31m".into()];
        assert!(matches!(g.check(&i), Err(GrantError::InvalidAsk(m)) if m.contains("\\u{1b}")));
        i.http_origins = vec!["https://a.example.com".into(); MAX_HTTP_ORIGINS + 1];
        assert!(matches!(g.check(&i), Err(GrantError::InvalidAsk(_))));
    }

    #[test]
    fn everything_asked_grants_exactly_the_asks() {
        let mut i = info(vec![sub("v1", "Secret", Some("vault"))]);
        i.permissions = vec![perm("v1", "Service", Some("default"), &["get", "apply"])];
        i.http_origins = vec!["http://127.0.0.1:9000".into()];
        i.events = true;
        let g = Grants::everything_asked(&i);
        assert_eq!(g.check(&i), Ok(()));
        assert!(g.allows_read("v1", "Secret", Some("vault")));
        assert!(!g.allows_read("v1", "Secret", Some("other")));
        assert!(g.allows_write("v1", "Service", Some("default"), "apply"));
        assert!(!g.allows_write("v1", "Service", Some("default"), "delete"));
        assert!(g.allows_origin("http", "127.0.0.1", 9000));
        assert!(!g.allows_origin("http", "127.0.0.1", 9001));
        assert_eq!(g.source(), &GrantSource::EverythingAsked);
    }

    #[test]
    fn refusal_message_lists_missing_grants_and_the_lines_to_add() {
        let i = {
            let mut i = info(vec![sub("v1", "Secret", None)]);
            i.events = true;
            i
        };
        // From the default: the suggested table must grant everything, the watch too.
        let g = Grants::builtin_default();
        let err = g.check(&i).unwrap_err();
        let msg = err.message("p", &g, Path::new("/plugins/p.toml"), &i);
        assert!(
            msg.contains("not granted: watch v1 Secret in every namespace"),
            "{msg}"
        );
        assert!(msg.contains("not granted: record Events"), "{msg}");
        assert!(msg.contains("built-in default"), "{msg}");
        assert!(msg.contains("/plugins/p.toml"), "{msg}");
        assert!(msg.contains("    [grants]\n    watch = [{ api-version = \"v1\", kind = \"Secret\" }]\n    events = true"), "{msg}");
        // From a manifest: only what is missing.
        let g = Grants::from_table(
            table("[grants]\nwatch = [{ api-version = \"v1\", kind = \"Secret\" }]").unwrap(),
            GrantSource::Manifest {
                path: "/plugins/p.toml".into(),
            },
        );
        let msg = g
            .check(&i)
            .unwrap_err()
            .message("p", &g, Path::new("/plugins/p.toml"), &i);
        assert!(!msg.contains("watch ="), "{msg}");
        assert!(msg.contains("events = true"), "{msg}");
    }

    #[test]
    fn policy_takes_the_manifest_table_else_the_default() {
        let manifest = Manifest::parse(
            Path::new("p.toml"),
            "write-qps = 0.5\nwrite-burst = 3\ndry-run = true\n[grants]\nevents = true\n",
        )
        .unwrap();
        let i = info(vec![sub("v1", "ConfigMap", None)]);
        let g = GrantPolicy::default().grants_for(&manifest, Path::new("p.toml"), &i);
        assert!(g.events());
        assert!(
            !g.allows_read("v1", "ConfigMap", None),
            "a [grants] table replaces the default"
        );
        assert_eq!(
            (g.write_qps(), g.write_burst(), g.dry_run()),
            (0.5, 3, true)
        );
        let g = GrantPolicy::default().grants_for(&Manifest::default(), Path::new("p.toml"), &i);
        assert_eq!(g, Grants::builtin_default());

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("defaults.toml");
        std::fs::write(&file, "[grants]\nwatch = [{ api-version = \"v1\", kind = \"ConfigMap\", namespaces = [\"a\"] }]\n").unwrap();
        let policy = GrantPolicy::operator(Some(&file)).unwrap();
        let g = policy.grants_for(&Manifest::default(), Path::new("p.toml"), &i);
        assert!(g.allows_read("v1", "ConfigMap", Some("a")));
        assert!(!g.allows_read("v1", "ConfigMap", None));
        assert!(matches!(g.source(), GrantSource::DefaultFile { .. }));
        std::fs::write(&file, "[grants]\nwatch = 3\n").unwrap();
        let err = GrantPolicy::operator(Some(&file)).unwrap_err().to_string();
        assert!(
            err.contains("defaults.toml") && err.contains("line 2"),
            "{err}"
        );
        let g =
            GrantPolicy::EverythingAsked.grants_for(&Manifest::default(), Path::new("p.toml"), &i);
        assert_eq!(g.check(&i), Ok(()));
    }
}
