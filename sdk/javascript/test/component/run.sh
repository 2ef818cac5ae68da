#!/usr/bin/env bash
# Builds the SDK smoke components (componentize-js) against kubewasm:handler@0.3.0 (wit/0.3.0):
# smoke.js in the handler world and controller-smoke.js in the controller world, each with
# <repo>/sdk/javascript, into <repo>/target/sdk-smoke/, and runs smoke.yaml (and
# controller-smoke.yaml when there is one) through `kubewasm test` (KUBEWASM, default
# <repo>/target/release/kubewasm). KUBEWASM_NODE_MODULES names the node_modules holding
# componentize-js (default <repo>/guest-examples/javascript/node_modules); BUILD_ONLY=1 stops
# after the builds. scripts/test.sh runs it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../../.." && pwd)"
cjs="${KUBEWASM_NODE_MODULES:-$repo/guest-examples/javascript/node_modules}/.bin/componentize-js"
wit="$repo/wit/0.3.0"
dist="$repo/target/sdk-smoke"
out="$dist/javascript-sdk-smoke.wasm"
controller="$dist/javascript-sdk-controller-smoke.wasm"
mkdir -p "$dist"
"$cjs" "$here/smoke.js" --wit "$wit" --world-name handler --out "$out" >/dev/null
echo "built $out (handler world)"
"$cjs" "$here/controller-smoke.js" --wit "$wit" --world-name controller --out "$controller" >/dev/null
echo "built $controller (controller world)"
[[ "${BUILD_ONLY:-}" == 1 ]] && exit 0
kubewasm="${KUBEWASM:-$repo/target/release/kubewasm}"
"$kubewasm" test --cache-dir "$repo/target/test-cache/kubewasm" "$out" "$here/smoke.yaml"
if [[ -f "$here/controller-smoke.yaml" ]]; then
  "$kubewasm" test --cache-dir "$repo/target/test-cache/kubewasm" "$controller" "$here/controller-smoke.yaml"
fi
