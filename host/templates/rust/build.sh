#!/usr/bin/env bash
# Builds {{name}}.wasm (a kubewasm:handler@0.3.0 component) in this folder from src/lib.rs.
# Needs: cargo and rustup with the wasm32-wasip2 target (guest-examples/install-toolchains.sh adds it).
# Honours CARGO_TARGET_DIR (default: ./target). wit-bindgen comes from crates.io (or cargo's cache).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="{{name}}"
crate="{{crate}}"  # the package name: a crate name cannot start with a digit
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup), then rustup target add wasm32-wasip2" >&2; exit 1; }
# grep reads everything (no -q): an early exit would fail the pipeline with SIGPIPE under pipefail.
if command -v rustup >/dev/null && ! rustup target list --installed | grep -x wasm32-wasip2 >/dev/null; then
  echo "the wasm32-wasip2 target is missing: rustup target add wasm32-wasip2" >&2
  exit 1
fi
target_dir="${CARGO_TARGET_DIR:-$here/target}"
cargo build --release --target wasm32-wasip2 --manifest-path "$here/Cargo.toml" --target-dir "$target_dir"
cp "$target_dir/wasm32-wasip2/release/${crate//-/_}.wasm" "$here/$name.wasm"
echo "built $here/$name.wasm ($(stat -c %s "$here/$name.wasm") bytes)"
