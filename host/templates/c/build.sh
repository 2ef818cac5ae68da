#!/usr/bin/env bash
# Builds {{name}}.wasm (a kubewasm:handler@0.2.0 component) in this folder from handler.c:
#   1. kubewasm-guest-tool generates the C bindings from wit/ into build/bindings
#   2. clang-19 compiles handler.c + bindings to a core wasm32-wasi reactor module (wasi-libc)
#   3. kubewasm-guest-tool embeds the world and applies the WASI preview1 reactor adapter
#   4. kubewasm-guest-tool checks the component against the world
# Needs clang-19, lld-19, libclang-rt-19-dev-wasm32 and wasi-libc (guest-examples/install-toolchains.sh),
# and kubewasm-guest-tool: KUBEWASM_GUEST_TOOL, else on PATH, else built with cargo from
# KUBEWASM_REPO/guest-examples/tool (into its target/, or KUBEWASM_TOOL_TARGET_DIR).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="{{name}}"
repo="${KUBEWASM_REPO:-{{repo}}}"
cc="${CC_WASM:-clang-19}"
command -v "$cc" >/dev/null || { echo "$cc not found: run guest-examples/install-toolchains.sh (Debian: clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc)" >&2; exit 1; }

tool="${KUBEWASM_GUEST_TOOL:-$(command -v kubewasm-guest-tool || true)}"
if [[ -z "$tool" ]]; then
  if [[ -z "$repo" || ! -f "$repo/guest-examples/tool/Cargo.toml" ]]; then
    echo "kubewasm-guest-tool not found: set KUBEWASM_GUEST_TOOL, put it on PATH, or set KUBEWASM_REPO" >&2
    echo "  to a kubewasm checkout (it is built from guest-examples/tool on first use)" >&2
    exit 1
  fi
  tool_target="${KUBEWASM_TOOL_TARGET_DIR:-$repo/guest-examples/tool/target}"
  cargo build --release --locked --quiet --manifest-path "$repo/guest-examples/tool/Cargo.toml" --target-dir "$tool_target"
  tool="$tool_target/release/kubewasm-guest-tool"
fi

build="$here/build"
rm -rf "$build" && mkdir -p "$build"
"$tool" bindgen "$here/wit" "$build/bindings" >/dev/null
"$cc" --target=wasm32-wasi -mexec-model=reactor -O2 -std=c17 -Wall -Wextra -Werror \
  -I "$build/bindings" -o "$build/$name.core.wasm" \
  "$here/handler.c" "$build/bindings/handler.c" "$build/bindings/handler_component_type.o"
"$tool" componentize "$here/wit" "$build/$name.core.wasm" "$here/$name.wasm"
"$tool" check "$here/wit" "$here/$name.wasm"
echo "built $here/$name.wasm ($(stat -c %s "$here/$name.wasm") bytes)"
