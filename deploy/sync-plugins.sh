#!/usr/bin/env bash
# Copies the example handlers the kustomization ships (deploy/kustomization.yaml,
# configMapGenerator) from guest-examples/dist/ into deploy/plugins/, or into DIR (with their
# committed manifests, deploy/plugins/NAME.toml).
# Build them first: bash guest-examples/build.sh rust
# Usage: sync-plugins.sh [DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dist="$here/../guest-examples/dist"
out="${1:-$here/plugins}"
mkdir -p "$out"
for name in configmap-logger label-auditor; do
  src="$dist/rust-$name.wasm"
  if [[ ! -f "$src" ]]; then
    echo "sync-plugins: $src is missing; build it with: bash guest-examples/build.sh rust" >&2
    exit 1
  fi
  cp "$src" "$out/$name.wasm"
  if [[ "$(cd "$out" && pwd)" != "$here/plugins" ]]; then
    cp "$here/plugins/$name.toml" "$out/$name.toml"
  fi
done
echo "sync-plugins: copied configmap-logger.wasm and label-auditor.wasm to $out"
