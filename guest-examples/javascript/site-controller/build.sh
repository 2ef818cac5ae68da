#!/usr/bin/env bash
# Builds the JavaScript site-controller (site-controller.js on the SDK in <repo>/sdk/javascript,
# world `controller` of kubewasm:handler@0.3.0 from <repo>/wit/0.3.0) into
# guest-examples/dist/javascript-site-controller.wasm with its manifest beside it. Skipped when
# its inputs are unchanged (../../lib.sh). Needs guest-examples/javascript/node_modules
# (guest-examples/install-toolchains.sh). componentize-js, not componentize-qjs: the controller
# world imports wasi:http, which componentize-qjs 0.4.5 cannot pre-initialise (../README.md).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
js="$repo/guest-examples/javascript"
bin="$js/node_modules/.bin"
if [[ ! -x "$bin/componentize-js" ]]; then
  echo "componentize-js missing: run guest-examples/install-toolchains.sh" >&2
  exit 1
fi
dist="$repo/guest-examples/dist"
out="$dist/javascript-site-controller.wasm"
install_file "$here/site-controller.toml" "$dist/javascript-site-controller.toml"
toolchain="node $(node --version) $(sha256sum <"$js/package-lock.json")"
key="$(inputs_key "$here" "$repo/sdk/javascript" "$repo/wit/0.3.0" -- "$toolchain")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
# From the repository: componentize-js lets the component read only the source's folder, or the
# working directory when that holds the source, and the SDK is imported from <repo>/sdk.
(cd "$repo" && "$bin/componentize-js" "$here/site-controller.js" --wit "$repo/wit/0.3.0" --world-name controller --out "$out" >/dev/null)
record_key "$key" "$out"
built "$out"
