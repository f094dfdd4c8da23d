"""The ACP front: the agent side of ACP v1 over a byte stream (stdio or a unix socket).

One connection = one reader task (frames in, handled in order) + one writer task
(outbox drained in batches), both from `bridge/transport/ndjson.py`. Requests are
answered in the order they arrive, except `session/prompt`, which starts its turn at
once (so a `session/cancel` right behind it finds the turn) and is answered by its own
task when the turn ends. Requests we send the editor (permission and elicitation through
`EditorQuestions`, bridge/fronts/acp/questions.py; the back's `fs/*` and `terminal/*`
through `EditorServices`, bridge/fronts/acp/editor.py) are numbered and settled by the
connection's JSON-RPC peer (`bridge/codecs/jsonrpc_peer.py`). Each attached session
feeds its events through an `AttachedSession` (bridge/fronts/acp/subscriber.py) into
`deliver`, which projects them onto `session/update` notifications.

Protocol reference: agentclientprotocol.com/protocol/v1 (ACP schema, v1).
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from bridge import __version__, telemetry
from bridge.codecs import acp as codec
from bridge.codecs.acp_content import block_in
from bridge.codecs.jsonrpc import Call, Notify, ProtocolError, decode_params, error_response
from bridge.codecs.jsonrpc_peer import CancelRequested
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.config import Config, Route
from bridge.core.identity import ANONYMOUS, Identity
from bridge.fronts import owners
from bridge.fronts.acp.config import AcpFrontConfig
from bridge.core.events import (
    CommandsAvailable,
    Event,
    QuestionAnswered,
    QuestionAsked,
    StopReason,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
)
from bridge.errors import (
    AuthRequired,
    BackAuthRequired,
    BridgeError,
    FrameTooLarge,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    PeerError,
)
from bridge.fronts.acp.editor import EditorServices
from bridge.fronts.acp.questions import EditorQuestions
from bridge.fronts.acp.subscriber import AttachedSession
from bridge.schema import acp
from bridge.schema.jsonrpc import Notification
from bridge.session import Session, SessionManager
from bridge.session.grants import Refusals
from bridge.transport.ndjson import ANSWERED, NdjsonConnection, receive_frames

__all__ = ["AcpConnection", "serve_acp"]

log = logging.getLogger("bridge.fronts.acp.front")

async def serve_acp(
    receive: trio.abc.ReceiveStream,
    send: trio.abc.SendStream,
    *,
    manager: SessionManager,
    config: Config,
    route: str,
) -> None:
    """Serve one ACP client until it closes its end: over stdio, the user who started us
    (the editor that spawned this process runs as that user)."""
    await AcpConnection(receive, send, manager=manager, config=config, route=route, identity=owners.unix_identity(os.getuid())).run()


class AcpConnection:
    """One ACP client on a byte stream: its requests served, its sessions' events sent."""

    def __init__(
        self,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        *,
        manager: SessionManager,
        config: Config,
        route: str,
        identity: Identity = ANONYMOUS,
    ) -> None:
        self.identity = identity  # the socket peer's Unix user (unix_socket.py), the stdio user: its turns carry it, `[limits]` count it
        self.receive = receive
        self.send = send
        self.manager = manager
        self.config = config
        self.route_name = route
        self.route: Route = config.routes[route]
        self.conn = NdjsonConnection(send, max_outbox_items=config.section(AcpFrontConfig).outbox_max_events, log=log)
        self.outbox = self.conn.outbox
        self.peer = self.conn.peer
        self.attached: dict[str, AttachedSession] = {}
        self.prompts: dict[Any, Session] = {}  # prompt request id → session
        self.initialized = False
        self.client_caps = acp.ClientCapabilities()
        self.authenticated = self.route.acp_auth is None
        self.services = EditorServices(self.conn, config.section(AcpFrontConfig).request_timeout_s)
        self.questions = EditorQuestions(self.services)
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
        release = self.manager.grants.hold(self._refused, self._revoke, once=False)
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
            release()
            self.outbox.close()
            for att in self.attached.values():
                att.unsubscribe()
            self.conn.abandon_all()  # nobody will answer now: wake whoever waits (a back's fs call)
            for session in set(self.prompts.values()):
                session.cancel()

    async def _reader(self) -> None:
        lines = LineReader(self.config.section(AcpFrontConfig).max_frame_bytes)
        while True:
            frames, ended = await receive_frames(self.receive, lines)
            for frame in frames:
                await self._handle_frame(frame)
            if ended:
                return
            if self.outbox.congested():
                await self.outbox.wait_uncongested()

    async def _writer(self) -> None:
        try:
            if not await self.conn.write_loop():
                log.info("ACP client went away")
        finally:
            self._writer_done.set()

    # -- dispatch ---------------------------------------------------------------------
    async def _handle_frame(self, frame: bytes | Oversized) -> None:
        if isinstance(frame, Oversized):
            limit = self.config.section(AcpFrontConfig).max_frame_bytes
            log.warning("ACP frame of %d bytes over max_frame_bytes %d dropped", frame.size, limit)
            self.peer.respond_error(None, FrameTooLarge(f"frame of {frame.size} bytes exceeds max_frame_bytes ({limit})"))
            return
        try:
            msg = self.peer.receive(frame)
        except ProtocolError as exc:
            log.warning("bad ACP frame: %s", exc.error.message)
            self.peer.respond_error(exc.id, exc.error)
            return
        kind = type(msg)
        if kind is Call:
            await self.conn.serve_call(msg, self._dispatch, what="ACP")  # type: ignore[arg-type]
        elif kind is Notify:
            await self._notification(msg)  # type: ignore[arg-type]
        elif kind is CancelRequested:
            rid = msg.request_id  # type: ignore[union-attr]
            session = self.prompts.get(rid)
            if session is not None:
                # A prompt is withdrawn as `session/cancel` does: its turn is cancelled and
                # the prompt answered stopReason `cancelled` (ACP, Prompt Turn: Cancellation).
                await _cancel(session)
            else:
                self.conn.cancel_served(rid)  # any other request: answered -32800
        else:
            self.conn.settled(msg)  # type: ignore[arg-type]

    async def _dispatch(self, call: Call) -> Any:
        entry = self._handlers.get(call.method)
        if entry is None:
            raise MethodNotFound(f"method not found: {call.method}")
        if call.method != "initialize" and not self.initialized:
            raise InvalidRequest("call initialize first")
        if call.id in self.prompts:
            # JSON-RPC 2.0 §5: a response carries its request's id, so an id still in
            # flight (a prompt not yet answered) cannot be used again.
            raise InvalidRequest(f"request id {call.id!r} is already in use by a session/prompt in flight")
        if call.method.startswith("session/") and not self.authenticated:
            auth = self.route.acp_auth
            assert auth is not None
            raise AuthRequired(f"authentication required: call authenticate with methodId {auth.method_id!r}")
        params_type, handler = entry
        return await handler(call, decode_params(call.params, params_type))

    async def _notification(self, note: Notify) -> None:
        try:
            if note.method == "session/cancel":
                params = decode_params(note.params, acp.SessionIdParams)
                att = self.attached.get(params.session_id)
                if att is not None:
                    await _cancel(att.session)
            else:
                log.debug("ignored ACP notification %s", note.method)
        except PeerError as exc:
            log.warning("bad ACP notification %s: %s", note.method, exc.message)

    # -- handlers ---------------------------------------------------------------------
    async def _initialize(self, call: Call, p: acp.InitializeParams) -> acp.InitializeResult:
        self.initialized = True
        self.client_caps = p.client_capabilities or acp.ClientCapabilities()
        self.services.caps = self.client_caps
        back = self.manager.back_for(self.route_name)
        await back.ready()  # a back that looks its agent up first (an A2A card)
        auth = self.route.acp_auth
        return acp.InitializeResult(
            # We speak v1; a client asking for more gets 1 and decides (ACP, Initialization:
            # version negotiation).
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

    def _attach(self, session: Session) -> AttachedSession:
        if session.record.route != self.route_name:
            raise NotFound(f"session {session.id} belongs to route {session.record.route!r}, not {self.route_name!r}")
        # Again with the rules now: a reload may have come since the request was checked.
        owners.check(self.manager.config, session.record, self.identity, "use")
        att = self.attached.get(session.id)
        if att is None:
            att = AttachedSession(session, deliver=self.deliver, outbox=self.outbox, services=self.services)
            self.attached[session.id] = att
        return att

    def _refused(self, config: Config) -> BaseException | None:
        """On a reload (bridge/session/grants.py): the attached sessions the new rules no
        longer let this editor use."""
        refused: list[tuple[Any, BaseException]] = []
        for session_id, att in self.attached.items():
            refusal = owners.refusal(config, att.session.record, self.identity, "use")
            if refusal is not None:
                refused.append((session_id, refusal))
        return Refusals(refused) if refused else None

    def _revoke(self, refusals: BaseException) -> None:
        """Detach each: no more `session/update` for it, a request naming it is refused as
        for a session never opened here, and a turn this editor runs on it is cancelled
        (its `session/prompt` answers `cancelled`). ACP has no message for it."""
        assert isinstance(refusals, Refusals)
        for session_id, refusal in refusals.refused:
            att = self.attached.pop(session_id, None)
            if att is None:
                continue
            try:
                att.unsubscribe()
                log.info("ACP %s: session %s detached: %s", self.identity.subject, session_id, refusal)
                if att.session in self.prompts.values() and self._nursery is not None:
                    self._nursery.start_soon(_cancel, att.session)
            except Exception:  # our bug: the others are still detached
                log.exception("ACP: session %s could not be detached", session_id)

    def _still_attached(self, att: AttachedSession) -> None:
        """After an await of `session/load`: detached meanwhile (a reload's rules refuse it),
        the rest of the history is not sent, and the load is refused as for a stranger."""
        if self.attached.get(att.session.id) is not att:
            raise NotFound(f"unknown session {att.session.id!r}")

    def _announce_commands(self, session: Session) -> None:
        commands = session.commands()  # the back's own and the route's prompts (bridge/prompts)
        if commands:
            self.deliver(session, CommandsAvailable(commands=commands))

    async def _new(self, call: Call, p: acp.NewSessionParams) -> Any:
        if not os.path.isabs(p.cwd):
            raise InvalidParams(f"cwd must be an absolute path, got {p.cwd!r}")
        meta = {"mcpServers": p.mcp_servers} if p.mcp_servers else {}
        owners.check_start(self.manager.config, self.route_name, self.identity)
        session = await self.manager.create(self.route_name, front="acp", cwd=p.cwd, meta=owners.owned_by(self.identity, meta))
        att = self._attach(session)
        att.release(0)
        self.peer.respond(call.id, self._setup_result(session, acp.NewSessionResult))
        self._announce_commands(session)
        return ANSWERED

    async def _load(self, call: Call, p: acp.LoadSessionParams) -> Any:
        session = await owners.get_checked(self.manager, p.session_id, self.identity, "use")
        att = self._attach(session)
        # The whole conversation goes back as updates before the answer (ACP schema,
        # `session/load`); what happens meanwhile waits in the subscriber until `release`.
        # It is read in bounded pages, each sent under the outbox's backpressure, so a
        # long history is never in memory at once.
        put = self.outbox.put
        last = 0
        async for page in session.history_pages(0):
            self._still_attached(att)
            for event in page:
                update = codec.replayed(event)
                if update is not None:
                    for one in update if type(update) is list else (update,):
                        put(Notification(method="session/update", params=acp.SessionNotification(session_id=session.id, update=one)))
                if self.outbox.congested():
                    await self.outbox.wait_uncongested()
                    self._still_attached(att)
            last = page[-1].seq
        self._still_attached(att)
        att.release(last)
        self.peer.respond(call.id, self._setup_result(session, acp.LoadSessionResult))
        self._announce_commands(session)
        return ANSWERED

    async def _resume(self, call: Call, p: acp.LoadSessionParams) -> Any:
        session = await owners.get_checked(self.manager, p.session_id, self.identity, "use")
        self._attach(session).release(session.last_seq)
        self.peer.respond(call.id, self._setup_result(session, acp.LoadSessionResult))
        self._announce_commands(session)
        return ANSWERED

    async def _list(self, call: Call, p: acp.ListSessionsParams) -> acp.ListSessionsResult:
        page = 50
        try:
            offset = int(base64.urlsafe_b64decode(p.cursor.encode()).decode()) if p.cursor else 0
        except ValueError as exc:
            raise InvalidParams(f"invalid cursor {p.cursor!r}") from exc
        records, total = await self.manager.store.list_sessions(
            route=self.route_name, cwd=p.cwd, limit=page, offset=offset,
            visible=owners.visibility(self.manager.config, self.identity),  # what this caller may list, in the query
        )  # fmt: skip
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
        telemetry.incoming("acp", p.meta)  # `_meta.traceparent` (ACP extensibility, "The _meta field")
        turn = await session.begin_turn([block_in(b) for b in p.prompt], identity=self.identity, front="acp")
        self.prompts[call.id] = session
        assert self._nursery is not None
        self._nursery.start_soon(self._answer_prompt, call.id, turn)
        return ANSWERED

    async def _answer_prompt(self, request_id: Any, turn: Any) -> None:
        # Not in a `finally`: when the connection ends, this task is cancelled first and
        # `run()` must still find the prompt, to cancel a turn nobody will hear the end of
        # (in the daemon the session outlives the connection).
        ended = await turn.wait()
        self.prompts.pop(request_id, None)
        if ended.stop_reason is StopReason.FAILED:
            err = ended.error
            message = err.message if err else "the turn failed"
            # The agent wants the user to authorize: ACP's auth_required (ACP schema,
            # ErrorCode -32000 `auth_required`).
            cls = AuthRequired if err is not None and err.kind == BackAuthRequired.__name__ else _TurnFailed
            self.outbox.put(error_response(request_id, cls(message, data={"kind": err.kind if err else "back"})))
            return
        stop = ended.stop_reason
        if stop is StopReason.INPUT_REQUIRED:
            stop = StopReason.END_TURN  # the question was shown as text; the next prompt answers it
        self.peer.respond(request_id, acp.PromptResult(stop_reason=stop.value))

    # -- events to the editor -----------------------------------------------------------
    def deliver(self, session: Session, event: Event) -> None:
        """Project `event` onto the editor's wire (ACP schema, `session/update`); questions
        become requests of their own (`EditorQuestions`)."""
        update = codec.from_turn(event)
        if update is not None:
            put = self.outbox.put
            if type(update) is list:
                for one in update:
                    put(Notification(method="session/update", params=acp.SessionNotification(session_id=session.id, update=one)))
            else:
                put(Notification(method="session/update", params=acp.SessionNotification(session_id=session.id, update=update)))
            if type(event) in _TOOL_CALL_EVENTS:
                self.questions.seen(session.id, event)
            return
        if isinstance(event, QuestionAsked) and self._nursery is not None:
            self._nursery.start_soon(self.questions.ask, session, event.question)
        elif isinstance(event, QuestionAnswered):
            self.questions.answered(session, event)
        elif isinstance(event, TurnEnded):
            self.questions.seen(session.id, event)


async def _cancel(session: Session) -> None:
    """Cancel the session's running turn for a notification, which has no answer to carry
    an error: one that cannot reach the turn (its instance gone) is logged."""
    try:
        await session.send_cancel()
    except BridgeError as exc:
        log.warning("ACP cancel of session %s failed: %s", session.id, exc.message)


class _TurnFailed(BridgeError):
    """A failed turn, answered as the error of its `session/prompt` (ACP schema,
    `session/prompt`: an error response ends the turn; its StopReason has no "failed")."""


_TOOL_CALL_EVENTS = (ToolCallStarted, ToolCallUpdated)
_EOF_FLUSH_S = 2.0  # after the editor closes stdin, how long queued answers may take to go out

