#!/usr/bin/env bash
# The main job: builds the example handlers and runs `kubewasm dev --demo` — an embedded API
# server, the handlers from guest-examples/dist, and a few ConfigMaps changing so they fire —
# beside the lb-controller example's cloud stand-in, so the acting handler creates, repairs and
# removes load balancers as demo Services come and go.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash guest-examples/build.sh
out="$(mktemp)"
python3 guest-examples/rust/lb-controller/cloud.py --port 0 >"$out" &
cloud=$!
trap 'kill $cloud 2>/dev/null; rm -f "$out"' EXIT
for _ in $(seq 100); do
  grep -q '^listening on ' "$out" && break
  sleep 0.1
done
endpoint="$(sed -n 's/^listening on //p' "$out" | head -1)"
[[ -n "$endpoint" ]] || { echo "demo: the cloud stand-in did not start" >&2; exit 1; }
echo "demo: cloud stand-in at $endpoint (try: curl $endpoint/lbs)"
cargo run --release -p kubewasm -- dev --plugins guest-examples/dist --demo --demo-cloud "$endpoint" "$@"
