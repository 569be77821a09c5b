#!/usr/bin/env bash
# Installs the real MCP servers the end-to-end tests run, at the versions their pinned
# manifests were taken from (a new release would change the listings), and the real MCP
# clients the acceptance tests in tests/clients/ drive (the MCP Inspector's CLI, the Python
# `mcp` client library), into tests/real-servers/.installed (ignored by git). Idempotent: a
# second run checks and exits.
#
# After it: node_modules/.bin style paths are written to tests/real-servers/.installed/env,
# which the tests read (TOOLWARD_REAL_SERVERS points at the folder).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest="$here/.installed"
mkdir -p "$dest"
stamp="$dest/.stamp-v3"
# PyPI: a real OTLP/HTTP receiver the telemetry test reads spans and metrics back from
# (tests/all/telemetry.rs), in a venv of its own; installed apart from the stamp below so
# that an existing installation gains it.
if [ ! -x "$dest/otel-venv/bin/python" ] || ! "$dest/otel-venv/bin/python" -c 'import oteltap' 2>/dev/null; then
  python3 -m venv "$dest/otel-venv"
  "$dest/otel-venv/bin/pip" install --quiet --disable-pip-version-check oteltap==1.0.0
fi
# npm: jco and componentize-js, which build the JavaScript policy components
# (examples/js-policy/, tests/all/js_policy.rs), at the versions that example's package-lock.json
# pins; installed apart from the stamp, and again whenever that lock file changes.
js="$dest/js-toolchain"
if ! cmp -s "$here/../../examples/js-policy/package-lock.json" "$js/package-lock.json" \
  || [ ! -x "$js/node_modules/.bin/jco" ]; then
  rm -rf "$js"
  mkdir -p "$js"
  cp "$here/../../examples/js-policy/package.json" "$here/../../examples/js-policy/package-lock.json" "$js/"
  (cd "$js" && npm ci --no-audit --no-fund --loglevel=error)
  # `npm ci` takes the lock file's versions. The guide's JavaScript chapter runs
  # `npm install` with no lock file (offline in tests/all/js_policy.rs), which resolves the
  # newest matching versions and needs their metadata and tarballs in npm's cache: install
  # the same package.json once online, without its scripts, so that test does not depend on
  # another npm run having filled the cache before it.
  resolve="$(mktemp -d)"
  cp "$here/../../examples/js-policy/package.json" "$resolve/"
  (cd "$resolve" && npm install --ignore-scripts --no-audit --no-fund --loglevel=error)
  rm -rf "$resolve"
fi
# PyPI: componentize-py, pinned, which builds the Python policy example
# (examples/python-policy) and the hostile Python guests (tests/all/python_policy.rs), in a
# venv of its own; installed apart from the stamp below, as the receiver above.
if [ ! -x "$dest/componentize-venv/bin/componentize-py" ]; then
  python3 -m venv "$dest/componentize-venv"
  "$dest/componentize-venv/bin/pip" install --quiet --disable-pip-version-check componentize-py==0.25.1
fi
# npm: the MCP TypeScript SDK, pinned, whose example server `simpleStreamableHttp` with
# `--oauth` runs an in-process demo authorization server (metadata, dynamic client
# registration, PKCE, an authorize endpoint that redirects back without a login page): the
# upstream of the sign-in test (tests/all/oauth.rs). In a folder of its own and apart from
# the stamp below, so that an existing installation gains it; again when the pin changes.
sdk="$dest/oauth-sdk"
sdk_version=1.32.2
if ! grep -qs "\"version\": \"$sdk_version\"" "$sdk/node_modules/@modelcontextprotocol/sdk/package.json" \
  || [ ! -f "$sdk/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js" ]; then
  mkdir -p "$sdk"
  [ -f "$sdk/package.json" ] || echo '{"private": true}' > "$sdk/package.json"
  (cd "$sdk" && npm install --no-audit --no-fund --loglevel=error --save-exact \
    "@modelcontextprotocol/sdk@$sdk_version")
fi
# npm: `oidc-provider`, pinned, a certified OpenID provider library: the real authorization
# server of the listener's OAuth tests (tests/all/listen_oauth.rs), configured by
# tests/real-servers/oidc/provider.mjs, which the tests copy beside a link to this
# node_modules. In a folder of its own and apart from the stamp below; again when the pin
# changes.
oidc="$dest/oidc-provider"
oidc_version=9.13.3
if ! grep -qs "\"version\": \"$oidc_version\"" "$oidc/node_modules/oidc-provider/package.json"; then
  mkdir -p "$oidc"
  [ -f "$oidc/package.json" ] || echo '{"private": true}' > "$oidc/package.json"
  (cd "$oidc" && npm install --no-audit --no-fund --loglevel=error --save-exact \
    "oidc-provider@$oidc_version")
fi
# Debian's Chromium and its WebDriver (`/usr/bin/chromium`, `/usr/bin/chromedriver`), and
# PyPI's Selenium, pinned, in a venv of its own: the real browser of the console's test
# (tests/clients/test_console_browser.py). Selenium is given the driver's path, so it
# downloads nothing. Apart from the stamp below, so that an existing installation gains it.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
  else
    echo "install Debian's chromium and chromium-driver (as root) for the console's browser test" >&2
  fi
fi
if [ ! -x "$dest/browser-venv/bin/python" ] || ! "$dest/browser-venv/bin/python" -c 'import selenium' 2>/dev/null; then
  python3 -m venv "$dest/browser-venv"
  "$dest/browser-venv/bin/pip" install --quiet --disable-pip-version-check selenium==4.50.0
fi
# PyPI: maturin, which builds the Python package's wheel (python/, `scripts/test.sh`), and
# pytest, which runs its tests (python/tests), pinned, in the clients' venv (the `mcp`
# library below is what those tests swap `ToolwardSession` for); installed apart from the
# stamp, so that an existing installation gains them.
if [ ! -x "$dest/venv/bin/maturin" ] || ! "$dest/venv/bin/python" -c 'import pytest' 2>/dev/null; then
  [ -x "$dest/venv/bin/python" ] || python3 -m venv "$dest/venv"
  "$dest/venv/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0 pytest==9.2.0
fi
if [ -f "$stamp" ]; then
  echo "real servers already installed in $dest"
  exit 0
fi
# npm: the reference servers (TypeScript).
(cd "$dest" && [ -f package.json ] || echo '{"private": true}' > "$dest/package.json")
(cd "$dest" && npm install --no-audit --no-fund --loglevel=error \
  @modelcontextprotocol/server-filesystem@2026.8.31 \
  @modelcontextprotocol/server-everything@2026.8.31 \
  @modelcontextprotocol/server-memory@2026.8.31)
# npm: the MCP Inspector, whose CLI mode (node_modules/.bin/mcp-inspector --cli) the
# acceptance tests drive (tests/clients/inspector.sh).
(cd "$dest" && npm install --no-audit --no-fund --loglevel=error --save-exact \
  @modelcontextprotocol/inspector@2.12.0)
# PyPI: the reference servers (Python), in a virtual environment of their own.
python3 -m venv "$dest/venv"
"$dest/venv/bin/pip" install --quiet --disable-pip-version-check \
  mcp-server-time==2026.10.19 mcp-server-git==2026.10.19 \
  mcp-server-fetch==2026.10.24 \
  mcp==2.3.0
# The Python client library (`mcp`, pinned above, in the same venv) drives
# tests/clients/test_acceptance.py.
touch "$stamp"
echo "real servers installed in $dest"
