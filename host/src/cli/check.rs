//! `kubewasm check FILE.wasm`: validate a handler and print what it declares, what it is
//! granted and what is missing, without a cluster.
//!
//! Exit status: 0 when every file would load (valid, and its grants cover everything its
//! `describe()` asks for); 1 otherwise, so CI can catch a handler that needs a manifest change
//! before it reaches a cluster. The JSON is printed in either case when the file describes.

use std::path::{Path, PathBuf};

use crate::plugins::{GrantError, GrantPolicy, LoadError, OwnObjects, describe_file, plugin_name};
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics};

/// Arguments of `kubewasm check`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The handler component(s) to validate.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Grants for plugins whose `NAME.toml` has no `[grants]` table, as `kubewasm run` takes
    /// them (default: the built-in default).
    #[arg(long, value_name = "FILE")]
    pub default_grants: Option<PathBuf>,
}

/// Validates each file exactly as the host loads it (manifest, size, compile, `describe()`
/// under the deadline, subscription rules, grants) and prints the world version it implements,
/// its `describe()`, its grants and what is missing, as JSON.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let policy = GrantPolicy::operator(args.default_grants.as_deref())
        .map_err(|e| anyhow::anyhow!("--default-grants: {e}"))?;
    let runtime = Runtime::new(
        RuntimeConfig {
            cache_dir: super::default_cache_dir(),
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )?;
    let mut failed = 0;
    for file in &args.files {
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
    }))?;
    Ok((json, described.grant_error(&name, file)))
}
