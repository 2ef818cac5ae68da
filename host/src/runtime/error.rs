//! Errors of loading a handler and of calling one.

use std::fmt;

/// Most bytes of a parser's message about a component shown in an error.
const MAX_PARSER_MESSAGE: usize = 4096;

/// A message about a component, fit for a log line: wasmparser quotes what the component holds
/// (an export name with a line break and a log line of its own, say), so it is cut and escaped.
fn escaped(message: &str) -> String {
    crate::text::foreign(message, MAX_PARSER_MESSAGE)
}

/// Why a `.wasm` file could not become a [`CompiledHandler`](super::CompiledHandler) or an
/// instance; each variant names the cause so the plugins layer can report it verbatim.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Not a WebAssembly component at all (garbage, truncated, or a core module).
    #[error("not a WebAssembly component: {}", escaped(.0))]
    NotAComponent(String),
    /// A component, but not one implementing `kubewasm:handler/handler@0.1.0`.
    #[error("component does not implement the kubewasm:handler@0.1.0 `handler` world: {}", escaped(.0))]
    WrongWorld(String),
    /// A component that wasmtime could not validate or compile.
    #[error("cannot compile component: {}", escaped(.0))]
    Compile(String),
    /// The compile was stopped at a limit (memory, time) or by the kernel before it finished.
    #[error("cannot compile component: {0}")]
    CompileAborted(#[from] super::CompileAborted),
    /// Creating an instance failed (its start code trapped, limits too small).
    #[error("cannot instantiate handler: {0}")]
    Instantiate(String),
    /// Every instance slot of the pooling allocator is taken; the same request may succeed once
    /// an instance is dropped.
    #[error("cannot instantiate handler: {0}")]
    PoolExhausted(String),
    /// The compile cache directory could not be used.
    #[error("compile cache I/O error: {0}")]
    Io(#[from] std::io::Error),
}

/// Why a handler call did not return a value. In every case the instance was discarded; the
/// next call runs on a fresh one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// The guest trapped (e.g. a Rust panic); the message includes its last stderr lines.
    Trap(String),
    /// The call ran past its deadline and was interrupted.
    DeadlineExceeded,
    /// The guest tried to grow its memory beyond the plugin's cap.
    OutOfMemory,
    /// A fresh instance for this call could not be created.
    Instantiate(String),
    /// A fresh instance could not be created because the pooling allocator has no free slot
    /// (wasmtime's `PoolConcurrencyLimitError`): a matter of load, not of the handler, so the
    /// caller may retry later. `message` is wasmtime's, naming the limit and what ran out.
    PoolExhausted {
        /// wasmtime's description, e.g. `maximum concurrent limit of 16 for memories reached`.
        message: String,
    },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Trap(msg) => write!(f, "guest trapped: {msg}"),
            Self::DeadlineExceeded => f.write_str("call exceeded its deadline"),
            Self::OutOfMemory => f.write_str("guest exceeded its memory cap"),
            Self::Instantiate(msg) | Self::PoolExhausted { message: msg } => {
                write!(f, "cannot instantiate handler: {msg}")
            }
        }
    }
}

impl std::error::Error for CallError {}

impl CallError {
    /// Short label used for the `cause` metric label and log field.
    pub fn cause(&self) -> &'static str {
        match self {
            Self::Trap(_) => "trap",
            Self::DeadlineExceeded => "deadline",
            Self::OutOfMemory => "oom",
            // Still an instantiation failure to metrics and logs, as before it had a variant.
            Self::Instantiate(_) | Self::PoolExhausted { .. } => "instantiate",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RuntimeError;

    /// Issue 31, attack 11: wasmparser quotes an export name as the component spells it; a line
    /// break in it reached the host's log raw and forged a line of its own.
    #[test]
    fn a_parser_message_quoting_the_component_stays_on_one_line() {
        let forged =
            "export name `x\n2026-11-27T00:00:00Z  INFO plugin loaded\x1b[2J` is not valid";
        for e in [
            RuntimeError::Compile(forged.into()),
            RuntimeError::NotAComponent(forged.into()),
            RuntimeError::WrongWorld(forged.into()),
        ] {
            let shown = e.to_string();
            assert!(!shown.contains(['\n', '\x1b']), "{shown:?}");
            assert!(shown.contains("`x\\n2026-11-27"), "{shown}");
        }
        let long = RuntimeError::Compile("x".repeat(1 << 20)).to_string();
        assert!(long.len() < 8 << 10, "{} bytes", long.len());
    }
}
