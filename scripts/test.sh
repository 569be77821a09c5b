#!/usr/bin/env bash
# Runs every test: installs the real MCP servers the end-to-end tests use and the real MCP
# clients of the acceptance tests (npm, PyPI; pinned versions), then `cargo test
# --workspace`, then the acceptance tests with real clients (tests/clients/), then the Python
# package's wheel and its tests (python/). Works on a fresh machine with Rust, Node.js and
# Python.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed when the script ends: CI's time is a target (issue 34.6).
phase_times=()
phase_started=$SECONDS
phase_done() {
  phase_times+=("$(printf '%6ds  %s' $((SECONDS - phase_started)) "$1")")
  phase_started=$SECONDS
}
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
bash tests/real-servers/install.sh
phase_done "real MCP servers and clients installed"
export TOOLWARD_REAL_SERVERS="$PWD/tests/real-servers/.installed"
# The PostgreSQL store's tests (tests/all/store_contract.rs, tests/all/fleet.rs) use
# TOOLWARD_TEST_DATABASE_URL; without one, a throwaway server is started when PostgreSQL's
# binaries are installed (`.ci/run` installs Debian's `postgresql`).
stop_services=()
stop_all() {
  for service in "${stop_services[@]}"; do
    bash "scripts/$service.sh" stop || true
  done
  echo "== scripts/test.sh, time per phase (wall seconds)"
  printf '%s\n' "${phase_times[@]}"
}
trap stop_all EXIT
if [ -z "${TOOLWARD_TEST_DATABASE_URL:-}" ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  eval "$(bash scripts/postgres.sh start)"
  stop_services+=(postgres)
fi
# The OCI registry tests (tests/all/oci.rs) push to and pull from TOOLWARD_TEST_REGISTRY;
# without one, a throwaway registry is started when Debian's `docker-registry` is installed
# (`.ci/run` installs it).
if [ -z "${TOOLWARD_TEST_REGISTRY:-}" ] && [ -x /usr/bin/docker-registry ]; then
  eval "$(bash scripts/registry.sh start)"
  stop_services+=(registry)
fi
# The binary first: the CLI tests (tests/all/policy_kit.rs) and the client tests run it.
# Built in one invocation with the tests, so its dependencies are built once with the
# features the tests' dev-dependencies unify (`cargo build -p toolward` alone would build
# wasmtime a second time with other features).
cargo build -q --workspace --bins --tests
phase_done "cargo build (binaries and tests)"
export TOOLWARD_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/toolward"
cargo test --workspace
phase_done "cargo test --workspace"

# Acceptance with real MCP clients (tests/clients/): the Python `mcp` client library and the
# MCP Inspector's CLI each start `toolward serve` on a temp copy of examples/mcp.
clients_failed=0
echo "== acceptance: Python mcp client (tests/clients/test_acceptance.py)"
"$TOOLWARD_REAL_SERVERS/venv/bin/python" tests/clients/test_acceptance.py || clients_failed=1
phase_done "test_acceptance.py"
echo "== acceptance: MCP Inspector CLI (tests/clients/inspector.py)"
"$TOOLWARD_REAL_SERVERS/venv/bin/python" tests/clients/inspector.py || clients_failed=1
phase_done "inspector.py"
echo "== acceptance: data flow, Python mcp client (tests/clients/test_data_flow.py)"
"$TOOLWARD_REAL_SERVERS/venv/bin/python" tests/clients/test_data_flow.py || clients_failed=1
phase_done "test_data_flow.py"
echo "== acceptance: the web console in Chromium, with a real client (tests/clients/test_console_browser.py)"
"$TOOLWARD_REAL_SERVERS/browser-venv/bin/python" tests/clients/test_console_browser.py || clients_failed=1
phase_done "test_console_browser.py"
# The Python package (python/): its wheel built by maturin with the development profile (not
# the release profile's fat LTO) in the same target folder, so the dependencies compiled
# above are reused, installed in the clients' venv (which has the `mcp` library), and its
# tests run by pytest against the real filesystem server.
echo "== python: the wheel (maturin, dev profile), then pytest (python/tests)"
venv="$TOOLWARD_REAL_SERVERS/venv"
wheels="${CARGO_TARGET_DIR:-$PWD/target}/wheels"
rm -f "$wheels"/toolward-*.whl
if "$venv/bin/maturin" build --quiet --profile dev --auditwheel skip \
  --interpreter "$venv/bin/python" -m python/Cargo.toml -o "$wheels"; then
  phase_done "python wheel (maturin build --profile dev)"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheels"/toolward-*.whl
  "$venv/bin/python" -m pytest -q python/tests || clients_failed=1
  phase_done "pytest python/tests"
else
  clients_failed=1
  phase_done "python wheel (maturin build --profile dev): FAILED"
fi
if [ "$clients_failed" -ne 0 ]; then
  echo "acceptance with real clients or the Python package: FAILED" >&2
  exit 1
fi
