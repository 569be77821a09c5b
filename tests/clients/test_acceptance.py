"""Acceptance with a real client: the Python `mcp` client library (stdio_client +
ClientSession) starts `toolward serve` on a temp copy of examples/mcp and runs the scenario
of issue 5: list the tools (only the classified ones, prefixed), read a file (allowed),
write a file (held: approved from another process through `toolward approvals` → written;
a second write with other arguments is held again, not covered by the first approval →
denied → not written; the first arguments again are held again: an approval is single-use),
set a fixed parameter (tool error), and `toolward audit verify` passes afterwards.

The client declares no elicitation capability, so held calls go to the state directory's
queue. Plain Python: run it with the venv that tests/real-servers/install.sh fills:

    tests/real-servers/.installed/venv/bin/python tests/clients/test_acceptance.py

Closes with `python-mcp: N passed, N failed`; exit 1 when anything failed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import EXPECTED_TOOLS, HELLO, Answerer, Example, Report, example_copy  # noqa: E402

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

CALL_TIMEOUT_S = 60


def sha(answerer: Answerer) -> str | None:
    return (answerer.pending or {}).get("arguments_sha256")


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def held_call(session: ClientSession, ex: Example, tool: str, args: dict, verb: str, skip=()):
    """Calls `tool` while a background thread answers it with `verb` once it is queued."""
    answerer = Answerer(ex, tool, verb, skip=skip)
    answerer.start()
    result = await session.call_tool(tool, args, read_timeout_seconds=CALL_TIMEOUT_S)
    await asyncio.to_thread(answerer.join, 35)
    return result, answerer


async def scenario(ex: Example, report: Report, errlog) -> None:
    server = StdioServerParameters(command=ex.serve_argv()[0], args=ex.serve_argv()[1:], cwd=str(ex.folder))
    async with stdio_client(server, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S) as session:
            init = await session.initialize()
            report.check(
                "initialize: serverInfo toolward, tools capability",
                init.server_info.name == "toolward" and init.capabilities.tools is not None,
                f"{init.server_info} {init.capabilities}",
            )

            listed = await session.list_tools()
            names = sorted(t.name for t in listed.tools)
            report.check("tools/list: only the 6 classified tools, `fs__` prefixed", names == EXPECTED_TOOLS, f"got {names}")
            edit = next((t for t in listed.tools if t.name == "fs__edit_file"), None)
            props = (edit.input_schema or {}).get("properties", {}) if edit else {}
            report.check(
                "tools/list: fs__edit_file's schema is narrowed (no `dryRun`)",
                edit is not None and "dryRun" not in props and "edits" in props,
                f"properties {sorted(props)}",
            )

            read = await session.call_tool("fs__read_text_file", {"path": "hello.txt"})
            report.check(
                "read (allowed): the file's content is returned",
                not read.is_error and HELLO.strip() in text_of(read),
                f"isError={read.is_error} {text_of(read)!r}",
            )

            notes = ex.sandbox / "notes.txt"
            first = {"path": "notes.txt", "content": "approved through toolward approvals\n"}
            result, approved = await held_call(session, ex, "fs__write_file", first, "approve")
            report.check("write: held, shows in `approvals list`, approved from another process",
                         approved.answered(), approved.describe())
            report.check(
                "write approved: the call returns and the file is written",
                not result.is_error and notes.exists() and notes.read_text() == first["content"],
                f"isError={result.is_error} {text_of(result)!r} exists={notes.exists()}",
            )
            first_id = (approved.pending or {}).get("call_id")

            other = ex.sandbox / "other.txt"
            second = {"path": "other.txt", "content": "must not be written\n"}
            result, denied = await held_call(session, ex, "fs__write_file", second, "deny", skip={first_id})
            report.check(
                "write with other arguments: held again (not covered by the first approval), denied",
                denied.answered() and sha(denied) != sha(approved),
                denied.describe(),
            )
            report.check(
                "write denied: tool error, file not written",
                result.is_error and not other.exists(),
                f"isError={result.is_error} {text_of(result)!r} exists={other.exists()}",
            )
            second_id = (denied.pending or {}).get("call_id")

            result, replay = await held_call(session, ex, "fs__write_file", first, "deny", skip={first_id, second_id})
            report.check(
                "the approved arguments again: held again (an approval is single-use), denied → tool error",
                replay.answered() and result.is_error and sha(replay) == sha(approved),
                f"{replay.describe()} isError={result.is_error}",
            )

            before = (ex.sandbox / "hello.txt").read_text()
            fixed = await session.call_tool(
                "fs__edit_file",
                {"path": "hello.txt", "edits": [{"oldText": "Hello", "newText": "Goodbye"}], "dryRun": False},
            )
            report.check(
                "fixed parameter (`fs__edit_file` with `dryRun`): tool error naming it, file unchanged",
                fixed.is_error and "dryRun" in text_of(fixed) and (ex.sandbox / "hello.txt").read_text() == before,
                f"isError={fixed.is_error} {text_of(fixed)!r}",
            )

            preview = await session.call_tool(
                "fs__edit_file", {"path": "hello.txt", "edits": [{"oldText": "Hello", "newText": "Goodbye"}]}
            )
            report.check(
                "edit without `dryRun`: allowed as a preview (fixed to true), file unchanged",
                not preview.is_error and "Goodbye" in text_of(preview) and (ex.sandbox / "hello.txt").read_text() == before,
                f"isError={preview.is_error} {text_of(preview)!r}",
            )

            hidden = await session.call_tool("fs__move_file", {"source": "hello.txt", "destination": "moved.txt"})
            report.check(
                "an unclassified tool (`fs__move_file`): tool error, nothing moved",
                hidden.is_error and (ex.sandbox / "hello.txt").exists(),
                f"isError={hidden.is_error} {text_of(hidden)!r}",
            )
    leftover = ex.toolward("approvals", "list", "--json")
    report.check("no held call left in the queue", leftover.returncode == 0 and json.loads(leftover.stdout) == [], leftover.stdout)


def main() -> int:
    report = Report("python-mcp")
    ex = example_copy("toolward-pyclient-")
    print(f"python mcp client against `toolward serve --config {ex.config}`", flush=True)
    stderr_path = ex.folder / "toolward-serve.stderr"
    ok = False
    try:
        with open(stderr_path, "w") as errlog:
            asyncio.run(asyncio.wait_for(scenario(ex, report, errlog), timeout=150))
        verify = ex.toolward("audit", "verify", "--json", str(ex.audit))
        info = json.loads(verify.stdout) if verify.returncode in (0, 1) and verify.stdout else {}
        report.check(
            "`toolward audit verify` exits 0 (chain intact)",
            verify.returncode == 0 and info.get("intact") is True and info.get("records", 0) > 0,
            f"exit {verify.returncode}: {verify.stdout} {verify.stderr}",
        )
        ok = report.failed == 0
    except BaseException as e:  # noqa: BLE001 - a crash is a failed check, with its cause
        report.check("the scenario ran to its end", False, f"{type(e).__name__}: {e!r}")
    finally:
        if not ok:
            print(f"--- toolward serve stderr ({stderr_path}):", flush=True)
            print(stderr_path.read_text() if stderr_path.exists() else "(none)", flush=True)
        else:
            ex.cleanup()
    return report.close()


if __name__ == "__main__":
    sys.exit(main())
