#!/usr/bin/env bash
# Builds the reference configmap-logger (world kubewasm:handler@0.1.0) for wasm32-wasip2 into
# guest-examples/dist/rust-configmap-logger.wasm, with its manifest beside it. How, and when
# it is skipped: rust_example in ../../lib.sh. Works from any directory.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
rust_example configmap-logger
