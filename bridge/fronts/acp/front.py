"""The ACP front: the agent side of ACP v1 over a byte stream (stdio or a unix socket).

One connection = one reader task (frames in, handled in order) + one writer task
(outbox drained in batches). Requests are answered in the order they arrive, except
`session/prompt`, which starts its turn at once (so a `session/cancel` right behind
it finds the turn) and is answered by its own task when the turn ends. Requests we
send the editor (permission, elicitation) are matched by `codecs.jsonrpc.Outgoing`.

Protocol reference: protocols.md §1; agentclientprotocol.com/protocol/v1.
"""

from __future__ import annotations

import base64
import functools
import datetime as dt
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from bridge import __version__
from bridge.codecs import acp as codec
from bridge.codecs.jsonrpc import (
    Call,
    Notify,
    Outgoing,
    ProtocolError,
    Reply,
    decode_params,
    encode_lines,
    error_response,
    parse,
)
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.config import Config, Route
from bridge.fronts.acp.config import AcpFrontConfig
from bridge.core.content import TextContent
from bridge.core.events import (
    CommandsAvailable,
    Event,
    Question,
    QuestionAnswered,
    QuestionAsked,
    StopReason,
    TurnEnded,
    TurnStarted,
)
from bridge.errors import (
    AuthRequired,
    BackAuthRequired,
    BackError,
    BackUnavailable,
    BridgeError,
    FrameTooLarge,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    PeerError,
    RequestCancelled,
)
from bridge.fronts.outbox import Outbox
from bridge.schema import acp
from bridge.schema.jsonrpc import Notification, Response
from bridge.session import Session, SessionManager

__all__ = ["AcpConnection", "serve_acp"]

log = logging.getLogger("bridge.fronts.acp.front")

_result_decoder: dict[type, msgspec.json.Decoder[Any]] = {}


async def serve_acp(
    receive: trio.abc.ReceiveStream,
    send: trio.abc.SendStream,
    *,
    manager: SessionManager,
    config: Config,
    route: str,
) -> None:
    """Serve one ACP client until it closes its end."""
    await AcpConnection(receive, send, manager=manager, config=config, route=route).run()


class _Attached:
    """A session this connection is attached to, and the subscriber feeding it."""

    def __init__(self, conn: AcpConnection, session: Session) -> None:
        self.conn = conn
        self.session = session
        self.holding: list[Event] | None = []  # events that arrive during a replay
        self._unsubscribe = session.subscribe(self)
        session.client_services = conn.services  # the editor's files and terminals

    def unsubscribe(self) -> None:
        self._unsubscribe()
        if self.session.client_services is self.conn.services:
            self.session.client_services = None

    def deliver(self, event: Event) -> None:
        if self.holding is not None:
            self.holding.append(event)
        else:
            self.conn._deliver(self.session, event)

    def release(self, after_seq: int) -> None:
        held, self.holding = self.holding or [], None
        for event in held:
            if event.seq > after_seq:
                self.conn._deliver(self.session, event)
        # From now on events go straight to the connection: one call less per event.
        self.deliver = functools.partial(self.conn._deliver, self.session)  # type: ignore[method-assign]

    def congested(self) -> bool:
        return self.conn.outbox.congested()

    async def wait_uncongested(self) -> None:
        await self.conn.outbox.wait_uncongested()


class AcpConnection:
    def __init__(
        self,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        *,
        manager: SessionManager,
        config: Config,
        route: str,
    ) -> None:
        self.receive = receive
        self.send = send
        self.manager = manager
        self.config = config
        self.route_name = route
        self.route: Route = config.routes[route]
        self.outbox = Outbox(config.section(AcpFrontConfig).outbox_max_events)
        self.outgoing = Outgoing()
        self._replies: dict[Any, tuple[trio.Event, list[Reply]]] = {}
        self._asked: dict[str, Any] = {}  # question id → our request id
        self.attached: dict[str, _Attached] = {}
        self.prompts: dict[Any, Session] = {}  # prompt request id → session
        self.initialized = False
        self.client_caps = acp.ClientCapabilities()
        self.authenticated = self.route.acp_auth is None
        self.services = _EditorServices(self)
        self._nursery: trio.Nursery | None = None
        self._writer_done = trio.Event()
        self._handlers: dict[str, tuple[type, Callable[[Any, Any], Awaitable[Any]]]] = {
            "initialize": (acp.InitializeParams, self._initialize),
            "authenticate": (acp.AuthenticateParams, self._authenticate),
            "session/new": (acp.NewSessionParams, self._new),
            "session/load": (acp.LoadSessionParams, self._load),
            "session/resume": (acp.LoadSessionParams, self._resume),
            "session/list": (acp.ListSessionsParams, self._list),
            "session/close": (acp.SessionIdParams, self._close),
            "session/set_mode": (acp.SetModeParams, self._set_mode),
            "session/set_config_option": (acp.SetConfigOptionParams, self._set_config_option),
            "session/prompt": (acp.PromptParams, self._prompt),
        }

    # -- connection -------------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer)
                await self._reader()
                # The editor closed its end: what is already queued (answers to the
                # requests it sent before closing) still goes out, for a bounded time;
                # then whatever it started stops.
                self.outbox.close()
                with trio.move_on_after(_EOF_FLUSH_S):
                    await self._writer_done.wait()
                nursery.cancel_scope.cancel()
        finally:
            self.outbox.close()
            for att in self.attached.values():
                att.unsubscribe()
            for event, _box in list(self._replies.values()):
                event.set()  # nobody will answer now: wake whoever waits (a back's fs call)
            for session in set(self.prompts.values()):
                session.cancel()

    async def _reader(self) -> None:
        lines = LineReader(self.config.section(AcpFrontConfig).max_frame_bytes)
        while True:
            try:
                data = await self.receive.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            frames = lines.feed(data) if data else lines.feed_eof()
            for frame in frames:
                await self._handle_frame(frame)
            if not data:
                return
            if self.outbox.congested():
                await self.outbox.wait_uncongested()

    async def _writer(self) -> None:
        try:
            await self._write_all()
        finally:
            self._writer_done.set()

    async def _write_all(self) -> None:
        buf = bytearray()
        while True:
            items = await self.outbox.take()
            if not items:
                return
            buf.clear()
            encode_lines(items, buf)
            try:
                await self.send.send_all(buf)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                log.info("ACP client went away")
                self.outbox.close()
                return

    def _reply(self, id: Any, result: Any) -> None:
        self.outbox.put(Response(id=id, result=result))

    def _fail(self, id: Any, exc: BaseException) -> None:
        self.outbox.put(error_response(id, exc))

    def _notify(self, method: str, params: Any) -> None:
        self.outbox.put(Notification(method=method, params=params))

    # -- dispatch ---------------------------------------------------------------------
    async def _handle_frame(self, frame: bytes | Oversized) -> None:
        if isinstance(frame, Oversized):
            limit = self.config.section(AcpFrontConfig).max_frame_bytes
            log.warning("ACP frame of %d bytes over max_frame_bytes %d dropped", frame.size, limit)
            self._fail(None, FrameTooLarge(f"frame of {frame.size} bytes exceeds max_frame_bytes ({limit})"))
            return
        try:
            msg = parse(frame)
        except ProtocolError as exc:
            log.warning("bad ACP frame: %s", exc.error.message)
            self._fail(exc.id, exc.error)
            return
        if isinstance(msg, Call):
            await self._call(msg)
        elif isinstance(msg, Notify):
            self._notification(msg)
        else:
            self._settle(msg)

    async def _call(self, call: Call) -> None:
        entry = self._handlers.get(call.method)
        try:
            if entry is None:
                raise MethodNotFound(f"method not found: {call.method}")
            if call.method != "initialize" and not self.initialized:
                raise InvalidRequest("call initialize first")
            if call.method.startswith("session/") and not self.authenticated:
                auth = self.route.acp_auth
                assert auth is not None
                raise AuthRequired(f"authentication required: call authenticate with methodId {auth.method_id!r}")
            params_type, handler = entry
            params = decode_params(call.params, params_type)
            result = await handler(call, params)
        except PeerError as exc:
            log.warning("ACP %s failed: %s", call.method, exc.message)
            self._fail(call.id, exc)
        except BridgeError as exc:
            log.warning("ACP %s failed: %s", call.method, exc.message)
            self._fail(call.id, exc)
        except Exception:
            # One request's boundary (STYLE.md rule 17): our bug is this request's -32603
            # and a log line; the connection, its sessions and other clients go on.
            log.exception("ACP %s failed", call.method)
            self._fail(call.id, InternalError("internal error"))
        else:
            if result is not _LATER:
                self._reply(call.id, result)

    def _notification(self, note: Notify) -> None:
        try:
            if note.method == "session/cancel":
                params = decode_params(note.params, acp.SessionIdParams)
                att = self.attached.get(params.session_id)
                if att is not None:
                    att.session.cancel()
            elif note.method == "$/cancel_request":
                req = decode_params(note.params, acp.CancelRequestParams)
                session = self.prompts.get(req.request_id)
                if session is not None:
                    session.cancel()  # the prompt is then answered `cancelled`
            else:
                log.debug("ignored ACP notification %s", note.method)
        except PeerError as exc:
            log.warning("bad ACP notification %s: %s", note.method, exc.message)

    def _settle(self, reply: Reply) -> None:
        if self.outgoing.settle(reply) is None:
            log.debug("reply to an unknown or abandoned request %r", reply.id)
            return
        slot = self._replies.get(reply.id)
        if slot is not None:
            slot[1].append(reply)
            slot[0].set()

    async def _request(self, method: str, params: Any, *, question_id: str) -> Reply | None:
        """Ask the editor; None when it does not answer in time or goes away."""
        req = self.outgoing.request(method, params)
        slot: tuple[trio.Event, list[Reply]] = (trio.Event(), [])
        self._replies[req.id] = slot
        self._asked[question_id] = req.id
        self.outbox.put(req)
        try:
            with trio.move_on_after(self.config.section(AcpFrontConfig).request_timeout_s):
                await slot[0].wait()
        finally:
            self._replies.pop(req.id, None)
            self._asked.pop(question_id, None)
            self.outgoing.pending.pop(req.id, None)
        return slot[1][0] if slot[1] else None

    # -- handlers ---------------------------------------------------------------------
    async def _initialize(self, call: Call, p: acp.InitializeParams) -> acp.InitializeResult:
        self.initialized = True
        self.client_caps = p.client_capabilities or acp.ClientCapabilities()
        back = self.manager.back_for(self.route_name)
        await back.ready()  # a back that looks its agent up first (an A2A card)
        auth = self.route.acp_auth
        return acp.InitializeResult(
            # We speak v1; a client asking for more gets 1 and decides (protocols.md §1.2).
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=acp.AgentCapabilities(
                load_session=True,
                prompt_capabilities=acp.PromptCapabilities(image=True, audio=True, embedded_context=True),
                session_capabilities={"list": {}, "close": {}, "resume": {}},
            ),
            auth_methods=[acp.AuthMethod(id=auth.method_id, name=auth.name, description=auth.description)] if auth else [],
            agent_info=acp.Implementation(
                name="agent-bridge", version=__version__, title=self.route.title or back.info.title or self.route_name
            ),
        )

    async def _authenticate(self, call: Call, p: acp.AuthenticateParams) -> dict[str, Any]:
        auth = self.route.acp_auth
        if auth is None or p.method_id != auth.method_id:
            raise InvalidParams(f"unknown auth method {p.method_id!r}")
        if not os.environ.get(auth.token_env):
            raise AuthRequired(f"authentication failed: the environment variable {auth.token_env} is not set")
        self.authenticated = True
        return {}

    def _setup_result(self, session: Session, cls: type) -> Any:
        options = session.config_options()
        return cls(
            **({"session_id": session.id} if cls is acp.NewSessionResult else {}),
            modes=codec.modes(options),
            config_options=codec.config_options(options) or None,
        )

    def _attach(self, session: Session) -> _Attached:
        if session.record.route != self.route_name:
            raise NotFound(f"session {session.id} belongs to route {session.record.route!r}, not {self.route_name!r}")
        att = self.attached.get(session.id)
        if att is None:
            att = self.attached[session.id] = _Attached(self, session)
        return att

    def _announce_commands(self, session: Session) -> None:
        commands = session.commands()  # the back's own and the route's prompts (bridge/prompts)
        if commands:
            self._deliver(session, CommandsAvailable(commands=commands))

    async def _new(self, call: Call, p: acp.NewSessionParams) -> Any:
        if not os.path.isabs(p.cwd):
            raise InvalidParams(f"cwd must be an absolute path, got {p.cwd!r}")
        meta = {"mcpServers": p.mcp_servers} if p.mcp_servers else {}
        session = await self.manager.create(self.route_name, cwd=p.cwd, meta=meta)
        att = self._attach(session)
        att.release(0)
        self._reply(call.id, self._setup_result(session, acp.NewSessionResult))
        self._announce_commands(session)
        return _LATER

    async def _load(self, call: Call, p: acp.LoadSessionParams) -> Any:
        session = await self.manager.get(p.session_id)
        att = self._attach(session)
        history = await session.history(0)
        for event in history:
            if isinstance(event, TurnStarted):
                for chunk in codec.user_chunks(event):
                    self._notify("session/update", acp.SessionNotification(session_id=session.id, update=chunk))
            elif isinstance(event, TurnEnded) and event.error is not None and event.error.kind == "interrupted":
                # A turn cut by a stopped daemon (closed at its start, bridge/store/base.py):
                # a replay has no prompt answer to carry its stop reason (ACP §session/load
                # replays only updates), so it ends with a line saying so.
                notice = acp.AgentMessageChunk(
                    content=TextContent(text=f"\n\n[interrupted: {event.error.message}]"),
                    message_id=f"interrupted-{event.turn_id}",
                )
                self._notify("session/update", acp.SessionNotification(session_id=session.id, update=notice))
            else:
                self._deliver(session, event, replay=True)
            if self.outbox.congested():
                await self.outbox.wait_uncongested()
        att.release(history[-1].seq if history else 0)
        self._reply(call.id, self._setup_result(session, acp.LoadSessionResult))
        self._announce_commands(session)
        return _LATER

    async def _resume(self, call: Call, p: acp.LoadSessionParams) -> Any:
        session = await self.manager.get(p.session_id)
        self._attach(session).release(session.last_seq)
        self._reply(call.id, self._setup_result(session, acp.LoadSessionResult))
        self._announce_commands(session)
        return _LATER

    async def _list(self, call: Call, p: acp.ListSessionsParams) -> acp.ListSessionsResult:
        page = 50
        try:
            offset = int(base64.urlsafe_b64decode(p.cursor.encode()).decode()) if p.cursor else 0
        except ValueError as exc:
            raise InvalidParams(f"invalid cursor {p.cursor!r}") from exc
        records, total = await self.manager.store.list_sessions(
            route=self.route_name, cwd=p.cwd, limit=page, offset=offset
        )
        nxt = offset + len(records)
        return acp.ListSessionsResult(
            sessions=[
                acp.SessionInfo(
                    session_id=r.session_id,
                    cwd=r.cwd,
                    title=r.title,
                    updated_at=dt.datetime.fromtimestamp(r.updated_at, dt.UTC).isoformat().replace("+00:00", "Z"),
                )
                for r in records
            ],
            next_cursor=base64.urlsafe_b64encode(str(nxt).encode()).decode() if nxt < total else None,
        )

    async def _close(self, call: Call, p: acp.SessionIdParams) -> dict[str, Any]:
        att = self.attached.pop(p.session_id, None)
        if att is None:
            raise NotFound(f"session {p.session_id!r} is not open on this connection")
        att.unsubscribe()
        await att.session.close()
        return {}

    def _session(self, session_id: str) -> Session:
        att = self.attached.get(session_id)
        if att is None:
            raise NotFound(f"unknown session {session_id!r}: create it with session/new or open it with session/load")
        return att.session

    async def _set_mode(self, call: Call, p: acp.SetModeParams) -> dict[str, Any]:
        session = self._session(p.session_id)
        mode = next((o for o in session.config_options() if o.category == "mode"), None)
        if mode is None:
            raise InvalidParams("this route has no modes")
        await session.set_option(mode.id, p.mode_id)
        return {}

    async def _set_config_option(self, call: Call, p: acp.SetConfigOptionParams) -> acp.SetConfigOptionResult:
        session = self._session(p.session_id)
        if not isinstance(p.value, str):
            raise InvalidParams(f"option {p.config_id!r} takes one of its listed values, not a boolean")
        options = await session.set_option(p.config_id, p.value)
        return acp.SetConfigOptionResult(config_options=codec.config_options(options))

    async def _prompt(self, call: Call, p: acp.PromptParams) -> Any:
        session = self._session(p.session_id)
        if not p.prompt:
            raise InvalidParams("prompt must hold at least one content block")
        turn = session.start_turn(p.prompt)
        self.prompts[call.id] = session
        assert self._nursery is not None
        self._nursery.start_soon(self._answer_prompt, call.id, turn)
        return _LATER

    async def _answer_prompt(self, request_id: Any, turn: Any) -> None:
        # Not in a `finally`: when the connection ends, this task is cancelled first and
        # `run()` must still find the prompt, to cancel a turn nobody will hear the end of
        # (in the daemon the session outlives the connection).
        ended = await turn.wait()
        self.prompts.pop(request_id, None)
        if ended.stop_reason is StopReason.FAILED:
            err = ended.error
            message = err.message if err else "the turn failed"
            # The agent wants the user to authorize: ACP's auth_required (protocols.md §6.4).
            cls = AuthRequired if err is not None and err.kind == BackAuthRequired.__name__ else _TurnFailed
            self.outbox.put(error_response(request_id, cls(message, data={"kind": err.kind if err else "back"})))
            return
        stop = ended.stop_reason
        if stop is StopReason.INPUT_REQUIRED:
            stop = StopReason.END_TURN  # the question was shown as text; the next prompt answers it
        self._reply(request_id, acp.PromptResult(stop_reason=stop.value))

    # -- events to the editor -----------------------------------------------------------
    def _deliver(self, session: Session, event: Event, *, replay: bool = False) -> None:
        update = codec.from_turn(event)
        if update is not None:
            put = self.outbox.put
            if type(update) is list:
                for one in update:
                    put(Notification(method="session/update", params=acp.SessionNotification(session_id=session.id, update=one)))
            else:
                put(Notification(method="session/update", params=acp.SessionNotification(session_id=session.id, update=update)))
            return
        if replay:
            return
        if isinstance(event, QuestionAsked) and self._nursery is not None:
            self._nursery.start_soon(self._ask, session, event.question)
        elif isinstance(event, QuestionAnswered):
            rid = self._asked.pop(event.question_id, None)
            turn = session.turn
            if event.cancelled and event.by == "user" and turn is not None and turn.cancel_requested:
                return  # the editor cancelled the turn: ACP has it answer its own requests
            if rid is not None and rid in self._replies:
                # Answered elsewhere (another client, a timeout, a cancel): withdraw ours.
                self._notify("$/cancel_request", {"requestId": rid})

    async def _ask(self, session: Session, question: Question) -> None:
        elicit = self.client_caps.elicitation is not None and self.client_caps.elicitation.form is not None
        if question.kind == "form" or (question.kind == "choice" and elicit and (question.multi_select or question.allow_text)):
            if not elicit:
                self._answer(session, question.id, cancelled=True, by="front")  # nobody can see it here
                return
            params: Any = codec.elicitation_request(session.id, _with_schema(question))
            method, result_type = "elicitation/create", acp.ElicitationResult
        else:
            params = codec.permission_request(session.id, question)
            method, result_type = "session/request_permission", acp.RequestPermissionResult
        reply = await self._request(method, params, question_id=question.id)
        if reply is None or reply.error is not None or reply.result is None:
            if reply is not None and reply.error is not None:
                log.warning("editor answered %s with an error: %s", method, reply.error.message)
            self._answer(session, question.id, cancelled=True)
            return
        try:
            result = decode_params(reply.result, result_type)
        except PeerError as exc:  # InvalidParams, or ParseError for bytes that are not JSON
            log.warning("editor's answer to %s is invalid: %s", method, exc.message)
            self._answer(session, question.id, cancelled=True)
            return
        if isinstance(result, acp.RequestPermissionResult):
            if result.outcome.outcome == "selected" and result.outcome.option_id:
                self._answer(session, question.id, selected=[result.outcome.option_id])
            else:
                self._answer(session, question.id, cancelled=True)
        else:
            if result.action == "accept":
                self._answer(session, question.id, **_from_form(question, result.content or {}))
            else:
                self._answer(session, question.id, cancelled=True)

    def _answer(self, session: Session, question_id: str, **answer: Any) -> None:
        try:
            session.answer(question_id, **answer)
        except NotFound:
            pass  # already answered: by a timeout, a cancel or another client
        except InvalidParams as exc:
            log.warning("editor's answer does not fit the question: %s", exc.message)
            session.answer(question_id, cancelled=True)


class _EditorServices:
    """The editor's `fs/*` and `terminal/*`, offered to the session's back (ClientServices).

    Requests are forwarded unchanged (the back puts the bridge's sessionId in them)
    and matched like our other requests to the editor; its error comes back mapped
    by meaning (STYLE.md rule 9).
    """

    def __init__(self, conn: AcpConnection) -> None:
        self.conn = conn

    @property
    def fs_read(self) -> bool:
        fs = self.conn.client_caps.fs
        return fs is not None and fs.read_text_file

    @property
    def fs_write(self) -> bool:
        fs = self.conn.client_caps.fs
        return fs is not None and fs.write_text_file

    @property
    def terminal(self) -> bool:
        return self.conn.client_caps.terminal

    async def call(self, method: str, params: Any) -> Any:
        conn = self.conn
        req = conn.outgoing.request(method, params)
        slot: tuple[trio.Event, list[Reply]] = (trio.Event(), [])
        conn._replies[req.id] = slot
        conn.outbox.put(req)
        try:
            with trio.move_on_after(conn.config.section(AcpFrontConfig).request_timeout_s):
                await slot[0].wait()
        finally:
            conn._replies.pop(req.id, None)
            conn.outgoing.pending.pop(req.id, None)
        if not slot[1]:
            raise BackUnavailable(f"the editor did not answer {method}")
        reply = slot[1][0]
        if reply.error is not None:
            cls = _EDITOR_ERRORS.get(reply.error.code, BackError)
            raise cls(f"the editor answered {method}: {reply.error.message}", data=reply.error.data)
        return reply.result


_EDITOR_ERRORS: dict[int, type[BridgeError]] = {
    -32602: InvalidParams,
    -32601: MethodNotFound,
    -32002: NotFound,
    -32000: AuthRequired,
    -32800: RequestCancelled,
}


class _TurnFailed(BridgeError):
    """A failed turn, answered as the error of its `session/prompt` (protocols.md §6.5)."""


_LATER = object()  # the handler answered (or will answer) by itself
_EOF_FLUSH_S = 2.0  # after the editor closes stdin, how long queued answers may take to go out


def _with_schema(question: Question) -> Question:
    """A choice question as an elicitation form (protocols.md §6.4)."""
    if question.schema is not None:
        return question
    choices = [{"const": o.id, "title": o.label} for o in question.options]
    props: dict[str, Any] = {}
    if question.multi_select:
        props["choice"] = {"type": "array", "title": question.header or "Choice", "items": {"anyOf": choices}}
    else:
        props["choice"] = {"type": "string", "title": question.header or "Choice", "oneOf": choices}
    if question.allow_text:
        props["other"] = {"type": "string", "title": "Other"}
    return msgspec.structs.replace(question, schema={"type": "object", "properties": props})


def _from_form(question: Question, content: dict[str, Any]) -> dict[str, Any]:
    if question.kind == "form":
        return {"values": content}
    choice = content.get("choice")
    selected = choice if isinstance(choice, list) else ([choice] if isinstance(choice, str) else [])
    other = content.get("other")
    return {"selected": [str(s) for s in selected], "text": other if isinstance(other, str) and other else None}
