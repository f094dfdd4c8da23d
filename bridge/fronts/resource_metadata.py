"""OAuth 2.0 Protected Resource Metadata (RFC 9728) for the bridge's HTTP fronts.

With `[[auth.issuers]]`, an MCP client that gets a 401 from `/mcp` reads the
`resource_metadata` URL of its `WWW-Authenticate` challenge (bridge/fronts/auth.py),
fetches this document, and finds there which authorization servers issue tokens for
this resource (MCP 2025-11-25 Authorization, "Authorization Server Discovery"). Two
documents (RFC 9728 §3.1: the well-known part goes before the resource's path):

- `/.well-known/oauth-protected-resource/mcp`: the resource `{base}/mcp`;
- `/.well-known/oauth-protected-resource`: the resource `{base}`, the whole listener.

Both are public: they name issuers, never a secret.
"""

from __future__ import annotations

from typing import Any

from bridge.fronts.auth import Authenticator, public_base
from bridge.fronts.http import Scope, send_json

__all__ = ["ResourceMetadata"]


class ResourceMetadata:
    __slots__ = ("_auth",)

    def __init__(self, auth: Authenticator) -> None:
        self._auth = auth

    def document(self, scope: Scope, path: str) -> dict[str, Any]:
        """RFC 9728 §2: `resource` is exactly the URL the client derived this document's URL from."""
        base = public_base(scope, self._auth.cfg.resource_url)
        return {
            "resource": base + path,
            "authorization_servers": [i.issuer for i in self._auth.cfg.issuers],
            "bearer_methods_supported": ["header"],  # RFC 6750 §2.1 only: never in a query
            "resource_name": "agent-bridge",
        }

    async def root(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        await send_json(send, 200, self.document(scope, ""), headers=[("cache-control", "max-age=300")])

    async def mcp(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        await send_json(send, 200, self.document(scope, "/mcp"), headers=[("cache-control", "max-age=300")])
