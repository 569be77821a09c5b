"""Captures the raw `tools/list` result text of each real reference server into
benches/data/<server>.json, for `benches/canonical.rs` and `benches/load.rs`.

Each file holds the exact bytes of the `result` object the server sent (first page; these
servers list every tool on one page), cut out of its JSON-RPC line without re-encoding, so
key order, whitespace and number spellings are the server's own. Run once after
`tests/real-servers/install.sh` (the servers' versions are pinned there):

    python3 benches/data/capture.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path(os.environ.get("TOOLWARD_REAL_SERVERS", HERE.parent.parent / "tests/real-servers/.installed"))


def node(package: str) -> str:
    return str(ROOT / "node_modules/@modelcontextprotocol" / package / "dist/index.js")


def result_text(line: str) -> str:
    """The exact text of the top-level `result` member of one JSON-RPC message."""
    decoder = json.JSONDecoder()
    i = line.index("{") + 1
    while True:
        while line[i] in " \t\r\n,":
            i += 1
        key, i = decoder.raw_decode(line, i)
        while line[i] in " \t\r\n:":
            i += 1
        start = i
        _, i = decoder.raw_decode(line, i)
        if key == "result":
            return line[start:i]
        while line[i] in " \t\r\n":
            i += 1
        if line[i] != ",":
            raise ValueError("no `result` in the answer")


def capture(name: str, argv: list[str], env: dict[str, str], cwd: str) -> None:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env={**os.environ, **env}, cwd=cwd,
                            text=True, encoding="utf-8")
    assert proc.stdin and proc.stdout

    def send(message: dict) -> None:
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def answer(request_id: int) -> str:
        for line in proc.stdout:
            message = json.loads(line)
            if message.get("id") == request_id:
                return line
        raise RuntimeError(f"{name}: closed before answering")

    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "toolward-capture", "version": "0"}}})
    answer(1)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
    text = result_text(answer(2))
    if json.loads(text).get("nextCursor"):
        raise RuntimeError(f"{name}: more than one page; capture the others too")
    proc.stdin.close()
    proc.wait(timeout=10)
    (HERE / f"{name}.json").write_text(text, encoding="utf-8")
    print(f"{name}: {len(json.loads(text)['tools'])} tools, {len(text.encode())} bytes")


def main() -> int:
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["git", "init", "--quiet", work], check=True)
        servers = {
            "filesystem": (["node", node("server-filesystem"), work], {}),
            "everything": (["node", node("server-everything"), "stdio"], {}),
            "memory": (["node", node("server-memory")], {"MEMORY_FILE_PATH": f"{work}/memory.jsonl"}),
            # The time server writes the machine's time zone into its descriptions.
            "time": ([str(ROOT / "venv/bin/mcp-server-time")], {"TZ": "UTC"}),
            "git": ([str(ROOT / "venv/bin/mcp-server-git"), "--repository", work], {}),
        }
        for name, (argv, env) in servers.items():
            capture(name, argv, env, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
