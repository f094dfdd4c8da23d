"""Our client connection to one ACP agent subprocess (ACP v1, the client side).

How the process is spawned, initialized, logged and ended is `AgentLifecycle`
(bridge/backs/acp/lifecycle.py), the base of `AgentProcess`; this module is the
connection on its pipes.

Tasks: one reader (NDJSON frames in; each `session/update` decoded with the typed
SessionUpdate decoder and handed to the session that owns its sessionId; that
session's turn `flow()`s once per read, not per event), one writer (the bounded
outbox of `bridge/transport/ndjson.py`, drained into one write), the stderr logger
of `AgentLifecycle`, and one task per request
the agent sends us. Ids, pending requests and settling are the shared JSON-RPC peer's
(`bridge/codecs/jsonrpc_peer.py`); the agent's `$/cancel_request` for one of its requests
stops that request's task, which answers -32800 (ACP schema, `ErrorCode`).

A line over `max_frame_bytes` (DESIGN.md, complaint 7) is never buffered whole: as
soon as it crosses the bound, what it belongs to fails with a clear error, judged from
its first bytes: the request it answers, the agent's own request (answered -32600), the
turn of the session it updates, or, when it cannot be told, every request in flight.
A line still unended after another `max_frame_bytes` ends the agent as a crash does, and
an agent whose output is stuck inside such a line is not used again (`alive`): the next
turn starts a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import trio

from bridge.backs.acp.lifecycle import AgentLifecycle
from bridge.backs.base import TurnHandle
from bridge.codecs import safejson
from bridge.codecs.jsonrpc_sniff import sniff_head
from bridge.codecs.jsonrpc import Call, Notify, ProtocolError, Reply, encode_lines
from bridge.codecs.jsonrpc_peer import CancelRequested, RequestError, RequestResult
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.backs.acp.config import AcpBackConfig as AcpBack
from bridge.errors import BackError, BackUnavailable, BridgeError, Busy, FrameTooLarge, MethodNotFound, NotFound
from bridge.errors import RequestCancelled
from bridge.schema import acp
from bridge.schema.jsonrpc import Request
from bridge.transport.ndjson import NdjsonConnection, receive_frames

__all__ = ["AgentProcess", "Handler"]

log = logging.getLogger("bridge.backs.acp.back")

_MAX_QUEUED = 1024  # messages to the agent not yet written; more fail (it is not reading)
_MAX_CALLS = 64  # requests from the agent served at once; more are answered Busy


class Handler(Protocol):
    """What a process needs of each session it serves (an `AcpSession`)."""

    session_id: str  # the bridge's id, for logs

    def on_update(self, update: acp.SessionUpdate) -> TurnHandle | None:
        """Apply one update; return the turn that got events (to `flow()` after the read)."""

    def on_odd_update(self, kind: str, update: dict[str, Any]) -> None:
        """An update the typed decoder refused (an unknown kind, or a shape we do not model)."""

    async def on_call(self, method: str, params: msgspec.Raw | None) -> Any:
        """Serve a request of the agent; its result, or a BridgeError."""


class _SessionRef(msgspec.Struct, rename="camel"):
    session_id: Any = None


class _UpdateFrame(msgspec.Struct):
    """A whole `session/update` notification, decoded in one step (the hot path)."""

    method: str
    params: acp.SessionNotification
    id: Any = msgspec.UNSET
    jsonrpc: str = "2.0"


_UPDATE_MARK = b'"session/update"'
# Total decoders (bridge/codecs/safejson.py): an agent's invalid UTF-8, deep nesting or
# integer beyond 64 bits is its garbage line, never an exception here or at a later flush.
_update_decoder = safejson.Decoder(_UpdateFrame)
_note_decoder = safejson.Decoder(acp.SessionNotification)
_ref_decoder = safejson.Decoder(_SessionRef)
_dict_decoder = safejson.Decoder(dict[str, Any])


class _CallContext:
    """What a request of ours to the agent needs beside its id (`PendingRequest.context`)."""

    __slots__ = ("on_settle", "sid", "error")

    def __init__(self, on_settle: Callable[[], None] | None, sid: Any) -> None:
        self.on_settle = on_settle
        self.sid = sid  # the agent session a session/prompt is for
        self.error: BridgeError | None = None  # why it failed without a reply


class AgentProcess(AgentLifecycle):
    """A running agent: spawn it with `start`, talk with `call`/`notify`, end it with `stop`."""

    def __init__(
        self,
        *,
        route: str,
        cfg: AcpBack,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        client_caps: acp.ClientCapabilities,
        owner: str,
    ) -> None:
        super().__init__(route=route, cfg=cfg, argv=argv, env=env, cwd=cwd, client_caps=client_caps, owner=owner)
        self.sessions: dict[str, Handler] = {}  # agent sessionId → handler
        self.users = 0  # sessions sharing a multiplexed process
        self._conn: NdjsonConnection | None = None  # once spawned: its stdin's writer and our peer
        self._calls = 0
        self._garbage = 0
        self._overflow = False  # inside an oversized line, already reported

    # -- life -------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.dead is None and not self._overflow

    def label(self) -> str:
        ids = ",".join(h.session_id for h in self.sessions.values()) or self.owner
        return f"route {self.route} session {ids}"

    # -- the hooks of AgentLifecycle ---------------------------------------------------
    def _connect(self, proc: trio.Process, nursery: trio.Nursery) -> None:
        assert proc.stdin is not None
        self._conn = NdjsonConnection(proc.stdin, max_outbox_items=_MAX_QUEUED, log=log)
        nursery.start_soon(self._reader, proc)
        nursery.start_soon(self._conn.write_loop)  # a broken pipe: the reader sees the exit

    def _abandon(self) -> None:
        if self._conn is not None:
            self._conn.abandon_all()

    def _close_input(self) -> None:
        if self._conn is not None:
            self._conn.outbox.close()

    def _farewell(self) -> bytes:
        # ACP schema, `session/close`: an agent that advertised it frees its sessions;
        # written straight to the pipe, the writer task being cancelled by then.
        if self.init.agent_capabilities.session_capabilities.get("close") is None or not self.sessions:
            return b""
        return bytes(
            encode_lines(
                [Request(id=f"close-{sid}", method="session/close", params={"sessionId": sid}) for sid in self.sessions]
            )
        )

    # -- requests ---------------------------------------------------------------------
    def _live(self) -> NdjsonConnection:
        """The connection to write to; BackUnavailable once the agent is gone, BackError
        when it has stopped reading (what we queued is not going out)."""
        conn = self._conn
        if self.dead is not None or conn is None:
            raise BackUnavailable(f"route {self.route}: the agent {self.dead or 'is not running'}")
        if len(conn.outbox) >= _MAX_QUEUED:
            raise BackError(f"route {self.route}: the agent is not reading its input (queue full)")
        return conn

    def notify(self, method: str, params: Any) -> None:
        self._live().peer.notify(method, params)

    def respond(self, rid: Any, result: Any, *, error: BaseException | None = None) -> None:
        """Answer a request of the agent (nothing to do once it is gone)."""
        if self.dead is not None:
            return
        try:
            peer = self._live().peer
        except BackError as exc:
            log.warning("%s: cannot answer the agent: %s", self.label(), exc.message)
            return
        if error is not None:
            peer.respond_error(rid, error)
        else:
            peer.respond(rid, result)

    async def call(
        self, method: str, params: Any, *, timeout: float | None = None, on_settle: Callable[[], None] | None = None
    ) -> Reply:
        """Send a request and wait for its reply; BackUnavailable if the agent dies first.

        `on_settle` runs in the reader as the reply is read, before any later frame:
        `session/prompt` uses it so an update written after the response is not
        mistaken for part of the turn.
        """
        conn = self._live()
        context = _CallContext(on_settle, getattr(params, "session_id", None))
        pending = conn.start_request(method, params, context=context)
        if timeout is None:
            outcome = await conn.wait(pending)
        else:
            outcome = await conn.wait(pending, timeout_s=timeout)
            if outcome is None and context.error is None and self.dead is None:
                raise BackError(f"route {self.route}: the agent did not answer {method} within {timeout:g} s")
        if context.error is not None:
            raise context.error
        if type(outcome) is RequestResult:
            return Reply(pending.id, outcome.result, None)
        if type(outcome) is RequestError:
            return Reply(pending.id, None, outcome.error)
        raise BackUnavailable(f"route {self.route}: the agent {self.dead or 'stopped'} before it answered {method}")

    # -- tasks ------------------------------------------------------------------------
    async def _reader(self, proc: trio.Process) -> None:
        stream = proc.stdout
        assert stream is not None
        lines = LineReader(self.cfg.max_frame_bytes)
        sessions = self.sessions
        decode_update = _update_decoder.decode
        while True:
            frames, ended = await receive_frames(stream, lines)
            touched: list[TurnHandle] = []
            last: TurnHandle | None = None
            for frame in frames:
                # The hot path: a session/update decoded in one step, straight into its
                # typed SessionUpdate; anything else takes the general path below.
                if type(frame) is bytes and _UPDATE_MARK in frame:
                    try:
                        msg = decode_update(frame)
                    except (msgspec.ValidationError, msgspec.DecodeError):
                        msg = None
                    if msg is not None and msg.method == "session/update" and msg.id is msgspec.UNSET:
                        handler = sessions.get(msg.params.session_id)
                        if handler is None:
                            log.debug("%s: update for unknown agent session %r dropped", self.label(), msg.params.session_id)
                            continue
                        turn = handler.on_update(msg.params.update)
                        if turn is not None and turn is not last:
                            last = turn
                            if turn not in touched:
                                touched.append(turn)
                        continue
                turn = self._frame(frame)
                if turn is not None and turn not in touched:
                    touched.append(turn)
            big = lines.overflowing
            if big is not None:
                if not self._overflow:
                    self._overflow = True
                    self._oversized(big)
                if big.size > 2 * self.cfg.max_frame_bytes:
                    # Twice the bound and still no newline: the agent's output cannot be
                    # framed again; it is ended as a crash is, and restarted by the next turn.
                    self._die(f"sent a line over max_frame_bytes ({self.cfg.max_frame_bytes} bytes) that did not end")
                    log.warning("%s: the agent %s; ending it", self.label(), self.dead)
                    assert self._scope is not None
                    self._scope.cancel()
            for turn in touched:
                await turn.flow()  # backpressure reaches the agent through its stdout pipe
            if ended:
                break
        await self._output_ended()

    def _frame(self, frame: bytes | Oversized) -> TurnHandle | None:
        """Any frame but a well-formed session/update: replies, requests, the odd ones."""
        if isinstance(frame, Oversized):
            if self._overflow:
                self._overflow = False  # its end: reported as it crossed the bound
                log.info("%s: the oversized line ended after %d bytes", self.label(), frame.size)
            else:
                self._oversized(frame)
            return None
        conn = self._conn
        assert conn is not None
        try:
            msg = conn.peer.receive(frame)
        except ProtocolError as exc:
            self._odd_line(frame, exc.error.message)
            return None
        if type(msg) is Notify:
            if msg.method != "session/update":
                log.debug("%s: ignored agent notification %s", self.label(), msg.method)
                return None
            try:
                note = _note_decoder.decode(msg.params or b"null")
            except msgspec.ValidationError:
                self._odd_update(msg.params)
                return None
            handler = self.sessions.get(note.session_id)
            return handler.on_update(note.update) if handler is not None else None
        if type(msg) is Call:
            self._serve(msg)
            return None
        if type(msg) is CancelRequested:
            # The agent withdrew a request of its own (ACP schema, `$/cancel_request`): a
            # forwarded `fs/*` or `terminal/*` call may wait up to the editor's
            # request_timeout_s; its handler stops and it is answered -32800.
            conn.cancel_served(msg.request_id)
            return None
        settled = conn.settled(msg)  # type: ignore[arg-type]
        if settled is not None and settled.context.on_settle is not None:
            settled.context.on_settle()
        return None

    def _oversized(self, frame: Oversized) -> None:
        """Fail what a line over max_frame_bytes belongs to, judged from its head."""
        bound = self.cfg.max_frame_bytes
        said = f"the agent sent a line over max_frame_bytes ({bound} bytes)"
        log.warning("%s: %s: %d bytes so far; dropped", self.label(), said, frame.size)
        seen = sniff_head(frame.head)
        rid, method, sid = seen.get("id"), seen.get("method"), seen.get("sessionId")
        if isinstance(method, str):
            if rid is not None:  # the agent's own request: answered, the turn goes on
                self._answer_error(rid, FrameTooLarge(f"{method}: the request is over max_frame_bytes ({bound} bytes)"))
                return
        conn = self._conn
        assert conn is not None
        in_flight = conn.peer.pending
        if isinstance(method, str):
            failed = [
                p for p in in_flight.values() if p.method == "session/prompt" and (sid is None or p.context.sid == sid)
            ]
        elif type(rid) is int:
            failed = [in_flight[rid]] if rid in in_flight else []
        else:
            failed = list(in_flight.values())  # cannot tell what it was: everything in flight
        for pending in failed:
            context: _CallContext = pending.context
            what = f"as its answer to {pending.method}" if pending.id == rid else f"during {pending.method}"
            context.error = BackError(f"route {self.route}: {said} {what}")
            if pending.method == "session/prompt" and pending.id != rid and context.sid is not None and self.dead is None:
                # The agent is still at that turn: ask it to stop (ACP prompt turn, cancellation).
                try:
                    self.notify("session/cancel", acp.SessionIdParams(session_id=context.sid))
                except BackError as exc:
                    log.warning("%s: cannot cancel the failed turn: %s", self.label(), exc.message)
            conn.fail(pending)

    def _odd_line(self, frame: bytes, why: str) -> None:
        # Nothing but ACP may go to stdout (ACP, Transports: stdio); one stray line does not
        # break NDJSON framing, so it is reported and skipped, and the turn goes on.
        self._garbage += 1
        if self._garbage <= 5 or self._garbage % 100 == 0:
            shown = frame[:200].decode("utf-8", "replace")
            log.warning("%s: the agent wrote something that is not ACP on stdout (%s): %r [%d so far]",
                        self.label(), why, shown, self._garbage)  # fmt: skip

    def _odd_update(self, params: msgspec.Raw | None) -> None:
        try:
            body = _dict_decoder.decode(params or b"null")
            update = body.get("update")
            kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        except (msgspec.ValidationError, msgspec.DecodeError, AttributeError):
            body, update, kind = {}, None, None
        sid = body.get("sessionId")
        handler = self.sessions.get(sid) if isinstance(sid, str) else None
        if handler is None or not isinstance(kind, str) or not isinstance(update, dict):
            log.warning("%s: the agent sent an invalid session/update; dropped", self.label())
            return
        handler.on_odd_update(kind, update)

    # -- requests from the agent --------------------------------------------------------
    def _serve(self, call: Call) -> None:
        if self._calls >= _MAX_CALLS:
            self._answer_error(call.id, Busy(f"too many requests in flight ({_MAX_CALLS})"))
            return
        assert self._nursery is not None
        self._calls += 1
        self._nursery.start_soon(self._serve_one, call)

    async def _serve_one(self, call: Call) -> None:
        conn = self._conn
        assert conn is not None
        try:
            try:
                ref = _ref_decoder.decode(call.params or b"{}")
            except (msgspec.ValidationError, msgspec.DecodeError):
                ref = _SessionRef()
            sid = ref.session_id
            handler = self.sessions.get(sid) if isinstance(sid, str) else None
            if handler is None:
                if call.method.startswith(("session/", "fs/", "terminal/", "elicitation/")):
                    raise NotFound(f"unknown session {ref.session_id!r}")
                raise MethodNotFound(f"method not found: {call.method}")
            # Its scope is the agent's to cancel (`cancel_served`); a cancellation from
            # outside (the process ending) is not caught here.
            with conn.serving(call.id) as scope:
                result = await handler.on_call(call.method, call.params)
            if scope.cancelled_caught:
                raise RequestCancelled(f"{call.method} cancelled by the agent")
        except BridgeError as exc:
            if not isinstance(exc, (MethodNotFound, NotFound, RequestCancelled)):
                log.warning("%s: agent request %s failed: %s", self.label(), call.method, exc.message)
            self._answer_error(call.id, exc)
        except Exception as exc:
            log.exception("%s: serving agent request %s failed", self.label(), call.method)
            self._answer_error(call.id, exc)
        else:
            self.respond(call.id, result)
        finally:
            self._calls -= 1

    def _answer_error(self, rid: Any, exc: BaseException) -> None:
        self.respond(rid, None, error=exc)
