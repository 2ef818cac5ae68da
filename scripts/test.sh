#!/usr/bin/env bash
# The test command: installs every toolchain the tests need, builds every guest example from
# source (guest-examples/dist/) and the test fixtures (tests/fixtures/ into target/fixtures/),
# then runs the whole test suite (unit, scenario, API-server, end-to-end) and every example's
# scenario files through `kubewasm test` (scripts/scenarios.sh). Builds skip what is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash guest-examples/build.sh
bash tests/fixtures/build.sh
cargo test --release --workspace --lib --bins --tests
bash scripts/scenarios.sh
# The Rust SDK's unit tests (native: its pure parts) and its copy of the WIT it wraps.
diff -r wit/0.2.0 sdk/rust/wit
diff wit/handler.wit sdk/rust/wit-0.1.0/handler.wit  # its 0.1.0 mode (handler_v0_1!)
(cd sdk/rust && CARGO_TARGET_DIR="$PWD/../../target/sdk-native" cargo test --release)
# The SDKs' own unit tests (pure parts, on the native runtimes with stub bindings).
python3 -m unittest discover -s sdk/python/tests
(cd sdk/javascript && node --import ./test/register.js --test test/sdk.test.js)
# The Python SDK inside a real component (wasi:http requests and errors, the export guard).
bash sdk/python/tests/component/run.sh
bash sdk/javascript/test/component/run.sh
