# Shared by every example's build.sh (sourced, not run): skips a build whose inputs have not
# changed since the last one, and installs outputs without touching files that are already equal.
#
# Some toolchains are not reproducible (componentize-py and componentize-js embed a fresh
# snapshot each time), so "rebuild and compare" cannot tell that nothing changed, and rebuilding
# every guest costs minutes. Instead a build is keyed on a hash of everything it reads: the
# example's folder (sources, manifest, build script; scenarios/ and README.md excluded), the WIT
# it is built against, this file, the shared tool's sources where used, and a toolchain version
# string. The key is stored beside the output as OUT.key; the next build with the same key is
# skipped. KUBEWASM_REBUILD=1 forces a rebuild.

# inputs_key PATH... [-- STRING...]: sha256 over the files under each PATH (sorted by path;
# scenarios/, README.md, __pycache__, node_modules and target/ left out) and the STRINGs. Files
# are named relative to the repository, so a clone elsewhere with the same files (and a target
# folder copied into it) has the same keys and rebuilds nothing.
inputs_key() {
  local paths=() strings=() root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  while (($#)); do
    if [[ "$1" == -- ]]; then
      shift
      strings=("$@")
      break
    fi
    paths+=("$(realpath -m --relative-to="$root" "$1")")
    shift
  done
  {
    (cd "$root" && find "${paths[@]}" \
      \( -name scenarios -o -name __pycache__ -o -name node_modules -o -name target \) -prune \
      -o -type f ! -name README.md ! -name '*.wasm' ! -name '*.key' -print0 |
      sort -z | xargs -0 sha256sum)
    printf '%s\n' "${strings[@]}" "lib.sh:$(sha256sum <"${BASH_SOURCE[0]}")"
  } | sha256sum | cut -d' ' -f1
}

# up_to_date KEY OUT...: true when every OUT exists and was built with KEY.
up_to_date() {
  local key="$1" out
  shift
  [[ "${KUBEWASM_REBUILD:-}" == 1 ]] && return 1
  for out in "$@"; do
    [[ -f "$out" && -f "$out.key" && "$(cat "$out.key")" == "$key" ]] || return 1
  done
}

# record_key KEY OUT...: marks every OUT as built with KEY.
record_key() {
  local key="$1" out
  shift
  for out in "$@"; do echo "$key" >"$out.key"; done
}

# install_file SRC DST: copies SRC to DST unless DST already has the same bytes (a host watching
# the folder then sees no change).
install_file() {
  mkdir -p "$(dirname "$2")"
  cmp -s "$1" "$2" || cp "$1" "$2"
}

# built OUT: the line every build prints for an output.
built() {
  echo "built $1 ($(stat -c %s "$1") bytes)"
}

# skipped OUT...: the line printed for outputs that were up to date.
skipped() {
  local out
  for out in "$@"; do echo "up to date $out"; done
}

# guest_target_dir: where every Rust guest is compiled (examples, test fixtures, and the
# templates the CLI tests build): <target>/guests, <target> being CARGO_TARGET_DIR or
# <repo>/target. One folder, so the wasm32 dependencies (k8s-openapi above all) compile once for
# all of them; not <target> itself, whose lock `cargo test` holds while the template test builds.
guest_target_dir() {
  echo "${CARGO_TARGET_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/target}/guests"
}

# rust_example NAME: builds the Rust example crate NAME (a member of guest-examples/rust's cargo
# workspace) for wasm32-wasip2 into dist/rust-NAME.wasm, with NAME.toml beside it; skipped,
# without even asking cargo, when the crate, the workspace's manifest, lock file and profile,
# the WIT, the Rust SDK (sdk/rust) and the compiler are unchanged. Builds in guest_target_dir.
rust_example() {
  local name="$1"
  local here="$repo/guest-examples/rust/$name"
  local target_dir
  target_dir="$(guest_target_dir)"
  local dist="$repo/guest-examples/dist"
  local out="$dist/rust-$name.wasm" key
  install_file "$here/$name.toml" "$dist/rust-$name.toml"
  key="$(inputs_key "$here" "$here/../Cargo.toml" "$here/../Cargo.lock" "$repo/wit" "$repo/sdk/rust" -- "$(rustc --version)")"
  if up_to_date "$key" "$out"; then
    skipped "$out"
    return 0
  fi
  if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
    rustup target add wasm32-wasip2
  fi
  cargo build --release --target wasm32-wasip2 --quiet \
    --manifest-path "$here/../Cargo.toml" --target-dir "$target_dir" -p "$name"
  install_file "$target_dir/wasm32-wasip2/release/${name//-/_}.wasm" "$out"
  record_key "$key" "$out"
  built "$out"
}
