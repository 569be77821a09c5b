"""Confinement's cost at start: `toolward check` of the example (the real filesystem server,
node) with the server unconfined, confined by Landlock alone, and confined by the namespaces
and Landlock (the default), interleaved round by round so that a shared machine's load hits
every case alike. `check` starts the server, lists its tools and closes it: the start a
gateway pays at load and at each restart.

Issue 27's target: confined (the default) ≤ 1.2× unconfined. Prints per case the median and
quartiles in ms, and the median over rounds of each confined case's ratio to the unconfined
one of the same round. Build first (`cargo build --release -p toolward --bin toolward`, or
point `TOOLWARD_BIN` at a debug build) and install the real servers
(`tests/real-servers/install.sh`), then

    python3 benches/confine.py [ROUNDS]
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
SERVER = ROOT / "tests/real-servers/.installed/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"


def config(folder: Path, name: str, confine: dict, server_confine: dict | None) -> Path:
    """The example's config with `confine` (top level) and the server's own, in `folder`."""
    fs: dict = {"command": "node", "args": [str(SERVER), str(EXAMPLE / "sandbox")]}
    if server_confine is not None:
        fs["confine"] = server_confine
    path = folder / f"{name}.json"
    path.write_text(json.dumps({
        "mcpServers": {"fs": fs},
        "rules": {"file": str(EXAMPLE / "rules.json")},
        "manifest": str(EXAMPLE / "manifest.json"),
        "state_dir": str(folder / "state"),
        "audit": {"file": str(folder / "state/audit.jsonl")},
        "confine": confine,
    }))
    path.chmod(0o644)
    return path


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=EXAMPLE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    elapsed = (time.perf_counter() - start) * 1000
    if done.returncode != 0:
        raise RuntimeError(f"{argv} exited with {done.returncode}: {done.stdout.decode()}"
                           f"{done.stderr.decode()}")
    return elapsed


def main() -> int:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    folder = Path(tempfile.mkdtemp(prefix="toolward-confine-"))
    cases = {
        "unconfined": config(folder, "unconfined", {}, {"unconfined": "the bench's baseline"}),
        "landlock alone": config(folder, "landlock", {"namespaces": False}, None),
        "namespaces + landlock": config(folder, "namespaces", {}, None),
    }
    checks = {name: [TOOLWARD, "check", "--config", str(path)] for name, path in cases.items()}
    for argv in checks.values():
        timed(argv)  # fills the compiled-component cache, warms node's files
    times: dict[str, list[float]] = {name: [] for name in checks}
    for _ in range(rounds):
        for name, argv in checks.items():
            times[name].append(timed(argv))
    shutil.rmtree(folder, ignore_errors=True)
    print(f"{rounds} rounds of `toolward check` (the real filesystem server), ms: median (quartiles)")
    for name, values in times.items():
        q = statistics.quantiles(values, n=4)
        print(f"  {name:<22} {statistics.median(values):8.1f}  ({q[0]:.1f} – {q[2]:.1f})")
    for name in ("landlock alone", "namespaces + landlock"):
        ratio = [c / u for c, u in zip(times[name], times["unconfined"])]
        print(f"  {name} / unconfined: median ratio {statistics.median(ratio):.3f}"
              f" (target ≤ 1.2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
