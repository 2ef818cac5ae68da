#!/usr/bin/env bash
# Builds the notifier (notifier.js, world kubewasm:handler@0.2.0 from <repo>/wit/0.2.0) into
# guest-examples/dist/javascript-notifier.wasm with its manifest beside it. Skipped when its
# inputs are unchanged (../../lib.sh). Needs guest-examples/javascript/node_modules
# (guest-examples/install-toolchains.sh).
#
# notifier.js imports the SDK by relative path (<repo>/sdk/javascript), which componentize-js
# bundles. The notifier calls a webhook over wasi:http, which only componentize-js links:
# componentize-qjs 0.4.5 fails at pre-initialisation ("component imports instance
# `wasi:http/types@0.2.12` ... mismatched resource types"). See README.md.
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
out="$dist/javascript-notifier.wasm"
install_file "$here/notifier.toml" "$dist/javascript-notifier.toml"

toolchain="node $(node --version) $(sha256sum <"$js/package-lock.json")"
key="$(inputs_key "$here" "$repo/sdk/javascript" "$repo/wit/0.2.0" -- "$toolchain")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
"$bin/componentize-js" "$here/notifier.js" --wit "$repo/wit/0.2.0" --world-name handler --out "$out" >/dev/null
record_key "$key" "$out"
built "$out"
