//! The ways a scenario file can be wrong, kept apart from the parser so the messages users
//! read (each naming the fix) can be reviewed and extended in one place.

use std::path::PathBuf;

use crate::plugins::MAX_CONCURRENCY;
use crate::scenario::transcript::ExpectationError;

/// A scenario that cannot be run: the message names the file and, when known, the line.
#[derive(Debug, thiserror::Error)]
pub struct ScenarioError {
    /// The scenario file.
    pub path: PathBuf,
    /// 1-based line of the part at fault; 0 when it is the file as a whole.
    pub line: usize,
    /// What is wrong.
    #[source]
    pub problem: Problem,
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.path.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// What is wrong with a scenario file.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// The file could not be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// Not YAML, or not the scenario schema (serde_yaml's message, without its position).
    #[error("{0}")]
    Syntax(String),
    /// An object reference that is not `APIVERSION/KIND [NAMESPACE/]NAME`.
    #[error(transparent)]
    ObjectKey(#[from] BadObjectKey),
    /// A duration that is not like `1m30s`.
    #[error(transparent)]
    Duration(#[from] BadDuration),
    /// A value with no JSON form.
    #[error("not representable as JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    /// An object without the fields that identify it.
    #[error(
        "an object needs apiVersion, kind and metadata.name (and metadata.namespace when namespaced)"
    )]
    Unidentified,
    /// A patch type other than merge, json or strategic.
    #[error("patch type {0:?} is not merge, json or strategic")]
    PatchType(String),
    /// A stub URL that is not HTTP(S).
    #[error("stub url {0:?} must start with http:// or https://")]
    StubUrl(String),
    /// A stub body that could not be written as JSON text.
    #[error(transparent)]
    StubBody(serde_json::Error),
    /// A refused expectation.
    #[error(transparent)]
    Expectation(#[from] ExpectationError),
    /// A `concurrency` outside 1–[`MAX_CONCURRENCY`].
    #[error("concurrency must be between 1 and {MAX_CONCURRENCY}, got {0}")]
    Concurrency(usize),
    /// `settings` that cannot be a manifest's `[settings]` table.
    #[error("settings must be a map of keys to values TOML can hold (no nulls): {0}")]
    Settings(String),
    /// A step without an action.
    #[error(
        "step has no action: give one of start, apply, patch, delete, advance, relist, restart, swap, lose-leadership, gain-leadership, http"
    )]
    NoAction,
    /// A step with several actions.
    #[error("step has more than one action: split it into one step per action")]
    ManyActions,
    /// A `start` after the first step.
    #[error("start must be the first step (restart reloads a running handler)")]
    LateStart,
    /// `refused` beside steps: a handler that does not load has nothing to step through.
    #[error(
        "a scenario that expects the load to be refused has no steps: move the steps to a scenario of their own"
    )]
    RefusedWithSteps,
    /// A per-kind "none" beside an expectation of the same kind.
    #[error(
        "`{key}: []` says the step makes none, yet the step also expects one: keep one of the two"
    )]
    NoneAndSome {
        /// `calls`, `writes`, `events` or `http`.
        key: &'static str,
    },
    /// An `on-synced` expectation for a handler without that export.
    #[error(
        "the expectation names on-synced, which {} does not export (a kubewasm:handler@0.1.0 component)",
        .handler.display()
    )]
    NoOnSynced {
        /// The handler file.
        handler: PathBuf,
    },
}

/// An object reference that is not `APIVERSION/KIND NAMESPACE/NAME` or `APIVERSION/KIND NAME`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "object reference {0:?} is not APIVERSION/KIND NAMESPACE/NAME or APIVERSION/KIND NAME (e.g. \"v1/ConfigMap default/a\")"
)]
pub struct BadObjectKey(pub String);

/// A duration that is not like `500ms`, `30s`, `5m`, `1h` or `1m30s`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("duration {0:?} is not like 500ms, 30s, 5m, 1h or 1m30s")]
pub struct BadDuration(pub String);
