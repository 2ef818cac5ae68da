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
//! `watch`. A write grant covers the object and its `status`; any other subresource must be
//! named, `subresources = ["scale"]`. `exec`, `attach`, `portforward` and `proxy` are never
//! granted (a manifest naming them does not load), whatever the kind.
//!
//! Events: an Event's `regarding` object must be one the plugin may read (its kind and
//! namespace under `watch`), and the namespace the Event is written to must be one some grant
//! covers (a cluster-scoped object's Events go to `default`).
//!
//! HTTP origins: `scheme://host[:port]`, scheme `http` or `https`, no path, query, fragment or
//! user info; an omitted port means the scheme's default (80 or 443). `https://*.example.com`
//! matches one or more labels below `example.com` (`a.example.com`, `a.b.example.com`), never
//! `example.com` itself (list it too) and never an IP address. `:*` matches any port
//! (`http://127.0.0.1:*`). IPv6 literals are written in brackets (`http://[::1]:8080`).
//! A CIDR (`http://10.0.0.0/8:*`, `http://[fc00::]/7:*`) grants every address of a network.
//! A grant by DNS name reaches public addresses only; internal ones (loopback, link-local,
//! private networks, the cluster's API service) need an origin naming the address, a CIDR
//! holding it, or the table form `{ origin = "http://svc.ns.svc:8080", private = true }`;
//! cloud metadata addresses need an origin naming that very address. `http-max-inflight`
//! (default [`DEFAULT_HTTP_MAX_INFLIGHT`](crate::runtime::DEFAULT_HTTP_MAX_INFLIGHT)) bounds
//! the requests the plugin may have open at once.
//!
//! Writes are also rate limited per plugin by a token bucket, `write-qps` (default
//! [`DEFAULT_WRITE_QPS`]) and `write-burst` (default [`DEFAULT_WRITE_BURST`]) in `NAME.toml`,
//! the defaults of client-go's client rate limiter; `dry-run = true` sends every write as a
//! dry run. `kube.get` has its own bucket, `read-qps` (default [`DEFAULT_READ_QPS`]) and
//! `read-burst` (default [`DEFAULT_READ_BURST`]); reads from the guest's cache are free.

use std::net::IpAddr;

use serde::Serialize;

use crate::runtime::{Permission, PluginInfo};

mod change;
mod diff;
mod host_pod;
mod origin;
mod own_objects;
mod policy;
mod schema;

pub(crate) use change::*;
pub use diff::*;
pub use host_pod::HostPod;
/// Pure derivations of the host's own objects from its Pod and what the Pod names.
pub(crate) mod host_pod_objects {
    pub(crate) use super::host_pod::{
        controller, from_bindings, from_pdbs, from_pod, from_replica_set, from_service_account,
        service_account,
    };
}
pub use origin::*;
pub use own_objects::*;
pub use policy::*;
pub use schema::*;

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
    read_qps: f64,
    read_burst: u32,
    dry_run: bool,
    http_max_inflight: usize,
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
            read_qps: DEFAULT_READ_QPS,
            read_burst: DEFAULT_READ_BURST,
            dry_run: false,
            http_max_inflight: crate::runtime::DEFAULT_HTTP_MAX_INFLIGHT,
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
                    subresources: Vec::new(),
                });
            }
        }
        Grants::from_table(table, GrantSource::EverythingAsked)
    }

    /// Applies the manifest's read and write rates and dry-run settings.
    fn with_settings(mut self, settings: &GrantSettings) -> Grants {
        self.write_qps = settings.write_qps.unwrap_or(DEFAULT_WRITE_QPS);
        self.write_burst = settings.write_burst.unwrap_or(DEFAULT_WRITE_BURST);
        self.read_qps = settings.read_qps.unwrap_or(DEFAULT_READ_QPS);
        self.read_burst = settings.read_burst.unwrap_or(DEFAULT_READ_BURST);
        self.dry_run = settings.dry_run.unwrap_or(false);
        self.http_max_inflight = settings
            .http_max_inflight
            .unwrap_or(crate::runtime::DEFAULT_HTTP_MAX_INFLIGHT);
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
        self.allows_write_at(api_version, kind, namespace, verb, None)
    }

    /// Like [`Grants::allows_write`], for a write to `subresource` of the object (`None` is
    /// the object itself): `status` comes with every write grant, any other subresource only
    /// where the grant names it, and [`NEVER_GRANTED_SUBRESOURCES`] never.
    pub fn allows_write_at(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        verb: &str,
        subresource: Option<&str>,
    ) -> bool {
        let Some(verb) = Verb::parse(verb) else {
            return false;
        };
        if subresource.is_some_and(|s| NEVER_GRANTED_SUBRESOURCES.contains(&s)) {
            return false;
        }
        self.write.iter().any(|g| {
            g.verbs.0.contains(&verb)
                && g.covers_subresource(subresource)
                && covers_resource(
                    &g.api_version,
                    &g.kind,
                    &g.namespaces,
                    (api_version, kind, namespace),
                )
        })
    }

    /// Does any write grant name `verb`, whatever the kind? The check a call can make before
    /// parsing a body that names its target: without such a grant no body can be allowed.
    pub fn grants_verb(&self, verb: &str) -> bool {
        Verb::parse(verb).is_some_and(|verb| self.write.iter().any(|g| g.verbs.0.contains(&verb)))
    }

    /// May the plugin record Events?
    pub fn events(&self) -> bool {
        self.events
    }

    /// May the plugin record an Event about `kind` of `api_version` in `namespace` (`None`:
    /// cluster-scoped), written into `event_namespace`? The object must be one it may read,
    /// and the Event's namespace one some grant covers; `Err` says which rule failed.
    pub fn allows_event_about(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        event_namespace: &str,
    ) -> Result<(), &'static str> {
        if !self.events {
            return Err("no events grant");
        }
        if !self.allows_read(api_version, kind, namespace) {
            return Err("regarding object outside the watch grants");
        }
        let namespaces = self
            .watch
            .iter()
            .map(|g| &g.namespaces)
            .chain(self.write.iter().map(|g| &g.namespaces));
        let mut namespaces = namespaces;
        if !namespaces.any(|n| covers_namespace(n, Some(event_namespace))) {
            return Err("event namespace outside the grants");
        }
        Ok(())
    }

    /// May the plugin send an HTTP request to `scheme://host:port`? `host` is lowercase; an
    /// IP literal comes without brackets. The sender checks the resolved address too.
    pub fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.http.iter().any(|o| o.matches(scheme, host, port))
    }

    /// Whether an origin granted by address reaches `addr`: one naming it exactly, or (unless
    /// `exact`) a CIDR holding it.
    pub fn allows_address(&self, scheme: &str, addr: IpAddr, port: u16, exact: bool) -> bool {
        self.http
            .iter()
            .any(|o| o.reaches_address(scheme, addr, port, exact))
    }

    /// Whether a grant marked `private` covers `scheme://host:port`.
    pub fn private_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.http
            .iter()
            .any(|o| o.private() && o.matches(scheme, host, port))
    }

    /// Most outgoing HTTP requests the plugin may have open at once (`http-max-inflight`).
    pub fn http_max_inflight(&self) -> usize {
        self.http_max_inflight
    }

    /// Sustained writes per second (token bucket refill rate).
    pub fn write_qps(&self) -> f64 {
        self.write_qps
    }

    /// Writes allowed at once (token bucket size).
    pub fn write_burst(&self) -> u32 {
        self.write_burst
    }

    /// Sustained `kube.get` calls per second (token bucket refill rate).
    pub fn read_qps(&self) -> f64 {
        self.read_qps
    }

    /// `kube.get` calls allowed at once (token bucket size).
    pub fn read_burst(&self) -> u32 {
        self.read_burst
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

    /// The `watch` entries, for `kubewasm rbac`.
    pub fn watch_grants(&self) -> &[ResourceGrant] {
        &self.watch
    }

    /// The granted HTTP origins, for the grant changes a swap logs.
    pub fn http_origins(&self) -> &[OriginPattern] {
        &self.http
    }

    /// Whether some grant allows `verb` on `kind` in some namespaces (not necessarily all).
    fn allows_write_somewhere(&self, api_version: &str, kind: &str, verb: &str) -> bool {
        let Some(verb) = Verb::parse(verb) else {
            return false;
        };
        self.write.iter().any(|g| {
            g.verbs.0.contains(&verb)
                && g.namespaces.is_some()
                && covers_resource(&g.api_version, &g.kind, &None, (api_version, kind, None))
        })
    }

    /// Whether some `watch` grant covers `kind` in some namespaces (not necessarily all).
    fn allows_read_somewhere(&self, api_version: &str, kind: &str) -> bool {
        self.watch.iter().any(|g| {
            g.namespaces.is_some()
                && covers_resource(&g.api_version, &g.kind, &None, (api_version, kind, None))
        })
    }

    /// The `kube` permissions `describe()` asks for in every namespace that the grants confine
    /// to some namespaces: the plugin loads, and each call outside them gets 403 (what an
    /// operator narrowing a plugin expects; the plugin handles 403 like any refused call).
    /// One line per permission, for the load's warning and `kubewasm check`.
    pub fn confined(&self, info: &PluginInfo) -> Vec<String> {
        let mut out = Vec::new();
        for p in info.permissions.iter().filter(|p| p.namespace.is_none()) {
            let verbs: Vec<&str> = p
                .verbs
                .iter()
                .map(String::as_str)
                .filter(|v| {
                    if READ_VERBS.contains(v) {
                        !self.allows_read(&p.api_version, &p.kind, None)
                            && self.allows_read_somewhere(&p.api_version, &p.kind)
                    } else {
                        !self.allows_write(&p.api_version, &p.kind, None, v)
                            && self.allows_write_somewhere(&p.api_version, &p.kind, v)
                    }
                })
                .collect();
            if !verbs.is_empty() {
                out.push(format!(
                    "{} {} {}: asked in every namespace, granted only in the namespaces its grants name (calls elsewhere get 403)",
                    verbs.join(", "),
                    p.api_version,
                    p.kind
                ));
            }
        }
        out
    }

    /// Checks `info` (after subscription validation) against these grants: every subscription
    /// must be watchable, every permission's verbs granted, Events and every origin granted.
    /// A permission asked in every namespace is also granted by grants confined to some
    /// namespaces ([`Grants::confined`]): `kube` calls are checked one by one anyway, while a
    /// subscription needs its whole scope. Asks that are not valid are refused before anything
    /// is compared.
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
            let confined_read = ns.is_none() && self.allows_read_somewhere(&p.api_version, &p.kind);
            if !reads.is_empty() && !self.allows_read(&p.api_version, &p.kind, ns) && !confined_read
            {
                missing.push(Missing::Read(Permission {
                    verbs: reads,
                    ..p.clone()
                }));
            }
            let writes: Vec<String> = p
                .verbs
                .iter()
                .filter(|v| {
                    Verb::parse(v).is_some()
                        && !self.allows_write(&p.api_version, &p.kind, ns, v)
                        && !(ns.is_none()
                            && self.allows_write_somewhere(&p.api_version, &p.kind, v))
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

/// The runtime's view of the HTTP grants: the sender asks before every request (and again for
/// every loopback or link-local address a name resolves to).
impl crate::runtime::HttpGate for Grants {
    fn allows_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        Grants::allows_origin(self, scheme, host, port)
    }

    fn allows_address(&self, scheme: &str, addr: IpAddr, port: u16, exact: bool) -> bool {
        Grants::allows_address(self, scheme, addr, port, exact)
    }

    fn private_origin(&self, scheme: &str, host: &str, port: u16) -> bool {
        Grants::private_origin(self, scheme, host, port)
    }
}

#[cfg(test)]
mod tests;
