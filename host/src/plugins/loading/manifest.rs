//! The optional `NAME.toml` that sits beside `NAME.wasm`: one plugin's limits, write rate and
//! grants. Top-level keys come first; the `[grants]` table (see [`super::grants`]) last, as
//! TOML puts every key after a table header into that table.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::plugins::delivery::dispatch::MAX_CONCURRENCY;
use crate::plugins::grants::{Declared, GrantPolicy, GrantSettings, Grants};
use crate::runtime::{Limits, PluginInfo, PluginSettings};

/// Per-plugin settings an operator can change without rebuilding the handler.
///
/// Unknown keys are rejected so that a typo (`deadline_ms` for `deadline-ms`) is an error the
/// operator sees instead of a limit silently not applied.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Manifest {
    /// Deadline for one call into the guest (and for `describe()` and start-up), in
    /// milliseconds of the call's own running time.
    pub deadline_ms: Option<u64>,
    /// The plugin's memory budget in MiB: all its instances together, linear memory and what
    /// the host holds for them.
    pub memory_limit_mib: Option<u64>,
    /// Replaces the resync period of every subscription the handler declares (0 disables resync).
    pub resync_period_ms: Option<u64>,
    /// Notifications that may wait for this plugin before they coalesce per object (see
    /// [`DEFAULT_MAX_QUEUED`](crate::plugins::delivery::queue::DEFAULT_MAX_QUEUED)).
    pub max_queued: Option<usize>,
    /// Calls in flight at once, each on its own instance, never two for one object (default
    /// the host's `--default-concurrency`, else 1; at most
    /// [`MAX_CONCURRENCY`](crate::plugins::delivery::dispatch::MAX_CONCURRENCY)).
    pub concurrency: Option<usize>,
    /// Sustained writes per second (token bucket rate; default
    /// `DEFAULT_WRITE_QPS`).
    pub write_qps: Option<f64>,
    /// Writes allowed in a burst (token bucket size; default
    /// `DEFAULT_WRITE_BURST`).
    pub write_burst: Option<u32>,
    /// Sustained `kube.get` calls per second (token bucket rate; default
    /// `DEFAULT_READ_QPS`).
    pub read_qps: Option<f64>,
    /// `kube.get` calls allowed in a burst (token bucket size; default
    /// `DEFAULT_READ_BURST`).
    pub read_burst: Option<u32>,
    /// Send every write with `dryRun=All` and refuse non-GET HTTP.
    pub dry_run: Option<bool>,
    /// Outgoing HTTP requests the plugin may have open at once (default
    /// [`DEFAULT_HTTP_MAX_INFLIGHT`](crate::runtime::DEFAULT_HTTP_MAX_INFLIGHT)).
    pub http_max_inflight: Option<usize>,
    /// What the plugin is granted; without it, the host's default grants apply.
    pub grants: Option<crate::plugins::grants::GrantsTable>,
    /// The operator's settings for the plugin, which 0.3.0 guests read through the `settings`
    /// import (and may refuse in `validate-settings`). Any TOML values.
    pub settings: Option<toml::Table>,
    /// How the plugin's objects are spread over the replicas of a sharded host
    /// (`kubewasm run --sharding`): by uid, by namespace, or not at all (the default: one
    /// replica, the leader, handles every object).
    pub shard: Option<ShardKey>,
}

/// The manifest's `shard` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardKey {
    /// Every object on its own: FNV-1a 64 of `metadata.uid`.
    Uid,
    /// A namespace together: FNV-1a 64 of `metadata.namespace`.
    Namespace,
    /// Not sharded: the leader handles every object.
    None,
}

impl Manifest {
    /// What the plugin shards by.
    pub fn shard_by(&self) -> crate::runtime::ShardBy {
        match self.shard {
            Some(ShardKey::Uid) => crate::runtime::ShardBy::Uid,
            Some(ShardKey::Namespace) => crate::runtime::ShardBy::Namespace,
            Some(ShardKey::None) | None => crate::runtime::ShardBy::None,
        }
    }
}

/// Most bytes a plugin's `[settings]` may take as JSON: every instance can copy all of it
/// into guest memory, and it is configuration, not data.
pub(crate) const MAX_SETTINGS_BYTES: usize = 64 << 10;
/// Most top-level keys of `[settings]`.
pub(crate) const MAX_SETTINGS_KEYS: usize = 256;

/// Why a manifest could not be used; the plugin it belongs to is then not loaded.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file exists but could not be read.
    #[error("cannot read manifest {path}: {source}")]
    Read {
        /// The manifest file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown or mistyped keys.
    #[error("invalid manifest {path}: {message}")]
    Invalid {
        /// The manifest file.
        path: PathBuf,
        /// What the parser said, with line and column.
        message: String,
    },
}

/// Upper bounds that keep a manifest from asking for more than the host can give.
const MAX_DEADLINE_MS: u64 = 10 * 60 * 1000;
const MAX_MEMORY_MIB: u64 = 4096;
const MAX_MAX_QUEUED: usize = 10_000_000;
const MAX_WRITE_QPS: f64 = 10_000.0;
const MAX_WRITE_BURST: u32 = 100_000;
/// Past this a plugin's open requests would take a large share of the host-wide bound.
const MAX_HTTP_MAX_INFLIGHT: usize = 1024;

impl Manifest {
    /// The manifest path that belongs to a plugin file (`foo.wasm` → `foo.toml`).
    pub fn path_for(wasm: &Path) -> PathBuf {
        wasm.with_extension("toml")
    }

    /// Reads the manifest beside `wasm`; a missing file means defaults.
    pub fn load_for(wasm: &Path) -> Result<Manifest, ManifestError> {
        let path = Self::path_for(wasm);
        match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Manifest::default()),
            Err(source) => Err(ManifestError::Read { path, source }),
        }
    }

    /// Parses manifest text; `path` only names the file in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Manifest, ManifestError> {
        let invalid = |message: String| ManifestError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let m: Manifest =
            toml::from_str(text).map_err(|e| invalid(e.to_string().trim().to_string()))?;
        if let Some(d) = m.deadline_ms
            && !(1..=MAX_DEADLINE_MS).contains(&d)
        {
            return Err(invalid(format!(
                "deadline-ms must be between 1 and {MAX_DEADLINE_MS}, got {d}"
            )));
        }
        if let Some(mib) = m.memory_limit_mib
            && !(1..=MAX_MEMORY_MIB).contains(&mib)
        {
            return Err(invalid(format!(
                "memory-limit-mib must be between 1 and {MAX_MEMORY_MIB}, got {mib}"
            )));
        }
        if let Some(q) = m.max_queued
            && !(1..=MAX_MAX_QUEUED).contains(&q)
        {
            return Err(invalid(format!(
                "max-queued must be between 1 and {MAX_MAX_QUEUED}, got {q}"
            )));
        }
        if let Some(n) = m.concurrency
            && !(1..=MAX_CONCURRENCY).contains(&n)
        {
            return Err(invalid(format!(
                "concurrency must be between 1 and {MAX_CONCURRENCY}, got {n}"
            )));
        }
        for (key, qps) in [("write-qps", m.write_qps), ("read-qps", m.read_qps)] {
            if let Some(q) = qps
                && !(q > 0.0 && q <= MAX_WRITE_QPS)
            {
                return Err(invalid(format!(
                    "{key} must be above 0 and at most {MAX_WRITE_QPS}, got {q}"
                )));
            }
        }
        for (key, burst) in [("write-burst", m.write_burst), ("read-burst", m.read_burst)] {
            if let Some(b) = burst
                && !(1..=MAX_WRITE_BURST).contains(&b)
            {
                return Err(invalid(format!(
                    "{key} must be between 1 and {MAX_WRITE_BURST}, got {b}"
                )));
            }
        }
        if let Some(n) = m.http_max_inflight
            && !(1..=MAX_HTTP_MAX_INFLIGHT).contains(&n)
        {
            return Err(invalid(format!(
                "http-max-inflight must be between 1 and {MAX_HTTP_MAX_INFLIGHT}, got {n}"
            )));
        }
        if let Some(t) = &m.settings {
            if t.len() > MAX_SETTINGS_KEYS {
                return Err(invalid(format!(
                    "[settings] has {} keys, more than {MAX_SETTINGS_KEYS}",
                    t.len()
                )));
            }
            let bytes = m.plugin_settings().bytes();
            if bytes > MAX_SETTINGS_BYTES {
                return Err(invalid(format!(
                    "[settings] takes {bytes} bytes, more than {MAX_SETTINGS_BYTES}; settings \
                     are configuration: keep data in the cluster"
                )));
            }
        }
        Ok(m)
    }

    /// The `[settings]` in the shapes the `settings` import answers with: each top-level value
    /// as text (a string as itself, a number, boolean or date as its TOML spelling, an array or
    /// table as JSON), and the whole table as one JSON object.
    pub fn plugin_settings(&self) -> PluginSettings {
        let Some(t) = &self.settings else {
            return PluginSettings::empty();
        };
        // `toml::Table` is a BTreeMap: sorted by key, as `get` expects.
        let values = t
            .iter()
            .map(|(k, v)| {
                let text = match v {
                    toml::Value::String(s) => s.clone(),
                    toml::Value::Array(_) | toml::Value::Table(_) => json_of(v).to_string(),
                    other => other.to_string(),
                };
                (k.clone(), text)
            })
            .collect();
        let json =
            serde_json::Value::Object(t.iter().map(|(k, v)| (k.clone(), json_of(v))).collect())
                .to_string();
        PluginSettings { values, json }
    }

    /// The delivery settings for this plugin.
    pub fn dispatch_config(&self) -> crate::plugins::delivery::dispatch::DispatchConfig {
        let mut c = crate::plugins::delivery::dispatch::DispatchConfig::default();
        if let Some(q) = self.max_queued {
            c.max_queued = q;
        }
        c.concurrency = self.concurrency;
        c
    }

    /// The grants of the version this manifest (at `path`) configures: its `[grants]` table,
    /// or `policy`'s default without one, with the settings beside it.
    pub fn grants_under(&self, policy: &GrantPolicy, path: &Path, info: &PluginInfo) -> Grants {
        let declared = Declared {
            table: self.grants.as_ref(),
            settings: GrantSettings {
                write_qps: self.write_qps,
                write_burst: self.write_burst,
                read_qps: self.read_qps,
                read_burst: self.read_burst,
                dry_run: self.dry_run,
                http_max_inflight: self.http_max_inflight,
            },
            manifest_path: path,
        };
        policy.grants_for(&declared, info)
    }

    /// The runtime limits for this plugin, starting from the host defaults.
    pub fn limits(&self, defaults: Limits) -> Limits {
        let mut limits = defaults;
        if let Some(ms) = self.deadline_ms {
            limits.deadline = Duration::from_millis(ms);
        }
        if let Some(mib) = self.memory_limit_mib {
            limits.memory_bytes = mib * 1024 * 1024;
        }
        limits
    }
}

/// A TOML value as JSON; a date or time becomes its TOML spelling, a float JSON cannot hold
/// (`inf`, `nan`) its TOML spelling too.
fn json_of(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        toml::Value::String(s) => J::String(s.clone()),
        toml::Value::Integer(i) => J::from(*i),
        toml::Value::Float(f) => {
            serde_json::Number::from_f64(*f).map_or_else(|| J::String(v.to_string()), J::Number)
        }
        toml::Value::Boolean(b) => J::Bool(*b),
        toml::Value::Datetime(d) => J::String(d.to_string()),
        toml::Value::Array(a) => J::Array(a.iter().map(json_of).collect()),
        toml::Value::Table(t) => {
            J::Object(t.iter().map(|(k, v)| (k.clone(), json_of(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_reach_the_guest_as_text_and_as_one_json_object() {
        let m = Manifest::parse(
            Path::new("p.toml"),
            "concurrency = 2\n[settings]\nreplicas = 3\nratio = 0.5\nenabled = true\n\
             url = \"https://x.example\"\nzones = [\"a\", \"b\"]\n[settings.limits]\ncpu = \"1\"\n",
        )
        .unwrap();
        let s = m.plugin_settings();
        assert_eq!(s.get("replicas"), Some("3"));
        assert_eq!(s.get("ratio"), Some("0.5"));
        assert_eq!(s.get("enabled"), Some("true"));
        assert_eq!(s.get("url"), Some("https://x.example"));
        assert_eq!(s.get("zones"), Some(r#"["a","b"]"#));
        assert_eq!(s.get("limits"), Some(r#"{"cpu":"1"}"#));
        assert_eq!(s.get("missing"), None);
        let json: serde_json::Value = serde_json::from_str(&s.json).unwrap();
        assert_eq!(json["replicas"], 3);
        assert_eq!(json["zones"][1], "b");
        assert_eq!(Manifest::default().plugin_settings().json, "{}");
    }

    #[test]
    fn settings_over_their_bound_are_a_manifest_error() {
        let big = format!(
            "[settings]\nblob = \"{}\"\n",
            "x".repeat(MAX_SETTINGS_BYTES)
        );
        let err = Manifest::parse(Path::new("p.toml"), &big)
            .unwrap_err()
            .to_string();
        assert!(err.contains("[settings] takes"), "{err}");
        let many: String = (0..=MAX_SETTINGS_KEYS)
            .map(|i| format!("k{i} = 1\n"))
            .collect();
        let err = Manifest::parse(Path::new("p.toml"), &format!("[settings]\n{many}"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("keys, more than"), "{err}");
    }

    #[test]
    fn its_grants_table_and_settings_reach_the_grants() {
        let path = Path::new("p.toml");
        let info = PluginInfo {
            name: "p".into(),
            subscriptions: Vec::new(),
            permissions: Vec::new(),
            http_origins: Vec::new(),
            events: true,
            controller: None,
        };
        let m = Manifest::parse(
            path,
            "write-qps = 0.5\nwrite-burst = 3\nread-qps = 2\nread-burst = 4\ndry-run = true\n\
             http-max-inflight = 7\n[grants]\nevents = true\n",
        )
        .unwrap();
        let g = m.grants_under(&GrantPolicy::default(), path, &info);
        assert!(g.events());
        assert!(
            !g.allows_read("v1", "ConfigMap", None),
            "a [grants] table replaces the default"
        );
        assert_eq!(
            (g.write_qps(), g.write_burst(), g.read_qps(), g.read_burst()),
            (0.5, 3, 2.0, 4)
        );
        assert!(g.dry_run());
        assert_eq!(g.http_max_inflight(), 7);
        assert!(matches!(
            g.source(),
            crate::plugins::grants::GrantSource::Manifest { .. }
        ));
        let g = Manifest::default().grants_under(&GrantPolicy::default(), path, &info);
        assert_eq!(g, Grants::builtin_default());
    }

    #[test]
    fn parses_all_keys() {
        let m = Manifest::parse(
            Path::new("x.toml"),
            "deadline-ms = 250\nmemory-limit-mib = 16\nresync-period-ms = 1000\n",
        )
        .unwrap();
        assert_eq!(m.deadline_ms, Some(250));
        assert_eq!(m.memory_limit_mib, Some(16));
        assert_eq!(m.resync_period_ms, Some(1000));
        let l = m.limits(Limits::default());
        assert_eq!(l.deadline, Duration::from_millis(250));
        assert_eq!(l.memory_bytes, 16 << 20);
    }

    #[test]
    fn concurrency_is_bounded() {
        let m = Manifest::parse(Path::new("x.toml"), "concurrency = 8\n").unwrap();
        assert_eq!(m.dispatch_config().concurrency(), 8);
        assert_eq!(Manifest::default().dispatch_config().concurrency, None);
        for bad in ["concurrency = 0", "concurrency = 65"] {
            let err = Manifest::parse(Path::new("x.toml"), bad).unwrap_err();
            assert!(
                err.to_string()
                    .contains("concurrency must be between 1 and 64"),
                "{err}"
            );
        }
    }

    #[test]
    fn http_max_inflight_is_bounded() {
        let m = Manifest::parse(Path::new("x.toml"), "http-max-inflight = 4\n").unwrap();
        assert_eq!(m.http_max_inflight, Some(4));
        for bad in ["http-max-inflight = 0", "http-max-inflight = 5000"] {
            let err = Manifest::parse(Path::new("x.toml"), bad).unwrap_err();
            assert!(
                err.to_string().contains("http-max-inflight must be"),
                "{err}"
            );
        }
    }

    #[test]
    fn rejects_unknown_keys_and_names_the_file() {
        let err = Manifest::parse(Path::new("/p/bad.toml"), "deadline_ms = 5\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/p/bad.toml"), "{msg}");
        assert!(msg.contains("deadline_ms"), "{msg}");
    }

    #[test]
    fn rejects_out_of_range_values() {
        assert!(Manifest::parse(Path::new("a.toml"), "deadline-ms = 0").is_err());
        assert!(Manifest::parse(Path::new("a.toml"), "memory-limit-mib = 100000").is_err());
        assert!(Manifest::parse(Path::new("a.toml"), "deadline-ms = \"fast\"").is_err());
    }

    #[test]
    fn write_rate_dry_run_and_grants_parse() {
        let m = Manifest::parse(
            Path::new("x.toml"),
            "write-qps = 5\nwrite-burst = 20\ndry-run = true\n[grants]\nevents = true\n",
        )
        .unwrap();
        assert_eq!(m.write_qps, Some(5.0), "an integer rate is accepted");
        assert_eq!(m.write_burst, Some(20));
        assert_eq!(m.dry_run, Some(true));
        assert!(m.grants.unwrap().events);
        let m = Manifest::parse(Path::new("x.toml"), "write-qps = 0.5\n").unwrap();
        assert_eq!(m.write_qps, Some(0.5));
        let m = Manifest::parse(Path::new("x.toml"), "read-qps = 2\nread-burst = 3\n").unwrap();
        assert_eq!((m.read_qps, m.read_burst), (Some(2.0), Some(3)));
        for bad in [
            "write-qps = 0",
            "write-qps = -1",
            "write-burst = 0",
            "write-qps = nan",
            "read-qps = 0",
            "read-qps = inf",
            "read-burst = 0",
        ] {
            assert!(Manifest::parse(Path::new("a.toml"), bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bad_grant_names_the_file_and_line() {
        let err = Manifest::parse(
            Path::new("/p/lb.toml"),
            "deadline-ms = 250\n[grants]\nevents = true\nhttp = [\"https://lb.example.com\", \"gopher://x\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/p/lb.toml"), "{err}");
        assert!(err.contains("line 4"), "{err}");
        assert!(err.contains("gopher://x"), "{err}");
        // A key meant for the top level but written after [grants] is an unknown grant.
        let err = Manifest::parse(
            Path::new("a.toml"),
            "[grants]\nevents = true\nwrite-qps = 3\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("write-qps") && err.contains("line 3"), "{err}");
    }

    #[test]
    fn missing_manifest_means_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::load_for(&dir.path().join("p.wasm")).unwrap();
        assert_eq!(m, Manifest::default());
    }
}
