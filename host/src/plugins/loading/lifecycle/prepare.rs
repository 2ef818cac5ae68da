//! Preparing a version before anything is attached: compile, instantiate and describe it off
//! the async runtime under its deadline, then hand each instance only what its grants allow.

use std::path::Path;
use std::sync::Arc;

use super::PluginManager;
use crate::informer::InformerKey;
use crate::plugins::capabilities::cache_reader::SubscribedCache;
use crate::plugins::capabilities::kube_client::PluginClient;
use crate::plugins::delivery::attachment::Attachable;
use crate::plugins::delivery::dispatch::DispatchConfig;
use crate::plugins::delivery::shard_gate::PluginShardView;
use crate::plugins::grants::Grants;
use crate::plugins::loading::describe::{PluginInput, describe_plugin};
use crate::plugins::loading::error::LoadError;
use crate::runtime::{
    GuestCausedLog, HandlerInstance, HttpPolicy, PluginInfo, PluginSettings, ShardBy,
};

/// The informer of a sharded subscription: one that lists and watches only the replica's
/// slots, never shared with an unsharded one.
fn sharded_key(key: InformerKey, by: ShardBy) -> InformerKey {
    use kubewasm_apimachinery::ShardField;
    match by {
        ShardBy::Uid => key.sharded(ShardField::Uid),
        ShardBy::Namespace => key.sharded(ShardField::Namespace),
        ShardBy::None => key,
    }
}

impl PluginManager {
    /// Compiles, instantiates and describes a plugin on a blocking thread under its deadline,
    /// then validates what it asks for and creates the worker's instance template.
    pub(super) async fn prepare(
        &self,
        name: &str,
        path: &Path,
        wasm: Vec<u8>,
        manifest_text: Option<String>,
    ) -> Result<Prepared, LoadError> {
        let runtime = self.inner.runtime.clone();
        let (plugin, file) = (name.to_string(), path.to_path_buf());
        let closing = self.inner.closing.clone();
        let defaults = self.inner.defaults;
        let grants = self.inner.grants.clone();
        let described = tokio::task::spawn_blocking(move || {
            describe_plugin(
                &runtime,
                PluginInput {
                    name: &plugin,
                    path: &file,
                    wasm: &wasm,
                    manifest_text: manifest_text.as_deref(),
                },
                defaults,
                &grants,
                &closing,
            )
        })
        .await
        .map_err(|e| LoadError::Invalid {
            path: path.to_path_buf(),
            message: format!("loader task failed: {e}"),
        })??;
        // On a sharded host a sharded plugin's informers hold only this replica's slots: every
        // subscription of a handler, a controller's primary (its owned and watched kinds stay
        // whole; the keys they name are of cached primaries only).
        let shard = self
            .shard_gate()
            .filter(|_| described.shard_by != ShardBy::None)
            .map(|gate| (described.shard_by, gate.clone()));
        if shard.is_none() && described.shard_by != ShardBy::None {
            tracing::info!(plugin = %name, "the manifest's shard key applies only on a sharded host (--sharding); delivering every object");
        }
        let controller = described.dispatch.controller.is_some();
        let subscriptions: Vec<Attachable> = described
            .subscriptions
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let cache = p
                    .projection
                    .as_ref()
                    .map(|pr| self.inner.projections.cache_for(pr));
                let key = match &shard {
                    Some((by, _)) if i == 0 || !controller => sharded_key(p.key.clone(), *by),
                    _ => p.key.clone(),
                };
                (key, p.resync, cache)
            })
            .collect();
        let cache = Arc::new(SubscribedCache::new(
            name,
            self.inner.factory.clone(),
            subscriptions
                .iter()
                .map(|(k, _, c)| (k.clone(), c.clone()))
                .collect(),
            &self.inner.metrics,
        ));
        let instance = self
            .inner
            .runtime
            .handler_instance(&described.compiled, name, described.limits, cache)
            .map_err(|e| LoadError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?
            .with_settings(described.settings.clone());
        let instance = match &shard {
            Some((by, gate)) => instance.with_shard(Arc::new(PluginShardView {
                gate: gate.clone(),
                by: *by,
            })),
            None => instance,
        };
        for c in described.grants.confined(&described.info) {
            tracing::warn!(plugin = %name, "grant narrower than asked: {c}");
        }
        // One budget for the host lines this plugin causes, shared by its instances and
        // capabilities.
        let lines = GuestCausedLog::new(name, self.inner.runtime.metrics());
        let instance = self.grant(
            instance.with_guest_caused_log(lines.clone()),
            name,
            &described.grants,
            lines,
        );
        let mut dispatch = DispatchConfig {
            concurrency: Some(
                described
                    .dispatch
                    .concurrency
                    .unwrap_or(self.inner.default_concurrency),
            ),
            shard,
            ..described.dispatch
        };
        // Its share of the engine's instance pool, one slot per call it may run at once.
        let reservation = self
            .inner
            .runtime
            .reserve_instances(name, dispatch.concurrency())
            .map_err(|e| LoadError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        if reservation.capped() {
            tracing::warn!(plugin = %name, asked = dispatch.concurrency(), granted = reservation.granted(),
                "concurrency capped: the host's instance pool has only this many slots left for the plugin");
            dispatch.concurrency = Some(reservation.granted() as usize);
        }
        Ok(Prepared {
            instance: instance.with_pool_reservation(reservation),
            grants: described.grants,
            info: described.info,
            subscriptions,
            dispatch,
            settings: described.settings,
        })
    }

    /// Gives an instance what its grants allow: outbound HTTP to granted origins, and `kube`
    /// calls and Events through a client of its own (when the host is connected to a cluster).
    pub(super) fn grant(
        &self,
        instance: HandlerInstance,
        name: &str,
        grants: &Arc<Grants>,
        lines: GuestCausedLog,
    ) -> HandlerInstance {
        let cluster = self.inner.cluster.as_ref();
        if let Some(warning) = cluster.and_then(|c| c.own_objects().warning(grants)) {
            tracing::warn!(plugin = %name, "{warning}");
        }
        let mut http = HttpPolicy::new(grants.clone());
        http.dry_run = grants.dry_run() || cluster.is_some_and(|c| c.dry_run());
        http.max_inflight = grants.http_max_inflight();
        let instance = instance.with_http_policy(http);
        match cluster {
            Some(ctx) => instance.with_cluster(Arc::new(PluginClient::with_guest_caused_log(
                name,
                ctx.clone(),
                grants.clone(),
                lines,
            ))),
            None => instance,
        }
    }
}

/// What a successful describe produced.
pub(super) struct Prepared {
    pub(super) instance: HandlerInstance,
    pub(super) grants: Arc<Grants>,
    pub(super) info: PluginInfo,
    pub(super) subscriptions: Vec<Attachable>,
    pub(super) dispatch: DispatchConfig,
    pub(super) settings: Arc<PluginSettings>,
}
