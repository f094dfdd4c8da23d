"""The chat REST API (Blade Agent API docs, api/rest.md: sessions and `GET /api/sessions/{id}/messages`), beside `/ws` on the daemon's port.

    POST   /api/sessions                 {route?, intent?} → {session_id}
    GET    /api/sessions?limit&offset&route&front&status&q&counts=1
                                         → {sessions, total, limit, offset, counts?}, newest first
    GET    /api/sessions/{id}            → one session, with its status, commands and last_seq
    GET    /api/sessions/{id}/messages?limit&before
                                         → the turn projections of one page of runs
    DELETE /api/sessions/{id}            → stops its run, forgets it and its events
    GET    /api/routes                   → the routes, their commands, options and health
                                           (bridge/fronts/chat/routes_api.py)

Errors are `{"detail": ...}` with the status of `bridge/errors.py`. The same bearer
token and Origin allow-list as `/ws` apply; allowed browser origins get CORS headers
(and preflight answers), so a chat page on another origin can call the API.

A session's status comes from the summary its record keeps (`turn_count`, `last_stop`,
`last_cut`) and from the live session, never from its turns, so a listing costs the
same however long the sessions' histories are. The listing's filters are the store's
(bridge/store/listing.py: `front`, `status`, `q` a title search; `route` a configured
route), each value outside its set a 400 naming the allowed ones, as is a query
parameter it does not know; `counts=1` adds the sessions by status, front and route
(one more query: a GROUP BY over the session rows).

`/messages` is a JSON array of turn projections (the Blade shape), oldest first, of the
newest `limit` runs (default 50, at most 200; a run is one `chat:send` … `chat:end`).
Older pages are asked with `before=<cursor>`: the cursor of the next older page comes in
`X-Next-Cursor` and in `Link: <...>; rel="next"`, absent on the oldest page; a cursor
that is not one of ours is 400. Each page costs the same however long the history: its
runs are re-derived from the first one's checkpoint (bridge/fronts/chat/replay.py).
`X-Chat-Sequence` is the last frame number of the runs on the page; on the newest page,
the `after_sequence` to subscribe with so nothing is missed or repeated.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote

import msgspec
import trio

from bridge.codecs import safejson
from bridge.config import Config
from bridge.core.identity import of_scope
from bridge.errors import AuthRequired, BridgeError, InvalidParams, NotFound, PeerError, RateLimited, codes_for
from bridge.fronts import owners
from bridge.fronts.chat.access import Access
from bridge.fronts.chat.streams import ChatStreams
from bridge.fronts.chat.routes_api import RoutesApi, default_route
from bridge.fronts.chat.views import SessionViews, command_dicts
from bridge.fronts.http import HttpApp, Scope, header, read_body, send_bytes, send_json
from bridge.fronts.chat.state import ChatSessionState
from bridge.schema.chat_api import CreateSession
from bridge.session import SessionManager
from bridge.store import SessionRecord

__all__ = ["RestApi", "register"]

log = logging.getLogger("bridge.fronts.chat.rest")

_PAGE_RUNS, _MAX_PAGE_RUNS = 50, 200
# Read by a page on another origin (CORS hides every other response header from it).
_EXPOSED = "X-Chat-Sequence, X-Next-Cursor, Link, Retry-After"
_enc = msgspec.json.Encoder()


_create = safejson.Decoder(CreateSession)  # any bytes: a value or DecodeError (400); unknown fields named


_INDEX_PARAMS = ("limit", "offset", "route", "front", "status", "q", "counts")


def _known(query: dict[str, list[str]], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise InvalidParams(f"unknown query parameter {unknown[0][:40]!r}; parameters are {', '.join(allowed)}")


def _str(query: dict[str, list[str]], name: str) -> str | None:
    return query.get(name, [None])[-1]


def _int(query: dict[str, list[str]], name: str, default: int, lo: int, hi: int) -> int:
    raw = query.get(name, [str(default)])[-1]
    try:
        value = int(raw)
    except ValueError:
        raise InvalidParams(f"{name} must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise InvalidParams(f"{name} must be between {lo} and {hi}, got {value}")
    return value


def _cursor(first_seq: int) -> str:
    return base64.urlsafe_b64encode(str(first_seq).encode()).decode().rstrip("=")


def _before(query: dict[str, list[str]]) -> int | None:
    """The `before` cursor: an event sequence number (the first of the run after the page)."""
    raw = query.get("before", [None])[-1]
    if raw is None:
        return None
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("ascii") if len(raw) <= 32 else ""
        value = int(text) if text.isdigit() else 0
    except (ValueError, binascii.Error):  # UnicodeDecodeError is a ValueError
        value = 0
    if not 1 <= value < 2**62:  # a sequence number the store can hold
        raise InvalidParams(f"invalid cursor {raw[:40]!r}: pass the one from X-Next-Cursor or the Link header")
    return value


class RestApi:
    def __init__(self, config: Config, manager: SessionManager, streams: ChatStreams, access: Access) -> None:
        self.config = config
        self.manager = manager
        self.streams = streams
        self.access = access
        self.views = SessionViews(manager)

    def endpoint(self, fn: Callable[..., Awaitable[tuple[int, Any, list[tuple[str, str]]]]]) -> Any:
        """Access checks, errors as {"detail"}, CORS headers for an allowed browser origin."""

        async def handle(scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
            origin = header(scope, "origin")
            # CORS only for a page the operator named (a loopback page may call, not read).
            cors = (
                [("access-control-allow-origin", origin), ("access-control-expose-headers", _EXPOSED), ("vary", "Origin")]
                if self.access.origin_listed(origin)
                else []
            )
            try:  # Host and Origin: checked before any handler (bridge/fronts/http_policy.py)
                if not self.access.check_bearer(scope):
                    raise AuthRequired("an Authorization: Bearer token is required")
                status, body, extra = await fn(scope, receive, params)
            except PeerError as exc:
                log.warning("%s %s: %s", scope["method"], scope["path"], exc.message)
                extra = [("www-authenticate", "Bearer")] if codes_for(exc).http == 401 else []
                await send_json(send, codes_for(exc).http, {"detail": exc.message}, headers=cors + extra)
                return
            except RateLimited as exc:  # HTTP 429 and when to come back (RFC 6585 §4, RFC 9110 §10.2.3)
                log.warning("%s %s refused: %s", scope["method"], scope["path"], exc.message)
                after = [("retry-after", str(exc.retry_after_s))]
                await send_json(send, codes_for(exc).http, {"detail": exc.message, **exc.data}, headers=cors + after)
                return
            except BridgeError as exc:
                log.warning("%s %s failed: %s", scope["method"], scope["path"], exc.message)
                await send_json(send, codes_for(exc).http, {"detail": exc.message}, headers=cors)
                return
            await send_bytes(send, status, _enc.encode(body), headers=cors + extra)

        return handle

    async def preflight(self, scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        origin = header(scope, "origin")
        if origin is None or not self.access.origin_listed(origin):
            await send_json(send, 403, {"detail": f"origin {origin!r} is not allowed"})
            return
        headers = [
            ("access-control-allow-origin", origin),
            ("access-control-allow-methods", "GET, POST, DELETE, OPTIONS"),
            ("access-control-allow-headers", "authorization, content-type"),
            ("access-control-max-age", "600"),
            ("vary", "Origin"),
        ]
        await send_bytes(send, 204, b"", headers=headers)

    # -- handlers -----------------------------------------------------------------------
    async def create(
        self, scope: Scope, receive: Any, params: dict[str, str]
    ) -> tuple[int, Any, list[tuple[str, str]]]:
        body = await read_body(receive, self.config.server.max_body_bytes)
        try:
            req = _create.decode(body or b"{}")
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"invalid body: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise InvalidParams(f"the body is not JSON: {exc}") from exc
        config = self.manager.config
        who = of_scope(scope)
        routes = [name for name in sorted(config.routes) if owners.usable(config, who, name)]  # as /api/routes shows them
        route = req.route or default_route(config)
        if route is None:
            raise InvalidParams(f"name a route: {routes}")
        if route not in routes:
            raise NotFound(f"no route named {route[:80]!r}; routes are {routes}")
        owners.check_start(config, route, who)
        session = await self.manager.create(route, front="chat", meta=owners.owned_by(who))
        if req.intent:
            session.front_state(ChatSessionState).intent = req.intent
            session.record.title = " ".join(req.intent.split())[:80] or None
            await session.save_record()
        return 200, {"session_id": session.id}, []

    async def index(self, scope: Scope, receive: Any, params: dict[str, str]) -> tuple[int, Any, list[tuple[str, str]]]:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        _known(query, _INDEX_PARAMS)
        limit = _int(query, "limit", 50, 1, 200)
        offset = _int(query, "offset", 0, 0, 2**31)
        counts = _int(query, "counts", 0, 0, 1)
        route = _str(query, "route")
        config = self.manager.config
        if route is not None and not owners.usable(config, of_scope(scope), route):  # as /api/routes shows them
            known = ", ".join(name for name in sorted(config.routes) if owners.usable(config, of_scope(scope), name))
            raise InvalidParams(f"route must be one of {known}; got {route[:80]!r}")
        store = self.manager.store
        # Access rules filter in the store's query: full pages, totals and counts of what
        # this caller may see only (README: "Access control").
        visible = owners.visibility(self.manager.config, of_scope(scope))
        records, total = await store.list_sessions(
            limit=limit, offset=offset, route=route, front=_str(query, "front"), status=_str(query, "status"), q=_str(query, "q"),
            visible=visible,
        )  # fmt: skip
        body: dict[str, Any] = {"sessions": [self.views.info(r) for r in records], "total": total, "limit": limit, "offset": offset}
        if counts:
            body["counts"] = await store.count_sessions(visible=visible)
        return 200, body, []

    async def get(self, scope: Scope, receive: Any, params: dict[str, str]) -> tuple[int, Any, list[tuple[str, str]]]:
        record = await self._record(params["session_id"])
        owners.check(self.manager.config, record, of_scope(scope), "watch")
        live = self.manager.live(record.session_id)
        info = self.views.info(record)
        info["commands"] = command_dicts(self.views.commands(record))
        info["last_seq"] = live.last_seq if live is not None else record.last_seq
        return 200, info, []

    async def messages(
        self, scope: Scope, receive: Any, params: dict[str, str]
    ) -> tuple[int, Any, list[tuple[str, str]]]:
        session_id = params["session_id"]
        if owners.ruled(self.manager.config):
            owners.check(self.manager.config, await self._record(session_id), of_scope(scope), "watch")
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        limit = _int(query, "limit", _PAGE_RUNS, 1, _MAX_PAGE_RUNS)
        turns, sequence, older = await self.streams.transcript(session_id, limit=limit, before=_before(query))
        headers = [("x-chat-sequence", str(sequence))]
        if older is not None:
            cursor = _cursor(older)
            link = f"/api/sessions/{quote(session_id, safe='')}/messages?limit={limit}&before={cursor}"
            headers += [("x-next-cursor", cursor), ("link", f'<{link}>; rel="next"')]
        return 200, turns, headers

    async def delete(
        self, scope: Scope, receive: Any, params: dict[str, str]
    ) -> tuple[int, Any, list[tuple[str, str]]]:
        session_id = params["session_id"]
        record = await self._record(session_id)
        owners.check(self.manager.config, record, of_scope(scope), "use")
        self.streams.forget(session_id, record)
        live = self.manager.live(session_id)
        if live is not None:
            await live.close()
            # Its last events are flushed as it stops: wait, or they would outlive the delete.
            with trio.move_on_after(live.route.cancel_grace_s + 5):
                while self.manager.live(session_id) is live:
                    await trio.sleep(0.01)
        await self.manager.store.delete_session(session_id)
        return 200, {"session_id": session_id, "deleted": True}, []

    # -- helpers ------------------------------------------------------------------------
    async def _record(self, session_id: str) -> SessionRecord:
        live = self.manager.live(session_id)
        record = live.record if live is not None else await self.manager.store.get_session(session_id)
        if record is None:
            raise NotFound(f"unknown session {session_id!r}")
        return record


def register(app: HttpApp, config: Config, manager: SessionManager, streams: ChatStreams, access: Access) -> RestApi:
    api = RestApi(config, manager, streams, access)
    own = access.origins  # [ws] allowed_origins, beside the listener's policy
    static = access.static  # the front's own token, when it has one; an issuer's: HttpApp
    app.add("POST", "/api/sessions", api.endpoint(api.create), origins=own, static=static)
    app.add("GET", "/api/sessions", api.endpoint(api.index), origins=own, static=static)
    app.add("GET", "/api/sessions/{session_id}", api.endpoint(api.get), origins=own, static=static)
    app.add("DELETE", "/api/sessions/{session_id}", api.endpoint(api.delete), origins=own, static=static)
    app.add("GET", "/api/sessions/{session_id}/messages", api.endpoint(api.messages), origins=own, static=static)
    app.add("GET", "/api/routes", api.endpoint(RoutesApi(manager, api.views, app.readiness).index), origins=own, static=static)
    for path in ("/api/sessions", "/api/sessions/{session_id}", "/api/sessions/{session_id}/messages", "/api/routes"):
        app.add("OPTIONS", path, api.preflight, origins=own, public=True)  # a CORS preflight carries no credentials
    return api
