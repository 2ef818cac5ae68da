#!/usr/bin/env bash
# Builds the reference configmap-logger (world kubewasm:handler@0.1.0) for wasm32-wasip2 into
# guest-examples/dist/rust-configmap-logger.wasm, with its manifest beside it. The crate is a member of
# the examples' cargo workspace (../Cargo.toml). Skipped, without even asking cargo, when its
# inputs are unchanged (../../lib.sh). Works from any directory; honours CARGO_TARGET_DIR
# (default: <repo>/target).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
source "$repo/guest-examples/lib.sh"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
dist="$repo/guest-examples/dist"
out="$dist/rust-configmap-logger.wasm"
install_file "$here/configmap-logger.toml" "$dist/rust-configmap-logger.toml"

# The crate, the workspace's manifest, lock file and profile, the WIT and the compiler.
key="$(inputs_key "$here" "$here/../Cargo.toml" "$here/../Cargo.lock" "$repo/wit" -- "$(rustc --version)")"
if up_to_date "$key" "$out"; then
  skipped "$out"
  exit 0
fi
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi
cargo build --release --target wasm32-wasip2 --quiet \
  --manifest-path "$here/../Cargo.toml" --target-dir "$target_dir" -p configmap-logger
install_file "$target_dir/wasm32-wasip2/release/configmap_logger.wasm" "$out"
record_key "$key" "$out"
built "$out"
