//! `kubewasm check FILE.wasm` (or `kubewasm check REF`, pulled from a registry): validate a
//! handler and print what it declares, what it is granted and what is missing, without a
//! cluster.
//!
//! Exit status: 0 when every file would load (valid, and its grants cover everything its
//! `describe()` asks for); 1 otherwise, so CI can catch a handler that needs a manifest change
//! before it reaches a cluster. The JSON is printed in either case when the file describes.

use std::path::{Path, PathBuf};

use crate::plugins::{GrantError, GrantPolicy, LoadError, OwnObjects, describe_file, plugin_name};
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics};

/// Arguments of `kubewasm check`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct CheckArgs {
    /// The handler component(s) to validate: files, or registry references
    /// (`REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]`) for arguments that are not files.
    #[arg(required = true)]
    pub(crate) files: Vec<PathBuf>,
    /// Registry access, for references.
    #[command(flatten)]
    pub(crate) registry: super::registry::RegistryArgs,
    /// Grants for plugins whose `NAME.toml` has no `[grants]` table, as `kubewasm run` takes
    /// them (default: the built-in default).
    #[arg(long, value_name = "FILE")]
    pub(crate) default_grants: Option<PathBuf>,
}

/// Validates each file exactly as the host loads it (manifest, size, compile, `describe()`
/// under the deadline, subscription rules, grants) and prints the world version it implements,
/// its `describe()`, its grants and what is missing, as JSON.
pub(crate) fn check(args: CheckArgs) -> anyhow::Result<()> {
    let policy = GrantPolicy::operator(args.default_grants.as_deref())
        .map_err(|e| anyhow::anyhow!("--default-grants: {e}"))?;
    let runtime = Runtime::new(
        RuntimeConfig {
            cache_dir: super::default_cache_dir(),
            compile: crate::runtime::CompileLimits {
                worker: super::compile_worker_binary(),
                ..Default::default()
            },
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )?;
    let mut failed = 0;
    // Pulled components go here under their repository's last name, as `NAME.wasm`.
    let pulled_dir = tempfile::tempdir()?;
    for arg in &args.files {
        let file = &match fetch(arg, &args.registry, pulled_dir.path()) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("error: {}: {e:#}", arg.display());
                failed += 1;
                continue;
            }
        };
        match check_one(&runtime, &policy, file) {
            Ok((json, None)) => println!("{json}"),
            Ok((json, Some(e))) => {
                println!("{json}");
                eprintln!("error: {e}");
                failed += 1;
            }
            Err(e) => {
                eprintln!("error: {}: {e:#}", file.display());
                failed += 1;
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} file(s) failed validation", args.files.len());
    }
    Ok(())
}

/// `arg` itself when it is a file; else the component it names in a registry, pulled into
/// `dir` with every digest checked.
fn fetch(
    arg: &Path,
    registry: &super::registry::RegistryArgs,
    dir: &Path,
) -> anyhow::Result<PathBuf> {
    let text = arg.to_string_lossy();
    if arg.exists() || !text.contains('/') || text.ends_with(".wasm") {
        return Ok(arg.to_path_buf());
    }
    let reference = super::registry::parse_reference(&text)?;
    let client = registry.registry()?;
    let pulled = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(client.pull(&reference, registry.plain_http))?;
    let path = dir.join(super::pull::default_file(&reference));
    std::fs::write(&path, &pulled.wasm)?;
    eprintln!("pulled {}", pulled.reference);
    Ok(path)
}

/// The JSON report of one file and, if it would not load for its grants, why.
fn check_one(
    runtime: &Runtime,
    policy: &GrantPolicy,
    file: &Path,
) -> anyhow::Result<(String, Option<LoadError>)> {
    let described = describe_file(runtime, file, Limits::default(), policy)?;
    let name = plugin_name(file);
    let checked = described.grants.check(&described.info);
    let grant_with = checked
        .as_ref()
        .err()
        .map(|e| e.suggestion(&described.grants, &described.info))
        .unwrap_or_default();
    let missing = match checked {
        Err(GrantError::Missing(m)) => m,
        _ => Vec::new(),
    };
    // With deploy/'s names: `check` runs without a cluster, so it cannot know another's.
    let own = OwnObjects::default();
    let never_writable: Vec<String> = own
        .covered_by(&described.grants)
        .iter()
        .map(ToString::to_string)
        .collect();
    if let Some(warning) = own.warning(&described.grants) {
        eprintln!("warning: {name}: {warning}");
    }
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "file": file,
        "plugin": name,
        "world": described.compiled.world(),
        "describe": described.info,
        "granted": &*described.grants,
        "missing": missing.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "grant_with": grant_with,
        "never_writable": never_writable,
        "confined": described.grants.confined(&described.info),
        "memory": memory_report(&described),
    }))?;
    Ok((json, described.grant_error(&name, file)))
}

/// A plugin's memory: its budget (the worst case of all its instances together, linear memory
/// and what the host holds for them), what one instance used after `describe()`, and how many
/// such instances fit the budget at once (the dispatcher runs no more calls at once than that).
fn memory_report(described: &crate::plugins::DescribedPlugin) -> serde_json::Value {
    let budget = described.limits.memory_bytes;
    let one = described.instance_bytes;
    let concurrency = described.dispatch.concurrency();
    let fit = budget
        .checked_div(one)
        .map_or(concurrency as u64, |n| n.min(concurrency as u64));
    serde_json::json!({
        "budget_bytes": budget,
        "used_by_one_instance_bytes": one,
        "concurrency": concurrency,
        "instances_that_fit": fit,
    })
}
