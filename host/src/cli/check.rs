//! `kubewasm check FILE.wasm`: validate a handler and print what it declares, without a cluster.

use std::path::PathBuf;
use std::sync::Arc;

use crate::plugins::Manifest;
use crate::runtime::{NoCache, Runtime, RuntimeConfig, RuntimeMetrics};

/// Arguments of `kubewasm check`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The handler component(s) to validate.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Validates each file as the host would load it and prints its `describe()` as JSON.
pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let runtime = Runtime::new(
        RuntimeConfig {
            cache_dir: super::host::default_cache_dir(),
            ..RuntimeConfig::default()
        },
        RuntimeMetrics::unregistered(),
    )?;
    let mut failed = 0;
    for file in &args.files {
        match check_one(&runtime, file) {
            Ok(json) => println!("{json}"),
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

fn check_one(runtime: &Runtime, file: &PathBuf) -> anyhow::Result<String> {
    let wasm = std::fs::read(file).map_err(|e| anyhow::anyhow!("cannot read: {e}"))?;
    let manifest = Manifest::load_for(file)?;
    let limits = manifest.limits(Default::default());
    let compiled = runtime.compile(&wasm)?;
    let name = crate::plugins::plugin_name(file);
    let mut instance = runtime.instantiate(&compiled, &name, limits, Arc::new(NoCache))?;
    let mut info = instance
        .describe()
        .map_err(|e| anyhow::anyhow!("describe() failed: {e}"))?;
    if info.subscriptions.is_empty() {
        anyhow::bail!("describe() returned no subscriptions; the plugin would never be called");
    }
    if let Some(ms) = manifest.resync_period_ms {
        for s in &mut info.subscriptions {
            s.resync_period_ms = ms;
        }
    }
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "file": file,
        "plugin": name,
        "describe": info,
    }))?)
}
