"""When a caller's credential stops vouching for it: the end of every long-lived stream it opened.

A JWT carries `exp` (bridge/fronts/auth.py puts it, plus the issuer's clock skew, in
`Identity.expires_at`); a stream opened with it (`/ws`, the canonical events API and
change feed, A2A `SendStreamingMessage` / `SubscribeToTask`, an MCP session's GET
stream) ends then, each in its protocol's way, and its client comes back with a fresh
token. (An MCP call's own stream runs on to its answer: bridge/fronts/mcp/streamable_http.py.) Static tokens, Unix users and anonymous callers never expire.
"""

from __future__ import annotations

import time

import trio

from bridge.core.identity import Identity

__all__ = ["expiry"]


async def expiry(who: Identity) -> None:
    """Returns when `who`'s credential stops vouching for it (a JWT's `exp`): a stream
    it opened ends then, and its client reconnects with a fresh token."""
    if who.expires_at is None:
        await trio.sleep_forever()
    await trio.sleep(max(0.0, who.expires_at - time.time()))
