//! `kubewasm new NAME --lang LANG [--resource GROUP/VERSION/KIND] [--kind reconcile]`: a
//! ready-to-build handler folder (`kubewasm:handler@0.2.0`), or a controller's
//! (`kubewasm:handler@0.3.0`, world `controller`).
//!
//! The templates live under `host/templates/<lang>/` and `host/templates/common/` and are
//! compiled into the binary (`include_str!`), as are the WIT files, so the command works wherever
//! the binary is copied. Placeholders are `{{key}}`; the values substituted are all validated
//! names (DNS-1123 label, apiVersion, kind), so they need no quoting in any of the languages.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use kubewasm_apimachinery::validation::{
    ValidationError, validate_api_version, validate_dns1123_label, validate_kind,
};
use serde_json::{Value, json};

/// Arguments of `kubewasm new`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct NewArgs {
    /// Name of the handler and of the folder created for it in the current directory: a
    /// DNS-1123 label (lowercase letters, digits and '-'), so it is a valid plugin name too.
    #[arg(value_parser = parse_name)]
    pub(crate) name: String,
    /// Language of the handler.
    #[arg(long, value_enum)]
    pub(crate) lang: Lang,
    /// The resource it subscribes to: `v1/ConfigMap`, `v1/Service`, `apps/v1/Deployment`
    /// (the core group has no group part).
    #[arg(long, value_name = "[GROUP/]VERSION/KIND", default_value = "v1/ConfigMap",
          value_parser = parse_resource)]
    pub(crate) resource: Resource,
    /// What to write: an event handler (`on-add`, `on-update`, `on-delete`) or a controller that
    /// reconciles keys of the resource (world `controller` of 0.3.0; Rust, Python, JavaScript).
    #[arg(long, value_enum, default_value = "handler")]
    pub(crate) kind: Kind,
}

/// The two sorts of plugin `kubewasm new` writes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An event handler on `kubewasm:handler@0.2.0`.
    Handler,
    /// A controller on `kubewasm:handler@0.3.0`'s `controller` world.
    Reconcile,
}

/// The languages there are templates for.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    /// Rust with wit-bindgen, target wasm32-wasip2.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js (StarlingMonkey).
    Javascript,
    /// C with clang-19, wasi-libc and kubewasm-guest-tool.
    C,
    /// Go (wasip1) with a hand-written canonical ABI and kubewasm-guest-tool.
    Go,
}

/// A resource as `--resource` names it: `apiVersion` and `kind`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resource {
    /// `v1` or `group/version`.
    pub(crate) api_version: String,
    /// CamelCase kind, e.g. `Deployment`.
    pub(crate) kind: String,
}

fn parse_name(s: &str) -> Result<String, ValidationError> {
    validate_dns1123_label(s)?;
    Ok(s.to_string())
}

/// Why a `--resource` value was refused.
#[derive(Debug, thiserror::Error)]
enum BadResource {
    #[error("expected [GROUP/]VERSION/KIND, e.g. v1/ConfigMap or apps/v1/Deployment")]
    Shape,
    #[error("apiVersion {api_version:?}: {source}")]
    ApiVersion {
        api_version: String,
        #[source]
        source: ValidationError,
    },
    #[error("kind {kind:?}: {source}")]
    Kind {
        kind: String,
        #[source]
        source: ValidationError,
    },
    #[error(
        "kind {kind:?}: kinds are CamelCase, starting with an uppercase letter (e.g. ConfigMap)"
    )]
    NotCamelCase { kind: String },
}

fn parse_resource(s: &str) -> Result<Resource, BadResource> {
    let (api_version, kind) = s.rsplit_once('/').ok_or(BadResource::Shape)?;
    validate_api_version(api_version).map_err(|source| BadResource::ApiVersion {
        api_version: api_version.into(),
        source,
    })?;
    validate_kind(kind).map_err(|source| BadResource::Kind {
        kind: kind.into(),
        source,
    })?;
    // A lowercase kind would pass the syntax check but never match what the server serves.
    if !kind.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Err(BadResource::NotCamelCase { kind: kind.into() });
    }
    Ok(Resource {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    })
}

/// One file of a template: where it goes in the new folder, its text, and whether it is a
/// script to run.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

const fn file(path: &'static str, text: &'static str) -> TemplateFile {
    TemplateFile {
        path,
        text,
        executable: false,
    }
}

const fn script(path: &'static str, text: &'static str) -> TemplateFile {
    TemplateFile {
        path,
        text,
        executable: true,
    }
}

macro_rules! template {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/", $path))
    };
}

macro_rules! wit {
    ($version:literal, $path:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../wit/",
            $version,
            "/",
            $path
        ))
    };
}

/// The WIT package a handler's bindings are generated from, with the WASI packages it uses.
const WIT: &[TemplateFile] = &[
    file("wit/handler.wit", wit!("0.2.0", "handler.wit")),
    file("wit/deps/cli.wit", wit!("0.2.0", "deps/cli.wit")),
    file("wit/deps/clocks.wit", wit!("0.2.0", "deps/clocks.wit")),
    file(
        "wit/deps/filesystem.wit",
        wit!("0.2.0", "deps/filesystem.wit"),
    ),
    file("wit/deps/http.wit", wit!("0.2.0", "deps/http.wit")),
    file("wit/deps/io.wit", wit!("0.2.0", "deps/io.wit")),
    file("wit/deps/random.wit", wit!("0.2.0", "deps/random.wit")),
    file("wit/deps/sockets.wit", wit!("0.2.0", "deps/sockets.wit")),
];

/// The 0.3.0 package a controller's bindings are generated from: it imports 0.2.0's interfaces,
/// so 0.2.0 is one of its deps.
const WIT_0_3: &[TemplateFile] = &[
    file("wit/handler.wit", wit!("0.3.0", "handler.wit")),
    file(
        "wit/deps/handler-0.2.0/handler.wit",
        wit!("0.3.0", "deps/handler-0.2.0/handler.wit"),
    ),
    file("wit/deps/cli.wit", wit!("0.3.0", "deps/cli.wit")),
    file("wit/deps/clocks.wit", wit!("0.3.0", "deps/clocks.wit")),
    file(
        "wit/deps/filesystem.wit",
        wit!("0.3.0", "deps/filesystem.wit"),
    ),
    file("wit/deps/http.wit", wit!("0.3.0", "deps/http.wit")),
    file("wit/deps/io.wit", wit!("0.3.0", "deps/io.wit")),
    file("wit/deps/random.wit", wit!("0.3.0", "deps/random.wit")),
    file("wit/deps/sockets.wit", wit!("0.3.0", "deps/sockets.wit")),
];

macro_rules! sdk_rust {
    ($path:literal) => {
        file(
            concat!("sdk/", $path),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/rust/", $path)),
        )
    };
}

// Each language's files (consts: a slice of `file(...)` calls is only `'static` in a const).
// A new Rust project gets the SDK's sources in `sdk/`, since it lives outside the repository.
const RUST_FILES: &[TemplateFile] = &[
    file("Cargo.toml", template!("rust/Cargo.toml.in")),
    file("Cargo.lock", template!("rust/Cargo.lock.in")),
    file("src/lib.rs", template!("rust/src/lib.rs")),
    script("build.sh", template!("rust/build.sh")),
    file(".gitignore", template!("rust/gitignore")),
];

/// The Rust SDK a new project builds on (it lives outside the repository), with its WIT.
const RUST_SDK: &[TemplateFile] = &[
    sdk_rust!("Cargo.toml"),
    sdk_rust!("README.md"),
    sdk_rust!("build.rs"),
    sdk_rust!("src/lib.rs"),
    sdk_rust!("src/controller.rs"),
    sdk_rust!("src/settings.rs"),
    sdk_rust!("src/shard.rs"),
    sdk_rust!("src/cache.rs"),
    sdk_rust!("src/describe.rs"),
    sdk_rust!("src/error.rs"),
    sdk_rust!("src/events.rs"),
    sdk_rust!("src/handler.rs"),
    sdk_rust!("src/http.rs"),
    sdk_rust!("src/kube.rs"),
    sdk_rust!("src/lazy.rs"),
    sdk_rust!("src/log.rs"),
    sdk_rust!("src/object.rs"),
    sdk_rust!("src/owner.rs"),
    sdk_rust!("src/patch.rs"),
    sdk_rust!("src/world.rs"),
    sdk_rust!("wit/handler.wit"),
    sdk_rust!("wit/deps/handler-0.2.0/handler.wit"),
    sdk_rust!("wit/deps/cli.wit"),
    sdk_rust!("wit/deps/clocks.wit"),
    sdk_rust!("wit/deps/filesystem.wit"),
    sdk_rust!("wit/deps/http.wit"),
    sdk_rust!("wit/deps/io.wit"),
    sdk_rust!("wit/deps/random.wit"),
    sdk_rust!("wit/deps/sockets.wit"),
    sdk_rust!("wit-0.1.0/handler.wit"),
    sdk_rust!("wit-0.1.0/sdk.wit"),
    sdk_rust!("wit-sdk/sdk.wit"),
];

/// The Rust controller: the handler's files but the source.
const RUST_RECONCILE_FILES: &[TemplateFile] = &[
    file("src/lib.rs", template!("rust/reconcile/lib.rs")),
    file("Cargo.toml", template!("rust/Cargo.toml.in")),
    file("Cargo.lock", template!("rust/Cargo.lock.in")),
    script("build.sh", template!("rust/build.sh")),
    file(".gitignore", template!("rust/gitignore")),
];

const PYTHON_FILES: &[TemplateFile] = &[
    file("src/app.py", template!("python/app.py")),
    script("build.sh", template!("python/build.sh")),
    file(".gitignore", template!("python/gitignore")),
];

const PYTHON_RECONCILE_FILES: &[TemplateFile] = &[
    file("src/app.py", template!("python/reconcile/app.py")),
    script("build.sh", template!("python/build.sh")),
    file(".gitignore", template!("python/gitignore")),
];

const JAVASCRIPT_FILES: &[TemplateFile] = &[
    file("handler.js", template!("javascript/handler.js")),
    script("build.sh", template!("javascript/build.sh")),
    file(".gitignore", template!("javascript/gitignore")),
];

const JAVASCRIPT_RECONCILE_FILES: &[TemplateFile] = &[
    file("handler.js", template!("javascript/reconcile/handler.js")),
    script("build.sh", template!("javascript/build.sh")),
    file(".gitignore", template!("javascript/gitignore")),
];

const C_FILES: &[TemplateFile] = &[
    file("handler.c", template!("c/handler.c")),
    script("build.sh", template!("c/build.sh")),
    file(".gitignore", template!("c/gitignore")),
];

const GO_FILES: &[TemplateFile] = &[
    file("main.go", template!("go/main.go")),
    file("go.mod", template!("go/go.mod.in")),
    script("build.sh", template!("go/build.sh")),
    file(".gitignore", template!("go/gitignore")),
];

macro_rules! sdk {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../sdk/", $path))
    };
}

/// The Python SDK a new project builds on, copied in (not rendered) so the project builds
/// outside a kubewasm checkout and offline.
const PYTHON_SDK: &[TemplateFile] = &[
    file(
        "sdk/kubewasm_sdk/__init__.py",
        sdk!("python/kubewasm_sdk/__init__.py"),
    ),
    file(
        "sdk/kubewasm_sdk/errors.py",
        sdk!("python/kubewasm_sdk/errors.py"),
    ),
    file(
        "sdk/kubewasm_sdk/events.py",
        sdk!("python/kubewasm_sdk/events.py"),
    ),
    file(
        "sdk/kubewasm_sdk/handler.py",
        sdk!("python/kubewasm_sdk/handler.py"),
    ),
    file(
        "sdk/kubewasm_sdk/http.py",
        sdk!("python/kubewasm_sdk/http.py"),
    ),
    file(
        "sdk/kubewasm_sdk/kube.py",
        sdk!("python/kubewasm_sdk/kube.py"),
    ),
    file(
        "sdk/kubewasm_sdk/log.py",
        sdk!("python/kubewasm_sdk/log.py"),
    ),
    file(
        "sdk/kubewasm_sdk/objects.py",
        sdk!("python/kubewasm_sdk/objects.py"),
    ),
    file(
        "sdk/kubewasm_sdk/owner.py",
        sdk!("python/kubewasm_sdk/owner.py"),
    ),
    file(
        "sdk/kubewasm_sdk/controller.py",
        sdk!("python/kubewasm_sdk/controller.py"),
    ),
    file(
        "sdk/kubewasm_sdk/settings.py",
        sdk!("python/kubewasm_sdk/settings.py"),
    ),
    file(
        "sdk/kubewasm_sdk/shard.py",
        sdk!("python/kubewasm_sdk/shard.py"),
    ),
];

/// The JavaScript SDK a new project builds on, copied in as PYTHON_SDK is.
const JAVASCRIPT_SDK: &[TemplateFile] = &[
    file("sdk/package.json", sdk!("javascript/package.json")),
    file("sdk/index.js", sdk!("javascript/index.js")),
    file("sdk/errors.js", sdk!("javascript/errors.js")),
    file("sdk/events.js", sdk!("javascript/events.js")),
    file("sdk/handler.js", sdk!("javascript/handler.js")),
    file("sdk/handler-core.js", sdk!("javascript/handler-core.js")),
    file("sdk/http.js", sdk!("javascript/http.js")),
    file("sdk/kube.js", sdk!("javascript/kube.js")),
    file("sdk/log.js", sdk!("javascript/log.js")),
    file("sdk/objects.js", sdk!("javascript/objects.js")),
    file("sdk/owner.js", sdk!("javascript/owner.js")),
    file("sdk/controller.js", sdk!("javascript/controller.js")),
    file("sdk/settings.js", sdk!("javascript/settings.js")),
    file("sdk/shard.js", sdk!("javascript/shard.js")),
    file("sdk/v0.1.0.js", sdk!("javascript/v0.1.0.js")),
];

/// The SDK sources a project in `lang` gets under `sdk/` (none where the template has no SDK).
fn sdk_files(lang: Lang) -> &'static [TemplateFile] {
    match lang {
        Lang::Rust => RUST_SDK,
        Lang::Python => PYTHON_SDK,
        Lang::Javascript => JAVASCRIPT_SDK,
        _ => &[],
    }
}

/// A language's template: its files, the rows it adds to the README's file table, its build
/// notes, and its name in prose.
struct LangTemplate {
    files: &'static [TemplateFile],
    /// The controller's files instead, where the language has a reconcile template.
    reconcile_files: Option<&'static [TemplateFile]>,
    readme_files: &'static str,
    readme_build: &'static str,
    title: &'static str,
}

impl Lang {
    fn template(self) -> LangTemplate {
        match self {
            Lang::Rust => LangTemplate {
                files: RUST_FILES,
                reconcile_files: Some(RUST_RECONCILE_FILES),
                readme_files: template!("rust/files.md"),
                readme_build: template!("rust/build.md"),
                title: "Rust",
            },
            Lang::Python => LangTemplate {
                files: PYTHON_FILES,
                reconcile_files: Some(PYTHON_RECONCILE_FILES),
                readme_files: template!("python/files.md"),
                readme_build: template!("python/build.md"),
                title: "Python",
            },
            Lang::Javascript => LangTemplate {
                files: JAVASCRIPT_FILES,
                reconcile_files: Some(JAVASCRIPT_RECONCILE_FILES),
                readme_files: template!("javascript/files.md"),
                readme_build: template!("javascript/build.md"),
                title: "JavaScript",
            },
            Lang::C => LangTemplate {
                files: C_FILES,
                reconcile_files: None,
                readme_files: template!("c/files.md"),
                readme_build: template!("c/build.md"),
                title: "C",
            },
            Lang::Go => LangTemplate {
                files: GO_FILES,
                reconcile_files: None,
                readme_files: template!("go/files.md"),
                readme_build: template!("go/build.md"),
                title: "Go",
            },
        }
    }

    /// The `kubewasm:handler` version a handler in this language is built for: the Rust SDK's
    /// handlers are 0.3.0 components, the other templates' 0.2.0 ones.
    fn handler_world(self) -> &'static str {
        match self {
            Lang::Rust => "0.3.0",
            _ => "0.2.0",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Javascript => "javascript",
            Lang::C => "c",
            Lang::Go => "go",
        }
    }
}

/// Kinds a real cluster serves without a namespace, for resources the embedded API server does
/// not serve (there, its own registry says). Any other kind is taken as namespaced.
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "Node",
    "PersistentVolume",
    "ClusterRole",
    "ClusterRoleBinding",
    "StorageClass",
    "CustomResourceDefinition",
    "PriorityClass",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "CSINode",
    "VolumeAttachment",
    "CertificateSigningRequest",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
];

/// Whether the embedded API server (`kubewasm dev`, `kubewasm test`) serves `r`, and whether
/// it is namespaced. Another resource still gets a handler, but its scenario runs only once
/// the server serves it (a CRD), so `new` says so.
fn embedded(r: &Resource) -> Option<bool> {
    apiserver::builtin_kinds()
        .into_iter()
        .find(|(v, k, _)| *v == r.api_version && *k == r.kind)
        .map(|(_, _, namespaced)| namespaced)
}

fn namespaced(r: &Resource) -> bool {
    embedded(r).unwrap_or_else(|| !CLUSTER_SCOPED.contains(&r.kind.as_str()))
}

/// The expectations of the start step for objects the embedded API server holds from the start
/// (its namespaces): a handler sees them in its initial list too, and a controller reconciles
/// each in its first pass.
fn preexisting(r: &Resource, name: &str, kind: Kind) -> String {
    if (r.api_version.as_str(), r.kind.as_str()) != ("v1", "Namespace") {
        return String::new();
    }
    let mut out = String::new();
    for ns in apiserver::PRECREATED_NAMESPACES {
        let (call, reason, action, note) = match kind {
            Kind::Handler => (
                "on-add, object: v1/Namespace {ns}, is-in-initial-list: true",
                "Observed",
                "Observe",
                "saw",
            ),
            Kind::Reconcile => (
                "reconcile, object: v1/Namespace {ns}, initial: true",
                "Reconciled",
                "Reconcile",
                "reconciled",
            ),
        };
        let call = call.replace("{ns}", ns);
        let _ = writeln!(
            out,
            "      - {{call: {call}, result: ok}}\n      - {{event: Normal, regarding: v1/Namespace {ns}, reason: {reason}, action: {action}, note: \"{name} {note} {ns}\"}}"
        );
    }
    out
}

/// The expectations of the delete step before `on-delete`: a Namespace is not deleted at once
/// but marked `Terminating`, then given the namespace controller's conditions, as on a real
/// cluster, so the handler sees two updates first.
fn terminating(r: &Resource, second: &Value) -> String {
    if (r.api_version.as_str(), r.kind.as_str()) != ("v1", "Namespace") {
        return String::new();
    }
    let (object, key) = (object_ref(second), object_key(second));
    let update = format!(
        "      - {{call: on-update, object: {object}, is-sync: false, result: ok}}\n      - {{log: info, message: \"^update {key} sync=false$\"}}\n"
    );
    update.repeat(2)
}

/// A small object of the resource, valid for the kinds that need a spec to be accepted.
fn example_object(r: &Resource, name: &str, labels: Option<Value>) -> Value {
    let mut metadata = json!({ "name": name });
    if namespaced(r) {
        metadata["namespace"] = json!("default");
    }
    if let Some(labels) = labels {
        metadata["labels"] = labels;
    }
    let mut obj = json!({ "apiVersion": r.api_version, "kind": r.kind, "metadata": metadata });
    let container = json!([{ "name": "app", "image": "registry.k8s.io/pause:3.10" }]);
    let pod_template = json!({
        "metadata": { "labels": { "app": name } },
        "spec": { "containers": container },
    });
    let body = match (r.api_version.as_str(), r.kind.as_str()) {
        ("v1", "ConfigMap") => json!({ "data": { "greeting": "hello" } }),
        // `data` (base64), not `stringData`, which the server folds into `data`.
        ("v1", "Secret") => json!({ "data": { "greeting": "aGVsbG8=" } }),
        ("v1", "Service") => json!({ "spec": { "ports": [{ "port": 80 }] } }),
        ("v1", "Pod") => json!({ "spec": { "containers": container } }),
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") => json!({
            "spec": { "selector": { "matchLabels": { "app": name } }, "template": pod_template }
        }),
        ("batch/v1", "Job") => json!({
            "spec": { "template": {
                "spec": { "containers": container, "restartPolicy": "Never" }
            } }
        }),
        _ => json!({}),
    };
    if let (Some(o), Value::Object(b)) = (obj.as_object_mut(), body) {
        o.extend(b);
    }
    obj
}

/// `APIVERSION/KIND NAMESPACE/NAME` (or `APIVERSION/KIND NAME`), as scenario files name objects.
fn object_ref(obj: &Value) -> String {
    format!(
        "{}/{} {}",
        obj["apiVersion"].as_str().unwrap_or_default(),
        obj["kind"].as_str().unwrap_or_default(),
        object_key(obj)
    )
}

/// `namespace/name` or `name`: what the handlers log.
fn object_key(obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// The members of a map in the order Kubernetes manifests are written (`apiVersion`, `kind`,
/// `metadata`; `namespace`, `name`, `labels`), the rest alphabetically (serde_json's order).
fn ordered(m: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    const FIRST: [&str; 6] = [
        "apiVersion",
        "kind",
        "metadata",
        "namespace",
        "name",
        "labels",
    ];
    let mut items: Vec<_> = m.iter().collect();
    items.sort_by_key(|(k, _)| FIRST.iter().position(|f| f == k).unwrap_or(FIRST.len()));
    items
}

/// A YAML flow rendering of `v` (`{apiVersion: v1, kind: ConfigMap, …}`): one line per object
/// keeps the scenario short. Strings that YAML would read as something else are quoted.
fn flow(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let items: Vec<String> = ordered(m)
                .into_iter()
                .map(|(k, v)| format!("{}: {}", flow_str(k), flow(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(flow).collect::<Vec<_>>().join(", ")),
        Value::String(s) => flow_str(s),
        other => other.to_string(),
    }
}

/// A YAML block rendering of the object `v` for the README (maps as blocks, lists in flow).
fn block(v: &Value, indent: usize, out: &mut String) {
    if let Value::Object(m) = v {
        for (k, v) in ordered(m) {
            match v {
                Value::Object(inner) if !inner.is_empty() => {
                    let _ = writeln!(out, "{:indent$}{}:", "", flow_str(k));
                    block(v, indent + 2, out);
                }
                _ => {
                    let _ = writeln!(out, "{:indent$}{}: {}", "", flow_str(k), flow(v));
                }
            }
        }
    }
}

fn flow_str(s: &str) -> String {
    let plain = s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
        && !matches!(
            s.to_ascii_lowercase().as_str(),
            "true" | "false" | "yes" | "no" | "on" | "off" | "null" | "y" | "n"
        );
    if plain {
        s.to_string()
    } else {
        Value::String(s.to_string()).to_string()
    }
}

/// Replaces every `{{key}}` of `text`; a placeholder left over is a bug in a template.
fn render(text: &str, vars: &[(&str, String)]) -> anyhow::Result<String> {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    // `{{` alone is code in some languages (a Go composite literal); a placeholder is
    // `{{` + lowercase letters, digits and '-' + `}}`.
    for (i, _) in out.match_indices("{{") {
        let rest = &out[i + 2..];
        if let Some(end) = rest.find("}}") {
            let key = &rest[..end];
            if !key.is_empty()
                && key
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            {
                bail!("template placeholder {{{{{key}}}}} has no value");
            }
        }
    }
    Ok(out)
}

/// The kubewasm checkout this binary was built from, when it is still there with its
/// toolchain installer: the build scripts' default for `KUBEWASM_REPO`.
fn source_checkout() -> Option<PathBuf> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    repo.join("guest-examples/install-toolchains.sh")
        .is_file()
        .then(|| repo.canonicalize().ok())
        .flatten()
}

/// Every file of the new folder, rendered: (path relative to the folder, text, executable).
fn render_all(args: &NewArgs, repo: Option<&Path>) -> anyhow::Result<Vec<(String, String, bool)>> {
    let r = &args.resource;
    let name = &args.name;
    let lang = args.lang.template();
    let reconcile = args.kind == Kind::Reconcile;
    let files = match (reconcile, lang.reconcile_files) {
        (false, _) => lang.files,
        (true, Some(files)) => files,
        (true, None) => bail!(
            "--kind reconcile has templates for rust, python and javascript, not {}",
            args.lang.name()
        ),
    };
    let first = example_object(r, "first", None);
    let second = example_object(r, "second", None);
    let changed = example_object(r, "second", Some(json!({ "stage": "changed" })));
    let resource = format!("{}/{}", r.api_version, r.kind);
    let mut example_yaml = String::new();
    block(&first, 0, &mut example_yaml);
    example_yaml.truncate(example_yaml.trim_end().len());
    let repo_str = repo.map(|p| p.display().to_string()).unwrap_or_default();
    let vars = vec![
        ("name", name.clone()),
        // A DNS-1123 label may start with a digit, a Rust package name may not.
        (
            "crate",
            if name.starts_with(|c: char| c.is_ascii_digit()) {
                format!("handler-{name}")
            } else {
                name.clone()
            },
        ),
        ("api-version", r.api_version.clone()),
        ("kind", r.kind.clone()),
        ("resource", resource),
        ("lang", args.lang.name().to_string()),
        ("lang-title", lang.title.to_string()),
        ("repo", repo_str.clone()),
        (
            "repo-shown",
            if repo_str.is_empty() {
                "none: set KUBEWASM_REPO".to_string()
            } else {
                repo_str
            },
        ),
        ("files", lang.readme_files.to_string()),
        ("build", lang.readme_build.trim_end().to_string()),
        ("example-yaml", example_yaml),
        ("first", flow(&first)),
        ("first-ref", object_ref(&first)),
        ("first-key", object_key(&first)),
        ("preexisting", preexisting(r, name, Kind::Handler)),
        ("second", flow(&second)),
        ("second-changed", flow(&changed)),
        ("second-ref", object_ref(&second)),
        ("second-key", object_key(&second)),
        ("terminating", terminating(r, &second)),
        (
            "preexisting-reconcile",
            preexisting(r, name, Kind::Reconcile),
        ),
        (
            "world",
            if reconcile { "controller" } else { "handler" }.to_string(),
        ),
        (
            "wit-version",
            if reconcile { "0.3.0" } else { "0.2.0" }.to_string(),
        ),
        ("handler-version", args.lang.handler_world().to_string()),
        (
            "sdk-macro",
            if reconcile { "controller" } else { "handler" }.to_string(),
        ),
        (
            "what",
            if reconcile { "controller" } else { "handler" }.to_string(),
        ),
        (
            "sdk-class",
            match (reconcile, args.lang) {
                (true, Lang::Javascript) => "controller",
                (true, _) => "Controller",
                (false, Lang::Javascript) => "handler",
                (false, _) => "Handler",
            }
            .to_string(),
        ),
    ];
    let common = if reconcile {
        [
            file("README.md", template!("common/reconcile/README.md")),
            file(
                "scenarios/basic.yaml",
                template!("common/reconcile/basic.yaml"),
            ),
        ]
    } else {
        [
            file("README.md", template!("common/README.md")),
            file("scenarios/basic.yaml", template!("common/basic.yaml")),
        ]
    };
    let mut out = Vec::new();
    // The README's own placeholders come from the language's snippets, so render it twice.
    for f in common.iter().chain(files) {
        let text = render(&render_once(f.text, &vars), &vars)
            .with_context(|| format!("template {}/{}", args.lang.name(), f.path))?;
        out.push((f.path.to_string(), text, f.executable));
    }
    let grants = if reconcile {
        template!("common/reconcile/grants.toml")
    } else {
        template!("common/grants.toml")
    };
    out.push((format!("{name}.toml"), render(grants, &vars)?, false));
    let wit = if reconcile || args.lang.handler_world() == "0.3.0" {
        WIT_0_3
    } else {
        WIT
    };
    for f in wit.iter().chain(sdk_files(args.lang)) {
        out.push((f.path.to_string(), f.text.to_string(), false));
    }
    Ok(out)
}

/// One pass of substitution, leaving unknown placeholders for the next.
fn render_once(text: &str, vars: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out
}

/// Creates the folder `NAME` in the current directory with the handler, its build script,
/// manifest, scenario, WIT files and README. Refuses a folder that exists and is not empty.
pub(crate) fn new(args: NewArgs) -> anyhow::Result<()> {
    let dir = PathBuf::from(&args.name);
    if dir.exists() {
        let mut entries = std::fs::read_dir(&dir)
            .with_context(|| format!("{} exists and is not a readable folder", dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} exists and is not empty: choose another name or remove it",
                dir.display()
            );
        }
    }
    let files = render_all(&args, source_checkout().as_deref())?;
    for (path, text, executable) in &files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        if *executable {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()))?;
        }
    }
    let mut msg = String::new();
    let name = &args.name;
    let (what, world) = match args.kind {
        Kind::Handler => (
            "handler",
            format!("kubewasm:handler@{}", args.lang.handler_world()),
        ),
        Kind::Reconcile => (
            "controller",
            "kubewasm:handler@0.3.0 controller".to_string(),
        ),
    };
    let _ = writeln!(
        msg,
        "created {name}/ ({} {what} for {}/{}, world {world})",
        args.lang.template().title,
        args.resource.api_version,
        args.resource.kind
    );
    if embedded(&args.resource).is_none() {
        eprintln!(
            "note: the embedded API server of `kubewasm dev` and `kubewasm test` does not serve {} {}: \
             scenarios/basic.yaml runs once it does (install its CRD first); the handler works on \
             any cluster that serves it",
            args.resource.api_version, args.resource.kind
        );
    }
    let _ = writeln!(msg, "next:");
    let _ = writeln!(msg, "  cd {name} && ./build.sh");
    let _ = writeln!(msg, "  kubewasm check {name}.wasm");
    let _ = writeln!(msg, "  kubewasm test {name}.wasm scenarios/basic.yaml");
    print!("{msg}");
    Ok(())
}

#[cfg(test)]
mod tests;
