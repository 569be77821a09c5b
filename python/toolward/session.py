"""`ToolwardSession`: a stand-in for the MCP Python SDK's `mcp.ClientSession` over a started
toolward, so a runtime written against a session swaps it in and reaches the tools behind
toolward's policy in-process, with no server to spawn and no transport.

    async with ToolwardSession(tw, approver=ask) as session:
        await session.initialize()
        listed = await session.list_tools()
        result = await session.call_tool("fs__read_text_file", {"path": "hello.txt"})

It answers as toolward's own MCP side (`toolward serve`) answers a real `ClientSession`:
`initialize` returns toolward's `InitializeResult` (the `tools` capability only), `list_tools`
the registered tools (one page), and `call_tool` a `CallToolResult`, where a call toolward
refused, the policy denied or the approver did not approve is a tool error
(`isError: true`) whose text names the tool, the server and the reason, as the SDK's code
expects of a server; `Toolward.call` raises `CallRefused` instead. `structuredContent` was
already checked against the tool's `outputSchema` by toolward.
"""

from __future__ import annotations

import asyncio
from typing import Any

from mcp import types

from . import Approver, Toolward, __version__

# The newest revision negotiated with `initialize` (later ones use `server/discover`).
try:
    from mcp_types.version import LATEST_HANDSHAKE_VERSION as _PROTOCOL_VERSION
except ImportError:  # an SDK without the split: its one latest version
    _PROTOCOL_VERSION = types.LATEST_PROTOCOL_VERSION


class ToolwardSession:
    """What a runtime uses of `mcp.ClientSession`, answered by toolward in-process.

    `approver` is asked about held calls (default: the one given to `toolward.start`; none
    denies them). `read_timeout_seconds`, as the session's, bounds each call; a call past it
    is cancelled and raises `TimeoutError`, as the SDK's session raises on a read timeout.
    Closing the session does not shut toolward down: several sessions may share it.
    """

    def __init__(
        self,
        toolward: Toolward,
        *,
        approver: Approver | None = None,
        read_timeout_seconds: float | None = None,
        client_info: types.Implementation | None = None,
    ):
        self._toolward = toolward
        self._approver = approver
        self._read_timeout_seconds = read_timeout_seconds
        self._client_info = client_info
        self._initialize_result: types.InitializeResult | None = None

    async def __aenter__(self) -> ToolwardSession:
        return self

    async def __aexit__(self, *exc_info: object) -> bool | None:
        return None

    async def initialize(self) -> types.InitializeResult:
        """toolward's answer to `initialize`: serverInfo `toolward`, the `tools` capability."""
        if self._initialize_result is None:
            self._initialize_result = types.InitializeResult(
                protocol_version=_PROTOCOL_VERSION,
                capabilities=types.ServerCapabilities(tools=types.ToolsCapability(list_changed=False)),
                server_info=types.Implementation(name="toolward", version=__version__),
            )
        return self._initialize_result

    @property
    def initialize_result(self) -> types.InitializeResult | None:
        return self._initialize_result

    @property
    def protocol_version(self) -> str | None:
        return self._initialize_result.protocol_version if self._initialize_result else None

    @property
    def server_info(self) -> types.Implementation | None:
        return self._initialize_result.server_info if self._initialize_result else None

    @property
    def server_capabilities(self) -> types.ServerCapabilities | None:
        return self._initialize_result.capabilities if self._initialize_result else None

    @property
    def instructions(self) -> str | None:
        return None

    async def send_ping(self, *, meta: Any = None) -> types.EmptyResult:
        return types.EmptyResult()

    async def list_tools(self, *, params: types.PaginatedRequestParams | None = None) -> types.ListToolsResult:
        """The registered tools, as the model sees them (one page: toolward's tool set is
        fixed at its start)."""
        return types.ListToolsResult(tools=[types.Tool.model_validate(tool.mcp) for tool in self._toolward.tools()])

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: Any = None,
        *,
        meta: Any = None,
        **_later_revisions: Any,
    ) -> types.CallToolResult:
        """Calls tool `name` through toolward; refusals are tool errors, as from a server.
        `progress_callback` and `meta` are accepted and unused: toolward forwards no progress
        to an in-process caller."""
        timeout = read_timeout_seconds if read_timeout_seconds is not None else self._read_timeout_seconds
        ended = await asyncio.wait_for(self._toolward._call(name, arguments, self._approver), timeout)
        return types.CallToolResult.model_validate(ended.result)


__all__ = ["ToolwardSession"]
