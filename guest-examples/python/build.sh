#!/usr/bin/env bash
# Builds the Python configmap-logger into guest-examples/dist/python-configmap-logger.wasm.
# Needs componentize-py from guest-examples/install-toolchains.sh (venv at <repo>/.toolchains/venv).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${KUBEWASM_VENV:-$repo/.toolchains/venv}"
cpy="$venv/bin/componentize-py"
if [[ ! -x "$cpy" ]]; then
  echo "componentize-py not found at $cpy: run guest-examples/install-toolchains.sh" >&2
  exit 1
fi
mkdir -p "$repo/guest-examples/dist"
out="$repo/guest-examples/dist/python-configmap-logger.wasm"
# -p: the directory bundled into the component (every file in it: keep it to the sources);
# bindings are generated on the fly (no generated files to commit). A stale __pycache__ would be
# bundled too, so it is removed first (componentize-py recreates it; it is git-ignored).
rm -rf "$here/src/__pycache__"
"$cpy" -q -d "$repo/wit" -w handler componentize -p "$here/src" -o "$out" app
echo "built $out ($(stat -c %s "$out") bytes)"
