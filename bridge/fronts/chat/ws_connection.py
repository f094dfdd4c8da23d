"""One `/ws` client connection: its reader, its writer, its subscriptions and limits.

`WsConnection` is made by `WsFront` (bridge/fronts/chat/ws.py, which says what the
front does) for each accepted WebSocket. The reader handles client frames in order
(`session:subscribe`, `session:unsubscribe`, `chat:send`, `chat:stop`); the writer drains
the bounded queue in batches (STYLE.md rule 13) through ws_send.py. Errors reach the
client as `system:error {message, code, detail}`, with the codes of `_CODES`; close
codes follow RFC 6455 §7.4.1 (4008 "slow consumer" is the application twin of 1008).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import trio

from bridge import telemetry
from bridge.codecs import chat_parts, safejson
from bridge.codecs.chat import commands_frame, encode_frame
from bridge.core.access import Action
from bridge.core.identity import ANONYMOUS, Identity
from bridge.fronts import owners
from bridge.errors import (
    AuthRequired,
    BridgeError,
    Busy,
    Forbidden,
    FrameTooLarge,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    Overloaded,
    RateLimited,
    ParseError,
    PeerError,
)
from bridge.fronts.chat.runs import run_meta
from bridge.fronts.chat.streams import TextFrame
from bridge.fronts.expiry import expiry
from bridge.fronts.chat.ws_send import (
    AsgiSender,
    FrameQueue,
    Gone,
    HypercornSender,
    close_frame_on_protocol_error,
    hypercorn_stream,
    sender_for,
)
from bridge.schema import chat

__all__ = ["CLOSE_GOING_AWAY", "CLOSE_SLOW", "WsConnection"]

log = logging.getLogger("bridge.fronts.chat.ws")  # one logger for the front

CLOSE_SLOW = 4008  # application-defined twin of 1008 (policy): "slow consumer"
CLOSE_GOING_AWAY = 1001  # RFC 6455 §7.4.1: "a server going down"
_frame = safejson.Decoder(chat.ClientFrame)  # any bytes or text: a value or DecodeError
_keys = safejson.Decoder(dict[str, Any])  # a chat:send's data again, only when its message is empty
_data: dict[str, safejson.Decoder[Any]] = {name: safejson.Decoder(typ) for name, typ in chat.CLIENT_EVENTS.items()}


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


_CODES = {
    ParseError: "parse_error",
    InvalidRequest: "invalid_request",
    FrameTooLarge: "frame_too_large",
    MethodNotFound: "unknown_event",
    InvalidParams: "invalid_params",
    AuthRequired: "unauthorized",
    Forbidden: "forbidden",
    NotFound: "not_found",
    Busy: "busy",
    Overloaded: "overloaded",
    RateLimited: "rate_limited",  # `detail` says which limit and `retryAfter` (seconds)
}


class _RateLimited(PeerError):
    pass


class _Ended(Exception):
    """A subscription that ended as it was made; its client was told why already."""


def _code(exc: BaseException) -> str:
    if isinstance(exc, _RateLimited):
        return "rate_limited"
    for cls in type(exc).__mro__:
        if cls in _CODES:
            return _CODES[cls]
    return "internal_error" if not isinstance(exc, BridgeError) else "back_error"


class WsConnection:
    """One WebSocket client: its subscriptions, its queue, its reader and its writer.

    The reader is the ASGI task itself. The writer is started when frames are queued
    and ends once the queue is empty, so an idle connection holds no task of its own;
    with `batch_writes` the front's pinger (`WsFront._ping_quiet`) asks for a ping when
    the client was quiet for `ping_interval_s`, and the writer sends it.
    """

    __slots__ = (
        "front", "cfg", "receive", "send", "authed", "_authed", "outbox", "subs", "close_code",
        "close_reason", "_flush", "sending_since", "_tokens", "_refilled", "_nursery", "sender",
        "_writing", "_ping_due", "_heard", "peer", "identity",
    )  # fmt: skip

    def __init__(
        self, front: Any, receive: Any, send: Any, *, authed: bool, peer: str = "an unknown peer",
        identity: Identity = ANONYMOUS,
    ) -> None:
        self.front = front
        self.peer = peer  # "host:port" of the client, for our log lines (its WARNINGs name it)
        self.identity = identity  # who authenticated: the upgrade's, or the first frame's
        self.cfg = front.cfg
        self.receive = receive
        self.send = send
        self.authed = authed
        self._authed: trio.Event | None = None if authed else trio.Event()
        self.outbox = FrameQueue()
        self.subs: dict[str, Any] = {}
        self.close_code: int | None = None
        self.close_reason = ""
        self._flush = False
        self.sending_since: float | None = None
        self._tokens = float(self.cfg.message_burst)
        self._refilled = trio.current_time()
        self._nursery: trio.Nursery | None = None
        self.sender: AsgiSender | None = None
        self._writing = False
        self._ping_due = False
        self._heard = False  # a client frame since the pinger last looked

    # -- lifecycle ------------------------------------------------------------------------
    async def run(self) -> None:
        stream = hypercorn_stream(self.send)
        if stream is not None and not self.cfg.permessage_deflate:
            stream.handshake.extensions = None  # do not negotiate deflate (zlib state per connection)
        if stream is not None:
            close_frame_on_protocol_error(stream)
        await self.send({"type": "websocket.accept"})
        self.sender = sender_for(self.send, stream, self.cfg.batch_writes)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    self.front.connections.add(self)
                    if self.front.closing:  # accepted as the others were being closed
                        self.close(CLOSE_GOING_AWAY, "the bridge is shutting down")
                    if self._authed is not None:
                        nursery.start_soon(self._auth_deadline, self._authed)
                    else:
                        nursery.start_soon(self._until_expiry)
                    await self._reader()
                    if self.close_code is None:
                        nursery.cancel_scope.cancel()  # the client left: nothing more to write
                    # else the writer sends the close frame, then ends the connection
                finally:
                    # While the nursery is still open: once it closes (and before `async
                    # with` returns) a session delivering to us must find no way to start
                    # a writer in it (`_kick`), which would raise into that session's emit.
                    self._leave_all()
                    self._nursery = None
        finally:
            self.front.connections.discard(self)
            self._leave_all()

    async def abort(self, code: int, reason: str) -> None:
        """After a failure: the close frame if the socket still takes one (bounded)."""
        self._leave_all()
        if self.sender is None:
            return
        with trio.move_on_after(self.cfg.slow_client_timeout_s, shield=True):
            try:
                await self.sender.close(code, reason)
            except Exception:  # the socket is already gone or broken: nothing more to say
                log.debug("WebSocket close after a failure not sent", exc_info=True)

    def close(self, code: int, reason: str, *, flush: bool = False) -> None:
        """No more frames, then the close frame (the writer sends it).

        `flush`: what is already queued (the error that explains the close) goes first;
        a slow consumer's queue is dropped instead.
        """
        if self.close_code is not None:
            return
        self.close_code, self.close_reason, self._flush = code, reason, flush
        if code == CLOSE_SLOW:
            log.warning("WebSocket client %s disconnected: %s", self.peer, reason)
        self._leave_all()
        self._kick()

    def _leave_all(self) -> None:
        for session_id in list(self.subs):
            self.front.streams.unwatch(session_id, self)
        self.subs.clear()

    async def _auth_deadline(self, authed: trio.Event) -> None:
        with trio.move_on_after(self.cfg.auth_timeout_s):
            await authed.wait()
            return
        self._error(AuthRequired(f"send auth.token in the first frame within {self.cfg.auth_timeout_s:g} s"))
        self.close(4401, "authentication timed out", flush=True)

    async def _until_expiry(self) -> None:
        """A caller is let in while its credential vouches for it (a JWT until its `exp`,
        RFC 7519 §4.1.4): then the connection closes (4401) and its client reconnects with
        a fresh token, so a revoked caller does not keep watching on an old one."""
        if self.identity.expires_at is None:
            return
        await expiry(self.identity)
        self._error(AuthRequired("the token expired: reconnect with a fresh one"))
        self.close(4401, "token expired", flush=True)

    # -- writing --------------------------------------------------------------------------
    def _kick(self) -> None:
        # `_nursery` is None once the connection's nursery may be closing (see `run`).
        if not self._writing and self._nursery is not None:
            self._writing = True
            self._nursery.start_soon(self._writer, self._nursery)

    async def _writer(self, nursery: trio.Nursery) -> None:
        # `nursery` passed in: `run` lets go of `_nursery` as it closes, maybe before we start.
        assert self.sender is not None
        try:
            while self.close_code is None:
                if self._ping_due:
                    self._ping_due = False
                    await self.sender.ping()
                if not len(self.outbox):
                    break
                items = self.outbox.take()
                self.sending_since = trio.current_time()
                await self.sender.send_many(items)
                self.sending_since = None
            if self.close_code is not None:
                # What explains the close (if flushed), then the close frame: shielded, with
                # the slow-client deadline. A cancel landing inside hypercorn's close would
                # lose the frames and leave its connection neither open nor closed, holding
                # the listener at shutdown (as mcp_http._shielded explains for SSE).
                with trio.move_on_after(self.cfg.slow_client_timeout_s, shield=True):
                    if self._flush and len(self.outbox):
                        await self.sender.send_many(self.outbox.take())
                    await self.sender.close(self.close_code, self.close_reason)
                nursery.cancel_scope.cancel()
        except Gone:
            nursery.cancel_scope.cancel()  # the client left under a write
        finally:
            self._writing = False

    def _put(self, text: str) -> None:
        if self.close_code is None:
            if len(self.outbox) >= self.cfg.queue_max_frames:
                self.close(CLOSE_SLOW, f"slow consumer: more than {self.cfg.queue_max_frames} frames waiting")
                return
            self.outbox.items.append(text)
            self._kick()

    def _error(self, exc: BaseException, session_id: str | None = None) -> None:
        message = exc.message if isinstance(exc, BridgeError) else "internal error"
        data = exc.data if isinstance(exc, BridgeError) else None
        err = chat.SystemError(message=message, code=_code(exc), detail=data, session_id=session_id)
        self._put(encode_frame("system:error", err).decode())

    # -- Watcher (ChatStreams) ----------------------------------------------------------------
    def push(self, frames: list[TextFrame]) -> None:
        if self.close_code is not None:
            return
        waiting = len(self.outbox)
        if waiting + len(frames) > self.cfg.queue_max_frames:
            self.close(CLOSE_SLOW, f"slow consumer: more than {self.cfg.queue_max_frames} frames waiting")
            return
        since = self.sending_since
        if waiting and since is not None and trio.current_time() - since > self.cfg.slow_client_timeout_s:
            self.close(CLOSE_SLOW, f"slow consumer: no write accepted for {self.cfg.slow_client_timeout_s:g} s")
            return
        put = self.outbox.items.append
        for _seq, text in frames:
            put(text)
        self._kick()

    async def replay(self, frames: list[TextFrame]) -> None:
        room = max(8, self.cfg.queue_max_frames // 2)  # a replay fills at most half the bound
        for i in range(0, len(frames), room):
            if len(self.outbox) >= room:
                with trio.move_on_after(self.cfg.slow_client_timeout_s):
                    await self.outbox.wait_below(room)
                if len(self.outbox) >= room:
                    self.close(CLOSE_SLOW, "slow consumer: the replay is not being read")
            if self.close_code is not None:
                return
            self.push(frames[i : i + room])

    def revoked(self, session_id: str, refusal: BaseException) -> None:
        """A reload's rules refuse its caller the session (WsFront._refused)."""
        if self.subs.pop(session_id, None) is not None:
            self.front.streams.unwatch(session_id, self)
            self._error(refusal, session_id)

    def session_gone(self, session_id: str, reason: str) -> None:
        if self.subs.pop(session_id, None) is not None:
            self._error(NotFound(reason), session_id)

    def overflowed(self) -> None:
        self.close(CLOSE_SLOW, "slow consumer: too many frames arrived during the replay")

    # -- reading ----------------------------------------------------------------------------
    def ping_if_quiet(self) -> None:
        """The front's pinger looks (every `ping_interval_s`): a client quiet since the
        last look gets a ping. Only on hypercorn's stream (ASGI has no ping message)."""
        if self._heard:
            self._heard = False
        elif self.close_code is None and isinstance(self.sender, HypercornSender):
            self._ping_due = True
            self._kick()

    async def _reader(self) -> None:
        while self.close_code is None:
            message = await self.receive()
            self._heard = True
            kind = message["type"]
            if kind == "websocket.disconnect":
                return
            if kind == "websocket.receive":
                text = message.get("text")
                await self._frame(text if text is not None else message.get("bytes") or b"")

    def _rate_ok(self) -> bool:
        now = trio.current_time()
        rate = self.cfg.max_messages_per_s
        self._tokens = min(float(self.cfg.message_burst), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    async def _frame(self, data: str | bytes) -> None:
        limit = self.cfg.max_frame_bytes
        size = len(data) if isinstance(data, bytes) or len(data) * 4 <= limit else len(data.encode())
        if size > limit:
            self._error(
                FrameTooLarge(f"frame of {size} bytes exceeds max_frame_bytes ({limit})", data={"limit": limit})
            )
            self.close(1009, "frame too large", flush=True)
            return
        session_id = None
        try:
            if not self._rate_ok():
                raise _RateLimited(f"more than {self.cfg.max_messages_per_s:g} frames per second; frame dropped")
            try:
                frame = _frame.decode(data)
            except msgspec.ValidationError as exc:
                raise InvalidRequest(f'not a chat frame {{"event", "data"}}: {exc}') from exc
            except msgspec.DecodeError as exc:
                if isinstance(data, bytes) and not _is_utf8(data):
                    # RFC 6455 §7.4.1: 1007, "data within a message that was not
                    # consistent with the type of the message"; the error goes first.
                    log.warning("chat client error from %s: a frame that is not UTF-8", self.peer)
                    self._error(ParseError(f"the frame is not UTF-8: {exc}"))
                    self.close(1007, "the frame is not UTF-8", flush=True)
                    return
                raise ParseError(f"invalid JSON: {exc}") from exc
            if not self.authed:
                identity = await self.front.access.identify_token(frame.auth.token if frame.auth is not None else None)
                if frame.auth is None or identity is None:
                    raise AuthRequired("the first frame must carry a valid auth.token")
                self.identity = identity
                self.authed = True
                if self._authed is not None:
                    self._authed.set()
                if self._nursery is not None:
                    self._nursery.start_soon(self._until_expiry)
            if not frame.event and frame.auth is not None:
                return  # an authentication frame and nothing else
            decoder = _data.get(frame.event)
            if decoder is None:
                what = f"unknown event {frame.event!r}" if frame.event else 'no "event": a frame is {"event": NAME, "data": {...}}'
                raise MethodNotFound(f"{what}; events are {sorted(_data)}")
            try:
                params = decoder.decode(frame.data if not isinstance(frame.data, msgspec.UnsetType) else b"{}")
            except msgspec.ValidationError as exc:
                raise InvalidParams(f"{frame.event}: {exc}") from exc
            session_id = getattr(params, "session_id", None)
            await self._dispatch(frame.event, params, frame.data)
        except _Ended:
            pass  # its end was said as it happened
        except PeerError as exc:
            log.warning("chat client error from %s: %s", self.peer, exc.message)
            self._error(exc, session_id)
            if not self.authed:  # whatever the first frame was, it did not authenticate
                self.close(4401, "unauthorized", flush=True)
        except BridgeError as exc:
            log.warning("chat %s failed (client %s): %s", session_id, self.peer, exc.message)
            self._error(exc, session_id)
        except Exception as exc:
            # One frame's boundary (STYLE.md rule 17): our bug costs this client an
            # `internal_error` for that frame, and the connection goes on.
            log.exception("chat frame failed (session %s)", session_id)
            self._error(exc, session_id)

    # -- events -----------------------------------------------------------------------------
    async def _dispatch(self, event: str, p: Any, raw: Any) -> None:
        if event == "session:subscribe":
            await self._subscribe(p.session_id, p.after_sequence, ack=True)
        elif event == "session:unsubscribe":
            if self.subs.pop(p.session_id, None) is not None:
                self.front.streams.unwatch(p.session_id, self)
        elif event == "chat:send":
            await self._send(p, raw)
        elif event == "chat:stop":
            session = await owners.get_checked(self.front.manager, p.session_id, self.identity, "use")
            await session.send_cancel()  # the run ends with chat:end status "interrupted"

    async def _subscribe(self, session_id: str, after: int | None, *, ack: bool, action: Action = "watch") -> Any:
        if session_id not in self.subs and len(self.subs) >= self.cfg.max_subscriptions:
            raise InvalidRequest(f"at most {self.cfg.max_subscriptions} subscriptions per connection")
        session = await owners.get_checked(self.front.manager, session_id, self.identity, action)
        if session_id in self.subs:
            self.front.streams.unwatch(session_id, self)
        self.subs[session_id] = session
        try:
            sequence = await self.front.streams.watch(session, self, after)
        except BaseException:
            self.subs.pop(session_id, None)
            raise
        if self.subs.get(session_id) is not session:
            # Ended while it replayed (a reload's rules refused it, the session went):
            # that was said, and it is not subscribed.
            raise _Ended
        if ack and self.close_code is None:
            self._put(
                encode_frame("session:subscribed", chat.Subscribed(session_id=session_id, sequence=sequence)).decode()
            )
        if self.close_code is None:  # its slash commands; again whenever they change (chat_streams)
            self._put(commands_frame(session_id, session.commands()).decode())
        return session

    async def _send(self, p: chat.SendMessage, raw: Any) -> None:
        action: Action = "answer" if p.askuser_answer is not None else "use"
        session = await owners.get_checked(self.front.manager, p.session_id, self.identity, action)
        if self.subs.get(p.session_id) is session:
            await self._send_to(session, p, raw)
            return
        # The sender hears its run: subscribed first (an answer finds its question in the
        # stream), and no longer if nothing was sent, so a send that fails (a made-up
        # answer, a busy session) is no way to watch a session one may only use or answer.
        had = p.session_id in self.subs  # (an older object of the session: the client's own subscription)
        session = await self._subscribe(p.session_id, None, ack=False, action=action)
        try:
            await self._send_to(session, p, raw)
        except BaseException:
            if not had and self.subs.get(p.session_id) is session:
                del self.subs[p.session_id]
                self.front.streams.unwatch(p.session_id, self)
            raise

    async def _send_to(self, session: Any, p: chat.SendMessage, raw: Any) -> None:
        if p.askuser_answer is not None:
            await self._answer(session, p.askuser_answer)
            return
        content = chat_parts.message_to_content(p.message)
        if not content:
            # Unknown fields are ignored (forward compatible): name them where one was meant as the message.
            given = _keys.decode(bytes(raw)) if isinstance(raw, msgspec.Raw) else {}
            ignored = [k[:40] for k in sorted(set(given) - set(chat.SendMessage.__struct_fields__))[:8]]
            hint = f"; ignored unknown field(s) {', '.join(ignored)}" if ignored else ""
            raise InvalidParams(f'message is empty: send {{"session_id", "message": text or items}} or an askuser_answer{hint}')
        if p.output_schema is not None:
            chat_parts.check_output_schema(p.output_schema)
        if p.mode or p.model:
            session.check_limits(self.identity, "ws")  # a turn over `[limits]` changes no option of the back's
        for value, category in ((p.mode, "mode"), (p.model, "model")):
            option = next((o for o in session.route.options if o.category == category), None) if value else None
            if option is not None and value in {v.value for v in option.values}:
                await session.set_option(option.id, value)
            # Other values are ignored: Blade clients send mode "executing" to every agent (Blade api/chat-flow.md, `chat:send`).
        headless = p.headless or p.output_schema is not None
        # With the run's turn record, not the session's state: bridge/fronts/chat/runs.py.
        meta = run_meta(chat.RunOptions(headless=True, output_schema=p.output_schema)) if headless else None
        telemetry.incoming("chat", {"traceparent": p.traceparent, "tracestate": p.tracestate})  # else the upgrade's
        await session.begin_turn(content, record_meta=meta, identity=self.identity, front="ws")

    async def _answer(self, session: Any, answer: chat.AskUserAnswer) -> None:
        projector = self.front.streams.live_projector(session.id)
        question = projector.question_for(answer.tool_call_id) if projector is not None else None
        if question is None or session.turn is None or session.turn.open_question(question.id) is None:
            raise NotFound(f"no open AskUserQuestion {answer.tool_call_id!r} in session {session.id}")
        await session.send_answer(question.id, **chat_parts.answer_from_chat(question, answer))
