"""The Python `mcp` SDK's stdio client, timing sequential `tools/call`s, for
`cargo bench --bench gateway -- python`.

    python mcp_client.py WARMUP CALLS TOOL -- COMMAND [ARG...]

Starts COMMAND with `stdio_client`, initializes a `ClientSession`, lists the tools, makes
WARMUP untimed calls of TOOL with `{"text": "hello"}`, then CALLS timed ones, one at a time,
checking each is an echo. Prints one line of JSON: the latencies in microseconds, in order,
and the CPU time COMMAND's process (not its children) used per timed call, in microseconds,
from /proc (its own child: `stdio_client` does not hand out the process).
"""

import asyncio
import json
import os
import sys
import time

TICK_US = 1e6 / os.sysconf("SC_CLK_TCK")


def child_cpu_ticks() -> int:
    """utime + stime of this process's children (the server it started), in clock ticks."""
    total = 0
    for tid in os.listdir(f"/proc/{os.getpid()}/task"):
        with open(f"/proc/{os.getpid()}/task/{tid}/children") as f:
            for pid in f.read().split():
                with open(f"/proc/{pid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
    return total

from mcp import ClientSession, StdioServerParameters, stdio_client


async def run(warmup: int, calls: int, tool: str, argv: list[str]) -> None:
    server = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with stdio_client(server, errlog=sys.stderr) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            latencies = []
            ticks = 0
            for i in range(warmup + calls):
                if i == warmup:
                    ticks = child_cpu_ticks()
                start = time.perf_counter_ns()
                result = await session.call_tool(tool, {"text": "hello"})
                elapsed = time.perf_counter_ns() - start
                if result.is_error or "hello" not in result.content[0].text:
                    raise RuntimeError(f"{tool}: not an echo: {result}")
                if i >= warmup:
                    latencies.append(elapsed / 1000)
            cpu_us = (child_cpu_ticks() - ticks) * TICK_US / max(calls, 1)
            print(json.dumps({"latencies_us": latencies, "cpu_us_per_call": cpu_us}), flush=True)


def main() -> None:
    warmup, calls, tool = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    assert sys.argv[4] == "--"
    asyncio.run(run(warmup, calls, tool, sys.argv[5:]))


if __name__ == "__main__":
    main()
