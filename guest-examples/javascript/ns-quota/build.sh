#!/usr/bin/env bash
# Builds the JavaScript ns-quota controller (ns-quota.js on the SDK in <repo>/sdk/javascript,
# world kubewasm:handler@0.2.0 from <repo>/wit/0.2.0) into
# guest-examples/dist/javascript-ns-quota.wasm with its manifest beside it. Skipped when its
# inputs are unchanged (../../lib.sh). Needs guest-examples/javascript/node_modules
# (guest-examples/install-toolchains.sh). componentize-js, not componentize-qjs: every 0.2.0
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
out="$dist/javascript-ns-quota.wasm"
install_file "$here/ns-quota.toml" "$dist/javascript-ns-quota.toml"
toolchain="node $(node --version) $(sha256sum <"$js/package-lock.json")"
key="$(inputs_key "$here" "$repo/sdk/javascript" "$repo/wit/0.2.0" -- "$toolchain")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
"$bin/componentize-js" "$here/ns-quota.js" --wit "$repo/wit/0.2.0" --world-name handler --out "$out" >/dev/null
record_key "$key" "$out"
built "$out"
