#!/usr/bin/env bash
# Runs every test: installs the real MCP servers the end-to-end tests use (npm, PyPI;
# pinned versions), then `cargo test --workspace`. Works on a fresh machine with Rust,
# Node.js and Python.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
bash tests/real-servers/install.sh
export TOOLWARD_REAL_SERVERS="$PWD/tests/real-servers/.installed"
cargo test --workspace
