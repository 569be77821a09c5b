"""Acceptance with a real client: the MCP Inspector's CLI (`mcp-inspector --cli`, npm
`@modelcontextprotocol/inspector`, pinned by tests/real-servers/install.sh) starts
`toolward serve` on a temp copy of examples/mcp, one Inspector process per request, and:
lists the tools (only the classified ones, prefixed); reads a file (allowed); writes a file
(held: approved from another process through `toolward approvals` → written); writes with
other arguments (held again → denied → tool error, not written); sets a fixed parameter
(tool error); then `toolward audit verify` passes.

The Inspector's own `--config` option would take toolward's `--config`, so the server's
command goes after `--`:

    mcp-inspector --cli --method tools/list -- toolward serve --config toolward.json

Run: python3 tests/clients/inspector.py (standard library only). Closes with
`inspector: N passed, N failed`; exit 1 when anything failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import EXPECTED_TOOLS, HELLO, INSPECTOR, Answerer, Example, Report, example_copy  # noqa: E402

TIMEOUT_S = 60


def inspector_argv(ex: Example, method: str, tool: str | None = None, args: dict | None = None) -> list[str]:
    argv = [str(INSPECTOR), "--cli", "--method", method]
    if tool is not None:
        argv += ["--tool-name", tool]
    if args:
        argv += ["--tool-arg", *(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in args.items())]
    return [*argv, "--", *ex.serve_argv()]


def env_for(ex: Example) -> dict[str, str]:
    # Keep the Inspector's catalog (it may create one) out of the home directory.
    return {**os.environ, "MCP_CATALOG_PATH": str(ex.folder / "inspector-catalog.json")}


class Run:
    """One Inspector invocation's outcome: exit code, the JSON it printed first, its stderr."""

    def __init__(self, code: int, stdout: str, stderr: str):
        self.code, self.stdout, self.stderr = code, stdout, stderr
        try:
            self.json, _ = json.JSONDecoder().raw_decode(stdout.lstrip())
        except ValueError:
            self.json = None

    def is_error(self) -> bool:
        return bool(self.json and self.json.get("isError"))

    def text(self) -> str:
        content = (self.json or {}).get("content") or []
        return "\n".join(c.get("text", "") for c in content if isinstance(c, dict))

    def __str__(self) -> str:
        return f"exit {self.code}, stdout {self.stdout[:400]!r}, stderr {self.stderr[-400:]!r}"


def inspect(ex: Example, method: str, tool: str | None = None, args: dict | None = None) -> Run:
    p = subprocess.run(
        inspector_argv(ex, method, tool, args),
        capture_output=True, text=True, timeout=TIMEOUT_S, cwd=ex.folder, env=env_for(ex),
    )
    return Run(p.returncode, p.stdout, p.stderr)


def held(ex: Example, tool: str, args: dict, verb: str, skip=()) -> tuple[Run, Answerer]:
    """Starts the Inspector's call, answers it with `verb` from another process once queued."""
    proc = subprocess.Popen(
        inspector_argv(ex, "tools/call", tool, args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ex.folder, env=env_for(ex),
    )
    answerer = Answerer(ex, tool, verb, skip=skip)
    answerer.start()
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    answerer.join(35)
    return Run(proc.returncode, out, err), answerer


def scenario(ex: Example, report: Report) -> None:
    listed = inspect(ex, "tools/list")
    names = sorted(t.get("name") for t in (listed.json or {}).get("tools", []))
    report.check("tools/list: only the 6 classified tools, `fs__` prefixed", listed.code == 0 and names == EXPECTED_TOOLS,
                 f"got {names}; {listed}")

    read = inspect(ex, "tools/call", "fs__read_text_file", {"path": "hello.txt"})
    report.check("read (allowed): the file's content is returned",
                 read.code == 0 and not read.is_error() and HELLO.strip() in read.text(), str(read))

    notes = ex.sandbox / "notes.txt"
    first = {"path": "notes.txt", "content": "approved through toolward approvals"}
    run, approved = held(ex, "fs__write_file", first, "approve")
    report.check("write: held, shows in `approvals list`, approved from another process", approved.answered(),
                 approved.describe())
    report.check("write approved: the call returns and the file is written",
                 run.code == 0 and not run.is_error() and notes.exists() and notes.read_text() == first["content"],
                 f"{run}; exists={notes.exists()}")

    other = ex.sandbox / "other.txt"
    second = {"path": "other.txt", "content": "must not be written"}
    skip = {(approved.pending or {}).get("call_id")}
    run, denied = held(ex, "fs__write_file", second, "deny", skip=skip)
    report.check("write with other arguments: held again (not covered by the first approval), denied",
                 denied.answered(), denied.describe())
    report.check("write denied: tool error, file not written",
                 run.is_error() and run.code != 0 and not other.exists(), f"{run}; exists={other.exists()}")

    before = (ex.sandbox / "hello.txt").read_text()
    fixed = inspect(ex, "tools/call", "fs__edit_file",
                    {"path": "hello.txt", "edits": [{"oldText": "Hello", "newText": "Goodbye"}], "dryRun": False})
    report.check("fixed parameter (`fs__edit_file` with `dryRun`): tool error naming it, file unchanged",
                 fixed.is_error() and "dryRun" in fixed.text() and (ex.sandbox / "hello.txt").read_text() == before,
                 str(fixed))

    verify = ex.toolward("audit", "verify", "--json", str(ex.audit))
    info = json.loads(verify.stdout) if verify.stdout.strip().startswith("{") else {}
    report.check("`toolward audit verify` exits 0 (chain intact)",
                 verify.returncode == 0 and info.get("intact") is True and info.get("records", 0) > 0,
                 f"exit {verify.returncode}: {verify.stdout} {verify.stderr}")


def main() -> int:
    report = Report("inspector")
    if not INSPECTOR.exists():
        print(f"{INSPECTOR} is missing: bash tests/real-servers/install.sh", flush=True)
        report.check("the MCP Inspector is installed", False)
        return report.close()
    ex = example_copy("toolward-inspector-")
    print(f"MCP Inspector CLI against `toolward serve --config {ex.config}`", flush=True)
    try:
        scenario(ex, report)
    except Exception as e:  # noqa: BLE001 - a crash is a failed check, with its cause
        report.check("the scenario ran to its end", False, f"{type(e).__name__}: {e!r}")
    if report.failed == 0:
        ex.cleanup()
    else:
        print(f"(kept {ex.folder} for a look)", flush=True)
    return report.close()


if __name__ == "__main__":
    sys.exit(main())
