//! `kubewasm test`: runs a handler through scenario files without a cluster.
//!
//! A scenario names initial objects, steps (apply, patch, delete, advance virtual time, relist
//! after 410, restart, hot swap, leadership changes, HTTP stubs) and what the handler must do
//! at each step. `harness` runs it for real — the embedded API server, the host's informers,
//! plugin manager and runtime — on one thread whose clock only moves when a step says so;
//! `recorder` turns what the handler does into a transcript; `transcript` compares it with
//! the expectations; `report` prints the result or writes it back (`--update`).
//!
//! This layer sits beside `cli`: it builds its host through [`crate::host::HostBuilder`] like
//! every entry point, asking for inline delivery on a paused clock, an observer and an HTTP
//! stand-in instead of a network. The parts know nothing of scenarios.

mod file;
mod harness;
mod recorder;
mod report;
mod transcript;

pub use file::{
    Action, BadDuration, BadObjectKey, ObjectKey, PatchSpec, Problem, Refusal, Scenario,
    ScenarioError, Step, Stub, duration, load, parse,
};
pub use harness::{RunConfig, RunOutcome, SETTLE_PATIENCE, StepOutcome, run};
pub use recorder::Recorder;
pub use report::{FileResult, UpdateError, junit, text, updated};
pub use transcript::{Entry, EntryKind, ExpectationError, compare, flow, subset};
