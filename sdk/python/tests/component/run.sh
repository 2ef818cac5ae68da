#!/usr/bin/env bash
# Builds the SDK smoke components against kubewasm:handler@0.3.0 (wit/0.3.0): src/smoke.py in
# the handler world and src/controller_smoke.py in the controller world, each with
# <repo>/sdk/python, into <repo>/target/sdk-smoke/, and runs smoke.yaml (and controller-smoke.yaml
# when there is one) through `kubewasm test` (KUBEWASM, default <repo>/target/release/kubewasm).
# BUILD_ONLY=1 stops after the builds. scripts/test.sh runs it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
cpy="${KUBEWASM_VENV:-$repo/.toolchains/venv}/bin/componentize-py"
wit="$repo/wit/0.3.0"
dist="$repo/target/sdk-smoke"
out="$dist/python-sdk-smoke.wasm"
controller="$dist/python-sdk-controller-smoke.wasm"
mkdir -p "$dist"
# -p bundles every file of the folders named: a stale __pycache__ would be bundled too.
rm -rf "$here/src/__pycache__" "$repo/sdk/python/kubewasm_sdk/__pycache__"
"$cpy" -q -d "$wit" -w handler componentize -p "$here/src" -p "$repo/sdk/python" -o "$out" smoke
echo "built $out (handler world)"
"$cpy" -q -d "$wit" -w controller componentize -p "$here/src" -p "$repo/sdk/python" -o "$controller" controller_smoke
echo "built $controller (controller world)"
[[ "${BUILD_ONLY:-}" == 1 ]] && exit 0
kubewasm="${KUBEWASM:-$repo/target/release/kubewasm}"
"$kubewasm" test --cache-dir "$repo/target/test-cache/kubewasm" "$out" "$here/smoke.yaml"
if [[ -f "$here/controller-smoke.yaml" ]]; then
  "$kubewasm" test --cache-dir "$repo/target/test-cache/kubewasm" "$controller" "$here/controller-smoke.yaml"
fi
