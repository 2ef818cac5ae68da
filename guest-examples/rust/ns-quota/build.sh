#!/usr/bin/env bash
# Builds the ns-quota controller (world kubewasm:handler@0.2.0, on the Rust SDK) for
# wasm32-wasip2 into guest-examples/dist/rust-ns-quota.wasm, with its manifest beside it. How,
# and when it is skipped: rust_example in ../../lib.sh. Works from any directory.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
rust_example ns-quota
