"""toolward for Python: the tools of third-party MCP servers behind an operator's policy,
embedded in a Python runtime.

    import toolward

    options = dict(servers={"fs": {"command": "node", "args": [server_js, "."]}}, rules=rules_text)
    manifest = await toolward.pin(**options)          # the operator reviews it, once
    tw = await toolward.start(**options, manifest=manifest, approver=ask)
    for tool in tw.tools():
        print(tool.name, tool.effect)
    result = await tw.call("fs__read_text_file", {"path": "hello.txt"})
    await tw.shutdown()

A call the policy holds asks the approver, a callable (sync or async) given a `HeldCall` and
returning `Approve(answerer=...)` or `Deny(reason, answerer=...)`; without one, held calls are
denied. A call toolward refuses (an unknown tool, invalid arguments, a policy's deny, an
approval denied) raises `CallRefused`, whose message names the tool, the server and the
reason; what the server answered, tool errors included, is returned.

`ToolwardSession` (in `toolward.session`, needs the `mcp` package) stands in for
`mcp.ClientSession`: `initialize`, `list_tools` and `call_tool` return `mcp.types` objects.
"""

from __future__ import annotations

import atexit
import json
import os
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Union

from . import _native
from ._native import Approve, Deny, HeldCall, PinError, StartError, ToolwardError

# toolward's runtime sets coroutines' results from its own threads; at exit they must be out
# of Python before the interpreter finalizes (CPython aborts otherwise).
atexit.register(_native.at_exit)

__all__ = [
    "Approve",
    "Approver",
    "CallRefused",
    "CallResult",
    "Deny",
    "HeldCall",
    "PinError",
    "StartError",
    "Tool",
    "Toolward",
    "ToolwardError",
    "ToolwardSession",
    "pin",
    "start",
]

__version__ = _native.__version__

Answer = Union[Approve, Deny]
#: Asked about each held call: returns (or, when async, resolves to) `Approve` or `Deny`.
Approver = Callable[[HeldCall], Union[Answer, Awaitable[Answer]]]
Bytes = Union[bytes, str]
PathLike = Union[str, "os.PathLike[str]"]


class CallRefused(ToolwardError):
    """toolward refused the call, or the policy or the approver did: it never reached the
    server. The message names the tool, the server and the reason.

    Attributes: `tool` (the name called), `server` (its server, `None` for a name no server
    has), `outcome` (`refused`, `denied` or `not-approved`), `reason` (toolward's text),
    `call_id` (as in the audit records) and `result` (the MCP `CallToolResult` toolward's MCP
    side would have answered, a dict).
    """

    def __init__(self, tool: str, server: str | None, outcome: str, reason: str, call_id: str, result: dict):
        self.tool = tool
        self.server = server
        self.outcome = outcome
        self.reason = reason
        self.call_id = call_id
        self.result = result
        # toolward's text names the tool and its server (a name no server has, only the tool).
        if server is not None and f"server `{server}`" not in reason:
            reason = f"tool `{_shown(tool)}` on server `{server}`: {reason}"
        super().__init__(reason)


@dataclass(frozen=True)
class Tool:
    """A registered tool: the MCP `Tool` the model sees (`mcp`), and where it comes from."""

    name: str
    server: str
    upstream_name: str
    effect: str
    description: str
    input_schema: dict
    mcp: dict = field(repr=False)


@dataclass(frozen=True)
class CallResult:
    """The end of a call that reached the server: `result` is the MCP `CallToolResult` (a
    dict with `content`, `isError`, maybe `structuredContent`)."""

    result: dict
    call_id: str
    outcome: str
    server: str | None

    @property
    def is_error(self) -> bool:
        """Whether the server answered with a tool error."""
        return self.result.get("isError") is True

    @property
    def text(self) -> str:
        """The text of the result's text content items, joined by line breaks."""
        return "\n".join(
            item.get("text", "") for item in self.result.get("content", []) if item.get("type") == "text"
        )


class Toolward:
    """A started toolward (`start` makes one). Use it from asyncio; `async with` shuts it
    down at the end."""

    def __init__(self, native: _native.Toolward, approver: Approver | None):
        self._native = native
        self._approver = approver

    def tools(self) -> list[Tool]:
        """The registered tools, by exposed name."""
        return [
            Tool(
                name=entry["tool"]["name"],
                server=entry["server"],
                upstream_name=entry["upstream_name"],
                effect=entry["effect"],
                description=entry["tool"].get("description", ""),
                input_schema=entry["tool"]["inputSchema"],
                mcp=entry["tool"],
            )
            for entry in json.loads(self._native.tools_json())
        ]

    @property
    def report(self) -> str:
        """The load report, as `toolward serve` prints it."""
        return self._native.report()

    async def call(
        self, name: str, arguments: Mapping[str, Any] | None = None, *, approver: Approver | None = None
    ) -> CallResult:
        """Calls tool `name` through toolward's whole path (validation, policy, approval,
        forward, result cap, audit) and returns what the server answered.

        Held calls ask `approver`, else the one given to `start`, else are denied. Raises
        `CallRefused` when the call did not reach the server. Cancelling the coroutine cancels
        the call (the server is told, the audit records it)."""
        ended = await self._call(name, arguments, approver)
        if ended.outcome not in ("allowed", "approved"):
            raise CallRefused(name, ended.server, ended.outcome, ended.text, ended.call_id, ended.result)
        return ended

    async def _call(self, name: str, arguments: Mapping[str, Any] | None, approver: Approver | None) -> CallResult:
        """The call, whatever its outcome (`ToolwardSession` answers refusals as results)."""
        text = None if arguments is None else json.dumps(dict(arguments))
        outcome, call_id, server, result = await self._native.call(name, text, self._approver if approver is None else approver)
        return CallResult(result=json.loads(result), call_id=call_id, outcome=outcome, server=server)

    def audit_records(self) -> list[dict]:
        """The audit records this process made since the start or the last call of this, in
        `seq` order (with a state folder, its `audit.jsonl` holds them too)."""
        return [json.loads(line) for line in self._native.audit_records()]

    async def shutdown(self) -> None:
        """Closes every server. Calls made after it fail as calls to a server that is down."""
        await self._native.shutdown()

    async def __aenter__(self) -> Toolward:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()


def _bytes(value: Bytes | Mapping[str, Any] | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(dict(value)).encode()


def _options(
    servers: Mapping[str, Mapping[str, Any]],
    rules: Bytes | Mapping[str, Any],
    settings: Mapping[str, Any] | None,
    rules_component: bytes | None,
    policy_component: bytes | None,
    policy_settings: Bytes | Mapping[str, Any] | None,
    cedar: Bytes | None,
    state_dir: PathLike | None,
    servers_dir: PathLike | None,
    base_dir: PathLike | None,
) -> _native.Options:
    folder = lambda path: None if path is None else os.fspath(path)  # noqa: E731
    return _native.Options(
        json.dumps({name: dict(entry) for name, entry in servers.items()}),
        _bytes(rules),
        json.dumps(dict(settings or {})),
        rules_component=rules_component,
        policy_component=policy_component,
        policy_settings=_bytes(policy_settings),
        cedar=_bytes(cedar),
        state_dir=folder(state_dir),
        servers_dir=folder(servers_dir),
        base_dir=folder(base_dir),
    )


async def pin(
    *,
    servers: Mapping[str, Mapping[str, Any]],
    rules: Bytes | Mapping[str, Any],
    settings: Mapping[str, Any] | None = None,
    rules_component: bytes | None = None,
    policy_component: bytes | None = None,
    policy_settings: Bytes | Mapping[str, Any] | None = None,
    cedar: Bytes | None = None,
    state_dir: PathLike | None = None,
    servers_dir: PathLike | None = None,
    base_dir: PathLike | None = None,
) -> str:
    """Starts each server, lists its tools and returns the manifest pinning them (JSON text).
    The operator reviews it, keeps it with the runtime's settings and gives it to `start`.
    Takes the same values as `start`. Raises `PinError` naming a server that could not be
    started or listed, `StartError` for values that make no config."""
    return await _native.pin(
        _options(servers, rules, settings, rules_component, policy_component, policy_settings, cedar,
                 state_dir, servers_dir, base_dir)
    )


async def start(
    *,
    servers: Mapping[str, Mapping[str, Any]],
    rules: Bytes | Mapping[str, Any],
    manifest: str,
    approver: Approver | None = None,
    settings: Mapping[str, Any] | None = None,
    rules_component: bytes | None = None,
    policy_component: bytes | None = None,
    policy_settings: Bytes | Mapping[str, Any] | None = None,
    cedar: Bytes | None = None,
    state_dir: PathLike | None = None,
    servers_dir: PathLike | None = None,
    base_dir: PathLike | None = None,
) -> Toolward:
    """Starts a toolward from values, writing no file unless `state_dir` or `servers_dir`
    is given.

    - `servers`: `mcpServers` entries by name (`{"command": ..., "args": [...]}`, or
      `{"type": "http", "url": ...}`);
    - `rules`: the rules (text, or a mapping): which tools are registered, with which effect;
    - `manifest`: what `pin` returned, reviewed;
    - `approver`: asked about held calls (a call may name its own); none denies them;
    - `settings`: other top-level config keys (`principal`, `limits`, `guest`, ...);
    - `rules_component`, `policy_component`: WebAssembly components' bytes instead of the
      built-in ones; `policy_settings`: the policy component's settings instead of the rules;
      `cedar`: Cedar policies, decided by the built-in Cedar component;
    - `state_dir`: keep state there (approvals queue, fact counters, the audit log);
      `servers_dir`: each stdio server's own `HOME` and `TMPDIR` under it;
      `base_dir`: where relative paths resolve and stdio servers start (default: the
      current directory).

    Raises `StartError` with the reason."""
    native = await _native.start(
        _options(servers, rules, settings, rules_component, policy_component, policy_settings, cedar,
                 state_dir, servers_dir, base_dir),
        manifest,
    )
    return Toolward(native, approver)


def _shown(text: str) -> str:
    """`text` with control characters escaped, for a message read in a terminal."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def __getattr__(name: str) -> Any:
    # `ToolwardSession` needs the `mcp` package: imported only when asked for.
    if name == "ToolwardSession":
        from .session import ToolwardSession

        return ToolwardSession
    raise AttributeError(f"module 'toolward' has no attribute {name!r}")
