"""One call through `toolward serve` by a real MCP client (the Python `mcp` library), for the
console's browser test: prints the result as one JSON line (`is_error`, `text`).

    venv/bin/python tests/clients/console_client.py CONFIG TOOL ARGUMENTS_JSON

The client declares no elicitation capability, so a held call waits in the state folder's
queue, where the console shows it.
"""

from __future__ import annotations

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client

CALL_TIMEOUT_S = 90


async def main(config: str, tool: str, arguments: dict, toolward: str) -> None:
    server = StdioServerParameters(command=toolward, args=["serve", "--config", config])
    async with stdio_client(server, errlog=sys.stderr) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=None) as session:
            await session.initialize()
            result = await session.call_tool(tool, arguments, read_timeout_seconds=None)
            text = "\n".join(getattr(c, "text", "") for c in result.content)
            print(json.dumps({"is_error": bool(result.is_error), "text": text}), flush=True)


if __name__ == "__main__":
    asyncio.run(
        asyncio.wait_for(
            main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]), CALL_TIMEOUT_S
        )
    )
