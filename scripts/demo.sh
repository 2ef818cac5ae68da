#!/usr/bin/env bash
# The main job: builds the example handlers and runs `kubewasm dev --demo` — an embedded API
# server, the examples from guest-examples/dist (components and manifests only; test fixtures live
# in target/fixtures and are never loaded), and a few ConfigMaps changing so they fire — beside
# the lb-controller example's cloud stand-in, so the acting handler creates, repairs and removes
# load balancers as demo Services come and go.
#
# Starts in seconds when nothing changed: every step skips what is up to date (toolchains, guest
# builds keyed on their inputs, cargo), the host binary is the one the test command builds
# (`cargo test --release --workspace --tests`: `cargo run -p kubewasm` would unify
# features differently and rebuild half the dependency tree), and compiled plugins are cached in
# target/test-cache/kubewasm, the compile cache the test command fills. Extra arguments go to `kubewasm dev`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash guest-examples/build.sh
cargo test --release --workspace --tests --no-run --quiet
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
# The API server's port: 6443 as on a cluster, unless something else holds it (k3s and many
# local clusters do) and no --port was given, then any free port; kubectl finds it through the
# printed KUBECONFIG either way.
port=()
if [[ " $* " != *" --port"* ]] && ! python3 -c 'import socket; socket.socket().bind(("127.0.0.1", 6443))' 2>/dev/null; then
  port=(--port "$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')")
  echo "demo: 127.0.0.1:6443 is taken; the API server uses port ${port[1]} (choose one with --port N)"
fi
target/release/kubewasm dev --plugins guest-examples/dist --cache-dir target/test-cache/kubewasm \
  --demo --demo-cloud "$endpoint" "${port[@]}" "$@"
