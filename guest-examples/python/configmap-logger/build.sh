#!/usr/bin/env bash
# Builds the Python configmap-logger (src/app.py on the SDK in <repo>/sdk/python, world
# kubewasm:handler@0.1.0 from <repo>/wit)
# into guest-examples/dist/python-configmap-logger.wasm, with its manifest beside it. Skipped
# when its inputs are unchanged (../../lib.sh). Needs componentize-py from
# guest-examples/install-toolchains.sh (venv at <repo>/.toolchains/venv).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
venv="${KUBEWASM_VENV:-$repo/.toolchains/venv}"
cpy="$venv/bin/componentize-py"
if [[ ! -x "$cpy" ]]; then
  echo "componentize-py not found at $cpy: run guest-examples/install-toolchains.sh" >&2
  exit 1
fi
dist="$repo/guest-examples/dist"
out="$dist/python-configmap-logger.wasm"
install_file "$here/configmap-logger.toml" "$dist/python-configmap-logger.toml"

key="$(inputs_key "$here" "$repo/sdk/python/kubewasm_sdk" "$repo/wit/handler.wit" -- "componentize-py $("$cpy" --version)")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
# -p bundles every file of src/ into the component: keep it to the sources (a stale __pycache__
# would be bundled too; componentize-py recreates it, it is git-ignored). Bindings are generated
# on the fly (no generated files to commit).
rm -rf "$here/src/__pycache__"
find "$repo/sdk/python" -name __pycache__ -prune -exec rm -rf {} +  # the SDK's tests' too
"$cpy" -q -d "$repo/wit" -w handler componentize -p "$here/src" -p "$repo/sdk/python" -o "$out" app
record_key "$key" "$out"
built "$out"
