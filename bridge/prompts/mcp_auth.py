"""OAuth for a Streamable HTTP prompt source: its access token on every request of the `mcp` SDK's client.

The SDK's client is httpx2's; `OAuthFlow` is its `Auth`, over the source's `OAuthClient`
(bridge/transport/oauth.py). Imported with bridge/prompts/mcp_source.py, only when a
configured source needs the `mcp` SDK.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import httpx2

from bridge.transport.oauth import OAuthClient

__all__ = ["OAuthFlow"]


class OAuthFlow(httpx2.Auth):
    """Every request carries the source's OAuth access token (MCP 2025-11-25 Authorization
    §2.6: `Authorization: Bearer` on every HTTP request); a 401 renews the token and the
    request is sent once more."""

    def __init__(self, oauth: OAuthClient) -> None:
        self.oauth = oauth

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        token = await self.oauth.token()
        request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            self.oauth.invalidate(token)
            request.headers["Authorization"] = f"Bearer {await self.oauth.token()}"
            yield request
