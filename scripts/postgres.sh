#!/usr/bin/env bash
# A throwaway PostgreSQL for the tests: `initdb` into a temporary folder as a non-root user,
# listening on 127.0.0.1 at a free port and on a Unix socket in that folder.
#
#   eval "$(bash scripts/postgres.sh start)"   # exports TOOLWARD_TEST_DATABASE_URL
#   bash scripts/postgres.sh stop              # stops it and removes the folder
#   bash scripts/postgres.sh pause|resume      # stops it / starts it again, same port
#   bash scripts/postgres.sh run               # after `start` + `pause`: the server in the
#                                              # foreground, a child of the caller
#   bash scripts/postgres.sh ready             # waits (30 s at most) until it takes connections
#
# The folder is $TOOLWARD_PG_DIR (default: $TMPDIR or /tmp, `toolward-pg`). PostgreSQL
# refuses to run as root, so as root (CI) the server runs as the `postgres` system user
# Debian's package creates. Authentication is `trust` on 127.0.0.1 only: a test database.
# The binaries: $TOOLWARD_PG_BIN, else Debian's /usr/lib/postgresql/<newest>/bin, else PATH.
set -euo pipefail

dir="${TOOLWARD_PG_DIR:-${TMPDIR:-/tmp}/toolward-pg}"
bin="${TOOLWARD_PG_BIN:-}"
if [ -z "$bin" ]; then
  bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
fi
if [ -z "$bin" ]; then
  bin="$(dirname "$(command -v initdb 2>/dev/null || echo /nonexistent/initdb)")"
fi
if [ ! -x "$bin/initdb" ]; then
  echo "postgres.sh: no initdb found (install Debian's \`postgresql\` or set TOOLWARD_PG_BIN)" >&2
  exit 2
fi

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_server() {
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-p $1 -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" \
    start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
}

case "${1:-}" in
  start)
    if [ -f "$dir/url" ] && as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
      echo "export TOOLWARD_TEST_DATABASE_URL='$(cat "$dir/url")'"
      exit 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres: "$dir"
    fi
    chmod 700 "$dir"
    port="$(free_port)"
    as_owner "$bin/initdb" -D "$dir/data" -U toolward -A trust --no-sync >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    echo "$port" >"$dir/port"
    # A caller that reaps orphans (the test binary is a child subreaper) may end the server
    # pg_ctl daemonized before createdb reaches it: start it again, at most three times.
    for attempt in 1 2 3; do
      start_server "$port"
      if as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U toolward toolward; then
        break
      fi
      if [ "$attempt" -eq 3 ] || as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then
        echo "postgres.sh: createdb failed (server log: $dir/server.log)" >&2
        exit 1
      fi
    done
    url="postgres://toolward@127.0.0.1:$port/toolward"
    echo "$url" >"$dir/url.tmp" && mv "$dir/url.tmp" "$dir/url"
    echo "export TOOLWARD_TEST_DATABASE_URL='$url'"
    ;;
  stop)
    if [ -d "$dir/data" ]; then
      as_owner "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  url)
    cat "$dir/url"
    ;;
  pause)
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null; then
      # Already gone: a caller that reaps orphans (the test binary is a child subreaper) may
      # have ended the server `start` daemonized. Stopped is what was asked.
      ! as_owner "$bin/pg_ctl" -D "$dir/data" status >/dev/null 2>&1
    fi
    ;;
  resume)
    start_server "$(cat "$dir/port")"
    ;;
  run)
    # For a caller that is a child subreaper (the test binary, as toolward is): a server that
    # pg_ctl daemonizes is reparented to it and taken for a server's orphan; one that stays
    # its descendant is not. Stops on SIGINT (PostgreSQL's fast shutdown).
    port="$(cat "$dir/port")"
    if [ "$(id -u)" -eq 0 ]; then
      exec runuser -u postgres -- "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
        -c listen_addresses=127.0.0.1 -c max_connections=200 >>"$dir/server.log" 2>&1
    fi
    exec "$bin/postgres" -D "$dir/data" -p "$port" -k "$dir" \
      -c listen_addresses=127.0.0.1 -c max_connections=200 >>"$dir/server.log" 2>&1
    ;;
  ready)
    for _ in $(seq 300); do
      if "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$dir/port")"; then exit 0; fi
      sleep 0.1
    done
    echo "postgres.sh: the server in $dir is not ready after 30 s" >&2
    cat "$dir/server.log" >&2
    exit 1
    ;;
  *)
    echo "usage: $0 start|stop|url|pause|resume|run|ready" >&2
    exit 2
    ;;
esac
