#!/usr/bin/env bash
# The test command: installs every toolchain the tests need, builds every guest example from
# source (guest-examples/dist/) and the test fixtures (tests/fixtures/ into target/fixtures/),
# then runs the whole test suite (unit, scenario, API-server, end-to-end) and every example's
# scenario files through `kubewasm test` (scripts/scenarios.sh). Builds skip what is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage is timed; the summary is printed at the end (also when a stage fails), so the next
# regression in the test command's length shows which stage grew.
stages=()
stage() {
  local name="$1" start rc=0
  shift
  start=$(date +%s)
  "$@" || rc=$?
  stages+=("$(printf '%6d s  %s' "$(( $(date +%s) - start ))" "$name")")
  return "$rc"
}
summary() {
  echo "test.sh: time per stage"
  printf '  %s\n' "${stages[@]}"
}
trap summary EXIT
stage "setup (toolchains)" bash scripts/setup.sh
stage "guest examples" bash guest-examples/build.sh
stage "test fixtures" bash tests/fixtures/build.sh
# KUBEWASM_CLIPPY=1 (CI) builds every target under clippy-driver with warnings denied: clippy's
# lints ride on this one build instead of a separate `cargo clippy`, which would compile every
# dependency a second time in check mode (~10 min on 2 cores). The run must use the same wrapper
# and CLIPPY_ARGS or cargo would rebuild the workspace crates; `--config` keeps the wrapper out of
# the test processes' environment (tests that run cargo build guests without it).
# `--tests`: every target whose manifest keeps `test = true` (unit and integration tests, no doc
# tests); `--lib --bins` would also link test harnesses the manifests switch off.
targets=(--tests)
lint=()
if [[ "${KUBEWASM_CLIPPY:-}" == 1 ]]; then
  targets=(--tests --benches)
  lint=(--config "build.rustc-workspace-wrapper=\"$(rustup which clippy-driver)\"")
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
stage "cargo build (tests${lint:+, clippy})" cargo test --release --workspace "${targets[@]}" --no-run --timings "${lint[@]}"
stage "cargo test (run)" cargo test --release --workspace --tests "${lint[@]}"
stage "example scenarios" bash scripts/scenarios.sh
# The Rust SDK's unit tests (native: its pure parts; its WIT is symlinked to wit/, not copied)
# ran with the workspace above. It has no doc tests of its own to run (its one example is
# `ignore`; the others rustdoc finds are wit-bindgen's generated macro docs), and `cargo test -p`
# alone would resolve its dependencies' features apart from the workspace's and compile
# k8s-openapi again.
# The SDKs' own unit tests (pure parts, on the native runtimes with stub bindings).
stage "Python SDK unit tests" python3 -m unittest discover -s sdk/python/tests
stage "JavaScript SDK unit tests" bash -c 'cd sdk/javascript && node --import ./test/register.js --test test/sdk.test.js'
# The SDKs inside real components (wasi:http requests and errors, the export guard).
stage "Python SDK component" bash sdk/python/tests/component/run.sh
stage "JavaScript SDK component" bash sdk/javascript/test/component/run.sh
