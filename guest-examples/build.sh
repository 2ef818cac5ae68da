#!/usr/bin/env bash
# Builds the guest examples from source into guest-examples/dist/ by running every
# <lang>/<example>/build.sh: each puts <lang>-<example>.wasm (variants under dist/variants/) and
# its manifest <lang>-<example>.toml there, and skips what is up to date (lib.sh).
# Run guest-examples/install-toolchains.sh once first.
#
# Usage: build.sh [FILTER...]   a FILTER is a language (rust), an example (configmap-logger) or
#                               both (python/replicator); without one, every example is built.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
matched=0
for script in "$here"/*/*/build.sh; do
  dir="${script%/build.sh}"
  example="${dir##*/}"
  lang="$(basename "$(dirname "$dir")")"
  if (($#)); then
    wanted=0
    for f in "$@"; do
      [[ "$f" == "$lang" || "$f" == "$example" || "$f" == "$lang/$example" ]] && wanted=1
    done
    ((wanted)) || continue
  fi
  matched=$((matched + 1))
  echo "== $lang/$example"
  start=$SECONDS
  bash "$script"
  echo "== $lang/$example: $((SECONDS - start)) s"
done
if ((matched == 0)); then
  echo "build.sh: no example matches '$*' (examples: $(cd "$here" && ls -d */*/build.sh | sed 's#/build.sh##' | tr '\n' ' '))" >&2
  exit 2
fi
