"""A stdlib-only MCP echo server over stdio, for `cargo bench --bench gateway -- python`.

One tool, `echo`, whose result is one text block holding its arguments as JSON. Reads one
JSON-RPC message a line from standard input and writes each answer as one line, flushed
(one `write`), as a small Python server does. No dependency beyond the standard library, so
the cost measured is the protocol's, not an SDK's.
"""

import json
import sys

ECHO = {
    "name": "echo",
    "description": "Echoes its arguments.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    },
}


def main() -> None:
    out = sys.stdout
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        method = message.get("method")
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "python-echo", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [ECHO]}
        elif method == "tools/call":
            arguments = message["params"].get("arguments", {})
            result = {"content": [{"type": "text", "text": json.dumps(arguments)}]}
        elif method == "ping":
            result = {}
        else:
            answer = {"jsonrpc": "2.0", "id": message["id"],
                      "error": {"code": -32601, "message": "method not found"}}
            out.write(json.dumps(answer) + "\n")
            out.flush()
            continue
        out.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
