"""The canonical API: a session's own events over SSE, and the commands that drive it.

    GET  /api/sessions/{id}/events?after&tail_turns&through   text/event-stream
    POST /api/sessions/{id}/prompt   {text} | {content: [ContentBlock]} → 202 {turn_id}
    POST /api/sessions/{id}/answer   {question_id, selected?, text?, values?} → {answered}
    POST /api/sessions/{id}/cancel   {} or no body → {cancelled}

These speak the bridge's turn model itself (bridge/core/events.py, bridge/core/content.py),
not a protocol's projection of it, so a client sees everything a turn carries (tool
kinds, locations, option kinds) that the chat frames leave out. Same bearer token,
Origin policy, CORS and `{"detail"}` errors as the rest of `/api/sessions`.

The event stream (WHATWG HTML §9.2 server-sent events) starts with `retry: 1000`; each
event is `id: <seq>`, `event: <its tag>`, `data: <the event as JSON>`. It replays the
stored events after `after` (or `Last-Event-ID`, which wins), or from the first event of
the `tail_turns` newest turns, or from the start; then `event: caught_up` (`last_seq`,
`first_seq`, `earlier`); then the live events, each once: the stream subscribes before
it reads the store and holds what arrives until the replay is written (as
bridge/fronts/acp/subscriber.py does). `through` makes it finite (a page of older
events). Its session deleted: `event: gone` (`{}`), and the end; a reload whose access
rules refuse the caller the session: `event: gone` with `{"reason": "access", "detail"}`
(a new request meets that refusal: 404). A client too slow for its
queue (bridge/fronts/chat/sse_out.py) has its stream ended, never the session paused:
it reconnects with `Last-Event-ID` and reads the rest from the store.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, ClassVar
from urllib.parse import parse_qs

import msgspec
import trio

from bridge import telemetry
from bridge.codecs import safejson
from bridge.codecs.sse import encode_event
from bridge.config import Config
from bridge.core.content import TextContent
from bridge.core.identity import Identity, of_scope
from bridge.fronts import owners
from bridge.core.events import Event
from bridge.errors import AuthRequired, BridgeError, InvalidParams, Overloaded
from bridge.fronts.chat.config import WsFrontConfig
from bridge.fronts.chat.rest import RestApi
from bridge.fronts.chat.sse_out import SseOut, Write
from bridge.fronts.expiry import expiry
from bridge.fronts.http import Scope, header, read_body
from bridge.schema.chat_api import AnswerBody, CancelBody, PromptBody
from bridge.session import SessionManager

__all__ = ["CanonicalApi", "Slots", "event_frame", "query_ints", "sse_handler"]

log = logging.getLogger("bridge.fronts.chat.events")

_enc = msgspec.json.Encoder()
_MAX_TURNS = 10_000
_REPLAYS = 4  # replays in a row whose live events overflowed the hold: then the client resumes
_GONE = encode_event(b"{}", event="gone")


def event_frame(event: Event) -> bytes:
    return encode_event(_enc.encode(event), event=type(event).__struct_config__.tag, id=event.seq)  # type: ignore[arg-type]


# Request bodies reject unknown fields, naming them (bridge/schema/chat_api.py).
_prompt = safejson.Decoder(PromptBody)
_answer = safejson.Decoder(AnswerBody)
_cancel = safejson.Decoder(CancelBody)


def _decode(decoder: safejson.Decoder[Any], body: bytes) -> Any:
    try:
        return decoder.decode(body or b"{}")
    except msgspec.ValidationError as exc:
        raise InvalidParams(f"invalid body: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise InvalidParams(f"the body is not JSON: {exc}") from exc


def query_ints(scope: Scope, allowed: tuple[str, ...]) -> dict[str, int]:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    unknown = sorted(set(query) - set(allowed))
    if unknown:
        raise InvalidParams(f"unknown query parameter {unknown[0]!r}; known: {', '.join(allowed)}")
    out = {}
    for name, values in query.items():
        raw = values[-1]
        if not raw.isdigit() or len(raw) > 18:
            raise InvalidParams(f"{name} must be a non-negative integer, got {raw[:40]!r}")
        out[name] = int(raw)
    return out


class Slots:
    """How many SSE responses are open, under `[ws] max_event_streams`."""

    __slots__ = ("open", "limit")

    def __init__(self, limit: int) -> None:
        self.open, self.limit = 0, limit

    def take(self) -> None:
        if self.open >= self.limit:
            raise Overloaded(f"too many event streams open ([ws] max_event_streams = {self.limit}); try again later")
        self.open += 1

    def give(self) -> None:
        self.open -= 1


def sse_handler(api: RestApi, slots: Slots, open_: Any, serve: Any) -> Any:
    """An SSE endpoint: `open_(scope, params)` may refuse (auth, 404, 400, 503: the same
    `{"detail"}` answers as every endpoint, through `api.endpoint`); then `serve(...)`
    writes the stream, with the CORS headers of an allowed origin."""

    async def handle(scope: Scope, receive: Any, send: Any, params: dict[str, str]) -> None:
        try:
            if not api.access.check_bearer(scope):
                raise AuthRequired("an Authorization: Bearer token is required")
            slots.take()
            try:
                opened = await open_(scope, params)
            except BaseException:
                slots.give()
                raise
        except BridgeError as exc:
            error = exc

            async def refuse(*_: Any) -> Any:
                raise error

            await api.endpoint(refuse)(scope, receive, send, params)
            return
        origin = header(scope, "origin")
        cors = [("access-control-allow-origin", origin), ("vary", "Origin")] if api.access.origin_listed(origin) else []
        try:
            await serve(opened, send, receive, cors)
        finally:
            slots.give()

    return handle


class _Follower:
    """The stream's session subscriber: holds events until the replay is written, then
    queues each later one once (by sequence number)."""

    protocol: ClassVar[str] = "chat"

    def __init__(self, out: SseOut, hold_max: int) -> None:
        self.out = out
        self.hold_max = hold_max
        self.holding: list[Event] | None = []
        self.overflowed = False  # held events were let go: read them from the store again
        self.last = 0

    def deliver(self, event: Event) -> None:
        held = self.holding
        if held is not None:
            if len(held) >= self.hold_max:
                held.clear()
                self.overflowed = True
            held.append(event)
            return
        if event.seq is not None and event.seq > self.last:
            self.last = event.seq
            self.out.put(event_frame(event))

    def release(self, after: int) -> None:
        held, self.holding = self.holding or [], None
        self.last = after
        for event in held:
            self.deliver(event)

    def broken(self) -> None:
        self.out.close()

    def congested(self) -> bool:
        return False  # never pause the back for an SSE client: a slow one is dropped

    async def wait_uncongested(self) -> None:
        pass


class _Gone:
    """Hears that the stream's session was deleted (bridge/session/changes.py)."""

    __slots__ = ("session_id", "out")

    def __init__(self, session_id: str, out: SseOut) -> None:
        self.session_id, self.out = session_id, out

    def changed(self, session_id: str) -> None:
        pass

    def deleted(self, session_id: str, record: Any = None) -> None:
        if session_id == self.session_id:
            self.out.close(_GONE)


def _revoked(out: SseOut, refusal: BaseException) -> None:
    """A reload's rules refuse the caller this session: `gone`, saying so (a new request
    meets the same refusal: 404)."""
    out.close(encode_event(_enc.encode({"reason": "access", "detail": str(refusal)}), event="gone"))


class CanonicalApi:
    def __init__(self, config: Config, manager: SessionManager, api: RestApi) -> None:
        self.cfg = config.section(WsFrontConfig)
        self.max_body = config.server.max_body_bytes
        self.manager = manager
        self.api = api

    def out(self) -> SseOut:
        return SseOut(max_frames=self.cfg.events_queue_max, max_bytes=self.cfg.events_queue_max_bytes)

    async def serve_out(self, out: SseOut, send: Any, receive: Any, cors: list[tuple[str, str]], **kw: Any) -> None:
        """`out.serve` until it ends, the session closes or the daemon stops."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_close_when, self.manager.stopping.wait, out)
            for wait in kw.pop("also", ()):
                nursery.start_soon(_close_when, wait, out)
            await out.serve(send, receive, headers=cors, heartbeat_s=self.cfg.events_heartbeat_s,
                            slow_s=self.cfg.slow_client_timeout_s, **kw)  # fmt: skip
            nursery.cancel_scope.cancel()

    # -- GET /api/sessions/{id}/events ---------------------------------------------------
    async def open_events(self, scope: Scope, params: dict[str, str]) -> tuple[Any, int, int | None]:
        q = query_ints(scope, ("after", "tail_turns", "through"))
        last_id = header(scope, "last-event-id")
        session = await owners.get_checked(self.manager, params["session_id"], of_scope(scope), "watch")  # NotFound: 404 before the stream
        if last_id is not None and last_id.strip().isdigit():
            start = int(last_id.strip())
        elif "after" in q:
            start = q["after"]
        elif q.get("tail_turns"):
            start = await self._tail_start(session, min(q["tail_turns"], _MAX_TURNS), q.get("through"))
        else:
            start = 0
        return session, start, q.get("through"), of_scope(scope)

    async def _tail_start(self, session: Any, k: int, through: int | None) -> int:
        """Before the first event of the `k`-th newest turn (0: there are no more turns);
        with `through`, of the turns begun by then (a page of older turns)."""
        await session.flush()  # its turns not stored yet are
        before = None if through is None else through + 1
        turns = await self.manager.store.list_turns(session.id, before_seq=before, newest_first=True, limit=k + 1)
        return turns[k - 1].first_seq - 1 if len(turns) > k else 0

    async def serve_events(
        self, opened: tuple[Any, int, int | None, Identity], send: Any, receive: Any, cors: list[tuple[str, str]]
    ) -> None:
        session, start, through, who = opened
        out = self.out()
        follower = None
        undo: list[Any] = []
        if through is None:
            follower = _Follower(out, max(16, self.cfg.events_queue_max // 2))
            undo.append(session.subscribe(follower))  # first: nothing emitted from now on is missed
            undo.append(self.manager.changes.listen(_Gone(session.id, out)))
        out.on_close = lambda: [u() for u in undo]
        # A reload whose rules refuse the caller ends the stream (bridge/session/grants.py),
        # one that came while it was opened at once (closing it runs `undo` as it stands).
        undo.append(owners.hold(self.manager, session.record, who, ("watch",), functools.partial(_revoked, out)))

        async def replay(write: Write) -> None:
            after, first = start, None
            for _ in range(_REPLAYS):
                async for page in session.history_pages(after, through_seq=through):
                    if out.closed:  # revoked (a reload), the session deleted, or the daemon stopping
                        return
                    frames = [event_frame(e) for e in page if e.seq > after]
                    if frames:
                        first = first or page[-len(frames)].seq
                        after = page[-1].seq
                        await write(b"".join(frames))
                if follower is None or not follower.overflowed:
                    break
                follower.overflowed = False  # live events were let go while we read: read on
            else:
                out.close()  # a back faster than the store, for this long: the client resumes
                return
            caught = {"last_seq": after, "first_seq": first if first is not None else start + 1, "earlier": start > 0}
            out.put(encode_event(_enc.encode(caught), event="caught_up"))
            if follower is None:
                out.close()
            else:
                follower.release(after)  # no await since the last read: no event slips between

        try:
            also = (lambda: _closed(session), functools.partial(expiry, who))
            await self.serve_out(out, send, receive, cors, prologue=replay, also=also)
        finally:
            out.close()

    # -- commands ------------------------------------------------------------------------
    async def prompt(self, scope: Scope, receive: Any, params: dict[str, str]) -> tuple[int, Any, list[tuple[str, str]]]:
        req = _decode(_prompt, await read_body(receive, self.max_body))
        if (req.text is None) == (req.content is None):
            raise InvalidParams("give either text or content (a list of content blocks)")
        content = req.content if req.content is not None else [TextContent(text=req.text)]
        session = await owners.get_checked(self.manager, params["session_id"], of_scope(scope), "use")
        telemetry.incoming("chat", scope=scope)
        # Busy: 409; a bad /command: 400; over `[limits]`: 429 with Retry-After (bridge/fronts/chat/rest.py).
        turn = await session.begin_turn(content, identity=of_scope(scope), front="rest")
        return 202, {"turn_id": turn.turn_id}, []

    async def answer(self, scope: Scope, receive: Any, params: dict[str, str]) -> tuple[int, Any, list[tuple[str, str]]]:
        req = _decode(_answer, await read_body(receive, self.max_body))
        session = await owners.get_checked(self.manager, params["session_id"], of_scope(scope), "answer")
        # NotFound (no such open question): 404; an answer that does not fit it: 400.
        await session.send_answer(req.question_id, selected=req.selected, text=req.text, values=req.values)
        return 200, {"answered": True}, []

    async def cancel(self, scope: Scope, receive: Any, params: dict[str, str]) -> tuple[int, Any, list[tuple[str, str]]]:
        _decode(_cancel, await read_body(receive, self.max_body))
        session = await owners.get_checked(self.manager, params["session_id"], of_scope(scope), "use")
        return 200, {"cancelled": await session.send_cancel()}, []


async def _closed(session: Any) -> None:
    """Until the session closes; one another instance ran that moved (here or elsewhere)
    handed its subscribers on to its new home (bridge/session/remote.py): wait on that."""
    while True:
        await session.wait_closed()
        session = getattr(session, "moved_to", None)
        if session is None:
            return


async def _close_when(wait: Any, out: SseOut) -> None:
    await wait()
    out.close()
