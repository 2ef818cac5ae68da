#!/usr/bin/env bash
# Builds every Rust guest for wasm32-wasip2 and copies it to guest-examples/dist/rust-<name>.wasm.
# Works from any directory; honours CARGO_TARGET_DIR (default: <repo>/target).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
dist="$repo/guest-examples/dist"
guests=(configmap-logger label-auditor lb-controller logger-v2 test-fixture http-fixture)

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
fi

cargo build --release --target wasm32-wasip2 \
    --manifest-path "$here/Cargo.toml" --target-dir "$target_dir"

mkdir -p "$dist"
for g in "${guests[@]}"; do
    src="$target_dir/wasm32-wasip2/release/${g//-/_}.wasm"
    cp "$src" "$dist/rust-$g.wasm"
    echo "built $dist/rust-$g.wasm ($(wc -c <"$src") bytes)"
    # An example that ships its operator manifest gets it beside the component, so `kubewasm
    # run` and `kubewasm check` on dist/ grant it what it needs.
    if [[ -f "$here/$g/$g.toml" ]]; then
        cp "$here/$g/$g.toml" "$dist/rust-$g.toml"
    fi
done

# describe() variants of the test fixture for the host's bad-input tests: one component each
# (only the fixture crate is rebuilt per variant; each is copied before the next overwrites it).
mkdir -p "$dist/fixtures"
for v in sleep many bad-selector bad-namespace bad-kind unknown-kind trap none huge-name duplicates \
    bad-field bad-field-syntax bad-api-version secrets; do
    cargo build --release --target wasm32-wasip2 --quiet \
        --manifest-path "$here/Cargo.toml" --target-dir "$target_dir" \
        -p test-fixture --features "describe-$v"
    cp "$target_dir/wasm32-wasip2/release/test_fixture.wasm" \
        "$dist/fixtures/rust-fixture-describe-$v.wasm"
done
# logger-v2 asking for writes, Events and HTTP (for the grant checks of `check` and `rbac`).
cargo build --release --target wasm32-wasip2 --quiet \
    --manifest-path "$here/Cargo.toml" --target-dir "$target_dir" \
    -p logger-v2 --features describe-asks
cp "$target_dir/wasm32-wasip2/release/logger_v2.wasm" "$dist/fixtures/rust-logger-v2-asks.wasm"
# logger-v2 subscribing with a projection, logging the JSON it receives (projection tests).
for v in fields metadata-only; do
    cargo build --release --target wasm32-wasip2 --quiet \
        --manifest-path "$here/Cargo.toml" --target-dir "$target_dir" \
        -p logger-v2 --features "$v"
    cp "$target_dir/wasm32-wasip2/release/logger_v2.wasm" "$dist/fixtures/rust-logger-v2-$v.wasm"
done
echo "built $(ls "$dist/fixtures" | wc -l) describe() fixture variants in $dist/fixtures"
