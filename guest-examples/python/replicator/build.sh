#!/usr/bin/env bash
# Builds the Python replicator (src/replicator.py, world kubewasm:handler@0.2.0 from
# <repo>/wit/0.2.0) into guest-examples/dist/, with the manifests beside the components:
#   python-replicator.wasm                    replicator.toml
#   variants/python-replicator-secrets.wasm   replicator-secrets.toml: the same source plus a
#                                             settings module that switches Secrets on (README.md)
# Skipped when its inputs are unchanged (../../lib.sh). Needs componentize-py from
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
out="$dist/python-replicator.wasm"
secrets="$dist/variants/python-replicator-secrets.wasm"
install_file "$here/replicator.toml" "$dist/python-replicator.toml"
install_file "$here/replicator-secrets.toml" "$dist/variants/python-replicator-secrets.toml"

key="$(inputs_key "$here" "$repo/sdk/python/kubewasm_sdk" "$repo/wit/0.2.0" -- "componentize-py $("$cpy" --version)")"
if up_to_date "$key" "$out" "$secrets"; then
  skipped "$out" "$secrets"
  exit 0
fi
# -p bundles every file of src/ into the component: keep it to the sources (a stale __pycache__
# would be bundled too). Further -p folders add modules (the variant's settings).
# The SDK (package kubewasm_sdk) is bundled from <repo>/sdk/python.
sdk="$repo/sdk/python"
build() {
  local out="$1"
  shift
  rm -rf "$here/src/__pycache__" "$sdk/kubewasm_sdk/__pycache__"
  "$cpy" -q -d "$repo/wit/0.2.0" -w handler componentize -p "$here/src" -p "$sdk" "$@" -o "$out" replicator
  built "$out"
}
build "$out"
settings="$(mktemp -d)"
trap 'rm -rf "$settings"' EXIT
echo "REPLICATE_SECRETS = True" >"$settings/replicator_settings.py"
build "$secrets" -p "$settings"
record_key "$key" "$out" "$secrets"
