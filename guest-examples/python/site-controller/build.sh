#!/usr/bin/env bash
# Builds the Python site-controller (src/site_controller.py on the SDK in <repo>/sdk/python,
# world `controller` of kubewasm:handler@0.3.0 from <repo>/wit/0.3.0) into
# guest-examples/dist/python-site-controller.wasm with its manifest beside it. Skipped when its
# inputs are unchanged (../../lib.sh). Needs componentize-py from
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
out="$dist/python-site-controller.wasm"
sdk="$repo/sdk/python"
install_file "$here/site-controller.toml" "$dist/python-site-controller.toml"
key="$(inputs_key "$here" "$sdk/kubewasm_sdk" "$repo/wit/0.3.0" -- "componentize-py $("$cpy" --version)")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
# -p bundles every file of the folders named: a stale __pycache__ would be bundled too.
rm -rf "$here/src/__pycache__" "$sdk/kubewasm_sdk/__pycache__"
"$cpy" -q -d "$repo/wit/0.3.0" -w controller componentize -p "$here/src" -p "$sdk" -o "$out" site_controller
record_key "$key" "$out"
built "$out"
