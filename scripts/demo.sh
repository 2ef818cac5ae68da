#!/usr/bin/env bash
# The main job: builds the example handlers and runs `kubewasm dev --demo` — an embedded API
# server, the handlers from guest-examples/dist, and a few ConfigMaps changing so they fire.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash guest-examples/build.sh
exec cargo run --release -p kubewasm -- dev --plugins guest-examples/dist --demo "$@"
