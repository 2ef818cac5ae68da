//! The `[grants]` table as an operator writes it: verbs, resource patterns, namespace lists,
//! the `watch` and `write` entries, and the bounds on what one plugin may ask for.

use kubewasm_apimachinery::validation::{
    validate_api_version, validate_dns1123_label, validate_dns1123_subdomain, validate_kind,
};
use serde::{Deserialize, Serialize};

use super::*;

/// Default sustained writes per second of one plugin (client-go's default client QPS).
pub(crate) const DEFAULT_WRITE_QPS: f64 = 5.0;
/// Default burst of writes of one plugin (client-go's default client burst).
pub(crate) const DEFAULT_WRITE_BURST: u32 = 10;
/// Default sustained `kube.get` calls per second of one plugin: reads cost the API server as
/// much as writes, and every plugin shares the host's ServiceAccount (and so its API Priority
/// and Fairness budget) with the informers and the leader election.
pub(crate) const DEFAULT_READ_QPS: f64 = 20.0;
/// Default burst of `kube.get` calls of one plugin.
pub(crate) const DEFAULT_READ_BURST: u32 = 40;
/// Subresources no grant ever covers: each runs code in, or reaches through to, something
/// other than the object (`exec`, `attach`, `portforward` into containers, `proxy` to pods,
/// services and nodes), which no handler needs and RBAC alone would have to stop.
pub const NEVER_GRANTED_SUBRESOURCES: [&str; 4] = ["exec", "attach", "portforward", "proxy"];
/// Most permissions one `describe()` may ask for.
pub(crate) const MAX_PERMISSIONS: usize = 64;
/// Most HTTP origins one `describe()` may ask for.
pub(crate) const MAX_HTTP_ORIGINS: usize = 32;
/// Longest origin string accepted (a guest's or the operator's).
pub(super) const MAX_ORIGIN_LEN: usize = 512;

/// Verbs a plugin may ask for that are covered by the `watch` grants.
pub(crate) const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

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
pub struct ApiVersionPattern(pub(super) String);

impl TryFrom<String> for ApiVersionPattern {
    // Serde glue (`#[serde(try_from)]`): the error reaches a user only as text inside the
    // TOML parser's message, which names the line; a type would be turned back into text.
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
    /// The pattern as written (`v1`, `apps/*`, `*`).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub(super) fn matches(&self, api_version: &str) -> bool {
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
pub struct KindPattern(pub(super) String);

impl TryFrom<String> for KindPattern {
    // Serde glue (`#[serde(try_from)]`): the error reaches a user only as text inside the
    // TOML parser's message, which names the line; a type would be turned back into text.
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

impl KindPattern {
    /// The kind, or `*`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `api_version`/`kind` is a core Secret, which wildcards never cover.
pub(super) fn is_secret(api_version: &str, kind: &str) -> bool {
    api_version == "v1" && kind == "Secret"
}

/// A namespace named in a grant (a DNS-1123 label).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NamespaceName(pub(super) String);

impl TryFrom<String> for NamespaceName {
    // Serde glue (`#[serde(try_from)]`): the error reaches a user only as text inside the
    // TOML parser's message, which names the line; a type would be turned back into text.
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
pub struct NamespaceList(pub(super) Vec<NamespaceName>);

impl TryFrom<Vec<NamespaceName>> for NamespaceList {
    // Serde glue (`#[serde(try_from)]`): the error reaches a user only as text inside the
    // TOML parser's message, which names the line; a type would be turned back into text.
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

impl NamespaceList {
    /// The namespaces, as written.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|n| n.0.as_str())
    }
}

/// A non-empty set of write verbs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "Vec<Verb>")]
pub struct VerbList(pub(super) Vec<Verb>);

impl TryFrom<Vec<Verb>> for VerbList {
    // Serde glue (`#[serde(try_from)]`): the error reaches a user only as text inside the
    // TOML parser's message, which names the line; a type would be turned back into text.
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

impl VerbList {
    /// The verbs, sorted, without repeats.
    pub fn verbs(&self) -> &[Verb] {
        &self.0
    }
}

/// A subresource a write grant names beyond the object and `status` (`scale`, `resize`, …): a
/// lowercase DNS-1123 label, never a path, never one of [`NEVER_GRANTED_SUBRESOURCES`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SubresourceName(pub(super) String);

impl TryFrom<String> for SubresourceName {
    // Serde glue (`#[serde(try_from)]`): the error reaches a user only as text inside the
    // TOML parser's message, which names the line; a type would be turned back into text.
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if NEVER_GRANTED_SUBRESOURCES.contains(&s.as_str()) {
            return Err(format!(
                "subresource {s:?} is never granted to a plugin (exec, attach, portforward \
                 and proxy reach into containers or through to other endpoints)"
            ));
        }
        validate_dns1123_label(&s).map_err(|e| format!("subresource {s:?}: {e}"))?;
        Ok(Self(s))
    }
}

impl SubresourceName {
    /// The subresource's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<SubresourceName> for String {
    fn from(n: SubresourceName) -> String {
        n.0
    }
}

/// Leave a namespace list out (every namespace) or name the namespaces.
pub(super) fn covers_namespace(list: &Option<NamespaceList>, namespace: Option<&str>) -> bool {
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
    pub(super) fn covers(&self, api_version: &str, kind: &str, namespace: Option<&str>) -> bool {
        covers_resource(
            &self.api_version,
            &self.kind,
            &self.namespaces,
            (api_version, kind, namespace),
        )
    }
}

/// The one resource-matching rule of `watch` and `write` entries.
pub(super) fn covers_resource(
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
    /// Subresources the verbs also reach beyond the object and `status` (which every write
    /// grant covers); never one of [`NEVER_GRANTED_SUBRESOURCES`]. `kubewasm rbac` prints a rule
    /// for each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<SubresourceName>,
}

impl WriteGrant {
    /// Whether a write to `subresource` (`None`: the object itself) falls under this grant.
    pub(super) fn covers_subresource(&self, subresource: Option<&str>) -> bool {
        match subresource {
            None | Some("status") => true,
            Some(s) => self.subresources.iter().any(|g| g.0 == s),
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
