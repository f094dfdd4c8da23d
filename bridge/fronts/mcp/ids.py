"""`/mcp`: requests of one session that reuse an id still in flight are answered in turn;
a POST whose client leaves before its body is whole never reaches the SDK.

MCP basic §"Requests": an id MUST NOT have been used before by the requestor in the
same session, but clients that share an `Mcp-Session-Id` (workers of one client,
each counting from 1) break that under load. The SDK's Streamable HTTP transport
(mcp 2.3.0, `StreamableHTTPServerTransport._handle_post_request`) files each POST's
response stream under `str(id)`: a second request with an id in flight replaces the
first one's stream, and one of the two is never answered (its POST hangs). A
session's ids are also its cancellation handles (`notifications/cancelled` names
one), so they are not rewritten here; instead a POST whose request id (compared as
`str(id)`, as the SDK does: 1 and "1" collide) is in flight in its session waits
until that one is answered. Every request gets exactly one response, a client that
keeps its ids unique never waits, and what waits is bounded by the POSTs the
listener holds open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from bridge.codecs.safejson import Decoder
from bridge.fronts.http import Scope, header

__all__ = ["IdGate"]


class _Probe(msgspec.Struct, forbid_unknown_fields=False):
    """What the gate needs of a JSON-RPC message: a request has both."""

    id: int | str | None = None
    method: str | None = None


_probe = Decoder(_Probe)


class _Slot:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = trio.Lock()  # FIFO: requests reusing an id are answered in arrival order
        self.users = 0


class IdGate:
    """One per `/mcp` endpoint: the (session, request id) pairs in flight."""

    def __init__(self, max_body_bytes: int) -> None:
        self._max = max_body_bytes
        self._slots: dict[tuple[str, str], _Slot] = {}

    async def serve(self, scope: Scope, receive: Any, handle: Callable[[Any], Awaitable[None]]) -> None:
        """Run `handle(receive)` for this request, after any request of its session with
        its id. The body is read here (bounded) and given to `handle` unchanged."""
        if scope["method"] != "POST":
            await handle(receive)
            return
        held, replay = await self._buffer(receive)
        if held[-1]["type"] == "http.disconnect":
            # The client left before its body was whole: nobody is there to answer,
            # and the SDK would log the client's leaving as its own error, traceback
            # and all (a hostile client could fill the log with them).
            return
        session = header(scope, "mcp-session-id")
        key = self._key(session, held) if session is not None else None
        if key is None:
            await handle(replay)
            return
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot()
        slot.users += 1
        try:
            async with slot.lock:
                await handle(replay)
        finally:
            slot.users -= 1
            if not slot.users:
                del self._slots[key]

    async def _buffer(self, receive: Any) -> tuple[list[dict[str, Any]], Any]:
        """The body's messages read so far (all of it, unless over the bound: then the
        SDK reads the rest and refuses it), and a `receive` that replays them first."""
        held: list[dict[str, Any]] = []
        size = 0
        while True:
            message = await receive()
            held.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if not message.get("more_body") or size > self._max:
                break
        queue = list(held)

        async def replay() -> Any:
            return queue.pop(0) if queue else await receive()

        return held, replay

    @staticmethod
    def _key(session: str, held: list[dict[str, Any]]) -> tuple[str, str] | None:
        if not held or held[-1].get("more_body") or held[-1]["type"] != "http.request":
            return None  # incomplete: the SDK answers it
        body = b"".join(m.get("body", b"") for m in held)
        try:
            probe = _probe.decode(body)
        except msgspec.DecodeError:
            return None  # not one JSON-RPC request: the SDK answers it (parse error, batch)
        if probe.id is None or probe.method is None:
            return None  # a notification or a response: nothing is answered
        return session, str(probe.id)
