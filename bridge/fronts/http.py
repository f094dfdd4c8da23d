"""The daemon's HTTP surface: a small ASGI router that every HTTP front plugs into.

hypercorn (trio worker) serves one `HttpApp` on one port. A front registers its
paths (`add` for HTTP, `websocket` for WebSocket) with a handler taking the ASGI
triple and the path's named groups. Errors a handler raises as `BridgeError` become
`{"detail": ...}` JSON with the status from `bridge/errors.py`. A front that needs tasks
for the listener's whole life (the MCP front's session manager) registers them with
`background`: they run from the ASGI lifespan startup to its shutdown.

Every request and WebSocket upgrade passes the one browser-safety policy
(bridge/fronts/http_policy.py: Host, Origin, Content-Type) here, before any handler:
a front adds only its own extra origins (`origins=`) and, if its clients expect
another error shape than `{"detail": ...}`, how to say the refusal (`refuse=`).

Then, with `[[auth.issuers]]`, the one authentication step (bridge/fronts/auth.py) on
every path not registered `public=True`: a valid issuer token puts the caller's
`Identity` in the scope (`SCOPE_KEY`), a bad one is a 401 here; a path whose front has
its own static token says so (`static=`) and the front checks that token; any other
request without a token is a 401 here.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import msgspec
import trio

from bridge.config import ServerConfig
from bridge.core.identity import SCOPE_KEY
from bridge.errors import BridgeError, FrameTooLarge, InvalidRequest, PeerError, codes_for
from bridge.fronts.auth import AuthRefused, Authenticator
from bridge.fronts.http_policy import BrowserPolicy, normalize_origins

__all__ = ["HttpApp", "Scope", "header", "read_body", "send_bytes", "send_json"]

log = logging.getLogger("bridge.fronts.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
Handler = Callable[[Scope, Receive, Send, dict[str, str]], Awaitable[None]]
# How a front says a policy or authentication refusal: (send, status, detail, headers=...).
Refuse = Callable[..., Awaitable[None]]
# Whether a path's front checks a static token of its own, from the path's named groups.
Static = Callable[[dict[str, str]], bool]

_json = msgspec.json.Encoder()
_DEFAULT_SERVER = ServerConfig()


async def send_bytes(
    send: Send, status: int, body: bytes, *, content_type: str = "application/json", headers: list[tuple[str, str]] = ()  # type: ignore[assignment]
) -> None:
    raw = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Send, status: int, body: Any, *, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    await send_bytes(send, status, _json.encode(body), headers=headers)


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("client disconnected while sending the body")
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise FrameTooLarge(f"request body over max_body_bytes ({limit})")
        chunks.append(body)
        if not message.get("more_body"):
            return b"".join(chunks)


def header(scope: Scope, name: str) -> str | None:
    key = name.lower().encode()
    for k, v in scope.get("headers", ()):
        if k == key:
            return v.decode("latin-1")
    return None


async def _refuse_json(send: Send, status: int, detail: str, *, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    await send_json(send, status, {"detail": detail}, headers=headers)


def _no_static(params: dict[str, str]) -> bool:
    return False


class _Route:
    __slots__ = ("method", "pattern", "handler", "origins", "refuse", "public", "static", "resource")

    def __init__(self, method: str, path: str, handler: Handler, origins: frozenset[str], refuse: Refuse,
                 public: bool = False, static: Static = _no_static) -> None:  # fmt: skip
        self.method, self.pattern, self.handler = method, _compile(path), handler
        self.origins, self.refuse, self.public, self.static = origins, refuse, public, static
        self.resource = "/mcp" if path == "/mcp" else ""  # RFC 9728 §3.1: its own metadata URL


class HttpApp:
    def __init__(self, policy: BrowserPolicy | None = None, auth: Authenticator | None = None) -> None:
        self.policy = policy if policy is not None else BrowserPolicy(_DEFAULT_SERVER)
        # The issuers' tokens (None: no `[[auth.issuers]]`, only the fronts' static tokens).
        self.auth = auth if auth is not None and auth.enabled else None
        self._http: list[_Route] = []
        self._ws: list[_Route] = []
        self._background: list[Callable[..., Awaitable[None]]] = []
        # The daemon's readiness probes (bridge/doctor.py `Readiness`), for a front that
        # shows routes' health from the same cache as /readyz; None: not checked.
        self.readiness: Any = None

    def add(self, method: str, path: str, handler: Handler, *, origins: Iterable[str] = (), refuse: Refuse | None = None,
            public: bool = False, static: Static = _no_static) -> None:  # fmt: skip
        """`path` may hold `{name}` segments; they reach the handler by name. `origins`:
        browser origins this path accepts beside `[server] allowed_origins` and loopback.
        `public`: no authentication (agent cards, the console's files, probes with their
        own operators' token); `static`: whether the front checks its own token there."""
        self._http.append(_Route(method, path, handler, normalize_origins(origins), refuse or _refuse_json, public, static))

    def websocket(self, path: str, handler: Handler, *, origins: Iterable[str] = ()) -> None:
        """The handler authenticates a client that sends no Authorization header itself
        (a browser cannot: its first frame carries the token)."""
        self._ws.append(_Route("GET", path, handler, normalize_origins(origins), _refuse_json))

    async def _authenticate(self, route: _Route, scope: Scope, params: dict[str, str]) -> tuple[int, str, str] | None:
        """None if the request may go on (its identity, if any, in the scope), else
        (status, detail, WWW-Authenticate)."""
        auth = self.auth
        if auth is None or route.public:
            return None
        try:
            identity = await auth.identify(scope)
        except AuthRefused as exc:
            if not exc.shaped and route.static(params):
                return None  # not a JWT at all: the front's own token decides
            return 401, exc.reason, auth.challenge(scope, exc.reason, resource_path=route.resource)
        if identity is not None:
            scope[SCOPE_KEY] = identity
        elif scope["type"] == "http" and not route.static(params):
            detail = "a bearer token from a configured issuer is required"
            return 401, detail, auth.challenge(scope, resource_path=route.resource)
        return None

    def background(self, run: Callable[..., Awaitable[None]]) -> None:
        """`run(task_status=...)` runs beside the listener (lifespan startup to shutdown)."""
        self._background.append(run)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._serve_http(scope, receive, send)
        elif kind == "websocket":
            await self._serve_ws(scope, receive, send)

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        allowed: list[str] = []
        for route in self._http:
            m = route.pattern.fullmatch(path)
            if m is None:
                continue
            if route.method != scope["method"]:
                allowed.append(route.method)
                continue
            refusal = self.policy.check(scope, route.origins)
            if refusal is not None:
                log.warning("%s %s refused (%d): %s", scope["method"], path, *refusal)
                await route.refuse(send, *refusal)
                return
            params = m.groupdict()
            refused = None if self.auth is None else await self._authenticate(route, scope, params)  # no issuers: no coroutine per request
            if refused is not None:
                log.warning("%s %s refused (401): %s", scope["method"], path, refused[1])
                # Refused before its body was read, the connection cannot carry another
                # request (RFC 9112 §9.6): say so, or a client may send its next one on it
                # as the server closes it ("disconnected without a response").
                await route.refuse(send, refused[0], refused[1], headers=[("www-authenticate", refused[2]), ("connection", "close")])
                return
            try:
                await route.handler(scope, receive, send, params)
            except PeerError as exc:
                log.warning("%s %s: %s", scope["method"], path, exc.message)
                await send_json(send, codes_for(exc).http, {"detail": exc.message})
            except BridgeError as exc:
                log.warning("%s %s failed: %s", scope["method"], path, exc.message)
                await send_json(send, codes_for(exc).http, {"detail": exc.message})
            except Exception:
                # One request's boundary (STYLE.md rule 17): our bug is this client's 500
                # and a log line, never the listener's or another client's.
                log.exception("%s %s failed", scope["method"], path)
                await _internal_error(send)
            return
        refusal = self.policy.check(scope)
        if refusal is not None:  # not even a 404 or 405 for a page that may not ask
            log.warning("%s %s refused (%d): %s", scope["method"], path, *refusal)
            await _refuse_json(send, *refusal)
        elif allowed:
            await send_json(send, 405, {"detail": f"method not allowed; use {', '.join(sorted(set(allowed)))}"},
                            headers=[("allow", ", ".join(sorted(set(allowed))))])
        else:
            await send_json(send, 404, {"detail": f"no such path: {path}"})

    async def _serve_ws(self, scope: Scope, receive: Receive, send: Send) -> None:
        for route in self._ws:
            m = route.pattern.fullmatch(scope["path"])
            if m is None:
                continue
            refusal = self.policy.check(scope, route.origins)
            challenge: list[tuple[bytes, bytes]] = []
            if refusal is None:
                refused = None if self.auth is None else await self._authenticate(route, scope, m.groupdict())
                if refused is None:
                    await route.handler(scope, receive, send, m.groupdict())
                    return
                refusal, challenge = refused[:2], [(b"www-authenticate", refused[2].encode())]
            log.warning("WebSocket %s refused (%d): %s", scope["path"], *refusal)
            await receive()  # websocket.connect
            if "websocket.http.response" in scope.get("extensions", {}):
                body = _json.encode({"detail": refusal[1]})
                headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *challenge]
                await send({"type": "websocket.http.response.start", "status": refusal[0], "headers": headers})
                await send({"type": "websocket.http.response.body", "body": body})
            else:
                await send({"type": "websocket.close", "code": 1008})  # before accept: the server answers 403
            return
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 4404})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    for run in self._background:
                        await nursery.start(run)
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    nursery.cancel_scope.cancel()
                    break
        await send({"type": "lifespan.shutdown.complete"})


async def _internal_error(send: Send) -> None:
    try:
        await send_json(send, 500, {"detail": "internal error"})
    except Exception:  # the answer had begun, or the client is gone: the log line says it all
        log.debug("no 500 sent after a failure", exc_info=True)


def _compile(path: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path))

