"""`/mcp` on the daemon's listener: the MCP front over Streamable HTTP (MCP 2025-11-25, Transports: Streamable HTTP).

The SDK's `StreamableHTTPSessionManager` serves the endpoint (POST, GET, DELETE,
`MCP-Session-Id`, SSE); this module stands in front of it:

- Access, before the SDK sees the request: `HttpApp`'s one browser-safety policy
  (bridge/fronts/http_policy.py: Host, Origin, Content-Type), with `[mcp]
  allowed_origins` added for this path and its refusals said as JSON-RPC errors; then,
  with a token (`[mcp]`'s, else the listener's `[ws]` one), `Authorization: Bearer`
  must carry it (401). With `[[auth.issuers]]`, `HttpApp` checks an issuer's token first
  (bridge/fronts/auth.py) and answers 401 with the RFC 9728 `resource_metadata`
  challenge; `/.well-known/oauth-protected-resource[/mcp]` says which issuers
  (bridge/fronts/resource_metadata.py), so an MCP client can sign in by itself.
- The SDK is imported in a worker thread when the listener starts (~0.75 s, so the
  daemon's start does not wait for it); a request that comes first waits for it.
- Expiry: the session's GET stream (the one response that lasts as long as the client
  likes) of a caller let in by an issuer's JWT is closed when the token expires, as the
  SDK closes a stream for polling (`close_standalone_sse_stream`): the response ends,
  the session goes on (MCP 2025-11-25, Transports: Streamable HTTP, "Resumability and
  Redelivery": a disconnection is not a cancellation), and the client opens it again
  with a fresh token. A POST's SSE response is the answer to a call that was allowed
  when it was made: it runs to that answer, as any request does (its turn is bounded by
  the route's limits).
- Resumption: each session keeps its newest `[mcp] resume_events` events, so a client
  whose stream (a call's, or the GET one) was cut resumes it with `Last-Event-ID`
  (bridge/fronts/mcp/resume.py); an id not kept is 410. While stopping, a call's stream
  still resumes (its turn is drained); the notification stream does not.
- Owner: a session is the caller's that opened it (the identity key noted from the
  `Mcp-Session-Id` of its initialize answer); a request naming it with another identity
  is 404, as the SDK answers an unknown session.
- Shutdown: once the daemon stops accepting (SIGTERM), the standalone GET streams are
  closed and new ones refused, so an idle client's notification stream does not hold
  the listener until its graceful timeout; calls in progress finish (their turns are
  drained like any other).
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import msgspec
import trio

from bridge.config import Config
from bridge.core.identity import SCOPE_KEY, Identity, of_scope
from bridge.fronts.auth import static_identity
from bridge.fronts.expiry import expiry
from bridge.fronts.chat.config import WsFrontConfig
from bridge.fronts.mcp.config import McpFrontConfig
from bridge.fronts.http import HttpApp, Scope, header
from bridge.fronts.mcp.ids import IdGate
from bridge.fronts.resource_metadata import ResourceMetadata
from bridge.prompts.registry import load_module
from bridge.session import SessionManager

__all__ = ["McpHttp", "register"]

log = logging.getLogger("bridge.fronts.mcp.front")

_READY_WAIT_S = 30.0
_CLOSE_AGAIN_S = 0.1  # how often a stream to close is closed again, while it may still register


def register(app: HttpApp, config: Config, manager: SessionManager) -> McpHttp:
    front = McpHttp(config, manager)
    origins = config.section(McpFrontConfig).allowed_origins
    for method in ("POST", "GET", "DELETE"):
        app.add(method, "/mcp", front, origins=origins, refuse=_refuse, static=lambda params: front._token_required)
    if app.auth is not None:  # RFC 9728 §3: where an MCP client finds the issuers (MCP 2025-11-25 Authorization)
        metadata = ResourceMetadata(app.auth)
        app.add("GET", "/.well-known/oauth-protected-resource", metadata.root, public=True)
        app.add("GET", "/.well-known/oauth-protected-resource/mcp", metadata.mcp, public=True)
    app.background(front.run)
    return front


class McpHttp:
    def __init__(self, config: Config, manager: SessionManager) -> None:
        self.config = config
        self.manager = manager
        cfg = config.section(McpFrontConfig)
        if cfg.token_required:
            self._token, where = cfg.token(), "[mcp]"
        elif config.section(WsFrontConfig).token_required:
            self._token, where = config.section(WsFrontConfig).token(), "[ws]"
        else:
            self._token, where = None, None
        self._token_required = where is not None
        if self._token_required and self._token is None:
            log.error("%s names a token for /mcp but gives none: every MCP client is refused", where)
        self._sm: Any = None
        self._resume_events = cfg.resume_events
        self._max_sessions = cfg.max_sessions
        self._get_key = "_GET_stream"  # the SDK's name of the notification stream (its GET_STREAM_KEY, read at start)
        self._owners: dict[str, str] = {}  # MCP session id → the identity key of the caller that opened it
        self._ids = IdGate(config.server.max_body_bytes)
        self._ready = trio.Event()
        self._stopping = False

    # -- the engine ---------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            mcp = await load_module("bridge.fronts.mcp.front")
            resume = await load_module("bridge.fronts.mcp.resume")
            from mcp.server.streamable_http import GET_STREAM_KEY
            from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
            from mcp.server.transport_security import TransportSecuritySettings
        except ImportError as exc:
            log.error("the MCP front cannot start: %s (pip install mcp)", exc)
            self._ready.set()
            return
        self._get_key = GET_STREAM_KEY
        front = mcp.McpFront(self.config, self.manager)
        cfg = self.config.section(McpFrontConfig)
        kept = cfg.resume_events
        manager_class = (
            resume.scoped_manager(StreamableHTTPSessionManager, kept, cfg.resume_bytes) if kept else StreamableHTTPSessionManager
        )
        sm = manager_class(
            app=front.server,
            event_store=resume.Nothing() if kept else None,  # each session gets its own (resume.py)
            # Origin and Host are checked here, before the SDK (it still checks Content-Type).
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            session_idle_timeout=cfg.session_idle_timeout_s,
            max_sessions=cfg.max_sessions,
            max_request_body_size=self.config.server.max_body_bytes,
        )
        try:
            async with sm.run(), trio.open_nursery() as nursery:
                await nursery.start(front.run_notifier)
                nursery.start_soon(self._close_streams_on_stop, sm)
                self._sm = sm
                self._ready.set()
                log.info("MCP front ready at /mcp")
                await trio.sleep_forever()
        finally:
            self._sm = None

    async def _close_streams_on_stop(self, sm: Any) -> None:
        await self.manager.stopping.wait()
        self._stopping = True
        # The SDK keeps its sessions' transports privately; each may hold an open GET
        # stream. Again until the front ends: one resumed as the stop came registers only
        # once its replay is written.
        while True:
            for transport in list(getattr(sm, "_server_instances", {}).values()):
                transport.close_standalone_sse_stream()
            await trio.sleep(_CLOSE_AGAIN_S)

    # -- requests -----------------------------------------------------------------------
    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        if self._token_required and of_scope(scope).via != "jwt":  # an issuer's token: checked by HttpApp
            value = header(scope, "authorization") or ""
            scheme, _, token = value.partition(" ")
            good = self._token is not None and scheme.lower() == "bearer"
            if not (good and hmac.compare_digest(token.strip().encode(), self._token.encode())):  # type: ignore[union-attr]
                return 401, "a valid bearer token is required"
            scope[SCOPE_KEY] = static_identity("mcp")
        return None

    async def __call__(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        refusal = self._refusal(scope)
        if refusal is None and self._sm is None:
            with trio.move_on_after(_READY_WAIT_S):
                await self._ready.wait()
            if self._sm is None:
                refusal = 503, "the MCP front is not available (see the daemon's log)"
        who = of_scope(scope)
        session = header(scope, "mcp-session-id")
        if refusal is None and session is not None and self._owner(session) not in (who.key, None):
            refusal = 404, "Session not found"  # another caller's session: as the SDK says of an unknown one
        stream = None  # the stream a GET resumes (its Last-Event-ID's), or the notification stream
        if refusal is None and scope["method"] == "GET":
            stream, refusal = self._resumes(scope, session)
            if refusal is None and self._stopping and stream == self._get_key:
                refusal = 503, "the bridge is shutting down"  # a call's stream still resumes: its turn is drained
        if refusal is not None:
            status, message = refusal
            log.warning("MCP %s /mcp refused (%d): %s", scope["method"], status, message)
            await _refuse(send, status, message)
            return
        sm = self._sm
        if session is None and scope["method"] == "POST":
            send = self._owned_by(who, send)

        async def handle(replay: Any) -> None:
            if who.expires_at is None or scope["method"] != "GET" or session is None:
                await sm.handle_request(scope, replay, _shielded(send))
                return
            await self._serve_until_expiry(sm, scope, replay, send, who, session, stream)

        # A request reusing an id in flight in its session waits for it (bridge/fronts/mcp/ids.py).
        await self._ids.serve(scope, receive, handle)

    def _resumes(self, scope: Scope, session: str | None) -> tuple[str | None, tuple[int, str] | None]:
        """A GET's stream: the one its `Last-Event-ID` names, else the notification
        stream. An id its session does not keep (too old, or never its) is refused
        with 410, so the client stops trying (an empty stream would have it reconnect
        for ever) and a call's caller hears it is lost."""
        last = header(scope, "last-event-id")
        if last is None or session is None:
            return self._get_key, None
        transport = getattr(self._sm, "_server_instances", {}).get(session)  # the SDK's, private (as below)
        if transport is None:
            return self._get_key, None  # the SDK answers an unknown session (404)
        stream_of = getattr(getattr(transport, "_event_store", None), "stream_of", None)
        stream = stream_of(last) if stream_of is not None else None
        if stream is None:
            kept = f"this session keeps only its newest {self._resume_events} events" if self._resume_events else "no events are kept"
            return None, (410, f"cannot resume after event {last[:32]!r}: {kept}")
        return stream, None

    def _owned_by(self, who: Identity, send: Any) -> Any:
        """`send` of a POST without a session, noting whose the session it opens is: that
        caller's alone from then on (the SDK ties a session to an ASGI `user`, which the
        bridge does not set: its callers are `Identity`s, bridge/core/identity.py)."""

        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start":
                for k, v in message.get("headers", ()):
                    if k.lower() == b"mcp-session-id":
                        self._owners[v.decode("latin-1")] = who.key
                        self._prune_owners()
            await send(message)

        return noting

    def _owner(self, session: str) -> str | None:
        """Whose the session is; None for one the SDK does not have (it answers 404). A
        live one nobody is noted for is nobody's to use: "" (fails closed)."""
        owner = self._owners.get(session)
        if owner is None and session in getattr(self._sm, "_server_instances", {}):
            return ""
        return owner

    def _prune_owners(self) -> None:
        if len(self._owners) <= 2 * self._max_sessions:
            return
        live = getattr(self._sm, "_server_instances", None)  # the SDK's, private (as above)
        if isinstance(live, dict):  # sessions ended since: forget them
            self._owners = {k: v for k, v in self._owners.items() if k in live}
        else:  # an SDK without it: the newest are kept (an older one is, or soon will be, idle-closed)
            self._owners = dict(list(self._owners.items())[-self._max_sessions :])

    async def _serve_until_expiry(
        self, sm: Any, scope: Scope, receive: Any, send: Any, who: Identity, session: str, stream: str | None
    ) -> None:
        """`sm.handle_request` of a GET, its SSE stream (the notification stream, or the
        one it resumes) closed by the SDK if it is still open when `who`'s token expires
        (the module's docstring says why that way)."""
        sse = trio.Event()
        inner = _shielded(send)

        async def watched(message: Any) -> None:
            await inner(message)
            if message["type"] == "http.response.start" and _is_sse(message):
                # Sent: the SDK has filed the GET stream's writer (its task runs beside this
                # one, and ran while this was sent).
                sse.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._close_at_expiry, sm, session, stream or self._get_key, who, sse)
            await sm.handle_request(scope, receive, watched)
            nursery.cancel_scope.cancel()

    async def _close_at_expiry(self, sm: Any, session: str, stream: str, who: Identity, sse: trio.Event) -> None:
        await sse.wait()
        await expiry(who)
        while True:  # until it is registered: a resumed stream registers once its replay is written
            transport = getattr(sm, "_server_instances", {}).get(session)  # kept privately by the SDK, as above
            if transport is None:
                return  # the session is gone, and its streams with it
            streams = getattr(transport, "_request_streams", None)  # the SDK's, private: a stream's, once registered
            registered = not isinstance(streams, dict) or stream in streams
            if registered:
                try:
                    transport.close_sse_stream(stream)
                except Exception:  # the SDK's, or an SDK without it: this stream stays, nothing else is touched
                    log.exception("MCP session %s: a GET stream of %s could not be closed at its token's expiry", session, who.subject)
                    return
                log.info("MCP session %s: the GET stream of %s closed as its token expired", session, who.subject)
                return  # closed once: a stream opened next (with a fresh token) is not this one
            await trio.sleep(_CLOSE_AGAIN_S)


def _is_sse(start: Any) -> bool:
    return any(k.lower() == b"content-type" and v.startswith(b"text/event-stream") for k, v in start.get("headers", ()))


def _shielded(send: Any) -> Any:
    """The ASGI `send`, each call shielded from cancellation.

    The SDK (sse-starlette) cancels its task group right after the last body message
    of an SSE response; hypercorn does its end-of-response bookkeeping inside that
    `send` (making the keep-alive connection idle), and a cancel landing there leaves
    the connection neither idle nor closed: at shutdown it then holds the listener
    until the graceful timeout. hypercorn already shields the socket write itself.
    """

    async def send_shielded(message: Any) -> None:
        with trio.CancelScope(shield=True):
            await send(message)

    return send_shielded


async def _refuse(send: Any, status: int, message: str, *, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    """A JSON-RPC error without an id, as the SDK answers refusals (MCP 2025-11-25, Transports: Streamable HTTP)."""
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}})
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers]
    if status == 401 and not headers:
        raw.append((b"www-authenticate", b"Bearer"))
    headers = raw  # type: ignore[assignment]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
