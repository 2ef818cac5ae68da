#!/usr/bin/env bash
# Builds the C configmap-logger into guest-examples/dist/c-configmap-logger.wasm, with its
# manifest beside it:
#   1. kubewasm-guest-tool (guest-examples/tool, built with cargo on first use) generates the C
#      bindings from wit/
#   2. clang-19 compiles the handler + bindings to a core wasm32-wasi reactor module (wasi-libc)
#   3. kubewasm-guest-tool embeds the world and applies the WASI preview1 reactor adapter
#   4. kubewasm-guest-tool checks the component against the world
# Skipped when its inputs are unchanged (../../lib.sh). Needs clang-19, lld-19,
# libclang-rt-19-dev-wasm32, wasi-libc (guest-examples/install-toolchains.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
cc="${CC_WASM:-clang-19}"
command -v "$cc" >/dev/null || { echo "$cc not found: run guest-examples/install-toolchains.sh" >&2; exit 1; }
dist="$repo/guest-examples/dist"
out="$dist/c-configmap-logger.wasm"
install_file "$here/configmap-logger.toml" "$dist/c-configmap-logger.toml"

tool_src="$repo/guest-examples/tool"
key="$(inputs_key "$here" "$repo/wit/handler.wit" "$tool_src" -- "$("$cc" --version | head -1)")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$tool_src/target}"
cargo build --release --locked --quiet --manifest-path "$tool_src/Cargo.toml"
tool="$CARGO_TARGET_DIR/release/kubewasm-guest-tool"

build="$repo/target/guest-examples/c"
rm -rf "$build" && mkdir -p "$build"
"$tool" bindgen "$repo/wit" "$build/bindings" >/dev/null
"$cc" --target=wasm32-wasi -mexec-model=reactor -O2 -std=c17 -Wall -Wextra -Werror \
  -I "$build/bindings" -o "$build/configmap-logger.core.wasm" \
  "$here/configmap-logger.c" "$build/bindings/handler.c" "$build/bindings/handler_component_type.o"
"$tool" componentize "$repo/wit" "$build/configmap-logger.core.wasm" "$out"
"$tool" check "$repo/wit" "$out"
record_key "$key" "$out"
built "$out"
