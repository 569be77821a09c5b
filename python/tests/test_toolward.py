"""The asyncio API against the real filesystem server: start, list, calls allowed, held and
approved or denied by a Python callback, refused, and shutdown."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import toolward
from conftest import HELLO


def run(coroutine):
    return asyncio.run(coroutine)


def test_pin_returns_a_manifest_pinning_the_servers_tools(manifest: str):
    pinned = json.loads(manifest)
    assert "read_text_file" in pinned["servers"]["fs"]["tools"]
    assert "write_file" in pinned["servers"]["fs"]["tools"]


def test_start_registers_only_the_classified_tools_named_after_their_server(options, manifest):
    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            return tw.tools()

    tools = {tool.name: tool for tool in run(scenario())}
    assert sorted(tools) == ["fs__read_text_file", "fs__write_file"]
    read = tools["fs__read_text_file"]
    assert (read.server, read.upstream_name, read.effect) == ("fs", "read_text_file", "read-only")
    assert read.mcp["name"] == "fs__read_text_file"
    assert "path" in read.mcp["inputSchema"]["properties"]
    assert tools["fs__write_file"].effect == "local-change"


def test_an_allowed_read_returns_the_file_without_asking_the_approver(options, manifest):
    asked = []

    async def scenario():
        async with await toolward.start(**options, manifest=manifest, approver=asked.append) as tw:
            return await tw.call("fs__read_text_file", {"path": "hello.txt"})

    result = run(scenario())
    assert result.outcome == "allowed"
    assert not result.is_error
    assert result.text.strip() == HELLO.strip()
    assert result.server == "fs"
    assert asked == []


def test_a_held_write_approved_by_a_sync_callback_is_written_and_its_answerer_audited(options, manifest, workspace: Path):
    held = []

    def approve(call: toolward.HeldCall):
        held.append((call.tool, call.server, call.upstream_tool, call.effect, call.arguments))
        return toolward.Approve(answerer="alice")

    async def scenario():
        async with await toolward.start(**options, manifest=manifest, approver=approve) as tw:
            result = await tw.call("fs__write_file", {"path": "out.txt", "content": "approved\n"})
            return result, tw.audit_records()

    result, records = run(scenario())
    assert held == [("fs__write_file", "fs", "write_file", "local-change", {"path": "out.txt", "content": "approved\n"})]
    assert result.outcome == "approved"
    assert (workspace / "out.txt").read_text() == "approved\n"
    answered = [r for r in records if r["kind"] == "approval-answered"]
    assert len(answered) == 1
    assert answered[0]["answered_by"]["answerer"] == "alice"
    assert answered[0]["answered_by"]["channel"] == "embedder"


def test_a_held_write_approved_by_an_async_callback_runs_it_on_the_callers_event_loop(options, manifest, workspace: Path):
    loops = []

    async def approve(call: toolward.HeldCall):
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return toolward.Approve(answerer="alice")

    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            result = await tw.call("fs__write_file", {"path": "out.txt", "content": "async\n"}, approver=approve)
            return result, asyncio.get_running_loop()

    result, loop = run(scenario())
    assert result.outcome == "approved"
    assert loops == [loop]
    assert (workspace / "out.txt").read_text() == "async\n"


def test_a_write_the_callback_denies_raises_call_refused_naming_tool_server_and_reason(options, manifest, workspace: Path):
    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            deny = lambda call: toolward.Deny("not in this workspace", answerer="bob")  # noqa: E731
            with pytest.raises(toolward.CallRefused) as refused:
                await tw.call("fs__write_file", {"path": "out.txt", "content": "denied\n"}, approver=deny)
            return refused.value, tw.audit_records()

    refused, records = run(scenario())
    assert refused.outcome == "not-approved"
    assert (refused.tool, refused.server) == ("fs__write_file", "fs")
    message = str(refused)
    assert "`fs__write_file`" in message and "server `fs`" in message and "not in this workspace" in message
    assert not (workspace / "out.txt").exists()
    answered = [r for r in records if r["kind"] == "approval-answered"]
    assert [a["answered_by"]["answerer"] for a in answered] == ["bob"]


def test_a_held_write_without_an_approver_is_refused(options, manifest, workspace: Path):
    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            with pytest.raises(toolward.CallRefused) as refused:
                await tw.call("fs__write_file", {"path": "out.txt", "content": "nobody\n"})
            return refused.value

    refused = run(scenario())
    assert refused.outcome == "not-approved"
    assert "no approver" in refused.reason
    assert not (workspace / "out.txt").exists()


def test_an_approver_that_raises_or_answers_otherwise_denies_the_call(options, manifest, workspace: Path):
    def raises(call):
        raise RuntimeError("the approval service is down")

    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            refusals = []
            for approver in (raises, lambda call: True):
                with pytest.raises(toolward.CallRefused) as refused:
                    await tw.call("fs__write_file", {"path": "out.txt", "content": "x\n"}, approver=approver)
                refusals.append(refused.value)
            return refusals

    raised, answered_true = run(scenario())
    assert "the approval service is down" in raised.reason
    assert "not toolward.Approve or toolward.Deny" in answered_true.reason
    assert not (workspace / "out.txt").exists()


def test_an_unknown_tool_is_refused_naming_the_tool(options, manifest):
    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            with pytest.raises(toolward.CallRefused) as refused:
                await tw.call("fs__delete_everything", {})
            return refused.value

    refused = run(scenario())
    assert refused.outcome == "refused"
    assert refused.server is None
    assert "`fs__delete_everything`" in str(refused)
    assert "unknown tool" in refused.reason


def test_after_shutdown_calls_are_refused_naming_the_server(options, manifest):
    async def scenario():
        tw = await toolward.start(**options, manifest=manifest)
        before = await tw.call("fs__read_text_file", {"path": "hello.txt"})
        await tw.shutdown()
        with pytest.raises(toolward.CallRefused) as refused:
            await tw.call("fs__read_text_file", {"path": "hello.txt"})
        return before, refused.value

    before, refused = run(scenario())
    assert before.outcome == "allowed"
    assert refused.server == "fs"
    assert "server `fs`" in str(refused)


def test_start_without_a_reviewed_manifest_raises_start_error(options):
    with pytest.raises(toolward.StartError, match="manifest"):
        run(toolward.start(**options, manifest="{}"))


def test_an_async_approver_still_asking_at_the_approval_timeout_is_cancelled_and_the_call_refused(options, manifest, workspace: Path):
    cancelled = []

    async def ask_forever(call: toolward.HeldCall):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(call.tool)
            raise
        return toolward.Approve()

    async def scenario():
        settings = {"limits": {"approval_timeout_ms": 500}}
        async with await toolward.start(**options, manifest=manifest, settings=settings) as tw:
            with pytest.raises(toolward.CallRefused) as refused:
                await tw.call("fs__write_file", {"path": "out.txt", "content": "late\n"}, approver=ask_forever)
            # The cancellation reaches the task on this loop at its next turn.
            for _ in range(100):
                if cancelled:
                    break
                await asyncio.sleep(0.01)
            return refused.value

    refused = run(scenario())
    assert refused.outcome == "not-approved"
    assert cancelled == ["fs__write_file"]
    assert not (workspace / "out.txt").exists()


def test_a_sync_approver_past_the_timeout_or_of_a_cancelled_call_neither_holds_other_calls_nor_gets_its_call_through(options, manifest, workspace: Path):
    import threading
    import time

    released = threading.Event()

    def ask_slowly(call: toolward.HeldCall):
        # A person deciding: longer than the approval timeout, then approving.
        released.wait(5)
        return toolward.Approve(answerer="late")

    async def scenario():
        settings = {"limits": {"approval_timeout_ms": 500}}
        async with await toolward.start(**options, manifest=manifest, settings=settings) as tw:
            # Two (the cores of a small machine) and one more wait for a person at once: a read
            # is still answered, and each held call is refused at the timeout.
            held = [
                asyncio.ensure_future(
                    tw.call("fs__write_file", {"path": f"held{i}.txt", "content": "no\n"}, approver=ask_slowly)
                )
                for i in range(3)
            ]
            await asyncio.sleep(0.1)
            started = time.monotonic()
            read = await asyncio.wait_for(tw.call("fs__read_text_file", {"path": "hello.txt"}), 5)
            read_took = time.monotonic() - started
            outcomes = []
            for call in held:
                with pytest.raises(toolward.CallRefused) as refused:
                    await call
                outcomes.append(refused.value.outcome)
            # A call the runtime cancels while its sync approver decides is not made either.
            cancelled = asyncio.ensure_future(
                tw.call("fs__write_file", {"path": "cancelled.txt", "content": "no\n"}, approver=ask_slowly)
            )
            await asyncio.sleep(0.2)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            # Every approver now answers Approve, after nothing waits for it.
            released.set()
            await asyncio.sleep(0.5)
            return read, read_took, outcomes

    read, read_took, outcomes = run(scenario())
    assert "hello from a Python runtime" in read.text
    assert read_took < 2, f"a read waited {read_took:.1f} s behind sync approvers"
    assert outcomes == ["not-approved"] * 3
    assert sorted(p.name for p in workspace.iterdir()) == ["hello.txt"], "no held or cancelled write was made"


def test_with_a_state_folder_the_audit_log_is_written_there_and_its_records_read_back(options, manifest, tmp_path: Path):
    state = tmp_path / "state"

    async def scenario():
        async with await toolward.start(**options, manifest=manifest, state_dir=state) as tw:
            result = await tw.call("fs__read_text_file", {"path": "hello.txt"})
            # A record is streamed once durable (the log's writer syncs it): wait for the
            # call's last one, the result.
            records = []
            for _ in range(500):
                records += tw.audit_records()
                if any(r.get("call_id") == result.call_id and r["kind"] == "result" for r in records):
                    break
                await asyncio.sleep(0.01)
            return result, records

    result, records = run(scenario())
    # The log's lines; blank ones are the writer's preallocated space.
    lines = (state / "audit.jsonl").read_text().splitlines()
    logged = [json.loads(line) for line in lines if line.strip()]
    streamed = {record["seq"]: record for record in records}
    call_records = [r for r in logged if r.get("call_id") == result.call_id]
    assert call_records
    assert all(streamed[r["seq"]] == r for r in call_records)


def test_a_deny_reason_is_kept_to_a_thousand_characters_with_control_and_bidirectional_characters_escaped(options, manifest):
    reason = "\x1b[31m\u202e\u2066" + "x" * 5000

    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            with pytest.raises(toolward.CallRefused) as refused:
                deny = lambda call: toolward.Deny(reason)  # noqa: E731
                await tw.call("fs__write_file", {"path": "out.txt", "content": "x\n"}, approver=deny)
            return refused.value

    refused = run(scenario())
    assert "\x1b" not in refused.reason
    assert "\\u{001B}[31m\\u{202E}\\u{2066}" in refused.reason
    assert "\u202e" not in refused.reason and "\u2066" not in refused.reason
    assert "x" * 990 + "…" in refused.reason
    assert "x" * 1000 not in refused.reason


def test_a_per_call_approver_that_is_falsy_is_still_the_one_asked(options, manifest, workspace: Path):
    class Strict:
        """An approver object that happens to be falsy (empty, by its length)."""

        def __len__(self):
            return 0

        def __call__(self, call: toolward.HeldCall):
            return toolward.Deny("the strict approver denies", answerer="strict")

    async def scenario():
        approve = lambda call: toolward.Approve(answerer="lenient")  # noqa: E731
        async with await toolward.start(**options, manifest=manifest, approver=approve) as tw:
            with pytest.raises(toolward.CallRefused) as refused:
                await tw.call("fs__write_file", {"path": "out.txt", "content": "x\n"}, approver=Strict())
            return refused.value

    refused = run(scenario())
    assert "the strict approver denies" in refused.reason
    assert not (workspace / "out.txt").exists()
