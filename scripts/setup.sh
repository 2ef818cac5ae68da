#!/usr/bin/env bash
# Installs what builds and tests need on a fresh machine; fast when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target list --installed | grep -qx wasm32-wasip2 || rustup target add wasm32-wasip2
if ! command -v kubectl >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq kubectl
fi
if [ -f guest-examples/install-toolchains.sh ]; then
  bash guest-examples/install-toolchains.sh
fi
# The registry the OCI end-to-end tests push to and pull from (CNCF distribution, on 127.0.0.1).
if ! command -v docker-registry >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends docker-registry
fi
