#!/usr/bin/env bash
# Builds the C configmap-logger into guest-examples/dist/c-configmap-logger.wasm:
#   1. kubewasm-guest-tool (tool/, built with cargo on first use) generates the C bindings from wit/
#   2. clang-19 compiles the handler + bindings to a core wasm32-wasi reactor module (wasi-libc)
#   3. kubewasm-guest-tool embeds the world and applies the WASI preview1 reactor adapter
#   4. kubewasm-guest-tool checks the component against the world
# Needs clang-19, lld-19, libclang-rt-19-dev-wasm32, wasi-libc (guest-examples/install-toolchains.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cc="${CC_WASM:-clang-19}"
command -v "$cc" >/dev/null || { echo "$cc not found: run guest-examples/install-toolchains.sh" >&2; exit 1; }

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/tool/target}"
cargo build --release --locked --quiet --manifest-path "$here/tool/Cargo.toml"
tool="$CARGO_TARGET_DIR/release/kubewasm-guest-tool"

build="$repo/target/guest-examples/c"
rm -rf "$build" && mkdir -p "$build" "$repo/guest-examples/dist"
out="$repo/guest-examples/dist/c-configmap-logger.wasm"

"$tool" bindgen "$repo/wit" "$build/bindings" >/dev/null
"$cc" --target=wasm32-wasi -mexec-model=reactor -O2 -std=c17 -Wall -Wextra -Werror \
  -I "$build/bindings" -o "$build/configmap-logger.core.wasm" \
  "$here/configmap-logger.c" "$build/bindings/handler.c" "$build/bindings/handler_component_type.o"
"$tool" componentize "$repo/wit" "$build/configmap-logger.core.wasm" "$out"
"$tool" check "$repo/wit" "$out"
echo "built $out ($(stat -c %s "$out") bytes)"
