"""Shared by the real-client acceptance tests in this folder (plain Python, standard library).

- `example_copy()` copies examples/mcp (its configs, rules and pinned manifests)
  into a temp folder with a sandbox and a state directory of its own, and rewrites the
  copied config's server args to absolute paths (the installed server-filesystem, the temp
  sandbox). server-filesystem's listing does not depend on its sandbox path, so the pinned
  manifest still matches.
- `Answerer` is the person at another terminal: a background thread that polls
  `toolward approvals list --json` until a held call shows, then runs
  `toolward approvals approve ID` or `deny ID`.
- `Report` prints one line per check and closes with `N passed, N failed`.

Environment: TOOLWARD_BIN (default target/debug/toolward), TOOLWARD_REAL_SERVERS (default
tests/real-servers/.installed, filled by tests/real-servers/install.sh).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mcp"
INSTALLED = Path(
    os.environ.get("TOOLWARD_REAL_SERVERS", ROOT / "tests" / "real-servers" / ".installed")
).resolve()
TOOLWARD = Path(os.environ.get("TOOLWARD_BIN", ROOT / "target" / "debug" / "toolward")).resolve()
SERVER_FS = (
    INSTALLED / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"
)
INSPECTOR = INSTALLED / "node_modules" / ".bin" / "mcp-inspector"

# The tools examples/mcp/rules.json classifies; every other tool of the server is not shown.
EXPECTED_TOOLS = sorted(
    "fs__" + t
    for t in (
        "read_text_file",
        "list_directory",
        "get_file_info",
        "directory_tree",
        "write_file",
        "edit_file",
    )
)
HELLO = "Hello from the toolward sandbox.\n"


class Example:
    """A temp copy of examples/mcp."""

    def __init__(self, folder: Path, config: str = "toolward.json"):
        self.folder = folder
        self.config = folder / config
        self.sandbox = folder / "sandbox"
        settings = json.loads(self.config.read_text())
        self.state = folder / settings.get("state_dir", "state")
        self.audit = folder / settings.get("audit", {}).get("file", "state/audit.jsonl")

    def toolward(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
        """Runs `toolward ARGS` (an `approvals` subcommand gets `--config` of this copy)."""
        argv = [str(TOOLWARD), *args]
        if args and args[0] == "approvals":
            argv = [str(TOOLWARD), "approvals", "--config", str(self.config), *args[1:]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def serve_argv(self) -> list[str]:
        return [str(TOOLWARD), "serve", "--config", str(self.config)]

    def cleanup(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def example_copy(
    prefix: str, audit_sync: str | None = None, example: Path = EXAMPLE, config: str = "toolward.json"
) -> Example:
    """A temp copy of `example` (examples/mcp by default): its files (configs, rules,
    manifests, Cedar policies), its sandbox (examples/mcp's holds only `hello.txt`), with the
    config named `config` made absolute: the sandbox, and commands and arguments inside
    the installed servers."""
    for path, what in (
        (TOOLWARD, "build it: cargo build -p toolward"),
        (SERVER_FS, "install it: bash tests/real-servers/install.sh"),
    ):
        if not path.exists():
            sys.exit(f"{path} is missing: {what}")
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    for file in example.iterdir():
        if file.is_file() and file.suffix in (".json", ".cedar"):
            shutil.copy(file, folder / file.name)
    ex = Example(folder, config)
    if (example / "sandbox").is_dir():
        shutil.copytree(example / "sandbox", ex.sandbox)
    else:
        ex.sandbox.mkdir()
    if example == EXAMPLE:
        (ex.sandbox / "hello.txt").write_text(HELLO)
    config = json.loads(ex.config.read_text())
    if "$schema" in config:
        config["$schema"] = str((example / config["$schema"]).resolve())
    installed_in_tree = (ROOT / "tests" / "real-servers" / ".installed").resolve()

    def absolute(arg: str) -> str:
        resolved = (example / arg).resolve()
        if resolved == (example / "sandbox").resolve():
            return str(ex.sandbox)
        if resolved.is_relative_to(installed_in_tree):
            return str(INSTALLED / resolved.relative_to(installed_in_tree))
        return arg

    for server in config["mcpServers"].values():
        if "/" in server.get("command", ""):
            server["command"] = absolute(server["command"])
        server["args"] = [absolute(arg) for arg in server.get("args", [])]
    if audit_sync is not None:
        config.setdefault("audit", {})["sync"] = audit_sync
    ex.config.write_text(json.dumps(config, indent=2) + "\n")
    return ex


class Answerer(threading.Thread):
    """Answers the next held call of `tool` that shows in the queue (any id not in `skip`):
    `approve` or `deny`. After `join()`: `pending` (the entry seen), `answer` (the
    completed `toolward approvals approve|deny` process) or `error`."""

    def __init__(self, ex: Example, tool: str, verb: str, skip=(), timeout: float = 30):
        super().__init__(daemon=True)
        self.ex, self.tool, self.verb, self.skip = ex, tool, verb, set(skip)
        self.deadline = time.monotonic() + timeout
        self.pending: dict | None = None
        self.answer: subprocess.CompletedProcess | None = None
        self.error: str | None = None

    def run(self) -> None:
        try:
            while time.monotonic() < self.deadline:
                listed = self.ex.toolward("approvals", "list", "--json")
                if listed.returncode != 0:
                    self.error = f"approvals list exited {listed.returncode}: {listed.stderr}"
                    return
                for entry in json.loads(listed.stdout):
                    if entry.get("exposed_tool") == self.tool and entry["call_id"] not in self.skip:
                        self.pending = entry
                        self.answer = self.ex.toolward("approvals", self.verb, entry["call_id"])
                        return
                time.sleep(0.1)
            self.error = f"no held call of `{self.tool}` showed in `toolward approvals list`"
        except Exception as e:  # noqa: BLE001 - reported as the check's failure
            self.error = f"{type(e).__name__}: {e}"

    def describe(self) -> str:
        if self.error:
            return self.error
        if self.answer is None:
            return "the answerer did not finish"
        return f"approvals {self.verb} exited {self.answer.returncode}: {self.answer.stdout.strip()} {self.answer.stderr.strip()}"

    def answered(self) -> bool:
        return self.answer is not None and self.answer.returncode == 0


class Report:
    def __init__(self, title: str):
        self.title = title
        self.passed = 0
        self.failed = 0
        # Put before each check's name (a variant's name when a test runs several).
        self.prefix = ""

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        if ok:
            self.passed += 1
            print(f"  ok    {self.prefix}{name}", flush=True)
        else:
            self.failed += 1
            print(f"  FAIL  {self.prefix}{name}" + (f": {detail}" if detail else ""), flush=True)
        return ok

    def close(self) -> int:
        print(f"{self.title}: {self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0
