#!/usr/bin/env bash
# The main job, visibly: toolward in front of the real MCP filesystem server with the
# example rules (examples/mcp). Installs the server from npm if missing, builds toolward,
# shows the load report, then makes calls through the whole path.
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || true
bash tests/real-servers/install.sh >/dev/null
cargo build -q -p toolward
tw="$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/debug/toolward"
cfg=examples/mcp/toolward.json
rm -rf examples/mcp/state
printf 'Hello from the toolward sandbox.\n' > examples/mcp/sandbox/hello.txt
rm -f examples/mcp/sandbox/notes.txt

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

step toolward check --config "$cfg"
"$tw" check --config "$cfg" || true

step toolward call fs__read_text_file '{"path": "hello.txt"}'
"$tw" call --config "$cfg" fs__read_text_file --args '{"path": "hello.txt"}'

step toolward call fs__edit_file '(dryRun is fixed to true: a preview, nothing written)'
"$tw" call --config "$cfg" fs__edit_file \
  --args '{"path": "hello.txt", "edits": [{"oldText": "Hello", "newText": "Goodbye"}]}'

step toolward call fs__edit_file '{... "dryRun": false}   (sets a fixed parameter: refused)'
"$tw" call --config "$cfg" fs__edit_file \
  --args '{"path": "hello.txt", "edits": [], "dryRun": false}' || true

step toolward call fs__write_file '(held for approval; answered "n")'
echo n | "$tw" call --config "$cfg" fs__write_file \
  --args '{"path": "notes.txt", "content": "written through toolward\n"}' || true
test ! -e examples/mcp/sandbox/notes.txt && echo "(sandbox/notes.txt was not written)"

step toolward call fs__write_file '(held for approval; answered "y")'
echo y | "$tw" call --config "$cfg" fs__write_file \
  --args '{"path": "notes.txt", "content": "written through toolward\n"}'
echo "sandbox/notes.txt now holds: $(cat examples/mcp/sandbox/notes.txt)"

step toolward audit verify examples/mcp/state/audit.jsonl
"$tw" audit verify examples/mcp/state/audit.jsonl

cat <<TXT

To put it in front of your MCP client, point the client at:
  $tw serve --config $(pwd)/$cfg
TXT
