#!/usr/bin/env bash
# Installs everything the guest examples need on a fresh Debian 12 machine, as root, without
# prompts. Idempotent and fast when everything is already there.
#
#   apt:    clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc   (C guest)
#           python3-venv, nodejs/npm only if missing
#   rustup: target wasm32-wasip2                                  (Rust guests)
#   venv:   <repo>/.toolchains/venv with guest-examples/requirements.txt (componentize-py, wasmtime-py)
#   npm:    guest-examples/javascript/node_modules from package-lock.json (componentize-js, componentize-qjs)
#   cargo:  crates of guest-examples/tool fetched, so the C and Go builds need no network
# Each step checks first (dpkg-query, rustup, a stamp of the lock file it installed from), so a
# second run uses no network and takes well under a second.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
export DEBIAN_FRONTEND=noninteractive

log() { echo "[install-toolchains] $*"; }

# --- Debian packages -------------------------------------------------------------------------
apt_pkgs=(clang-19 lld-19 libclang-rt-19-dev-wasm32 wasi-libc)
command -v node >/dev/null 2>&1 || apt_pkgs+=(nodejs)
command -v npm >/dev/null 2>&1 || apt_pkgs+=(npm)
command -v python3 >/dev/null 2>&1 || apt_pkgs+=(python3)
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  apt_pkgs+=(python3-venv)
fi
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- Rust target for the Rust guests ----------------------------------------------------------
if command -v rustup >/dev/null 2>&1; then
  if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    log "rustup target add wasm32-wasip2"
    rustup target add wasm32-wasip2
  fi
else
  log "warning: rustup not found; the Rust guests and the C build tool need a Rust toolchain"
fi

# --- Python venv: componentize-py, wasmtime-py ------------------------------------------------
venv="$repo/.toolchains/venv"
if [[ ! -x "$venv/bin/python" ]]; then
  log "python3 -m venv $venv"
  python3 -m venv "$venv"
fi
req="$here/requirements.txt"
stamp="$venv/.requirements.sha256"
if [[ ! -f "$stamp" ]] || [[ "$(sha256sum <"$req")" != "$(cat "$stamp")" ]]; then
  log "pip install -r guest-examples/requirements.txt"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
  sha256sum <"$req" >"$stamp"
fi

# --- npm: componentize-js, componentize-qjs ---------------------------------------------------
js="$here/javascript"
stamp="$js/node_modules/.kubewasm-lock.sha256"
if [[ ! -f "$stamp" ]] || [[ "$(sha256sum <"$js/package-lock.json")" != "$(cat "$stamp")" ]]; then
  # `npm install` honours package-lock.json like `npm ci`, but does not fail on the lock file's
  # missing entries for other platforms' optional binaries (the registry mirror here lacks them,
  # and `npm ci` refuses such a lock). Versions are exact in package.json as well.
  log "npm install from package-lock.json (guest-examples/javascript)"
  (cd "$js" && npm install --no-audit --no-fund --loglevel=error)
  sha256sum <"$js/package-lock.json" >"$stamp"
fi

# --- crates for the C build tool --------------------------------------------------------------
stamp="$here/tool/target/.kubewasm-fetched.sha256"
if command -v cargo >/dev/null 2>&1 &&
  { [[ ! -f "$stamp" ]] || [[ "$(sha256sum <"$here/tool/Cargo.lock")" != "$(cat "$stamp")" ]]; }; then
  log "cargo fetch (guest-examples/tool)"
  (cd "$here/tool" && cargo fetch --locked -q)
  mkdir -p "$(dirname "$stamp")"
  sha256sum <"$here/tool/Cargo.lock" >"$stamp"
fi

log "done"
