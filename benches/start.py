"""Start: `toolward check` wall time on examples/mcp (the filesystem server) with the
compiled-component cache cold and warm, beside the server's own start, interleaved round by
round so that a shared machine's load hits every case alike.

Cases, each round in this order:
- `server alone`: node running @modelcontextprotocol/server-filesystem on the example's
  sandbox, fed `initialize`, `notifications/initialized` and `tools/list` on stdin, to its
  exit at end of input (what `check` asks of it, without toolward);
- `check warm`: `toolward check --config examples/mcp/toolward.json`, cache filled;
- `check cold`: the same after deleting the cache (`examples/mcp/state/components`);
- `check warm, fake server`: the same check (rules, manifest, cache warm) of a config whose
  `fs` is `toolward-fake-server` answering the filesystem server's identity and captured
  listing (`benches/data/filesystem.json`): a server that starts in about a millisecond, so
  this is toolward's own start;
- `binary start`: `toolward --version` (loading the binary, no work).

Prints per case the median and the quartiles in ms, and the median over rounds of
`check − server alone`. Build first: `cargo build --release -p toolward --bin toolward` and
`cargo build --release --bin toolward-fake-server`, then

    python3 benches/start.py [ROUNDS]

(hyperfine runs one command's runs back to back, so a load change between commands
shows up as a difference between them; hence this loop.)
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples/mcp"
TOOLWARD = os.environ.get("TOOLWARD_BIN", str(ROOT / "target/release/toolward"))
FAKE = ROOT / "target/release/toolward-fake-server"
SERVER = ROOT / "tests/real-servers/.installed/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
REQUESTS = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"start","version":"0"}}}\n'
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
    b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}\n'
)


def timed(argv: list[str], stdin: bytes = b"") -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, cwd=EXAMPLE, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited with {done.returncode}")
    return elapsed


def fake_config(folder: Path) -> Path:
    """The example's config, rules and manifest with `fs` played by the fake server."""
    scenario = folder / "fs.scenario.json"
    scenario.write_text(json.dumps({
        "server_info": {"name": "secure-filesystem-server", "version": "0.2.0"},
        "protocol_version": "2025-11-25",
        "pages": [(ROOT / "benches/data/filesystem.json").read_text()],
    }))
    config = folder / "toolward.json"
    config.write_text(json.dumps({
        "mcpServers": {"fs": {"command": str(FAKE), "args": [str(scenario)]}},
        "rules": {"file": str(EXAMPLE / "rules.json")},
        "manifest": str(EXAMPLE / "manifest.json"),
        "state_dir": str(folder / "state"),
    }))
    return config


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    check = [TOOLWARD, "check", "--config", "toolward.json"]
    names = ("server alone", "check warm", "check cold", "check warm, fake server",
             "binary start")
    times: dict[str, list[float]] = {k: [] for k in names}
    folder = Path(tempfile.mkdtemp(prefix="toolward-start-"))
    fake_check = [TOOLWARD, "check", "--config", str(fake_config(folder))]
    timed(check)  # fills the caches
    timed(fake_check)
    for _ in range(rounds):
        times["server alone"].append(timed(["node", str(SERVER), "sandbox"], REQUESTS))
        times["check warm"].append(timed(check))
        shutil.rmtree(EXAMPLE / "state/components", ignore_errors=True)
        times["check cold"].append(timed(check))
        times["check warm, fake server"].append(timed(fake_check))
        times["binary start"].append(timed([TOOLWARD, "--version"]))
    shutil.rmtree(folder, ignore_errors=True)
    print(f"{rounds} rounds, ms: median (quartiles)")
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        print(f"  {name:<24} {statistics.median(values):8.1f}  ({q[0]:.1f} – {q[2]:.1f})")
    for name in ("check warm", "check cold"):
        own = [c - s for c, s in zip(times[name], times["server alone"])]
        ratio = [c / s for c, s in zip(times[name], times["server alone"])]
        print(f"  {name} − server alone: median {statistics.median(own):.1f} ms;"
              f" ratio median {statistics.median(ratio):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
