#!/usr/bin/env bash
# The test command: installs every toolchain the tests need, builds every guest example from
# source, then runs the whole test suite (unit, scenario, API-server, end-to-end) and every
# example's scenario files through `kubewasm test` (scripts/scenarios.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash guest-examples/build.sh
cargo test --release --workspace --lib --bins --tests
bash scripts/scenarios.sh
