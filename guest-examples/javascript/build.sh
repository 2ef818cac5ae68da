#!/usr/bin/env bash
# Builds the JavaScript configmap-logger from one source with two engines, and the notifier:
#   guest-examples/dist/javascript-configmap-logger.wasm                           componentize-qjs (QuickJS), the default
#   guest-examples/dist/variants/javascript-starlingmonkey-configmap-logger.wasm   componentize-js (StarlingMonkey)
#   guest-examples/dist/javascript-notifier.wasm                                   componentize-js (always)
# Needs guest-examples/javascript/node_modules (guest-examples/install-toolchains.sh).
# JS_ENGINE=quickjs|starlingmonkey|both (default both). See README.md for why QuickJS is the default.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="$here/node_modules/.bin"
if [[ ! -x "$bin/componentize-js" || ! -x "$bin/componentize-qjs" ]]; then
  echo "componentize-js/componentize-qjs missing: run guest-examples/install-toolchains.sh" >&2
  exit 1
fi
dist="$repo/guest-examples/dist"
mkdir -p "$dist/variants"
engine="${JS_ENGINE:-both}"
src="$here/configmap-logger.js"

if [[ "$engine" == both || "$engine" == quickjs ]]; then
  out="$dist/javascript-configmap-logger.wasm"
  # --sync: without it the exports use the component-model async ABI, which the host does not enable.
  "$bin/componentize-qjs" --sync --wit "$repo/wit" --world handler --js "$src" --output "$out" >/dev/null
  echo "built $out ($(stat -c %s "$out") bytes)"
fi
if [[ "$engine" == both || "$engine" == starlingmonkey ]]; then
  out="$dist/variants/javascript-starlingmonkey-configmap-logger.wasm"
  # --disable http fetch-event: the host provides no wasi:http, so the component must not import it.
  "$bin/componentize-js" "$src" --wit "$repo/wit" --world-name handler \
    --disable http fetch-event --out "$out" >/dev/null
  echo "built $out ($(stat -c %s "$out") bytes)"
fi

# The notifier (world kubewasm:handler@0.2.0, wit/0.2.0) calls a webhook over wasi:http, which only
# componentize-js links: componentize-qjs 0.4.5 fails at pre-initialisation ("component imports
# instance `wasi:http/types@0.2.12` ... mismatched resource types"). See notifier/README.md.
out="$dist/javascript-notifier.wasm"
"$bin/componentize-js" "$here/notifier/notifier.js" --wit "$repo/wit/0.2.0" --world-name handler --out "$out" >/dev/null
echo "built $out ($(stat -c %s "$out") bytes)"
