"""`ToolwardSession` used as SDK code uses `mcp.ClientSession`: the same calls, the same
`mcp.types` answers, refusals as tool errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

from mcp import ClientSession, types

import toolward
from conftest import HELLO


async def agent_turn(session: ClientSession) -> dict:
    """What a runtime does with a session: initialize, list, call each tool it wants."""
    init = await session.initialize()
    listed = await session.list_tools()
    read = await session.call_tool("fs__read_text_file", {"path": "hello.txt"})
    write = await session.call_tool("fs__write_file", {"path": "out.txt", "content": "from the session\n"})
    unknown = await session.call_tool("fs__delete_everything", {})
    return {"init": init, "listed": listed, "read": read, "write": write, "unknown": unknown}


def test_the_session_answers_as_client_session_does_with_mcp_types(options, manifest, workspace: Path):
    held = []

    async def approve(call: toolward.HeldCall):
        held.append(call.tool)
        return toolward.Approve(answerer="alice")

    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            async with toolward.ToolwardSession(tw, approver=approve) as session:
                return await agent_turn(session)

    turn = asyncio.run(scenario())
    init = turn["init"]
    assert isinstance(init, types.InitializeResult)
    assert init.server_info.name == "toolward"
    assert init.capabilities.tools is not None
    listed = turn["listed"]
    assert isinstance(listed, types.ListToolsResult)
    assert all(isinstance(tool, types.Tool) for tool in listed.tools)
    assert sorted(tool.name for tool in listed.tools) == ["fs__read_text_file", "fs__write_file"]
    read = turn["read"]
    assert isinstance(read, types.CallToolResult)
    assert not read.is_error
    assert read.content[0].text.strip() == HELLO.strip()
    assert isinstance(turn["write"], types.CallToolResult) and not turn["write"].is_error
    assert held == ["fs__write_file"]
    assert (workspace / "out.txt").read_text() == "from the session\n"
    unknown = turn["unknown"]
    assert unknown.is_error
    assert "`fs__delete_everything`" in unknown.content[0].text


def test_a_call_the_session_approver_denies_is_a_tool_error_naming_tool_server_and_reason(options, manifest, workspace: Path):
    async def scenario():
        async with await toolward.start(**options, manifest=manifest) as tw:
            session = toolward.ToolwardSession(tw, approver=lambda call: toolward.Deny("read-only session"))
            await session.initialize()
            return await session.call_tool("fs__write_file", {"path": "out.txt", "content": "no\n"})

    result = asyncio.run(scenario())
    assert result.is_error
    text = result.content[0].text
    assert "fs__write_file" in text and "`fs`" in text and "read-only session" in text
    assert not (workspace / "out.txt").exists()
