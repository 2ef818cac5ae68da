//! Describing a plugin file without attaching it: read the file (size-capped) and its
//! manifest, compile, instantiate, call `describe()` under the plugin's deadline, apply the
//! manifest's overrides, validate the subscriptions and check the asks against the grants.
//!
//! The host's loads ([`super::lifecycle`]), `kubewasm check`, `kubewasm rbac` and the scenario
//! runner all go through here, so a file that one of them accepts the others accept too.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::error::LoadError;
use super::manifest::Manifest;
use super::subscriptions::{
    SubscriptionError, SubscriptionPlan, validate_controller, validate_subscriptions,
};
use crate::informer::InformerKey;
use crate::plugins::delivery::dispatch::{ControllerPlan, DispatchConfig};
use crate::plugins::grants::{GrantPolicy, Grants};
use crate::runtime::{Limits, NoCache, PluginInfo, PluginSettings, Runtime};

/// Longest handler name `describe()` may return (a DNS subdomain's length): it appears in
/// `/plugins` and in lifecycle events.
pub(crate) const MAX_NAME_BYTES: usize = 253;

/// Largest plugin file the host reads. A handler component is a few MiB (an interpreter-based
/// one up to ~40 MiB); anything far larger is refused before it is read into memory.
pub(crate) const MAX_PLUGIN_BYTES: u64 = 256 << 20;

/// The plugin name for a file: its stem (`/plugins/foo.wasm` → `foo`).
pub(crate) fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A plugin file compiled, described and validated, not attached to anything.
pub(crate) struct DescribedPlugin {
    /// The compiled handler.
    pub compiled: crate::runtime::CompiledHandler,
    /// What `describe()` returned, with manifest overrides applied and identical
    /// subscriptions merged.
    pub info: PluginInfo,
    /// The informer, resync period and projection of each subscription.
    pub subscriptions: Vec<SubscriptionPlan>,
    /// What it is granted (its `describe()` asks for no more).
    pub grants: Arc<Grants>,
    /// The limits its calls run under.
    pub limits: Limits,
    /// Its delivery settings.
    pub dispatch: DispatchConfig,
    /// The operator's `[settings]`, which its instances read (0.3.0).
    pub settings: Arc<PluginSettings>,
    /// What one instance used of its memory budget right after `describe()` (linear memory
    /// and what the host held for it).
    pub instance_bytes: u64,
    /// What it shards by (the manifest's `shard`), applied only on a sharded host.
    pub shard_by: crate::runtime::ShardBy,
}

/// One plugin file to describe, as read: grouped so the describe functions take the file
/// as one argument beside the host's settings.
pub(crate) struct PluginInput<'a> {
    /// The plugin's name (its file stem).
    pub name: &'a str,
    /// Where the file is; error messages and the manifest's path derive from it.
    pub path: &'a Path,
    /// The component's bytes.
    pub wasm: &'a [u8],
    /// The text of its `NAME.toml` manifest, if it has one.
    pub manifest_text: Option<&'a str>,
}

/// Every load step short of attaching, for one plugin file: manifest, compile, instantiate,
/// `describe()` under the deadline, manifest overrides, subscription validation, and the check
/// of what it asks for against what `policy` grants it. Blocks: the
/// guest runs on the calling thread (with a runtime of its own), so a guest stuck in
/// `describe()` occupies only this thread and only until its deadline; `closing` abandons it.
/// The host's loads and `kubewasm check` both go through here.
pub(crate) fn describe_plugin(
    runtime: &Runtime,
    input: PluginInput<'_>,
    defaults: Limits,
    policy: &GrantPolicy,
    closing: &CancellationToken,
) -> Result<DescribedPlugin, LoadError> {
    let (name, path) = (input.name, input.path);
    let described = describe_ungated(runtime, input, defaults, policy, closing)?;
    match described.grant_error(name, path) {
        Some(e) => Err(e),
        None => Ok(described),
    }
}

/// [`describe_plugin`] short of the grant check.
fn describe_ungated(
    runtime: &Runtime,
    input: PluginInput<'_>,
    defaults: Limits,
    policy: &GrantPolicy,
    closing: &CancellationToken,
) -> Result<DescribedPlugin, LoadError> {
    let PluginInput {
        name,
        path,
        wasm,
        manifest_text,
    } = input;
    let manifest = match manifest_text {
        Some(t) => Manifest::parse(&Manifest::path_for(path), t)?,
        None => Manifest::default(),
    };
    let limits = manifest.limits(defaults);
    let invalid = |message: String| LoadError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let busy = |message: String| LoadError::Busy {
        path: path.to_path_buf(),
        message,
    };
    let compiled = runtime.compile(wasm).map_err(|e| match e {
        // Killed from outside (the OOM killer when the host's memory is full): the same bytes
        // may compile later, so the load is retried rather than refused for good.
        crate::runtime::RuntimeError::CompileAborted(a) if a.is_transient() => busy(a.to_string()),
        e => invalid(e.to_string()),
    })?;
    // describe() runs before the subscriptions are known, so it gets a cache that refuses
    // everything; the worker's instances get the plugin's own.
    let settings = Arc::new(manifest.plugin_settings());
    let mut probe = runtime
        .handler_instance(&compiled, name, limits, Arc::new(NoCache))
        .map_err(|e| invalid(e.to_string()))?
        .with_settings(settings.clone());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| busy(format!("cannot start a loader runtime: {e}")))?;
    let mut info = rt.block_on(async {
        tokio::select! {
            _ = closing.cancelled() => Err(busy("the host is shutting down".into())),
            r = async {
                probe.start().await.map_err(|e| match e {
                    crate::runtime::CallError::PoolExhausted { message } => {
                        busy(format!("no free instance slot: {message}"))
                    }
                    e => invalid(format!("cannot instantiate: {e}")),
                })?;
                // describe() may depend on the settings, so they are judged first.
                match probe.validate_settings().await {
                    Ok(Ok(())) => {}
                    Ok(Err(message)) => {
                        return Err(invalid(format!(
                            "plugin {name} refused its [settings]: {}",
                            crate::text::foreign(&message, 1024)
                        )));
                    }
                    Err(e) => return Err(invalid(format!("validate-settings() failed: {e}"))),
                }
                probe
                    .describe()
                    .await
                    .map_err(|e| invalid(format!("describe() failed: {e}")))
            } => r,
        }
    })?;
    if info.name.len() > MAX_NAME_BYTES {
        return Err(invalid(format!(
            "describe() returned a name of {} bytes; at most {MAX_NAME_BYTES}",
            info.name.len()
        )));
    }
    if let Some(ms) = manifest.resync_period_ms {
        for s in &mut info.subscriptions {
            s.resync_period_ms = ms;
        }
    }
    let subscriptions = validate_controller(&info)
        .and_then(|()| validate_subscriptions(&mut info.subscriptions))
        .map_err(|e: SubscriptionError| invalid(format!("describe() of plugin {name}: {e}")))?;
    let mut dispatch = manifest.dispatch_config();
    dispatch.controller = ControllerPlan::of(&info).map(Arc::new);
    let shard_by = manifest.shard_by();
    // A controller's reconcile of a key whose primary left the cache would read "deleted"; only
    // the namespace, which the key names, tells a moved primary from a deleted one.
    if dispatch.controller.is_some() && shard_by == crate::runtime::ShardBy::Uid {
        return Err(invalid(format!(
            "plugin {name}: a controller shards by namespace (shard = \"namespace\"), not by \
             uid: a reconcile key names its namespace, not its uid"
        )));
    }
    let grants = manifest.grants_under(policy, &Manifest::path_for(path), &info);
    let instance_bytes = probe.memory_budget().used();
    Ok(DescribedPlugin {
        instance_bytes,
        compiled,
        info,
        subscriptions,
        grants: Arc::new(grants),
        limits,
        dispatch,
        settings,
        shard_by,
    })
}

impl DescribedPlugin {
    /// Why this plugin may not load with its grants: a malformed ask, or asks beyond the
    /// grants (the message lists each and the `NAME.toml` lines that would grant it).
    pub(crate) fn grant_error(&self, name: &str, path: &Path) -> Option<LoadError> {
        let e = self.grants.check(&self.info).err()?;
        let message = e.message(name, &self.grants, &Manifest::path_for(path), &self.info);
        let path = path.to_path_buf();
        Some(match e {
            crate::plugins::grants::GrantError::InvalidAsk(_) => {
                LoadError::Invalid { path, message }
            }
            crate::plugins::grants::GrantError::Missing(_) => {
                LoadError::NotGranted { path, message }
            }
        })
    }
}

/// Reads a plugin file (size-capped) and its manifest, then describes it like
/// `describe_plugin` but leaves the grant check to the caller
/// ([`DescribedPlugin::grant_error`]), so tools can show what is asked and granted either way.
pub(crate) fn describe_file(
    runtime: &Runtime,
    path: &Path,
    defaults: Limits,
    policy: &GrantPolicy,
) -> Result<DescribedPlugin, LoadError> {
    let files = read_plugin(path)?;
    describe_ungated(
        runtime,
        PluginInput {
            name: &plugin_name(path),
            path,
            wasm: &files.wasm,
            manifest_text: files.manifest.as_deref(),
        },
        defaults,
        policy,
        &CancellationToken::new(),
    )
}

/// The informer a subscription needs; equal subscriptions share one informer and one watch.
pub(crate) fn informer_key(sub: &crate::runtime::Subscription) -> InformerKey {
    let norm = |s: &Option<String>| {
        s.as_ref()
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    InformerKey {
        api_version: sub.api_version.clone(),
        kind: sub.kind.clone(),
        namespace: norm(&sub.namespace),
        label_selector: norm(&sub.label_selector),
        field_selector: norm(&sub.field_selector),
        shard: None,
    }
}

/// A plugin file's bytes, its manifest text (if any) and the digest of both.
pub(crate) struct PluginFiles {
    pub(crate) wasm: Vec<u8>,
    pub(crate) manifest: Option<String>,
    pub(crate) digest: [u8; 32],
}

/// Why a file name cannot name a plugin.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not UTF-8.
    #[error(
        "the file name is not valid UTF-8; a plugin's name is its file name without `.wasm` and \
         must be letters, digits, '.', '_' or '-'"
    )]
    NotUtf8,
    /// Empty or longer than the longest name.
    #[error(
        "a plugin's name (its file name without `.wasm`) must be 1 to {MAX_NAME_BYTES} bytes, not {0}"
    )]
    Length(usize),
    /// A character other than letters, digits, `.`, `_` and `-`.
    #[error(
        "the file name has the character {0:?}; a plugin's name (its file name without `.wasm`) \
         may hold only letters, digits, '.', '_' and '-'"
    )]
    Character(char),
}

/// A plugin's name is its file stem, and it labels metrics, logs and `/plugins`: it must be
/// readable and unambiguous. Two files whose names are not UTF-8 would otherwise both become
/// the same lossily decoded name (`bad\u{FFFD}`) and replace each other.
pub(crate) fn check_file_name(path: &Path) -> Result<(), NameError> {
    let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
        return Err(NameError::NotUtf8);
    };
    if stem.is_empty() || stem.len() > MAX_NAME_BYTES {
        return Err(NameError::Length(stem.len()));
    }
    if let Some(c) = stem
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(NameError::Character(c));
    }
    Ok(())
}

/// Reads the wasm file (size-capped) and its manifest and hashes both: a manifest edit is a new
/// version too.
pub(crate) fn read_plugin(path: &Path) -> Result<PluginFiles, LoadError> {
    let read_err = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let len = file.metadata().map_err(read_err)?.len();
    if len > MAX_PLUGIN_BYTES {
        return Err(LoadError::Invalid {
            path: path.to_path_buf(),
            message: format!(
                "file is {len} bytes, over the {MAX_PLUGIN_BYTES}-byte limit for a plugin component"
            ),
        });
    }
    let mut wasm = Vec::with_capacity(len as usize);
    // `take` bounds the read even if the file grows meanwhile.
    file.take(MAX_PLUGIN_BYTES + 1)
        .read_to_end(&mut wasm)
        .map_err(read_err)?;
    let manifest_path = Manifest::path_for(path);
    let manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(source) => {
            return Err(super::manifest::ManifestError::Read {
                path: manifest_path,
                source,
            }
            .into());
        }
    };
    let mut h = Sha256::new();
    h.update((wasm.len() as u64).to_le_bytes());
    h.update(&wasm);
    if let Some(m) = &manifest {
        h.update(m.as_bytes());
    }
    Ok(PluginFiles {
        wasm,
        manifest,
        digest: h.finalize().into(),
    })
}
