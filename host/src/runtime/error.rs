//! Errors of loading a handler and of calling one.

use std::fmt;

/// Why a `.wasm` file could not become a [`CompiledHandler`](super::CompiledHandler) or an
/// instance; each variant names the cause so the plugins layer can report it verbatim.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Not a WebAssembly component at all (garbage, truncated, or a core module).
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// A component, but not one implementing `kubewasm:handler/handler@0.1.0`.
    #[error("component does not implement the kubewasm:handler@0.1.0 `handler` world: {0}")]
    WrongWorld(String),
    /// A component that wasmtime could not validate or compile.
    #[error("cannot compile component: {0}")]
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
