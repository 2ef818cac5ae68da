//! Checks that bytes are a component implementing the `handler` world, with errors that say
//! what is wrong rather than wasmtime's generic linking messages.

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use super::bindings::v1::HandlerPre;
use super::error::RuntimeError;
use super::store::StoreState;

/// The world's exports, in the order they are reported when missing.
const REQUIRED_EXPORTS: [&str; 4] = ["describe", "on-add", "on-update", "on-delete"];

/// Rejects anything that is not a binary component before spending time compiling it.
pub(crate) fn check_binary(wasm: &[u8]) -> Result<(), RuntimeError> {
    if wasm.len() < 8 || &wasm[..4] != b"\0asm" {
        return Err(RuntimeError::NotAComponent(format!(
            "missing the \\0asm magic: not a WebAssembly binary ({} bytes)",
            wasm.len()
        )));
    }
    match [wasm[4], wasm[5], wasm[6], wasm[7]] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => Err(RuntimeError::NotAComponent(
            "this is a core WebAssembly module; handlers must be components \
             (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)"
                .into(),
        )),
        other => Err(RuntimeError::NotAComponent(format!(
            "unsupported WebAssembly version/layer bytes {other:02x?}"
        ))),
    }
}

/// Type-checks a compiled component against the world and pre-links its imports.
pub(crate) fn check_world(
    engine: &Engine,
    linker: &Linker<StoreState>,
    component: &Component,
) -> Result<HandlerPre<StoreState>, RuntimeError> {
    let ty = component.component_type();
    let missing: Vec<&str> = REQUIRED_EXPORTS
        .into_iter()
        .filter(|name| ty.get_export(engine, name).is_none())
        .collect();
    if !missing.is_empty() {
        let found: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
        return Err(RuntimeError::WrongWorld(format!(
            "missing export(s) {} (exports found: [{}])",
            missing.join(", "),
            found.join(", ")
        )));
    }
    let pre = linker.instantiate_pre(component).map_err(|e| {
        RuntimeError::WrongWorld(format!(
            "imports something the host does not provide: {e:#}"
        ))
    })?;
    HandlerPre::new(pre)
        .map_err(|e| RuntimeError::WrongWorld(format!("exports have the wrong types: {e:#}")))
}
