#!/usr/bin/env bash
# Builds the lb-controller (world kubewasm:handler/handler@0.3.0) for wasm32-wasip2 into
# guest-examples/dist/rust-lb-controller.wasm, with its manifest beside it. How, and when
# it is skipped: rust_example in ../../lib.sh. Works from any directory.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
rust_example lb-controller
