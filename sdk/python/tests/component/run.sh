#!/usr/bin/env bash
# Builds the SDK smoke component (src/smoke.py + <repo>/sdk/python) and runs smoke.yaml through
# `kubewasm test` (KUBEWASM, default <repo>/target/release/kubewasm). scripts/test.sh runs it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
cpy="${KUBEWASM_VENV:-$repo/.toolchains/venv}/bin/componentize-py"
out="$repo/target/sdk-smoke/python-sdk-smoke.wasm"
mkdir -p "$(dirname "$out")"
rm -rf "$here/src/__pycache__" "$repo/sdk/python/kubewasm_sdk/__pycache__"
"$cpy" -q -d "$repo/wit/0.2.0" -w handler componentize -p "$here/src" -p "$repo/sdk/python" -o "$out" smoke
"${KUBEWASM:-$repo/target/release/kubewasm}" test --cache-dir "$repo/target/test-cache/kubewasm" "$out" "$here/smoke.yaml"
