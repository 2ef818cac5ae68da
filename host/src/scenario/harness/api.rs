//! What a scenario's steps do to the world: the runner's writes and reads (under its own
//! field manager and User-Agent, never the host's) and the handler's load.

use serde_json::Value;

use super::{RUNNER_MANAGER, World};
use crate::informer::{resolve_kind, resource_path};
use crate::scenario::file::{ObjectKey, PatchSpec};

impl World {
    pub(super) async fn patch(&self, p: &PatchSpec) -> anyhow::Result<()> {
        let content_type = match p.patch_type.as_str() {
            "json" => "application/json-patch+json",
            "strategic" => "application/strategic-merge-patch+json",
            _ => "application/merge-patch+json",
        };
        let url = self.url(&p.object, p.subresource.as_deref()).await?;
        self.send(
            http::Method::PATCH,
            url,
            Some((content_type, serde_json::to_vec(&p.patch)?)),
        )
        .await
        .map(drop)
    }

    pub(super) async fn load(&self) -> anyhow::Result<()> {
        self.host
            .manager()
            .load_file(&self.plugin_path)
            .await
            .map(drop)
            .map_err(|e| anyhow::anyhow!("the handler did not load: {e}"))
    }

    /// The URL of `key` (or of its collection when `name` is empty).
    pub(super) async fn url(
        &self,
        key: &ObjectKey,
        subresource: Option<&str>,
    ) -> anyhow::Result<String> {
        let (ar, caps) = resolve_kind(&self.client, &key.api_version, &key.kind)
            .await
            .map_err(|e| anyhow::anyhow!("{}: {e}", key))?;
        let namespaced = caps.scope == kube::discovery::Scope::Namespaced;
        match (&key.namespace, namespaced) {
            (None, true) => anyhow::bail!("{key}: {} is namespaced: name a namespace", key.kind),
            (Some(_), false) => {
                anyhow::bail!("{key}: {} is cluster-scoped: name no namespace", key.kind)
            }
            _ => {}
        }
        let name = (!key.name.is_empty()).then_some(key.name.as_str());
        Ok(resource_path(
            &ar,
            key.namespace.as_deref(),
            name,
            subresource,
        ))
    }

    pub(super) async fn send(
        &self,
        method: http::Method,
        url: String,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<String> {
        let mut req = http::Request::builder().method(method).uri(url);
        let body = match body {
            Some((ct, b)) => {
                req = req.header(http::header::CONTENT_TYPE, ct);
                b
            }
            None => Vec::new(),
        };
        let req = req.body(body)?;
        match self.client.request_text(req).await {
            Ok(text) => Ok(text),
            Err(kube::Error::Api(s)) => Err(anyhow::anyhow!(
                "the API server refused it: {} {}: {}",
                s.code,
                s.reason,
                s.message
            )),
            Err(e) => Err(anyhow::anyhow!("request failed: {e}")),
        }
    }

    /// Applies `obj`; a status it carries goes through `/status` after, where the kind has that
    /// subresource: the API server, as a real one, ignores status written to the object itself
    /// (and clears it on create), so a scenario's object keeps meaning what it says.
    pub(super) async fn apply(&self, obj: &Value) -> anyhow::Result<()> {
        let key = ObjectKey::of(obj).ok_or_else(|| anyhow::anyhow!("not an object"))?;
        let query = format!("?fieldManager={RUNNER_MANAGER}&force=true");
        let url = format!("{}{query}", self.url(&key, None).await?);
        self.send(
            http::Method::PATCH,
            url,
            Some(("application/apply-patch+yaml", serde_json::to_vec(obj)?)),
        )
        .await?;
        let Some(status) = obj.get("status").filter(|s| !s.is_null()) else {
            return Ok(());
        };
        let (_, caps) = resolve_kind(&self.client, &key.api_version, &key.kind)
            .await
            .map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
        if !caps
            .subresources
            .iter()
            .any(|(ar, _)| ar.plural == "status")
        {
            return Ok(());
        }
        let mut metadata = serde_json::json!({"name": key.name});
        if let Some(ns) = &key.namespace {
            metadata["namespace"] = ns.as_str().into();
        }
        let body = serde_json::json!({
            "apiVersion": key.api_version, "kind": key.kind,
            "metadata": metadata, "status": status,
        });
        let url = format!("{}{query}", self.url(&key, Some("status")).await?);
        self.send(
            http::Method::PATCH,
            url,
            Some(("application/apply-patch+yaml", serde_json::to_vec(&body)?)),
        )
        .await
        .map(drop)
    }

    pub(super) async fn get(&self, key: &ObjectKey) -> anyhow::Result<Option<Value>> {
        let url = self.url(key, None).await?;
        let req = http::Request::get(url).body(Vec::new())?;
        match self.client.request_text(req).await {
            Ok(text) => Ok(Some(serde_json::from_str(&text)?)),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(anyhow::anyhow!("get {key}: {e}")),
        }
    }
}
