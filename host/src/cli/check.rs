//! `kubewasm check FILE.wasm`: validate a handler and print what it declares, without a cluster.

use std::path::{Path, PathBuf};

use crate::plugins::{describe_file, plugin_name};
use crate::runtime::{Limits, Runtime, RuntimeConfig, RuntimeMetrics};

/// Arguments of `kubewasm check`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The handler component(s) to validate.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Validates each file exactly as the host loads it (manifest, size, compile, `describe()`
/// under the deadline, subscription rules) and prints the world version it implements and its
/// `describe()` as JSON.
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

fn check_one(runtime: &Runtime, file: &Path) -> anyhow::Result<String> {
    let described = describe_file(runtime, file, Limits::default())?;
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "file": file,
        "plugin": plugin_name(file),
        "world": described.compiled.world(),
        "describe": described.info,
    }))?)
}
