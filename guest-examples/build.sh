#!/usr/bin/env bash
# Builds every guest example from source into guest-examples/dist/:
#   rust-*.wasm (guest-examples/rust/build.sh, when present), python-, javascript-, c-, go-configmap-logger.wasm
#   (+ dist/variants/javascript-starlingmonkey-configmap-logger.wasm), python-replicator.wasm,
#   javascript-notifier.wasm.
# Run guest-examples/install-toolchains.sh once first. Usage: build.sh [LANG...]  (rust python javascript c go)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
langs=("$@")
((${#langs[@]})) || langs=(rust python javascript c go)
for lang in "${langs[@]}"; do
  script="$here/$lang/build.sh"
  if [[ ! -f "$script" ]]; then
    if [[ "$lang" == rust ]]; then
      echo "== rust: guest-examples/rust/build.sh not present, skipped"
      continue
    fi
    echo "no build script for '$lang' ($script)" >&2
    exit 2
  fi
  echo "== $lang"
  start=$SECONDS
  bash "$script"
  echo "== $lang: $((SECONDS - start)) s"
done
