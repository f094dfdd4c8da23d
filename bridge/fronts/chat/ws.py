"""The chat event stream front: `/ws`, JSON frames `{"event", "data"}` (the chat event stream of DESIGN.md, with the
event names and payloads of the Blade Agent API docs, api/chat-flow.md and api/websocket.md).

One connection = one reader (client frames, handled in order) + one writer (a
bounded queue, drained in batches, STYLE.md rule 13). Client events: `session:subscribe {session_id,
after_sequence?}` (replay, then live; acknowledged with `session:subscribed`),
`session:unsubscribe`, `chat:send` (a new run, or an `askuser_answer` to an open
question; the sender is subscribed live if it was not), `chat:stop`. Server frames
come from `ChatStreams`; errors are `system:error {message, code, detail}`.

Access: Origin against `[ws] allowed_origins` and a bearer token (`Authorization`
header, refused before the upgrade with 403/401) or the first frame's `auth.token`
(close 4401 if wrong or late). A subscription whose caller a reload's access rules
refuse (it may no longer watch, use or answer the session) ends with `system:error`
`not_found` naming the session; the socket stays open.
Limits, each with its fate:
- a frame over `max_frame_bytes`: `system:error frame_too_large`, close 1009;
- over `max_messages_per_s` (token bucket with `message_burst`): `system:error
  rate_limited`, the frame is dropped;
- a slow client (queue over `queue_max_frames`, or no write accepted for
  `slow_client_timeout_s` while frames wait): close 4008 "slow consumer". The back is
  never paused for it, and its memory stays bounded; it may resume with
  `after_sequence`.

Shutdown (SIGTERM): once the daemon stops accepting, a new WebSocket is refused (503,
before the upgrade); once the drain has ended the running turns, and so every client
has its run's `turn:end` and `chat:end` (`interrupted` if cancelled) queued, every open
socket gets what is queued, then close 1001 (going away), so the listener is not held
until `[server] graceful_timeout_s`. A closing write is shielded with a deadline: a
cancel cannot cut it off inside hypercorn's close.

This module is the listener (`WsFront`); one connection is `WsConnection`
(ws_connection.py). Writes (ws_send.py): with `batch_writes`, every waiting frame goes out in one socket
write through hypercorn's WebSocket stream, each still its own WebSocket message;
otherwise one ASGI `websocket.send` per frame. The writer task exists only while
frames wait, and one task of the front pings the quiet sockets (`ping_interval_s`),
so an idle connection costs no task or timer of ours (memory per idle session,
bench/ws_stream.py).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import trio

from bridge import telemetry
from bridge.config import Config
from bridge.core.identity import of_scope
from bridge.fronts.chat.config import WsFrontConfig
from bridge.errors import PeerError, codes_for
from bridge.fronts import owners
from bridge.fronts.chat.access import Access
from bridge.fronts.chat.streams import ChatStreams
from bridge.fronts.chat.ws_connection import CLOSE_GOING_AWAY, CLOSE_SLOW, WsConnection
from bridge.fronts.http import Scope
from bridge.session import SessionManager
from bridge.session.grants import Refusals

__all__ = ["CLOSE_GOING_AWAY", "CLOSE_SLOW", "WsFront"]

log = logging.getLogger("bridge.fronts.chat.ws")


class WsFront:
    """The `/ws` handler; one per daemon, shared by every connection."""

    def __init__(self, config: Config, manager: SessionManager, streams: ChatStreams, access: Access) -> None:
        self.cfg = config.section(WsFrontConfig)
        self.manager = manager
        self.streams = streams
        self.access = access
        self.connections: set[WsConnection] = set()  # open sockets, closed at shutdown
        self.closing = False  # the daemon is stopping and its turns have ended: close every socket

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Beside the listener (HttpApp.background): pings quiet sockets, and closes every
        socket once the daemon stops.

        First the drain (`manager.drained`, bridge/service.py): a cancelled run's `turn:end`
        and `chat:end` are queued on its watchers when its turn ends, and no turn starts
        while stopping. Then close 1001 after what is queued; without it, an open socket
        would hold the listener until `[server] graceful_timeout_s`.
        """
        release = self.manager.grants.hold(self._refused, self._revoke, once=False)
        try:
            async with trio.open_nursery() as nursery:
                if self.cfg.ping_interval_s is not None:
                    nursery.start_soon(self._ping_quiet, self.cfg.ping_interval_s)
                task_status.started()
                await self.manager.drained.wait()
                nursery.cancel_scope.cancel()
        finally:
            release()
        self.closing = True
        for conn in list(self.connections):
            conn.close(CLOSE_GOING_AWAY, "the bridge is shutting down", flush=True)

    def _refused(self, config: Config) -> BaseException | None:
        """On a reload (bridge/session/grants.py): the subscriptions whose callers the new
        rules refuse. A caller keeps a session it may still watch, use or answer (the
        sender of a run hears it, `chat:send`); one for all sockets, so an idle
        connection holds nothing for it."""
        refused: list[tuple[Any, BaseException]] = []
        for conn in self.connections:
            for session_id, session in conn.subs.items():
                refusal = owners.refusal(config, session.record, conn.identity, "watch", "use", "answer")
                if refusal is not None:
                    refused.append(((conn, session_id), refusal))
        return Refusals(refused) if refused else None

    def _revoke(self, refusals: BaseException) -> None:
        assert isinstance(refusals, Refusals)
        for (conn, session_id), refusal in refusals.refused:
            try:
                conn.revoked(session_id, refusal)
            except Exception:  # our bug: the others are still revoked
                log.exception("/ws: subscription to %s could not be revoked", session_id)

    async def _ping_quiet(self, interval: float) -> None:
        """One task pings every socket whose client sent nothing for a whole interval
        (so between 1 and 2 intervals after its last frame): a keepalive for idle
        connections and the NATs between, where a timer per connection would cost each
        idle socket a cancel scope (memory per idle session, bench/ws_stream.py)."""
        while True:
            await trio.sleep(interval)
            for conn in list(self.connections):
                conn.ping_if_quiet()

    async def __call__(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        if not self.manager.accepting:  # stopping: the listener itself no longer accepts
            log.info("WebSocket from %s refused: %s", _peer(scope), self.manager.refusal)
            if "websocket.http.response" in scope.get("extensions", {}):
                await _deny(send, 503, self.manager.refusal)
            else:
                await send({"type": "websocket.close", "code": CLOSE_GOING_AWAY})
            return
        try:  # Host and Origin: checked before the upgrade reaches us (bridge/fronts/http_policy.py)
            authed = self.access.check_bearer(scope)
        except PeerError as exc:
            log.warning("WebSocket from %s refused: %s", _peer(scope), exc.message)
            if "websocket.http.response" in scope.get("extensions", {}):
                await _deny(send, codes_for(exc).http, exc.message)
            else:
                await send({"type": "websocket.close", "code": codes_for(exc).ws_close})  # the server answers 403
            return
        conn = WsConnection(self, receive, send, authed=authed, peer=_peer(scope), identity=of_scope(scope))
        telemetry.connection("chat", scope)  # the upgrade's traceparent: the parent of its turns
        try:
            await conn.run()
        except Exception:
            # The connection's boundary (STYLE.md rule 17): our bug ends this socket
            # (close 1011, RFC 6455 §7.4.1), never the listener, a session or another client.
            log.exception("WebSocket connection failed; closed")
            await conn.abort(1011, "internal error")


async def _deny(send: Any, status: int, detail: str) -> None:
    """Refuse the upgrade with an HTTP answer (ASGI `websocket.http.response`)."""
    body = msgspec.json.encode({"detail": detail})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


def _peer(scope: Scope) -> str:
    """The client's address from the ASGI scope (`client`: [host, port]), for a log line."""
    client = scope.get("client")
    if not client:
        return "an unknown peer"
    host, port = client[0], client[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
