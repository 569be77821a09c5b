#!/usr/bin/env bash
# The library's public surface, checked: rustdoc (JSON, so `RUSTC_BOOTSTRAP=1` on the stable
# toolchain; no second toolchain exists here) documents the `toolward` crate with default
# features, every intra-doc link resolved (warnings denied), and the listing of what lib.rs
# re-exports is compared with host/public-api.txt. `--update` rewrites that file instead.
set -euo pipefail
cd "$(dirname "$0")/.."
RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="-D warnings -Z unstable-options --output-format json" \
  cargo doc -q --no-deps -p toolward
json="${CARGO_TARGET_DIR:-$PWD/target}/doc/toolward.json"
if [ "${1:-}" = "--update" ]; then
  python3 scripts/public-api.py "$json" > host/public-api.txt
  echo "host/public-api.txt: $(grep -vc '^    ' host/public-api.txt) items"
else
  if ! python3 scripts/public-api.py "$json" | diff -u host/public-api.txt -; then
    echo "the public surface changed: if that is meant, run scripts/public-api.sh --update and say why in the commit" >&2
    exit 1
  fi
  echo "public surface unchanged: $(grep -vc '^    ' host/public-api.txt) items"
fi
