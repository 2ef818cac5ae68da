#!/usr/bin/env bash
# Runs the scenario files of every guest example through `kubewasm test` (no cluster: the real
# runtime against an in-process API server on a virtual clock; see guest-examples/SCENARIOS.md).
#
# Uses the release binary the test build makes (target/release/kubewasm, built by
# `cargo test --release --workspace --tests`; not `cargo run`, which would build
# another one with other features) and the components guest-examples/build.sh puts in
# guest-examples/dist/. Prints each handler's results and the total wall time; exits non-zero
# when a scenario fails or a component or binary is missing.
#
# Usage: scripts/scenarios.sh [FILTER...]   (run only the handlers whose component path
#                                            contains one of the FILTERs, e.g. `lb-controller`)
# Environment: KUBEWASM (the binary, default target/release/kubewasm), SCENARIO_CACHE_DIR (the
# compile cache, default target/test-cache/kubewasm: the test command's one compile cache, which
# the end-to-end tests have filled with the examples by the time this runs; a Python component
# compiles in ~10 s once).
set -uo pipefail
cd "$(dirname "$0")/.."

bin=${KUBEWASM:-target/release/kubewasm}
cache=${SCENARIO_CACHE_DIR:-target/test-cache/kubewasm}
dist=guest-examples/dist

# Every example folder guest-examples/<lang>/<example>/ with a scenarios/ folder is run, by one
# rule instead of a table:
#   <example>/scenarios/*.yaml          against dist/<lang>-<example>.wasm
#   <example>/scenarios/<variant>/*.yaml against dist/variants/<lang>-<example>-<variant>.wasm
#                                        (a variant build, e.g. python/replicator/scenarios/secrets/)
runs=()
for folder in guest-examples/*/*/scenarios guest-examples/*/*/scenarios/*/; do
  folder=${folder%/}
  [[ -d "$folder" ]] || continue
  if [[ "$(basename "$folder")" == scenarios ]]; then
    example=$(basename "$(dirname "$folder")")
    lang=$(basename "$(dirname "$(dirname "$folder")")")
    runs+=("$lang-$example.wasm|$folder")
  else
    variant=$(basename "$folder")
    example=$(basename "$(dirname "$(dirname "$folder")")")
    lang=$(basename "$(dirname "$(dirname "$(dirname "$folder")")")")
    runs+=("variants/$lang-$example-$variant.wasm|$folder")
  fi
done

# Scenario files a component must not run yet, each with the reason (printed as SKIP).
# (None today; an entry reads ["COMPONENT.wasm|FILE.yaml"]="reason".)
declare -A skip=()
# A run that takes longer than this (real seconds) has hung: it is stopped and fails.
limit=${SCENARIO_TIMEOUT:-300}

if [[ ! -x "$bin" ]]; then
  echo "scenarios: $bin not found; build it with: cargo test --release --workspace --tests" >&2
  exit 2
fi
mkdir -p "$cache"

wanted() {
  (($# == 1)) && return 0
  local c=$1 f
  shift
  for f in "$@"; do [[ "$c" == *"$f"* ]] && return 0; done
  return 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf "%d.%d" $(($1 / 1000)) $((($1 % 1000) / 100)); }

start=$(now_ms)
failed=()
handlers=0
files=0
skipped=0
for run in "${runs[@]}"; do
  component=${run%%|*}
  folder=${run#*|}
  wanted "$component" "$@" || continue
  handlers=$((handlers + 1))
  wasm=$dist/$component
  echo "== $component: scenarios in $folder"
  shopt -s nullglob
  scenarios=()
  for f in "$folder"/*.yaml; do
    why=${skip["$component|$(basename "$f")"]:-}
    if [[ -n "$why" ]]; then
      echo "SKIP $f ($why)"
      skipped=$((skipped + 1))
      continue
    fi
    scenarios+=("$f")
  done
  shopt -u nullglob
  if [[ ! -f "$wasm" ]]; then
    echo "FAIL $wasm is missing (build it: guest-examples/build.sh)"
    failed+=("$component (missing)")
    continue
  fi
  if ((${#scenarios[@]} == 0)); then
    echo "FAIL no scenario files in $folder"
    failed+=("$component (no scenarios)")
    continue
  fi
  files=$((files + ${#scenarios[@]}))
  t0=$(now_ms)
  timeout "$limit" "$bin" test --cache-dir "$cache" "$wasm" "${scenarios[@]}"
  rc=$?
  ((rc == 124)) && echo "FAIL $component: no result within $limit s (hung)"
  t1=$(now_ms)
  echo "== $component: exit $rc, $(secs $((t1 - t0))) s"
  ((rc == 0)) || failed+=("$component (exit $rc)")
done
end=$(now_ms)

echo "scenarios: $handlers handler(s), $files scenario run(s), $skipped skipped, wall time $(secs $((end - start))) s"
if ((${#failed[@]})); then
  printf "scenarios: FAILED: %s\n" "${failed[@]}"
  exit 1
fi
echo "scenarios: all passed"
