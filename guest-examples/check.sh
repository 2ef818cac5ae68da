#!/usr/bin/env bash
# Validates the built guests in guest-examples/dist/ (run build.sh first):
#   1. kubewasm-guest-tool check: each component implements kubewasm:handler/handler (types
#      included) and imports nothing but the world's interfaces and the WASI p2 packages the host
#      links (cli, io, clocks, random, filesystem, sockets);
#   2. conformance.py: each *configmap-logger*.wasm, run on wasmtime 48 (wasmtime-py), produces the
#      reference handler's log lines and results call for call, and they all agree.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$here/tool/target}"
cargo build --release --locked --quiet --manifest-path "$here/tool/Cargo.toml"
tool="$CARGO_TARGET_DIR/release/kubewasm-guest-tool"
shopt -s nullglob
components=("$here"/dist/*.wasm "$here"/dist/variants/*.wasm)
((${#components[@]})) || { echo "no components in guest-examples/dist: run guest-examples/build.sh" >&2; exit 1; }
for c in "${components[@]}"; do
  "$tool" check "$repo/wit" "$c"
done
"$repo/.toolchains/venv/bin/python" "$here/conformance.py"
