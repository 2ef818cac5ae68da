//! [`SourceFactory`] over a real API server: `Api<DynamicObject>` with the `ApiResource`
//! resolved from apiVersion + kind through discovery.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, VersionMatch, WatchParams};
use kube::core::WatchEvent as KubeWatchEvent;
use kube::core::{GroupVersionKind, Status};
use kube::discovery::Scope;

use super::list_watch::{
    ListOptions, ListPage, ListerWatcher, SourceError, SourceErrorKind, SourceFactory, WatchEvent,
    WatchOptions, WatchStream,
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
        let (group, version) = match key.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", key.api_version.as_str()),
        };
        let gvk = GroupVersionKind::gvk(group, version, &key.kind);
        let (ar, caps) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|e| {
                let (api_version, kind, cause) =
                    (key.api_version.clone(), key.kind.clone(), e.to_string());
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
            })?;
        let api: Api<DynamicObject> = match (&key.namespace, &caps.scope) {
            (Some(ns), Scope::Namespaced) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (Some(ns), Scope::Cluster) => {
                tracing::warn!(informer = %key, namespace = %ns,
                    "kind is cluster-scoped; ignoring the namespace");
                Api::all_with(self.client.clone(), &ar)
            }
            (None, _) => Api::all_with(self.client.clone(), &ar),
        };
        Ok(Arc::new(KubeListerWatcher {
            api,
            label_selector: key.label_selector.clone(),
            field_selector: key.field_selector.clone(),
        }))
    }
}

/// LIST/WATCH of one resource through kube-client.
pub struct KubeListerWatcher {
    api: Api<DynamicObject>,
    label_selector: Option<String>,
    field_selector: Option<String>,
}

/// Classifies a kube-client error for the reflector.
pub fn classify_kube_error(e: &kube::Error) -> SourceError {
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

fn to_value(o: DynamicObject) -> Result<serde_json::Value, SourceError> {
    serde_json::to_value(o).map_err(|e| SourceError::new(SourceErrorKind::Malformed, e.to_string()))
}

#[async_trait::async_trait]
impl ListerWatcher for KubeListerWatcher {
    async fn list(&self, opts: &ListOptions) -> Result<ListPage, SourceError> {
        let mut lp = ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            continue_token: opts.continue_token.clone(),
            limit: opts.limit,
            ..Default::default()
        };
        if !opts.resource_version.is_empty() {
            lp.resource_version = Some(opts.resource_version.clone());
            lp.version_match = Some(VersionMatch::NotOlderThan);
            // kube-client drops resourceVersion=0 when a limit is set; the watch cache ignores
            // limit for RV "0" anyway, so send RV "0" unpaged.
            if opts.resource_version == "0" {
                lp.limit = None;
            }
        }
        let list = self
            .api
            .list(&lp)
            .await
            .map_err(|e| classify_kube_error(&e))?;
        let items = list
            .items
            .into_iter()
            .map(to_value)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListPage {
            items,
            resource_version: list.metadata.resource_version.unwrap_or_default(),
            continue_token: list.metadata.continue_.filter(|c| !c.is_empty()),
        })
    }

    async fn watch(&self, opts: &WatchOptions) -> Result<WatchStream, SourceError> {
        let wp = WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(opts.timeout_seconds),
            bookmarks: opts.allow_bookmarks || opts.send_initial_events,
            send_initial_events: opts.send_initial_events,
        };
        let stream = self
            .api
            .watch(&wp, &opts.resource_version)
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
            .map(|r| match r {
                Ok(KubeWatchEvent::Added(o)) => to_value(o).map(WatchEvent::Added),
                Ok(KubeWatchEvent::Modified(o)) => to_value(o).map(WatchEvent::Modified),
                Ok(KubeWatchEvent::Deleted(o)) => to_value(o).map(WatchEvent::Deleted),
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
            })
            .boxed())
    }
}
