"""Measures what toolward adds to an allowed call (not run by the tests).

The same call, `read_text_file {"path": "hello.txt"}`, made N times over one session with
the Python `mcp` client library (stdio_client + ClientSession):

- direct: to @modelcontextprotocol/server-filesystem itself (node, the temp sandbox);
- gateway: to `fs__read_text_file` through `toolward serve` on a temp copy of examples/mcp,
  with the example's `audit.sync: always` (the decision record is fsynced before the call
  is forwarded), and again with `audit.sync: none`.

Each run makes WARMUP calls first (not counted). Prints p50, p90, p99, mean and max in
milliseconds, and the gateway's added p50/p99 over direct. Build first (`cargo build -p
toolward`, or `--release` and TOOLWARD_BIN=target/release/toolward), then:

    tests/real-servers/.installed/venv/bin/python tests/clients/measure_overhead.py [N]
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import HELLO, SERVER_FS, TOOLWARD, Example, example_copy  # noqa: E402

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

WARMUP = 20


async def timed_calls(server: StdioServerParameters, tool: str, n: int, errlog) -> list[float]:
    async with stdio_client(server, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=30) as session:
            await session.initialize()
            await session.list_tools()
            times = []
            for i in range(WARMUP + n):
                start = time.perf_counter()
                result = await session.call_tool(tool, {"path": "hello.txt"})
                elapsed = time.perf_counter() - start
                if result.is_error or HELLO.strip() not in result.content[0].text:
                    raise RuntimeError(f"{tool}: unexpected result {result}")
                if i >= WARMUP:
                    times.append(elapsed * 1000)
            return times


def percentile(sorted_ms: list[float], p: float) -> float:
    # nearest rank
    k = max(0, min(len(sorted_ms) - 1, round(p / 100 * len(sorted_ms) + 0.5) - 1))
    return sorted_ms[k]


def summary(name: str, ms: list[float]) -> dict:
    s = sorted(ms)
    row = {
        "p50": percentile(s, 50),
        "p90": percentile(s, 90),
        "p99": percentile(s, 99),
        "mean": statistics.fmean(s),
        "max": s[-1],
    }
    print(f"{name:<30} n={len(s):<4} " + "  ".join(f"{k} {v:7.3f}" for k, v in row.items()) + "  (ms)", flush=True)
    return row


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print(f"toolward {TOOLWARD}", flush=True)
    print(f"server   {SERVER_FS}", flush=True)
    print(f"{n} calls of read_text_file each over one session, after {WARMUP} warm-up calls\n", flush=True)
    copies: list[Example] = []
    rows = {}
    try:
        direct_copy = example_copy("toolward-measure-")
        copies.append(direct_copy)
        with open(os.devnull, "w") as devnull:
            direct = StdioServerParameters(command="node", args=[str(SERVER_FS), str(direct_copy.sandbox)],
                                           cwd=str(direct_copy.folder))
            rows["direct"] = summary("direct (server-filesystem)", asyncio.run(
                timed_calls(direct, "read_text_file", n, devnull)))
            for sync in ("always", "none"):
                ex = example_copy("toolward-measure-", audit_sync=sync)
                copies.append(ex)
                argv = ex.serve_argv()
                gw = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(ex.folder))
                rows[sync] = summary(f"gateway (audit.sync {sync})", asyncio.run(
                    timed_calls(gw, "fs__read_text_file", n, devnull)))
    finally:
        for ex in copies:
            ex.cleanup()
    print()
    for sync in ("always", "none"):
        print(f"added by the gateway (audit.sync {sync}): "
              f"p50 {rows[sync]['p50'] - rows['direct']['p50']:+.3f} ms, "
              f"p99 {rows[sync]['p99'] - rows['direct']['p99']:+.3f} ms", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
