#!/usr/bin/env bash
# Builds the JavaScript configmap-logger (configmap-logger.js on the SDK's 0.1.0 entry,
# <repo>/sdk/javascript/v0.1.0.js) from one source with two engines, each with the manifest
# beside it:
#   guest-examples/dist/javascript-configmap-logger.wasm                           componentize-qjs (QuickJS), the default
#   guest-examples/dist/variants/javascript-starlingmonkey-configmap-logger.wasm   componentize-js (StarlingMonkey)
# Skipped when its inputs are unchanged (../../lib.sh). Needs guest-examples/javascript/node_modules
# (guest-examples/install-toolchains.sh). JS_ENGINE=quickjs|starlingmonkey|both (default both).
# See ../README.md for why QuickJS is the default.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
js="$repo/guest-examples/javascript"
bin="$js/node_modules/.bin"
if [[ ! -x "$bin/componentize-js" || ! -x "$bin/componentize-qjs" ]]; then
  echo "componentize-js/componentize-qjs missing: run guest-examples/install-toolchains.sh" >&2
  exit 1
fi
dist="$repo/guest-examples/dist"
engine="${JS_ENGINE:-both}"
src="$here/configmap-logger.js"
# The toolchain: the exact packages package-lock.json pins, run by this node.
toolchain="node $(node --version) $(sha256sum <"$js/package-lock.json")"
key="$(inputs_key "$here" "$repo/sdk/javascript" "$repo/wit/handler.wit" -- "$toolchain")"

if [[ "$engine" == both || "$engine" == quickjs ]]; then
  out="$dist/javascript-configmap-logger.wasm"
  install_file "$here/configmap-logger.toml" "$dist/javascript-configmap-logger.toml"
  if up_to_date "$key" "$out"; then
    skipped "$out"
  else
    # --sync: without it the exports use the component-model async ABI, which the host does not enable.
    # --module-root: the SDK's files are outside this folder; imports resolve within the repository.
    "$bin/componentize-qjs" --sync --wit "$repo/wit" --world handler --js "$src" --module-root "$repo" \
      --output "$out" >/dev/null
    record_key "$key" "$out"
    built "$out"
  fi
fi
if [[ "$engine" == both || "$engine" == starlingmonkey ]]; then
  out="$dist/variants/javascript-starlingmonkey-configmap-logger.wasm"
  install_file "$here/configmap-logger.toml" "$dist/variants/javascript-starlingmonkey-configmap-logger.toml"
  if up_to_date "$key" "$out"; then
    skipped "$out"
  else
    # --disable http fetch-event: the host provides no wasi:http, so the component must not import it.
    "$bin/componentize-js" "$src" --wit "$repo/wit" --world-name handler \
      --disable http fetch-event --out "$out" >/dev/null
    record_key "$key" "$out"
    built "$out"
  fi
fi
