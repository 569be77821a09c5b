"""A real MCP client signing in to `toolward serve --listen` with OAuth (issue 31): the Python
`mcp` client library (pinned by tests/real-servers/install.sh) with its own OAuth support,
driven headlessly by the client credentials grant (`ClientCredentialsOAuthProvider`): the
listener's 401 leads it to the protected-resource metadata, the metadata to the
authorization server (tests/real-servers/oidc/provider.mjs), which issues the access token
the client then sends. Run by tests/all/listen_oauth.rs:

    python listen_oauth.py URL ISSUER CLIENT_ID CLIENT_SECRET TOOL ARGUMENTS_JSON

Prints one JSON line on stdout: the tools listed and the call's result; the client
library's log (warnings and up) goes to stderr, where the test looks for "Session
termination failed".
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys

import httpx2
from mcp import ClientSession
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class MemoryStorage:
    """Tokens and client information kept for this run only."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


async def main(url: str, issuer: str, client_id: str, secret: str, tool: str, arguments: dict) -> None:
    auth = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=MemoryStorage(),
        client_id=client_id,
        client_secret=secret,
        issuer=issuer,
    )
    timeout = httpx2.Timeout(30, read=60)
    async with httpx2.AsyncClient(auth=auth, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                result = await session.call_tool(tool, arguments)
    print(
        json.dumps(
            {
                "tools": sorted(t.name for t in tools.tools),
                "is_error": bool(result.is_error),
                "text": "".join(getattr(block, "text", "") for block in result.content),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    url, issuer, client_id, secret, tool, arguments = sys.argv[1:7]
    asyncio.run(main(url, issuer, client_id, secret, tool, json.loads(arguments)))
