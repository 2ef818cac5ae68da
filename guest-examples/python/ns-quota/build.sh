#!/usr/bin/env bash
# Builds the Python ns-quota controller (src/ns_quota.py on the SDK in <repo>/sdk/python, world
# kubewasm:handler@0.2.0 from <repo>/wit/0.2.0) into guest-examples/dist/python-ns-quota.wasm with
# its manifest beside it. Skipped when its inputs are unchanged (../../lib.sh). Needs
# componentize-py from guest-examples/install-toolchains.sh (venv at <repo>/.toolchains/venv).
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
out="$dist/python-ns-quota.wasm"
sdk="$repo/sdk/python"
install_file "$here/ns-quota.toml" "$dist/python-ns-quota.toml"
key="$(inputs_key "$here" "$sdk/kubewasm_sdk" "$repo/wit/0.2.0" -- "componentize-py $("$cpy" --version)")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
# -p bundles every file of the folders named: a stale __pycache__ would be bundled too.
rm -rf "$here/src/__pycache__" "$sdk/kubewasm_sdk/__pycache__"
"$cpy" -q -d "$repo/wit/0.2.0" -w handler componentize -p "$here/src" -p "$sdk" -o "$out" ns_quota
record_key "$key" "$out"
built "$out"
