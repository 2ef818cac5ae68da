#!/usr/bin/env bash
# Builds the Python guests into guest-examples/dist/:
#   python-configmap-logger.wasm   src/app.py, world kubewasm:handler@0.1.0 (wit/)
#   python-replicator.wasm         replicator/src/replicator.py, world kubewasm:handler@0.2.0 (wit/0.2.0/)
#   variants/python-replicator-secrets.wasm   the same, replicating Secrets too (replicator/README.md)
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
dist="$repo/guest-examples/dist"
mkdir -p "$dist"

# build WIT_DIR SOURCE_DIR MODULE NAME
# -p: the directory bundled into the component (every file in it: keep it to the sources);
# bindings are generated on the fly (no generated files to commit). A stale __pycache__ would be
# bundled too, so it is removed first (componentize-py recreates it; it is git-ignored).
# Further arguments are passed to componentize before the module (e.g. another -p DIR).
build() {
  local wit="$1" src="$2" module="$3" out="$dist/$4.wasm"
  shift 4
  rm -rf "$src/__pycache__"
  "$cpy" -q -d "$wit" -w handler componentize -p "$src" "$@" -o "$out" "$module"
  echo "built $out ($(stat -c %s "$out") bytes)"
}

build "$repo/wit" "$here/src" app python-configmap-logger
build "$repo/wit/0.2.0" "$here/replicator/src" replicator python-replicator
# The Secret-replicating variant: the same source plus a settings module that switches Secrets on.
settings="$(mktemp -d)"
trap 'rm -rf "$settings"' EXIT
echo "REPLICATE_SECRETS = True" >"$settings/replicator_settings.py"
mkdir -p "$dist/variants"
build "$repo/wit/0.2.0" "$here/replicator/src" replicator variants/python-replicator-secrets -p "$settings"
