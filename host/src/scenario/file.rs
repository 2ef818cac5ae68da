//! Scenario files: parsing, validation and the line each part starts on.
//!
//! serde_yaml names the line of a syntax error or an unknown key; for the checks made after
//! parsing (one action per step, object references, durations, expectation keys) the line is
//! found again in the text from the part's position (step `i`, its `expect` entry `j`), which
//! works for the block style scenario files are written in.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::transcript::{Entry, EntryKind};
use crate::plugins::MAX_CONCURRENCY;

mod error;

pub use error::{BadDuration, BadObjectKey, Problem, ScenarioError};

/// A scenario as read from its file.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file.
    pub path: PathBuf,
    /// Its text (kept for `--update` and error lines).
    pub text: String,
    /// `description`.
    pub description: Option<String>,
    /// `manifest`, resolved against the file's folder.
    pub manifest: Option<PathBuf>,
    /// `leader`.
    pub leader: bool,
    /// `concurrency`: calls the handler may have in flight at once, overriding its manifest's
    /// (1–[`MAX_CONCURRENCY`]); `None` keeps the manifest's.
    pub concurrency: Option<usize>,
    /// The plugin's `[settings]` for this run, replacing the manifest's (as an operator's
    /// `NAME.toml` would give them).
    pub settings: Option<toml::Table>,
    /// `workloads`: run the embedded server's workload controllers and fake node (Deployments
    /// get ReplicaSets, Pods become Running and Ready); off by default, so a scenario sees
    /// only the objects it and its handler write.
    pub workloads: bool,
    /// `objects`, as JSON.
    pub objects: Vec<Value>,
    /// `http`.
    pub http: Vec<Stub>,
    /// `steps` (a leading `start` added when missing).
    pub steps: Vec<Step>,
    /// `refused`: the handler must not load with its grants (no steps run then).
    pub refused: Option<Refusal>,
}

/// An expected load refusal: the grants do not cover what `describe()` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The grants the refusal must name, as its `not granted:` lines do (`record Events`,
    /// `watch v1 Secret in every namespace`); `None`: any refusal for missing grants passes.
    pub missing: Option<Vec<String>>,
    /// Line of `refused` in the file.
    pub line: usize,
}

/// One stubbed HTTP answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Stub {
    /// Only this method (any when `None`).
    pub method: Option<String>,
    /// The URL, or a prefix when it ends with `*`.
    pub url: String,
    /// Status code.
    pub status: u16,
    /// Response body.
    pub body: String,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// Answer at most this many requests.
    pub times: Option<u32>,
}

/// An object named by `APIVERSION/KIND [NAMESPACE/]NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectKey {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace of a namespaced object.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{} {ns}/{}", self.api_version, self.kind, self.name),
            None => write!(f, "{}/{} {}", self.api_version, self.kind, self.name),
        }
    }
}

impl ObjectKey {
    /// Parses a reference; the error says what the form is.
    pub fn parse(text: &str) -> Result<ObjectKey, BadObjectKey> {
        let bad = || BadObjectKey(text.to_string());
        let (type_part, name_part) = text.trim().split_once(' ').ok_or_else(bad)?;
        let (api_version, kind) = type_part.rsplit_once('/').ok_or_else(bad)?;
        let name_part = name_part.trim();
        let (namespace, name) = match name_part.split_once('/') {
            Some((ns, n)) => (Some(ns.to_string()), n.to_string()),
            None => (None, name_part.to_string()),
        };
        if api_version.is_empty() || kind.is_empty() || name.is_empty() || name.contains(' ') {
            return Err(bad());
        }
        Ok(ObjectKey {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace,
            name,
        })
    }

    /// The reference of an object given as JSON (`apiVersion`, `kind`, `metadata`).
    pub fn of(obj: &Value) -> Option<ObjectKey> {
        let md = obj.get("metadata")?;
        Some(ObjectKey {
            api_version: obj.get("apiVersion")?.as_str()?.to_string(),
            kind: obj.get("kind")?.as_str()?.to_string(),
            namespace: md
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_string),
            name: md.get("name")?.as_str()?.to_string(),
        })
    }
}

/// One patch of an object.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchSpec {
    /// The object.
    pub object: ObjectKey,
    /// `merge`, `json` or `strategic`.
    pub patch_type: String,
    /// The patch.
    pub patch: Value,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Load the handler.
    Start,
    /// Server-side apply of an object.
    Apply(Value),
    /// Patch an object.
    Patch(PatchSpec),
    /// Delete an object.
    Delete(ObjectKey),
    /// Let virtual time pass.
    Advance(Duration),
    /// Writes the watch misses, then 410 Gone.
    Relist {
        /// Applied while watches are held.
        apply: Vec<Value>,
        /// Patched while watches are held.
        patch: Vec<PatchSpec>,
        /// Deleted while watches are held.
        delete: Vec<ObjectKey>,
    },
    /// Unload and load the handler again.
    Restart,
    /// Hot swap to another component.
    Swap(PathBuf),
    /// Become a standby.
    LoseLeadership,
    /// Become the leader.
    GainLeadership,
    /// Replace the HTTP stubs.
    Http(Vec<Stub>),
}

impl Action {
    /// How the step is named in reports.
    pub fn label(&self) -> String {
        match self {
            Action::Start => "start".into(),
            Action::Apply(v) => format!(
                "apply {}",
                ObjectKey::of(v).map_or("object".into(), |k| k.to_string())
            ),
            Action::Patch(p) => format!("patch {}", p.object),
            Action::Delete(k) => format!("delete {k}"),
            Action::Advance(d) => format!("advance {}", humanize(*d)),
            Action::Relist { .. } => "relist (410 Gone)".into(),
            Action::Restart => "restart".into(),
            Action::Swap(p) => format!("swap to {}", p.display()),
            Action::LoseLeadership => "lose-leadership".into(),
            Action::GainLeadership => "gain-leadership".into(),
            Action::Http(_) => "http stubs".into(),
        }
    }
}

/// One step and its checks.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// What it does.
    pub action: Action,
    /// The transcript it must produce (`None`: not checked).
    pub expect: Option<Vec<Entry>>,
    /// Objects that must exist afterwards (subset match).
    pub state: Vec<Value>,
    /// Objects that must not exist afterwards.
    pub absent: Vec<ObjectKey>,
    /// Line of the step in the file (0: implied).
    pub line: usize,
    /// Index in the file's `steps` (`None`: the implied start).
    pub index: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Doc {
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    manifest: Option<PathBuf>,
    #[serde(default = "yes")]
    leader: bool,
    #[serde(default)]
    concurrency: Option<usize>,
    #[serde(default)]
    settings: Option<serde_yaml::Mapping>,
    #[serde(default)]
    workloads: bool,
    #[serde(default)]
    objects: Vec<serde_yaml::Value>,
    #[serde(default)]
    http: Vec<StubDoc>,
    #[serde(default)]
    steps: Vec<StepDoc>,
    #[serde(default)]
    refused: Option<RefusedDoc>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RefusedDoc {
    #[serde(default)]
    missing: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct StubDoc {
    #[serde(default)]
    method: Option<String>,
    url: String,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    body: Option<serde_yaml::Value>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    times: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StepDoc {
    #[serde(default, deserialize_with = "present")]
    start: bool,
    #[serde(default)]
    apply: Option<serde_yaml::Value>,
    #[serde(default)]
    patch: Option<PatchDoc>,
    #[serde(default)]
    delete: Option<String>,
    #[serde(default)]
    advance: Option<String>,
    #[serde(default)]
    relist: Option<RelistDoc>,
    #[serde(default, deserialize_with = "present")]
    restart: bool,
    #[serde(default)]
    swap: Option<PathBuf>,
    #[serde(default, deserialize_with = "present")]
    lose_leadership: bool,
    #[serde(default, deserialize_with = "present")]
    gain_leadership: bool,
    #[serde(default)]
    http: Option<Vec<StubDoc>>,
    #[serde(default)]
    expect: Option<Vec<serde_yaml::Value>>,
    #[serde(default)]
    state: Vec<serde_yaml::Value>,
    #[serde(default)]
    absent: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PatchDoc {
    object: String,
    #[serde(default, rename = "type")]
    patch_type: Option<String>,
    patch: serde_yaml::Value,
    #[serde(default)]
    subresource: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RelistDoc {
    #[serde(default)]
    apply: Vec<serde_yaml::Value>,
    #[serde(default)]
    patch: Vec<PatchDoc>,
    #[serde(default)]
    delete: Vec<String>,
}

/// A key that is present counts, whatever its value (`start:`, `start: {}`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde_yaml::Value::deserialize(d)?;
    Ok(true)
}

/// Reads and checks a scenario file.
pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
    let text = std::fs::read_to_string(path).map_err(|e| ScenarioError {
        path: path.to_path_buf(),
        line: 0,
        problem: Problem::Read(e),
    })?;
    parse(path, &text)
}

/// Parses and checks scenario `text` read from `path`.
pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
    let at = |line: usize, problem: Problem| ScenarioError {
        path: path.to_path_buf(),
        line,
        problem,
    };
    let doc: Doc = serde_yaml::from_str(text).map_err(|e| {
        let line = e.location().map_or(0, |l| l.line());
        let msg = e.to_string();
        // serde_yaml appends " at line N column M"; the prefix says it already.
        let msg = msg.split(" at line ").next().unwrap_or(&msg).to_string();
        at(line, Problem::Syntax(msg))
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let lines = Lines::new(text);
    if let Some(n) = doc.concurrency
        && !(1..=MAX_CONCURRENCY).contains(&n)
    {
        return Err(at(lines.key("concurrency"), Problem::Concurrency(n)));
    }

    let mut objects = Vec::new();
    for (i, o) in doc.objects.iter().enumerate() {
        let line = lines.item("objects", i);
        objects.push(object(o).map_err(|m| at(line, m))?);
    }
    let http = stubs(&doc.http).map_err(|m| at(lines.key("http"), m))?;
    let refused = doc.refused.map(|r| Refusal {
        missing: r.missing,
        line: lines.key("refused"),
    });
    if let Some(r) = &refused
        && !doc.steps.is_empty()
    {
        return Err(at(r.line, Problem::RefusedWithSteps));
    }

    let mut steps = Vec::new();
    for (i, s) in doc.steps.iter().enumerate() {
        let step = step(s, i, &lines, dir, steps.is_empty()).map_err(|(l, p)| at(l, p))?;
        steps.push(step);
    }
    if !matches!(steps.first().map(|s| &s.action), Some(Action::Start)) {
        steps.insert(
            0,
            Step {
                action: Action::Start,
                expect: None,
                state: Vec::new(),
                absent: Vec::new(),
                line: 0,
                index: None,
            },
        );
    }
    Ok(Scenario {
        path: path.to_path_buf(),
        text: text.to_string(),
        description: doc.description,
        manifest: doc.manifest.map(|m| dir.join(m)),
        leader: doc.leader,
        concurrency: doc.concurrency,
        settings: match &doc.settings {
            Some(m) => Some(
                toml::Table::try_from(m)
                    .map_err(|e| at(lines.key("settings"), Problem::Settings(e.to_string())))?,
            ),
            None => None,
        },
        workloads: doc.workloads,
        objects,
        http,
        steps,
        refused,
    })
}

/// Step `index` of the file: its one action, what it expects, the state it checks; an error
/// carries the line it is on (an expectation's own line when that is the culprit).
fn step(
    s: &StepDoc,
    index: usize,
    lines: &Lines,
    dir: &Path,
    first: bool,
) -> Result<Step, (usize, Problem)> {
    let line = lines.item("steps", index);
    let on_line = |p: Problem| (line, p);
    let action = step_action(s, dir).map_err(on_line)?;
    if matches!(action, Action::Start) && !first {
        return Err((line, Problem::LateStart));
    }
    let expect = match &s.expect {
        None => None,
        Some(list) => Some(expectations(list, lines, line)?),
    };
    let state = s
        .state
        .iter()
        .map(object)
        .collect::<Result<Vec<_>, _>>()
        .map_err(on_line)?;
    let absent = keys(&s.absent).map_err(on_line)?;
    Ok(Step {
        action,
        expect,
        state,
        absent,
        line,
        index: Some(index),
    })
}

/// The one action a step names (`start`, `apply`, …): none or several is an error.
fn step_action(s: &StepDoc, dir: &Path) -> Result<Action, Problem> {
    let mut actions = Vec::new();
    if s.start {
        actions.push(Action::Start);
    }
    if let Some(v) = &s.apply {
        actions.push(Action::Apply(object(v)?));
    }
    if let Some(p) = &s.patch {
        actions.push(Action::Patch(patch_spec(p)?));
    }
    if let Some(d) = &s.delete {
        actions.push(Action::Delete(ObjectKey::parse(d)?));
    }
    if let Some(a) = &s.advance {
        actions.push(Action::Advance(duration(a)?));
    }
    if let Some(r) = &s.relist {
        actions.push(Action::Relist {
            apply: r.apply.iter().map(object).collect::<Result<_, _>>()?,
            patch: r.patch.iter().map(patch_spec).collect::<Result<_, _>>()?,
            delete: keys(&r.delete)?,
        });
    }
    if s.restart {
        actions.push(Action::Restart);
    }
    if let Some(p) = &s.swap {
        actions.push(Action::Swap(dir.join(p)));
    }
    if s.lose_leadership {
        actions.push(Action::LoseLeadership);
    }
    if s.gain_leadership {
        actions.push(Action::GainLeadership);
    }
    if let Some(h) = &s.http {
        actions.push(Action::Http(stubs(h)?));
    }
    match actions.len() {
        1 => Ok(actions.pop().expect("one action")),
        0 => Err(Problem::NoAction),
        _ => Err(Problem::ManyActions),
    }
}

/// A step's `expect` list: a `none` of a kind beside another entry of that kind contradicts it.
fn expectations(
    list: &[serde_yaml::Value],
    lines: &Lines,
    line: usize,
) -> Result<Vec<Entry>, (usize, Problem)> {
    let mut out: Vec<Entry> = Vec::new();
    for (j, e) in list.iter().enumerate() {
        let eline = lines.nested(line, "expect", j);
        let entry = Entry::expectation(e).map_err(|m| (eline, m.into()))?;
        let clash = out
            .iter()
            .find(|o| o.kind == entry.kind && (o.is_none() || entry.is_none()));
        if let Some(c) = clash {
            let none = if c.is_none() { c } else { &entry };
            let key = none.kind.none_key();
            return Err((eline, Problem::NoneAndSome { key }));
        }
        out.push(entry);
    }
    Ok(out)
}

/// Object keys (`kind/namespace/name`) as a list.
fn keys(list: &[String]) -> Result<Vec<ObjectKey>, Problem> {
    list.iter()
        .map(|k| ObjectKey::parse(k).map_err(Problem::from))
        .collect()
}

impl Scenario {
    /// Checks expectations against what the handler exports: `on-synced` needs a 0.2.0 handler.
    pub fn check_exports(&self, has_synced: bool, handler: &Path) -> Result<(), ScenarioError> {
        if has_synced {
            return Ok(());
        }
        for step in &self.steps {
            for e in step.expect.iter().flatten() {
                if e.kind == EntryKind::Call && e.str("call") == Some("on-synced") {
                    return Err(ScenarioError {
                        path: self.path.clone(),
                        line: step.line,
                        problem: Problem::NoOnSynced {
                            handler: handler.to_path_buf(),
                        },
                    });
                }
            }
        }
        Ok(())
    }
}

fn patch_spec(p: &PatchDoc) -> Result<PatchSpec, Problem> {
    let patch_type = p.patch_type.clone().unwrap_or_else(|| "merge".into());
    if !["merge", "json", "strategic"].contains(&patch_type.as_str()) {
        return Err(Problem::PatchType(patch_type));
    }
    Ok(PatchSpec {
        object: ObjectKey::parse(&p.object)?,
        patch_type,
        patch: to_json(&p.patch)?,
        subresource: p.subresource.clone(),
    })
}

fn to_json(v: &serde_yaml::Value) -> Result<Value, Problem> {
    serde_json::to_value(v).map_err(Problem::NotJson)
}

fn object(v: &serde_yaml::Value) -> Result<Value, Problem> {
    let json = to_json(v)?;
    if ObjectKey::of(&json).is_none() {
        return Err(Problem::Unidentified);
    }
    Ok(json)
}

fn stubs(list: &[StubDoc]) -> Result<Vec<Stub>, Problem> {
    list.iter()
        .map(|s| {
            if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
                return Err(Problem::StubUrl(s.url.clone()));
            }
            let body = match &s.body {
                None => String::new(),
                Some(serde_yaml::Value::String(t)) => t.clone(),
                Some(v) => serde_json::to_string(&to_json(v)?).map_err(Problem::StubBody)?,
            };
            let mut headers: Vec<(String, String)> = s.headers.clone().into_iter().collect();
            if matches!(&s.body, Some(v) if !v.is_string())
                && !headers
                    .iter()
                    .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                headers.push(("content-type".into(), "application/json".into()));
            }
            Ok(Stub {
                method: s.method.clone().map(|m| m.to_ascii_uppercase()),
                url: s.url.clone(),
                status: s.status.unwrap_or(200),
                body,
                headers,
                times: s.times,
            })
        })
        .collect()
}

/// `500ms`, `30s`, `5m`, `1h`, or a combination (`1m30s`).
pub fn duration(text: &str) -> Result<Duration, BadDuration> {
    let bad = || BadDuration(text.to_string());
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return Err(bad());
        };
        total += unit.checked_mul(n as u32).ok_or_else(bad)?;
        rest = &rest[len..];
    }
    Ok(total)
}

/// A duration as a scenario would write it.
pub(super) fn humanize(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Finds the lines of block-style YAML parts by indentation.
struct Lines<'a> {
    lines: Vec<&'a str>,
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

fn is_content(l: &str) -> bool {
    let t = l.trim_start();
    !t.is_empty() && !t.starts_with('#')
}

impl<'a> Lines<'a> {
    fn new(text: &'a str) -> Self {
        Lines {
            lines: text.lines().collect(),
        }
    }

    /// 1-based line of top-level `key:` (0 if not found).
    fn key(&self, key: &str) -> usize {
        let prefix = format!("{key}:");
        self.lines
            .iter()
            .position(|l| l.starts_with(&prefix))
            .map_or(0, |i| i + 1)
    }

    /// 1-based line of item `n` of the block sequence under the line `from` (1-based) whose
    /// items are the `- ` lines indented at least `min_indent`.
    fn seq_item(&self, from: usize, min_indent: usize, n: usize) -> usize {
        let mut seen = 0;
        let mut item_indent = None;
        for (i, l) in self.lines.iter().enumerate().skip(from) {
            if !is_content(l) {
                continue;
            }
            let ind = indent(l);
            if ind < min_indent || (ind == min_indent && !l.trim_start().starts_with("- ")) {
                break;
            }
            if l.trim_start().starts_with("- ") || l.trim_start() == "-" {
                let want = *item_indent.get_or_insert(ind);
                if ind == want {
                    if seen == n {
                        return i + 1;
                    }
                    seen += 1;
                }
            }
        }
        from
    }

    /// Line of item `n` of top-level sequence `key`.
    fn item(&self, key: &str, n: usize) -> usize {
        let at = self.key(key);
        if at == 0 {
            return 0;
        }
        self.seq_item(at, 0, n)
    }

    /// Line of item `n` of the sequence `key` inside the sequence item starting at `item_line`.
    fn nested(&self, item_line: usize, key: &str, n: usize) -> usize {
        if item_line == 0 {
            return 0;
        }
        let base = indent(self.lines[item_line - 1]);
        let prefix = format!("{key}:");
        for (i, l) in self.lines.iter().enumerate().skip(item_line - 1) {
            if i >= item_line && is_content(l) && indent(l) <= base {
                break;
            }
            let t = l.trim_start().trim_start_matches("- ");
            if t.starts_with(&prefix) {
                return self.seq_item(i + 1, base + 1, n);
            }
        }
        item_line
    }
}

#[cfg(test)]
mod tests;
