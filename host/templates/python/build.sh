#!/usr/bin/env bash
# Builds {{name}}.wasm (a kubewasm:handler@{{wit-version}} component) in this folder from src/app.py and
# the kubewasm SDK in sdk/ (package kubewasm_sdk).
# Needs componentize-py: KUBEWASM_VENV/bin (default: KUBEWASM_REPO/.toolchains/venv, the venv
# guest-examples/install-toolchains.sh makes in a kubewasm checkout), else componentize-py on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="{{name}}"
repo="${KUBEWASM_REPO:-{{repo}}}"
venv="${KUBEWASM_VENV:-${repo:+$repo/.toolchains/venv}}"
if [[ -n "$venv" && -x "$venv/bin/componentize-py" ]]; then
  cpy="$venv/bin/componentize-py"
elif command -v componentize-py >/dev/null; then
  cpy="$(command -v componentize-py)"
else
  echo "componentize-py not found (looked in ${venv:-<no KUBEWASM_REPO or KUBEWASM_VENV>}/bin and on PATH):" >&2
  echo "  run guest-examples/install-toolchains.sh in a kubewasm checkout and set KUBEWASM_REPO to it" >&2
  exit 1
fi
# -p bundles every file of src/ and sdk/ into the component: keep them to the sources (a stale
# __pycache__ would be bundled too).
rm -rf "$here/src/__pycache__" "$here/sdk/kubewasm_sdk/__pycache__"
"$cpy" -q -d "$here/wit" -w {{world}} componentize -p "$here/src" -p "$here/sdk" -o "$here/$name.wasm" app
echo "built $here/$name.wasm ($(stat -c %s "$here/$name.wasm") bytes)"
