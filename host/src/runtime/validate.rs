//! Checks that bytes are a component implementing one version of the `handler` world, finds out
//! which, with errors that say what is wrong rather than wasmtime's generic linking messages.

use wasmtime::Engine;
use wasmtime::component::types::Component as ComponentType;
use wasmtime::component::{Component, Linker};

use super::bindings::{v1, v2, v3, v3c};
use super::error::RuntimeError;
use super::store::StoreState;
use super::types::HandlerWorld;

/// Each world's exports, in the order they are reported when missing.
const V1_EXPORTS: [&str; 4] = ["describe", "on-add", "on-update", "on-delete"];
const V2_EXPORTS: [&str; 5] = ["describe", "on-add", "on-update", "on-delete", "on-synced"];
const V3_EXPORTS: [&str; 6] = [
    "validate-settings",
    "describe",
    "on-add",
    "on-update",
    "on-delete",
    "on-synced",
];
const CONTROLLER_EXPORTS: [&str; 5] = [
    "validate-settings",
    "describe",
    "reconcile",
    "keys-for",
    "on-synced",
];

/// A component type-checked and pre-linked against the world version it implements.
#[derive(Clone)]
pub(crate) enum WorldPre {
    /// `kubewasm:handler@0.1.0`.
    V1(v1::HandlerPre<StoreState>),
    /// `kubewasm:handler@0.2.0`.
    V2(v2::HandlerPre<StoreState>),
    /// `kubewasm:handler@0.3.0`, world `handler`.
    V3(v3::HandlerPre<StoreState>),
    /// `kubewasm:handler@0.3.0`, world `controller`.
    Controller(v3c::ControllerPre<StoreState>),
}

impl WorldPre {
    pub(crate) fn world(&self) -> HandlerWorld {
        match self {
            Self::V1(_) => HandlerWorld::V0_1,
            Self::V2(_) => HandlerWorld::V0_2,
            Self::V3(_) => HandlerWorld::V0_3,
            Self::Controller(_) => HandlerWorld::Controller,
        }
    }

    pub(crate) fn component(&self) -> &Component {
        match self {
            Self::V1(pre) => pre.instance_pre().component(),
            Self::V2(pre) => pre.instance_pre().component(),
            Self::V3(pre) => pre.instance_pre().component(),
            Self::Controller(pre) => pre.instance_pre().component(),
        }
    }
}

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

/// Type-checks a compiled component against the world version it targets and pre-links its
/// imports.
pub(crate) fn check_world(
    engine: &Engine,
    linker: &Linker<StoreState>,
    component: &Component,
) -> Result<WorldPre, RuntimeError> {
    let ty = component.component_type();
    let world = target_world(engine, &ty)?;
    let required: &[&str] = match world {
        HandlerWorld::V0_1 => &V1_EXPORTS,
        HandlerWorld::V0_2 => &V2_EXPORTS,
        HandlerWorld::V0_3 => &V3_EXPORTS,
        HandlerWorld::Controller => &CONTROLLER_EXPORTS,
    };
    let missing: Vec<&str> = required
        .iter()
        .copied()
        .filter(|name| ty.get_export(engine, name).is_none())
        .collect();
    if !missing.is_empty() {
        let found: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
        return Err(RuntimeError::WrongWorld(format!(
            "missing export(s) {} of {world} (exports found: [{}])",
            missing.join(", "),
            found.join(", ")
        )));
    }
    let pre = linker.instantiate_pre(component).map_err(|e| {
        RuntimeError::WrongWorld(format!(
            "imports something the host does not provide: {e:#}"
        ))
    })?;
    let wrong_types = |e: wasmtime::Error| {
        RuntimeError::WrongWorld(format!("exports of {world} have the wrong types: {e:#}"))
    };
    match world {
        HandlerWorld::V0_1 => v1::HandlerPre::new(pre)
            .map(WorldPre::V1)
            .map_err(wrong_types),
        HandlerWorld::V0_2 => v2::HandlerPre::new(pre)
            .map(WorldPre::V2)
            .map_err(wrong_types),
        HandlerWorld::V0_3 => v3::HandlerPre::new(pre)
            .map(WorldPre::V3)
            .map_err(wrong_types),
        HandlerWorld::Controller => v3c::ControllerPre::new(pre)
            .map(WorldPre::Controller)
            .map_err(wrong_types),
    }
}

/// The world version a component was built for. 0.3.0 components import 0.2.0's interfaces
/// unchanged and may leave out `settings` when they never read it, so the exports decide:
/// `reconcile` is a controller, `validate-settings` (or any `@0.3.*` import) a 0.3.0 handler;
/// then 0.2.0 when it imports a `kubewasm:handler/*@0.2.*` interface or exports `on-synced`;
/// else 0.1.0 (whose handlers predate versioning). A component importing 0.1.0 beside a later
/// version is refused: its calls would straddle two contracts; so is a 0.1.0 component
/// importing `wasi:http`.
fn target_world(engine: &Engine, ty: &ComponentType) -> Result<HandlerWorld, RuntimeError> {
    let mut versions: Vec<&str> = ty
        .imports(engine)
        .filter_map(|(name, _)| name.strip_prefix("kubewasm:handler/"))
        .filter_map(|rest| rest.split_once('@').map(|(_, version)| version))
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let v3 = versions.iter().any(|v| v.starts_with("0.3."));
    let v2 = versions.iter().any(|v| v.starts_with("0.2."));
    let v1 = versions.iter().any(|v| v.starts_with("0.1."));
    if v1 && (v2 || v3) {
        return Err(RuntimeError::WrongWorld(format!(
            "imports kubewasm:handler interfaces of several versions ({}); a handler implements \
             exactly one",
            versions.join(", ")
        )));
    }
    let exports = |name| ty.get_export(engine, name).is_some();
    if exports("reconcile") {
        return Ok(HandlerWorld::Controller);
    }
    if v3 || exports("validate-settings") {
        return Ok(HandlerWorld::V0_3);
    }
    if v2 || exports("on-synced") {
        return Ok(HandlerWorld::V0_2);
    }
    // The shared linker also serves 0.2.0's wasi:http; a 0.1.0 handler never had it.
    if let Some((name, _)) = ty
        .imports(engine)
        .find(|(name, _)| name.starts_with("wasi:http/"))
    {
        return Err(RuntimeError::WrongWorld(format!(
            "imports {name}, which kubewasm:handler@0.1.0 does not offer; outbound HTTP needs \
             kubewasm:handler@0.2.0"
        )));
    }
    Ok(HandlerWorld::V0_1)
}
