"""The A2A front: every route as an A2A agent at `/a2a/{route}` (A2A spec, docs/specification.md), 1.0 and 0.3.

Under `/a2a/{route}` on the daemon's listener:

    GET  /.well-known/agent-card.json        the agent card (no auth; ETag, Cache-Control)
    POST (the interface URL itself)          JSON-RPC: every method of both dialects
    POST /message:send | /message:stream     HTTP+JSON 1.0 (A2A spec §5.3), and
    GET  /tasks, /tasks/{id}                 the same paths under /v1 for 0.3
    POST /tasks/{id}:cancel                  (0.3 has no ListTasks, and GET /v1/card
    POST|GET /tasks/{id}:subscribe           for the extended card)
    POST|GET|DELETE /tasks/{id}/pushNotificationConfigs[/{configId}]
    GET  /extendedAgentCard

and `/.well-known/agent-card.json` at the root for `[a2a] default_route` (else the
config's `default_route`, else the only route).

Dialect: the `A2A-Version` header; without it a request is 0.3 (A2A spec, versioning: a missing `A2A-Version` means 0.3) and is
answered in 0.3 shapes; a 1.0 method or path without it is VersionNotSupportedError
saying to send the header. Cards: a client that asks with `A2A-Version: 1.x` gets
a plain 1.0 card; any other request gets the merged card (1.0 fields and the 0.3
ones, as a2a-sdk's own server writes it), which 0.3 clients read and 1.0 clients
parse as 1.0 (`Vary: A2A-Version`). Both list JSON-RPC and HTTP+JSON for 1.0, then
for 0.3, at the same URL.

Auth (`[routes.NAME.a2a] token_env|token_file`, `api_key_header`): every call but
the card needs the token: none → 401 (`WWW-Authenticate`), a wrong one → 403; the
card's `securitySchemes` / `securityRequirements` say which. An SSE stream opened
with an issuer's JWT ends when the token expires (bridge/fronts/a2a/stream.py). Requests must be JSON
(`application/json`, `application/a2a+json`, or no Content-Type): anything else is
415 with ContentTypeNotSupportedError. Errors carry a `google.rpc.ErrorInfo`
(A2A spec, error handling): JSON-RPC answers them with HTTP 200, HTTP+JSON with the mapped status.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import logging
from typing import Any

import msgspec

from bridge import telemetry
from bridge.codecs import a2a_server as wire
from bridge.codecs.a2a_card import CardSpec, publish_card, skills_for
from bridge.codecs.a2a_server_rest import REST_ROUTES, rest_request
from bridge.codecs.a2a_server import A2AFault, EventEncoder
from bridge.codecs.a2a_dialect import Binding, Dialect
from bridge.config import Config, Route
from bridge.fronts.a2a.config import A2AFrontConfig, A2ARouteConfig
from bridge.core.identity import of_scope
from bridge.errors import BridgeError, FrameTooLarge, InternalError, Overloaded, PeerError, RateLimited, codes_for
from bridge.core.access import Action
from bridge.fronts import owners
from bridge.fronts.a2a.access import TaskAccess
from bridge.fronts.a2a.push import PushService
from bridge.fronts.a2a.remote import follow
from bridge.fronts.a2a.stream import SseStream
from bridge.fronts.a2a.tasks import TaskService
from bridge.core.identity import SCOPE_KEY
from bridge.fronts.auth import static_identity
from bridge.fronts.expiry import expiry
from bridge.fronts.http import HttpApp, Scope, header, read_body, send_bytes
from bridge.logs import add_secret
from bridge.schema import a2a as s
from bridge.session import SessionManager

__all__ = ["A2AFront", "register"]

log = logging.getLogger("bridge.fronts.a2a.front")

_enc = msgspec.json.Encoder()
_BY_CODE = {code: name for name, (code, _, _) in s.ERRORS.items()}
_JSON_TYPES = ("application/json", "application/a2a+json")
_CARD_PATH = "/.well-known/agent-card.json"


class _HttpError(Exception):
    """Refused before any A2A processing: unknown route, auth, content type."""

    def __init__(self, status: int, message: str, reason: str, headers: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.reason, self.headers = status, message, reason, headers or []


class _WrongContentType(A2AFault):
    """The request's own Content-Type (HTTP 415), not a part's media type (-32005 alone)."""


def _fault(exc: BridgeError) -> A2AFault:
    if isinstance(exc, RateLimited):
        meta = {"retryAfterSeconds": str(exc.retry_after_s), "limit": exc.limit, "scope": exc.scope}  # ErrorInfo metadata: strings
        return wire.RateLimitedFault(exc.message, retry_after_s=exc.retry_after_s, metadata=meta)
    if isinstance(exc, FrameTooLarge):
        return A2AFault("InvalidRequest", exc.message)
    return A2AFault(_BY_CODE.get(codes_for(exc).a2a, "Internal"), exc.message)


class A2AFront:
    def __init__(self, config: Config, manager: SessionManager) -> None:
        self.cfg = config.section(A2AFrontConfig)
        self.max_body = config.server.max_body_bytes
        self.default_route = config.section(A2AFrontConfig).default_route or config.default_route
        self.manager = manager
        self.tasks = TaskService(config.section(A2AFrontConfig), manager)
        self.push = PushService(config.section(A2AFrontConfig), self.tasks)
        self.access = TaskAccess(manager, self.tasks)  # [routes.NAME.access] on contexts and tasks
        self._tokens: dict[str, tuple[Route, str | None]] = {}

    def register(self, app: HttpApp) -> None:
        app.add("GET", _CARD_PATH, self.default_card, public=True)  # cards are public (A2A 1.0 §8.2)
        base = "/a2a/{route}"
        app.add("GET", base + _CARD_PATH, self.card, public=True)
        # Host, Origin and Content-Type are HttpApp's one policy, and so is the issuers'
        # authentication; its refusals in our shapes. A route's own token is checked here.
        app.add("POST", base, self.rpc, refuse=_refuse_rpc, static=self._has_token)
        app.add("POST", base + "/", self.rpc, refuse=_refuse_rpc, static=self._has_token)
        for method, path, op, dialect in REST_ROUTES:
            app.add(method, base + path, self._rest_handler(op, dialect), refuse=_refuse_rest, static=self._has_token)

    def _has_token(self, params: dict[str, str]) -> bool:
        route = self.manager.config.routes.get(params.get("route", ""))
        return route is not None and route.section(A2ARouteConfig).token_required

    # -- checks ------------------------------------------------------------------------------
    def _route(self, name: str) -> Route:
        route = self.manager.config.routes.get(name)
        if route is None or not route.section(A2ARouteConfig).expose:
            raise _HttpError(404, f"no A2A agent named {name!r} here", "NOT_FOUND")
        return route

    def _token(self, name: str, route: Route) -> str | None:
        cached = self._tokens.get(name)
        if cached is None or cached[0] is not route:  # read once per route config (a reload makes a new one)
            token = route.section(A2ARouteConfig).token()
            add_secret(token)
            if token is None:
                log.error("route %s: its A2A token cannot be read: every A2A call is refused", name)
            cached = self._tokens[name] = (route, token)
        return cached[1]

    def _auth(self, name: str, route: Route, scope: Scope) -> None:
        a = route.section(A2ARouteConfig)
        if not a.token_required or of_scope(scope).via == "jwt":  # an issuer's token: checked by HttpApp
            return
        token = self._token(name, route)
        if a.api_key_header:
            given = header(scope, a.api_key_header)
        else:
            value = header(scope, "authorization")
            scheme, _, rest = (value or "").partition(" ")
            given = rest.strip() if value is not None and scheme.lower() == "bearer" else None
            if value is not None and given is None:
                given = ""  # some other scheme: a credential, but not the right one
        challenge = [("www-authenticate", f'Bearer realm="a2a/{name}"' if not a.api_key_header else f'ApiKey header="{a.api_key_header}"')]
        if given is None:
            raise _HttpError(401, "authentication required: send the route's token", "UNAUTHENTICATED", challenge)
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            raise _HttpError(403, "the token is not valid for this agent", "PERMISSION_DENIED")
        scope[SCOPE_KEY] = static_identity(f"a2a/{name}")

    @staticmethod
    def _content_type(scope: Scope) -> None:
        ctype = header(scope, "content-type")
        if ctype is not None and ctype.split(";")[0].strip().lower() not in _JSON_TYPES:
            want = "application/json or application/a2a+json"
            raise _WrongContentType("ContentTypeNotSupported", f"requests are JSON ({want}), not {ctype!r}")

    async def _body(self, receive: Any) -> bytes:
        try:
            return await read_body(receive, self.max_body)
        except FrameTooLarge as exc:
            raise _HttpError(413, exc.message, "INVALID_REQUEST") from exc

    # -- cards ---------------------------------------------------------------------------------
    async def default_card(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        routes = [n for n, r in self.manager.config.routes.items() if r.section(A2ARouteConfig).expose]
        name = self.default_route or (routes[0] if len(routes) == 1 else None)
        if name is None:
            where = f"no default A2A agent; the agents are at /a2a/NAME{_CARD_PATH} for NAME in {routes}"
            await _plain_error(send, _HttpError(404, where, "NOT_FOUND"))
            return
        await self.card(scope, receive, send, {"route": name})

    async def card(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        name = params["route"]
        try:
            route = self._route(name)
            try:
                legacy = wire.dialect_of(header(scope, s.A2A_VERSION_HEADER)) is Dialect.V0_3
            except A2AFault:
                legacy = True
            doc = await self._card(name, route, scope, legacy=legacy, extended=False)
        except _HttpError as exc:
            await _plain_error(send, exc)
            return
        body = _enc.encode(doc)
        etag = f'W/"{hashlib.sha256(body).hexdigest()[:32]}"'
        headers = [("etag", etag), ("cache-control", f"public, max-age={self.cfg.card_max_age_s}"), ("vary", "A2A-Version")]
        match = header(scope, "if-none-match")
        if match and any(t.strip().removeprefix("W/") in ("*", etag.removeprefix("W/")) for t in match.split(",")):
            await send({"type": "http.response.start", "status": 304, "headers": [(k.encode(), v.encode()) for k, v in headers]})
            await send({"type": "http.response.body", "body": b""})
            return
        await send_bytes(send, 200, body, headers=headers)

    async def _card(self, name: str, route: Route, scope: Scope, *, legacy: bool, extended: bool) -> dict[str, object]:
        back = self.manager.back_for(name)
        await back.ready()  # an A2A back reads its agent's card first (never raises)
        a = route.section(A2ARouteConfig)
        title = route.title or back.info.title or name
        description = route.description or back.info.description or f"{title}, served by agent-bridge"
        own = [*a.skills, *(a.extended_skills if extended else ())]
        skills = [s.AgentSkill(id=k.id, name=k.name, description=k.description, tags=k.tags, examples=k.examples or None) for k in own]
        commands = back.info.commands
        prompts = getattr(self.manager, "prompts", None)
        if prompts is not None:
            commands = prompts.merged(name, commands)  # the route's prompts are slash commands too
        skills += skills_for(commands, route=name, title=title, description=description)
        auth = None if not a.token_required else (("api_key", a.api_key_header) if a.api_key_header else ("bearer", ""))
        provider = s.AgentProvider(organization=a.provider_organization, url=a.provider_url or "") if a.provider_organization else None
        spec = CardSpec(
            name=title, description=description, version=route.version, url=f"{self._base(scope)}/a2a/{name}", streaming=True,
            push_notifications=self.push.enabled, extended_card=a.extended_card, auth=auth, skills=skills, provider=provider,
            documentation_url=a.documentation_url, icon_url=a.icon_url,
            issuers=tuple(i.issuer for i in self.manager.config.auth.issuers),
        )  # fmt: skip
        return publish_card(spec, legacy=legacy)

    def _base(self, scope: Scope) -> str:
        if self.cfg.public_url:
            return self.cfg.public_url.rstrip("/")
        host = header(scope, "host")
        if not host:
            server = scope.get("server") or ("127.0.0.1", 80)
            host = f"{server[0]}:{server[1]}"
        return f"{scope.get('scheme', 'http')}://{host}"

    # -- JSON-RPC ------------------------------------------------------------------------------
    async def rpc(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        name = params["route"]
        rid: Any = None
        try:
            route = self._route(name)
            self._auth(name, route, scope)
            telemetry.incoming("a2a", scope=scope)  # W3C traceparent: its turn joins the client's trace
            body = await self._body(receive)
            try:
                self._content_type(scope)
                env = wire.decode_envelope(body)
                rid = env.id if env.id is not msgspec.UNSET else None
                dialect = wire.dialect_of(header(scope, s.A2A_VERSION_HEADER))
                op = wire.rpc_op(env.method, dialect)  # type: ignore[arg-type]
                req = wire.decode_params(op, dialect, env.params)
                if op in ("stream", "subscribe"):
                    stream, record = await self._open_stream(name, route, scope, op, req, EventEncoder(dialect, Binding.JSONRPC, _enc.encode(rid)))
                    await self._serve_stream(name, scope, op, stream, record, send, receive)
                    return
                result = await self._call(name, route, scope, op, req, dialect)
                out = wire.rpc_result(rid, wire.answer(op, dialect, Binding.JSONRPC, result))
            except BridgeError as exc:
                _log(exc, scope)
                fault = _fault(exc)
                out = wire.rpc_error(rid, fault)
            except A2AFault as fault:
                log.warning("A2A %s %s: %s", name, fault.name, fault.message)
                rid = fault.request_id if rid is None else rid
                if isinstance(fault, _WrongContentType):
                    await send_bytes(send, 415, wire.rpc_error(rid, fault))
                    return
                out = wire.rpc_error(rid, fault)
            await send_bytes(send, 200, out)
        except _HttpError as exc:
            log.warning("A2A %s: %s", name, exc.message)
            info = {"@type": s.ERROR_INFO_TYPE, "reason": exc.reason, "domain": "a2a-protocol.org"}
            error = {"code": codes_for(PeerError("")).a2a, "message": exc.message, "data": [info]}
            await send_bytes(send, exc.status, _enc.encode({"jsonrpc": "2.0", "id": rid, "error": error}), headers=exc.headers)

    # -- HTTP+JSON -----------------------------------------------------------------------------
    def _rest_handler(self, op: str, path_dialect: Dialect) -> Any:
        async def handle(scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
            await self._rest(scope, receive, send, params, op, path_dialect)

        return handle

    async def _rest(self, scope: Scope, receive: Any, send: Any, params: dict[str, str], op: str, path_dialect: Dialect) -> None:
        name = params["route"]
        dialect = path_dialect
        ctype = "application/a2a+json" if dialect is Dialect.V1_0 else "application/json"
        try:
            route = self._route(name)
            self._auth(name, route, scope)
            telemetry.incoming("a2a", scope=scope)
            body = await self._body(receive)
            try:
                self._content_type(scope)
                asked = wire.dialect_of(header(scope, s.A2A_VERSION_HEADER))
                if asked is not path_dialect:
                    where = "without the /v1 prefix" if asked is Dialect.V1_0 else "under /v1, or send A2A-Version: 1.0"
                    why = f"this is an A2A {path_dialect.value} path but the request is A2A {asked.value}; use the paths {where}"
                    raise A2AFault("VersionNotSupported", why)
                req = rest_request(op, dialect, body, params, scope.get("query_string", b""))
                if op in ("stream", "subscribe"):
                    stream, record = await self._open_stream(name, route, scope, op, req, EventEncoder(dialect, Binding.HTTP_JSON, b"null"))
                    await self._serve_stream(name, scope, op, stream, record, send, receive)
                    return
                result = await self._call(name, route, scope, op, req, dialect)
                await send_bytes(send, 200, wire.answer(op, dialect, Binding.HTTP_JSON, result), content_type=ctype)
            except BridgeError as exc:
                _log(exc, scope)
                fault = _fault(exc)
                status = 413 if isinstance(exc, FrameTooLarge) else 429 if isinstance(exc, RateLimited) else 503 if isinstance(exc, Overloaded) else None
                code, err = wire.rest_error(fault, dialect, status=status)
                after = [("retry-after", str(exc.retry_after_s))] if isinstance(exc, RateLimited) else []
                await send_bytes(send, code, err, content_type="application/json", headers=after)
            except A2AFault as fault:
                log.warning("A2A %s %s: %s", name, fault.name, fault.message)
                code, err = wire.rest_error(fault, dialect, status=415 if isinstance(fault, _WrongContentType) else None)
                await send_bytes(send, code, err, content_type="application/json")
        except _HttpError as exc:
            log.warning("A2A %s: %s", name, exc.message)
            await _plain_error(send, exc)

    # -- operations ----------------------------------------------------------------------------
    async def _call(self, name: str, route: Route, scope: Scope, op: str, req: Any, dialect: Dialect) -> Any:
        owner = await self.access.allowed(name, route, of_scope(scope), op, req)
        if op == "send":
            live = await self.tasks.send(name, req, dialect=dialect.value, owner=owner, identity=of_scope(scope))
            config = req.configuration
            if config is None or not config.return_immediately:
                await live.wait_stopped()
            await self.tasks.publish(live)
            return live.projector.snapshot(history_length=_history(config.history_length if config else None))
        if op == "get_task":
            return (await self.tasks.task(name, req.id)).snapshot(history_length=_history(req.history_length))
        if op == "list_tasks":
            return await self.tasks.list(name, req, owners.visibility(self.manager.config, of_scope(scope)))
        if op == "cancel":
            return (await self.tasks.cancel(name, req.id)).snapshot()
        if op == "create_push_config":
            return await self.push.create(name, req, dialect=dialect.value, creator=of_scope(scope))
        if op == "get_push_config":
            return await self.push.get(name, req.task_id, req.id)
        if op == "list_push_configs":
            return await self.push.list(name, req)
        if op == "delete_push_config":
            await self.push.delete(name, req.task_id, req.id)
            return None
        if op == "extended_card":
            if not route.section(A2ARouteConfig).extended_card:
                raise A2AFault("ExtendedAgentCardNotConfigured", "this agent has no extended card")
            return await self._card(name, route, scope, legacy=dialect is Dialect.V0_3, extended=True)
        raise InternalError(f"unhandled A2A operation {op}")

    async def _serve_stream(self, name: str, scope: Scope, op: str, stream: SseStream, record: Any, send: Any, receive: Any) -> None:
        """The stream's response, ended when its caller's token expires, or when a reload's
        rules refuse it the task's context (`record`; bridge/fronts/a2a/stream.py)."""
        who = of_scope(scope)
        until = None if who.expires_at is None else functools.partial(expiry, who)
        # Kept while the caller may do what opened it: follow the task (SubscribeToTask), or
        # follow or message it (SendStreamingMessage); checked now too, for a reload that
        # came while the stream was being opened.
        actions: tuple[Action, ...] = ("watch",) if op == "subscribe" else ("watch", "use")
        release = owners.hold(self.manager, record, who, actions, stream.revoke)
        try:
            await stream.run(send, receive, heartbeat_s=self.cfg.heartbeat_s, until=until)
        finally:
            release()
        if stream.expired:
            log.info("A2A %s: a stream of %s ended as its token expired (SubscribeToTask with a fresh one resumes)", name, who.subject)
        elif stream.revoked:
            log.info("A2A %s: a stream of %s ended: the reloaded access rules refuse it the task", name, who.subject)

    async def _open_stream(
        self, name: str, route: Route, scope: Scope, op: str, req: Any, encoder: EventEncoder
    ) -> tuple[SseStream, Any]:
        """The stream, with its first event queued, and the record of the task's context;
        errors before it are raised (answered as errors, not SSE)."""
        owner = await self.access.allowed(name, route, of_scope(scope), op, req)
        stream = SseStream(encoder, self.cfg.stream_queue_max_events, to_end=op == "subscribe")
        if op == "stream":
            live = await self.tasks.send(name, req, dialect=encoder.dialect.value, owner=owner, identity=of_scope(scope))
            await self.tasks.publish(live)
            config = req.configuration
            live.attach(stream, history_length=_history(config.history_length if config else None))
            return stream, live.session.record
        live = self.tasks.live.get(req.id) or await follow(self.tasks, name, req.id)
        if live is not None and live.session.record.route == name:
            self.tasks.waiting.check(req.id, running=sum(st.to_end for st in live.streams))
            live.attach(stream)
            return stream, live.session.record
        # Interrupted, its turn over: open until a message continues it.
        return stream, await self.tasks.subscribe_waiting(name, req.id, stream)


def _history(value: int | None) -> int | None:
    if value is not None and value < 0:
        raise A2AFault("InvalidParams", f"historyLength must not be negative, got {value}")
    return value


def _log(exc: BridgeError, scope: Scope) -> None:
    if isinstance(exc, PeerError):
        log.warning("A2A %s: %s", scope["path"], exc.message)
    elif isinstance(exc, InternalError):
        log.error("A2A %s failed: %s", scope["path"], exc.message, exc_info=exc)
    else:
        log.warning("A2A %s: %s", scope["path"], exc.message)


async def _refuse_rpc(send: Any, status: int, detail: str, *, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    """A browser-policy or authentication refusal (bridge/fronts/http.py) as a JSON-RPC error."""
    if status == 415:
        await send_bytes(send, 415, wire.rpc_error(None, _WrongContentType("ContentTypeNotSupported", detail)))
        return
    reason = "UNAUTHENTICATED" if status == 401 else "PERMISSION_DENIED"
    info = {"@type": s.ERROR_INFO_TYPE, "reason": reason, "domain": "a2a-protocol.org"}
    error = {"code": codes_for(PeerError("")).a2a, "message": detail, "data": [info]}
    await send_bytes(send, status, _enc.encode({"jsonrpc": "2.0", "id": None, "error": error}), headers=headers)


async def _refuse_rest(send: Any, status: int, detail: str, *, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
    """A browser-policy or authentication refusal as an HTTP+JSON `google.rpc.Status` body."""
    reason = {415: "CONTENT_TYPE_NOT_SUPPORTED", 401: "UNAUTHENTICATED"}.get(status, "PERMISSION_DENIED")
    await _plain_error(send, _HttpError(status, detail, reason, list(headers)))


async def _plain_error(send: Any, exc: _HttpError) -> None:
    """An error before any A2A processing, as a `google.rpc.Status` body."""
    status = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT",
              415: "INVALID_ARGUMENT", 421: "PERMISSION_DENIED"}.get(exc.status, "UNKNOWN")  # fmt: skip
    info = {"@type": s.ERROR_INFO_TYPE, "reason": exc.reason, "domain": "a2a-protocol.org"}
    body = _enc.encode({"error": {"code": exc.status, "status": status, "message": exc.message, "details": [info]}})
    await send_bytes(send, exc.status, body, headers=exc.headers)


def register(app: HttpApp, config: Config, manager: SessionManager) -> A2AFront:
    front = A2AFront(config, manager)
    front.register(app)
    return front
