#!/usr/bin/env bash
# A throwaway OCI registry for the tests: Debian's `docker-registry` (the CNCF distribution
# registry), storing blobs in a temporary folder, serving plain HTTP on 127.0.0.1 at a free
# port, without authentication.
#
#   eval "$(bash scripts/registry.sh start)"   # exports TOOLWARD_TEST_REGISTRY=127.0.0.1:PORT
#                                              # and TOOLWARD_TEST_REGISTRY_DIR (its storage,
#                                              # which tests alter to play a hostile registry)
#   bash scripts/registry.sh stop              # stops it and removes the folder
#   bash scripts/registry.sh ready             # waits (30 s at most) until it answers /v2/
#
# The folder is $TOOLWARD_REGISTRY_DIR (default: $TMPDIR or /tmp, `toolward-registry`). The
# binary: $TOOLWARD_REGISTRY_BIN, else /usr/bin/docker-registry, else `registry` on PATH.
# No auth and plain HTTP on loopback: a test registry, reached by nothing but this machine.
set -euo pipefail

dir="${TOOLWARD_REGISTRY_DIR:-${TMPDIR:-/tmp}/toolward-registry}"
bin="${TOOLWARD_REGISTRY_BIN:-}"
if [ -z "$bin" ]; then
  if [ -x /usr/bin/docker-registry ]; then
    bin=/usr/bin/docker-registry
  else
    bin="$(command -v registry 2>/dev/null || true)"
  fi
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "registry.sh: no registry found (install Debian's \`docker-registry\` or set TOOLWARD_REGISTRY_BIN)" >&2
  exit 2
fi

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

answers() {
  python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/", timeout=1) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

running() {
  [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null
}

wait_ready() {
  local port
  port="$(cat "$dir/port")"
  for _ in $(seq 300); do
    if answers "$port"; then return 0; fi
    if ! running; then break; fi
    sleep 0.1
  done
  echo "registry.sh: the registry in $dir does not answer on 127.0.0.1:$port" >&2
  cat "$dir/registry.log" >&2 || true
  return 1
}

case "${1:-}" in
  start)
    if [ -f "$dir/port" ] && running; then
      echo "export TOOLWARD_TEST_REGISTRY='127.0.0.1:$(cat "$dir/port")'"
      echo "export TOOLWARD_TEST_REGISTRY_DIR='$dir'"
      exit 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir/storage"
    chmod 700 "$dir"
    port="$(free_port)"
    echo "$port" >"$dir/port"
    # Deletes allowed so a test can make a registry lose a blob; no `auth` section: anyone on
    # this machine may push, which is what a test registry on loopback is for.
    cat >"$dir/config.yml" <<EOF
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
  headers:
    X-Content-Type-Options: [nosniff]
EOF
    # Detached from the caller's process group and standard streams: `eval "$(...)"` waits
    # for the output to close, and a caller's Ctrl-C should not reach it.
    setsid "$bin" serve "$dir/config.yml" </dev/null >"$dir/registry.log" 2>&1 &
    echo $! >"$dir/pid"
    wait_ready
    echo "export TOOLWARD_TEST_REGISTRY='127.0.0.1:$port'"
    echo "export TOOLWARD_TEST_REGISTRY_DIR='$dir'"
    ;;
  stop)
    if running; then
      pid="$(cat "$dir/pid")"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
      done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
    ;;
  ready)
    wait_ready
    ;;
  *)
    echo "usage: $0 start|stop|ready" >&2
    exit 2
    ;;
esac
