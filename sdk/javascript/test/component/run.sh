#!/usr/bin/env bash
# Builds the SDK smoke component (smoke.js + <repo>/sdk/javascript, componentize-js) and runs
# smoke.yaml through `kubewasm test` (KUBEWASM, default <repo>/target/release/kubewasm).
# scripts/test.sh runs it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
out="$repo/target/sdk-smoke/javascript-sdk-smoke.wasm"
mkdir -p "$(dirname "$out")"
"$repo/guest-examples/javascript/node_modules/.bin/componentize-js" "$here/smoke.js" --wit "$repo/wit/0.2.0" \
  --world-name handler --out "$out" >/dev/null
"${KUBEWASM:-$repo/target/release/kubewasm}" test --cache-dir "$repo/target/test-cache/kubewasm" "$out" "$here/smoke.yaml"
