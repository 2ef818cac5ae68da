//! [`SourceFactory`] over a real API server: the resource URL resolved from apiVersion + kind
//! through discovery, LIST and WATCH sent through kube-client, and the responses decoded straight
//! into served JSON per object ([`SourceObject::Json`]): no typed object and no tree per item.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::ApiResource;
use kube::api::{Api, DynamicObject, ListParams, VersionMatch, WatchParams};
use kube::core::WatchEvent as KubeWatchEvent;
use kube::core::{GroupVersionKind, Request, Status};
use kube::discovery::{ApiCapabilities, Scope};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::list_watch::{
    ListOptions, ListPage, ListerWatcher, SourceError, SourceErrorKind, SourceFactory,
    SourceObject, WatchEvent, WatchOptions, WatchStream,
};
use super::{InformerError, InformerKey};

/// Resolves informer keys against the cluster behind a kube `Client`.
#[derive(Clone)]
pub struct KubeSourceFactory {
    client: kube::Client,
}

impl KubeSourceFactory {
    /// Uses `client` for discovery, LIST and WATCH.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

#[async_trait::async_trait]
impl SourceFactory for KubeSourceFactory {
    async fn lister_watcher(
        &self,
        key: &InformerKey,
    ) -> Result<Arc<dyn ListerWatcher>, InformerError> {
        // The apiVersion goes into discovery paths and the namespace into every request path
        // (kube-client pastes both unescaped): only keys that pass the API server's syntax go
        // on. Selectors travel as form-encoded query values.
        key.validate()?;
        let (ar, caps) = resolve_kind(&self.client, &key.api_version, &key.kind).await?;
        let api: Api<DynamicObject> = match (&key.namespace, &caps.scope) {
            (Some(ns), Scope::Namespaced) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (Some(ns), Scope::Cluster) => {
                tracing::warn!(informer = %key, namespace = %ns,
                    "kind is cluster-scoped; ignoring the namespace");
                Api::all_with(self.client.clone(), &ar)
            }
            (None, _) => Api::all_with(self.client.clone(), &ar),
        };
        // Which fields a field selector may name is known only to the server, per kind. A
        // reflector would relist a refused selector forever (as client-go does), so one
        // one-item LIST asks first; any answer other than 400 is the reflector's business.
        if let Some(fields) = &key.field_selector {
            let mut probe = ListParams::default().limit(1).fields(fields);
            if let Some(labels) = &key.label_selector {
                probe = probe.labels(labels);
            }
            if let Err(kube::Error::Api(s)) = api.list_metadata(&probe).await
                && s.code == 400
            {
                return Err(InformerError::Rejected {
                    key: key.to_string(),
                    message: s.message,
                });
            }
        }
        Ok(Arc::new(KubeListerWatcher {
            request: Request::new(api.resource_url()),
            client: self.client.clone(),
            label_selector: key.label_selector.clone(),
            field_selector: key.field_selector.clone(),
        }))
    }
}

/// The URL path of resource `ar`: its collection (in `namespace`, when given), the object
/// `name`, and its `subresource`. Parts are used as given: callers pass validated names.
pub(crate) fn resource_path(
    ar: &ApiResource,
    namespace: Option<&str>,
    name: Option<&str>,
    subresource: Option<&str>,
) -> String {
    let mut path = if ar.group.is_empty() {
        format!("/api/{}", ar.version)
    } else {
        format!("/apis/{}/{}", ar.group, ar.version)
    };
    if let Some(ns) = namespace {
        path.push_str("/namespaces/");
        path.push_str(ns);
    }
    path.push('/');
    path.push_str(&ar.plural);
    for part in [name, subresource].into_iter().flatten() {
        path.push('/');
        path.push_str(part);
    }
    path
}

/// Asks discovery which resource serves `kind` of `api_version` (plural name, scope): the one
/// lookup behind informers and plugins' API calls. Callers validate both strings first; they go
/// into discovery paths.
pub(crate) async fn resolve_kind(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
) -> Result<(ApiResource, ApiCapabilities), InformerError> {
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let gvk = GroupVersionKind::gvk(group, version, kind);
    kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| {
            let (api_version, kind, cause) =
                (api_version.to_string(), kind.to_string(), e.to_string());
            match e {
                // The server answered: the kind (or its group/version) is not served.
                kube::Error::Discovery(_) => InformerError::UnknownKind {
                    api_version,
                    kind,
                    cause,
                },
                kube::Error::Api(ref s) if s.code == 404 => InformerError::UnknownKind {
                    api_version,
                    kind,
                    cause,
                },
                _ => InformerError::DiscoveryUnavailable {
                    api_version,
                    kind,
                    cause,
                },
            }
        })
}

/// LIST/WATCH of one resource through kube-client.
pub(crate) struct KubeListerWatcher {
    client: kube::Client,
    /// Builds the LIST and WATCH requests for the resource's URL.
    request: Request,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

/// Classifies a kube-client error for the reflector.
pub(super) fn classify_kube_error(e: &kube::Error) -> SourceError {
    match e {
        kube::Error::Api(s) => classify_status(s),
        kube::Error::SerdeError(_) => SourceError::new(SourceErrorKind::Malformed, e.to_string()),
        _ => {
            let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(s) = src {
                if let Some(io) = s.downcast_ref::<std::io::Error>()
                    && io.kind() == std::io::ErrorKind::ConnectionRefused
                {
                    return SourceError::new(SourceErrorKind::ConnectionRefused, e.to_string());
                }
                src = s.source();
            }
            let text = format!("{e:?}").to_ascii_lowercase();
            if text.contains("connection refused") || text.contains("connectionrefused") {
                return SourceError::new(SourceErrorKind::ConnectionRefused, e.to_string());
            }
            SourceError::new(SourceErrorKind::Other, e.to_string())
        }
    }
}

fn classify_status(s: &Status) -> SourceError {
    let causes: Vec<(&str, &str)> = s
        .details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.reason.as_str(), c.message.as_str()))
                .collect()
        })
        .unwrap_or_default();
    SourceError::from_status(s.code, &s.reason, &s.message, &causes)
}

/// A LIST response with each item left as its served text.
#[derive(Deserialize)]
struct WireList {
    #[serde(default)]
    metadata: WireListMeta,
    /// `null` from some servers when empty.
    #[serde(default)]
    items: Option<Vec<Box<RawValue>>>,
}

#[derive(Deserialize, Default)]
struct WireListMeta {
    #[serde(rename = "resourceVersion", default)]
    resource_version: Option<String>,
    #[serde(rename = "continue", default)]
    continue_token: Option<String>,
    /// KEP-5866's echo (ListMeta.shardInfo), present only when the server filtered.
    #[serde(rename = "shardInfo", default)]
    shard_info: Option<WireShardInfo>,
}

#[derive(Deserialize, Default)]
struct WireShardInfo {
    #[serde(default)]
    selector: Option<String>,
}

fn malformed(e: impl std::fmt::Display) -> SourceError {
    SourceError::new(SourceErrorKind::Malformed, e.to_string())
}

/// Decodes a LIST response body: one scan that copies each item's text into its own exact-size
/// buffer, which the cache then keeps (or splices once).
pub(super) fn decode_list(body: &str) -> Result<ListPage<SourceObject>, SourceError> {
    let list: WireList = serde_json::from_str(body).map_err(malformed)?;
    Ok(ListPage {
        items: list
            .items
            .unwrap_or_default()
            .into_iter()
            .map(|raw| SourceObject::Json(raw.into()))
            .collect(),
        resource_version: list.metadata.resource_version.unwrap_or_default(),
        continue_token: list.metadata.continue_token.filter(|c| !c.is_empty()),
        shard_selector: list.metadata.shard_info.and_then(|i| i.selector),
    })
}

/// Appends `shardSelector` (form-encoded) to a request built by kube-client, whose
/// `ListParams`/`WatchParams` predate KEP-5866.
fn with_shard_selector<B>(
    req: &mut http::Request<B>,
    selector: Option<&str>,
) -> Result<(), SourceError> {
    let Some(sel) = selector else { return Ok(()) };
    let uri = req.uri().to_string();
    let sep = if uri.ends_with('?') {
        ""
    } else if uri.contains('?') {
        "&"
    } else {
        "?"
    };
    let value: String = url::form_urlencoded::byte_serialize(sel.as_bytes()).collect();
    *req.uri_mut() = format!("{uri}{sep}shardSelector={value}").parse().map_err(
        |e: http::uri::InvalidUri| SourceError::new(SourceErrorKind::Other, e.to_string()),
    )?;
    Ok(())
}

/// Maps one decoded watch line. The object stays the text kube-client's line decoder cut out of
/// the event (`Box<RawValue>` borrows nothing, so no tree is built); this relies on servers
/// writing `type` before `object`, as the Kubernetes API server does.
fn watch_event(
    ev: Result<KubeWatchEvent<Box<RawValue>>, kube::Error>,
) -> Result<WatchEvent<SourceObject>, SourceError> {
    let json = |o: Box<RawValue>| SourceObject::Json(o.into());
    match ev {
        Ok(KubeWatchEvent::Added(o)) => Ok(WatchEvent::Added(json(o))),
        Ok(KubeWatchEvent::Modified(o)) => Ok(WatchEvent::Modified(json(o))),
        Ok(KubeWatchEvent::Deleted(o)) => Ok(WatchEvent::Deleted(json(o))),
        Ok(KubeWatchEvent::Bookmark(b)) => Ok(WatchEvent::Bookmark {
            initial_events_end: b
                .metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .is_some_and(|v| v == "true"),
            resource_version: b.metadata.resource_version,
        }),
        Ok(KubeWatchEvent::Error(s)) => Err(classify_status(&s)),
        Err(e) => Err(classify_kube_error(&e)),
    }
}

/// A served object as a tree, for callers of the tree-based [`ListerWatcher`] methods.
fn to_tree(o: SourceObject) -> Result<serde_json::Value, SourceError> {
    match o {
        SourceObject::Tree(v) => Ok(v),
        SourceObject::Json(j) => serde_json::from_str(&j).map_err(malformed),
    }
}

#[async_trait::async_trait]
impl ListerWatcher for KubeListerWatcher {
    async fn list(&self, opts: &ListOptions) -> Result<ListPage, SourceError> {
        let page = self.list_objects(opts).await?;
        let items = page
            .items
            .into_iter()
            .map(to_tree)
            .collect::<Result<_, _>>()?;
        Ok(ListPage {
            items,
            resource_version: page.resource_version,
            continue_token: page.continue_token,
            shard_selector: page.shard_selector,
        })
    }

    async fn watch(&self, opts: &WatchOptions) -> Result<WatchStream, SourceError> {
        let stream = self.watch_objects(opts).await?;
        Ok(stream
            .map(|r| match r {
                Ok(WatchEvent::Added(o)) => to_tree(o).map(WatchEvent::Added),
                Ok(WatchEvent::Modified(o)) => to_tree(o).map(WatchEvent::Modified),
                Ok(WatchEvent::Deleted(o)) => to_tree(o).map(WatchEvent::Deleted),
                Ok(WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                }) => Ok(WatchEvent::Bookmark {
                    resource_version,
                    initial_events_end,
                }),
                Err(e) => Err(e),
            })
            .boxed())
    }

    async fn list_objects(
        &self,
        opts: &ListOptions,
    ) -> Result<ListPage<SourceObject>, SourceError> {
        let mut lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            continue_token: opts.continue_token.clone(),
            limit: opts.limit,
            ..Default::default()
        };
        // kube-client leaves resourceVersion=0 out when a limit is set; client-go sends both and
        // lets the server decide (a watch cache answers RV "0" in one piece, a server that pages
        // it keeps every response small), so "0" is appended to the query by hand.
        let any_version = opts.resource_version == "0";
        if !opts.resource_version.is_empty() && !any_version {
            lp.resource_version = Some(opts.resource_version.clone());
            lp.version_match = Some(VersionMatch::NotOlderThan);
        }
        let mut req = self
            .request
            .list(&lp)
            .map_err(|e| SourceError::new(SourceErrorKind::Other, e.to_string()))?;
        if any_version {
            let uri = req.uri().to_string();
            let sep = if uri.ends_with('?') { "" } else { "&" };
            *req.uri_mut() =
                format!("{uri}{sep}resourceVersion=0&resourceVersionMatch=NotOlderThan")
                    .parse()
                    .map_err(|e: http::uri::InvalidUri| {
                        SourceError::new(SourceErrorKind::Other, e.to_string())
                    })?;
        }
        with_shard_selector(&mut req, opts.shard_selector.as_deref())?;
        req.extensions_mut().insert("list");
        // Read straight into one buffer: collecting the body as text would copy each page twice
        // more, and at 500 objects a page those copies are most of the list path's transient memory.
        let reader = self
            .client
            .request_stream(req)
            .await
            .map_err(|e| classify_kube_error(&e))?;
        futures::pin_mut!(reader);
        let mut body = Vec::new();
        futures::AsyncReadExt::read_to_end(&mut reader, &mut body)
            .await
            .map_err(|e| SourceError::new(SourceErrorKind::Other, e.to_string()))?;
        decode_list(std::str::from_utf8(&body).map_err(malformed)?)
    }

    async fn watch_objects(
        &self,
        opts: &WatchOptions,
    ) -> Result<WatchStream<SourceObject>, SourceError> {
        let wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(opts.timeout_seconds),
            bookmarks: opts.allow_bookmarks || opts.send_initial_events,
            send_initial_events: opts.send_initial_events,
        };
        let mut req = self
            .request
            .watch(&wp, &opts.resource_version)
            .map_err(|e| SourceError::new(SourceErrorKind::Other, e.to_string()))?;
        with_shard_selector(&mut req, opts.shard_selector.as_deref())?;
        req.extensions_mut().insert("watch");
        let stream = self
            .client
            .request_events::<Box<RawValue>>(req)
            .await
            .map_err(|e| classify_kube_error(&e))?;
        // A transport error mid-stream ends the watch like a server close (client-go's stream
        // watcher closes its channel): the reflector re-watches from the last RV, no relist.
        Ok(stream
            .take_while(|r| {
                let broken = matches!(r, Err(kube::Error::ReadEvents(_)));
                if let Err(e @ kube::Error::ReadEvents(_)) = r {
                    tracing::warn!(error = %e, "watch stream broke; ending it");
                }
                futures::future::ready(!broken)
            })
            .map(watch_event)
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_items_keep_their_served_text() {
        let body = r#"{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"c1"},"items":[{"metadata":{"name":"a"},"data":{"k":"v"}}, {"metadata":{"name":"b"}}]}"#;
        let page = decode_list(body).unwrap();
        assert_eq!(page.resource_version, "12");
        assert_eq!(page.continue_token.as_deref(), Some("c1"));
        let texts: Vec<_> = page
            .items
            .iter()
            .map(|o| match o {
                SourceObject::Json(j) => j.to_string(),
                SourceObject::Tree(_) => panic!("tree"),
            })
            .collect();
        assert_eq!(
            texts,
            [
                r#"{"metadata":{"name":"a"},"data":{"k":"v"}}"#,
                r#"{"metadata":{"name":"b"}}"#
            ]
        );
        let empty =
            decode_list(r#"{"metadata":{"resourceVersion":"3","continue":""},"items":null}"#)
                .unwrap();
        assert!(empty.items.is_empty() && empty.continue_token.is_none());
        assert_eq!(empty.shard_selector, None);
        let echoed = decode_list(
            r#"{"metadata":{"resourceVersion":"3","shardInfo":{"selector":"shardRange(x)"}},"items":[]}"#,
        )
        .unwrap();
        assert_eq!(echoed.shard_selector.as_deref(), Some("shardRange(x)"));
        assert_eq!(
            decode_list("{").unwrap_err().kind,
            SourceErrorKind::Malformed
        );
    }

    #[test]
    fn watch_lines_keep_their_served_text() {
        let line = r#"{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}}"#;
        let ev = serde_json::from_str::<KubeWatchEvent<Box<RawValue>>>(line)
            .map_err(kube::Error::SerdeError);
        match watch_event(ev).unwrap() {
            WatchEvent::Modified(SourceObject::Json(j)) => assert_eq!(
                &*j,
                r#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"5"}}"#
            ),
            other => panic!("{other:?}"),
        }
        let bookmark = r#"{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}"#;
        let ev = serde_json::from_str::<KubeWatchEvent<Box<RawValue>>>(bookmark)
            .map_err(kube::Error::SerdeError);
        assert!(matches!(
            watch_event(ev).unwrap(),
            WatchEvent::Bookmark { resource_version, initial_events_end: true } if resource_version == "9"
        ));
    }
}
