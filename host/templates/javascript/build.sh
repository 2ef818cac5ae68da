#!/usr/bin/env bash
# Builds {{name}}.wasm (a kubewasm:handler@{{wit-version}} component) in this folder from handler.js and
# the kubewasm SDK it imports from sdk/, with
# componentize-js (StarlingMonkey; it links wasi:http, which the world imports).
# Needs componentize-js: KUBEWASM_REPO/guest-examples/javascript/node_modules/.bin (made by
# guest-examples/install-toolchains.sh in a kubewasm checkout), else componentize-js on PATH.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="{{name}}"
repo="${KUBEWASM_REPO:-{{repo}}}"
bin="${repo:+$repo/guest-examples/javascript/node_modules/.bin}"
if [[ -n "$bin" && -x "$bin/componentize-js" ]]; then
  cjs="$bin/componentize-js"
elif command -v componentize-js >/dev/null; then
  cjs="$(command -v componentize-js)"
else
  echo "componentize-js not found (looked in ${bin:-<no KUBEWASM_REPO>} and on PATH):" >&2
  echo "  run guest-examples/install-toolchains.sh in a kubewasm checkout and set KUBEWASM_REPO to it" >&2
  exit 1
fi
"$cjs" "$here/handler.js" --wit "$here/wit" --world-name {{world}} --out "$here/$name.wasm" >/dev/null
echo "built $here/$name.wasm ($(stat -c %s "$here/$name.wasm") bytes)"
