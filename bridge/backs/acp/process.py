"""One ACP agent subprocess and our client connection to it (protocols.md §1).

The agent is spawned with `trio.run_process` in a nursery its owner passes in
(the session's, or the daemon's for a multiplexed agent), in a new session so it
leads its own process group. Ending it ends everything it started (DESIGN.md,
complaint 10): `session/close` for its sessions if it advertised that, EOF on its
stdin, SIGTERM to the group, `kill_grace_s`, SIGKILL; and once the agent has exited,
whatever is left of its group gets the same.

Tasks: one reader (NDJSON frames in; each `session/update` decoded with the typed
SessionUpdate decoder and handed to the session that owns its sessionId; that
session's turn `flow()`s once per read, not per event), one writer (a bounded
channel drained into one write), one stderr logger (each line logged with the
bridge session ids it serves), and one task per request the agent sends us.

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
import os
import re
import subprocess
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import trio

from bridge import __version__
from bridge.backs.base import TaskSpawner, TurnHandle
from bridge.transport.procgroup import describe_exit, kill_group
from bridge.codecs import safejson
from bridge.codecs.jsonrpc import Call, Notify, ProtocolError, Reply, encode_lines, error_response, parse
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.backs.acp.config import AcpBackConfig as AcpBack
from bridge.errors import BackError, BackUnavailable, BridgeError, Busy, FrameTooLarge, MethodNotFound, NotFound
from bridge.schema import acp
from bridge.schema.jsonrpc import Notification, Request, Response

__all__ = ["AgentProcess", "Handler", "InitResult"]

log = logging.getLogger("bridge.backs.acp.back")
agent_log = logging.getLogger("bridge.backs.acp.back.agent")  # the agents' own stderr

_READ = 65536
_MAX_CALLS = 64  # requests from the agent served at once; more are answered Busy
_LOG_LINE = 2000  # characters of one stderr line kept in the log


class Handler(Protocol):
    """What a process needs of each session it serves (an `AcpSession`)."""

    session_id: str  # the bridge's id, for logs

    def on_update(self, update: acp.SessionUpdate) -> TurnHandle | None:
        """Apply one update; return the turn that got events (to `flow()` after the read)."""

    def on_odd_update(self, kind: str, update: dict[str, Any]) -> None:
        """An update the typed decoder refused (an unknown kind, or a shape we do not model)."""

    async def on_call(self, method: str, params: msgspec.Raw | None) -> Any:
        """Serve a request of the agent; its result, or a BridgeError."""


# Lenient reads of what the agent answers: a missing optional field must not turn a
# working agent into a protocol error (the shared Structs are stricter).
class Capabilities(msgspec.Struct, kw_only=True, rename="camel"):
    load_session: bool = False
    session_capabilities: dict[str, Any] = {}
    prompt_capabilities: dict[str, Any] = {}


class InitResult(msgspec.Struct, kw_only=True, rename="camel"):
    protocol_version: Any = None
    agent_capabilities: Capabilities = msgspec.field(default_factory=Capabilities)
    auth_methods: list[dict[str, Any]] = []
    agent_info: dict[str, Any] | None = None


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
_init_decoder = safejson.Decoder(InitResult)
_ref_decoder = safejson.Decoder(_SessionRef)
_dict_decoder = safejson.Decoder(dict[str, Any])


# JSON tokens, enough to walk the first bytes of a line too long to decode (`_sniff`).
# A string always matches (its closing quote optional), so an unterminated one is not
# rescanned from every later quote.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]|\\.?)*"?|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.DOTALL)
_SNIFFED = {(1, None, "id"): "id", (1, None, "method"): "method", (2, "params", "sessionId"): "sessionId"}


def _sniff(head: bytes) -> dict[str, Any]:
    """The JSON-RPC `id`, `method` and `params.sessionId` of a message, as far as its
    first bytes show them (a line over max_frame_bytes is never decoded whole)."""
    found: dict[str, Any] = {}
    stack: list[tuple[bool, str | None]] = []  # (an object?, the key it sits under)
    key: str | None = None
    want_key = False
    for m in _JSON_TOKEN.finditer(head):
        if m.end() == len(head):
            break  # the last token may be cut short
        tok = m.group()
        c = tok[:1]
        if c in (b"{", b"["):
            stack.append((c == b"{", key))
            key, want_key = None, c == b"{"
        elif c in (b"}", b"]"):
            if not stack:
                break
            key, want_key = stack.pop()[1], False
        elif c == b",":
            want_key = bool(stack) and stack[-1][0]
        elif c != b":":
            try:
                value = safejson.decode(tok)
            except msgspec.DecodeError:
                break
            if want_key:
                key, want_key = (value if isinstance(value, str) else None), False
                continue
            name = _SNIFFED.get((len(stack), stack[-1][1] if stack else None, key or ""))
            if name is not None:
                found.setdefault(name, value)
    return found


class _Pending:
    __slots__ = ("done", "reply", "on_settle", "method", "sid", "error")

    def __init__(self, on_settle: Callable[[], None] | None, method: str, sid: Any) -> None:
        self.done = trio.Event()
        self.reply: Reply | None = None
        self.on_settle = on_settle
        self.method = method
        self.sid = sid  # the agent session a session/prompt is for
        self.error: BridgeError | None = None  # why it failed without a reply


class AgentProcess:
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
        self.route = route
        self.cfg = cfg
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.client_caps = client_caps
        self.owner = owner  # the session that spawned it, for logs until sessions register
        self.sessions: dict[str, Handler] = {}  # agent sessionId → handler
        self.init = InitResult()
        self.pid: int | None = None
        self.dead: str | None = None  # why it stopped, once it has
        self.users = 0  # sessions sharing a multiplexed process
        self._pending: dict[int, _Pending] = {}
        self._next_id = 0
        self._send, self._recv = trio.open_memory_channel[Any](1024)
        self._scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._finished = trio.Event()
        self._stderr_done = trio.Event()
        self._stdout_done = trio.Event()
        self._exited = trio.Event()
        self.returncode: int | None = None
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

    async def start(self, *, nursery: trio.Nursery | TaskSpawner) -> InitResult:
        """Spawn the agent in `nursery`, then `initialize` (and `authenticate`)."""
        await nursery.start(self._host)
        if self.dead is not None:
            raise BackUnavailable(f"route {self.route}: cannot start the agent {self.argv[0]!r}: {self.dead}")
        try:
            with trio.fail_after(self.cfg.startup_timeout_s):
                await self._handshake()
        except trio.TooSlowError:
            await self.stop()
            raise BackUnavailable(
                f"route {self.route}: the agent did not finish initialize within startup_timeout_s "
                f"({self.cfg.startup_timeout_s:g} s)"
            ) from None
        except BackError:
            await self.stop()
            raise
        return self.init

    async def _handshake(self) -> None:
        params = acp.InitializeParams(
            protocol_version=acp.PROTOCOL_VERSION,
            client_capabilities=self.client_caps,
            client_info=acp.Implementation(name="agent-bridge", version=__version__),
        )
        reply = await self.call("initialize", params)
        if reply.error is not None:
            raise BackUnavailable(f"route {self.route}: the agent refused initialize: {reply.error.message}")
        try:
            self.init = _init_decoder.decode(reply.result or b"null")
        except msgspec.ValidationError as exc:
            raise BackUnavailable(f"route {self.route}: the agent's initialize result is invalid: {exc}") from exc
        version = self.init.protocol_version
        if version != acp.PROTOCOL_VERSION or type(version) is not int:
            # protocols.md §1.2: the client disconnects on a version it does not speak.
            raise BackUnavailable(
                f"route {self.route}: the agent answered initialize with protocolVersion {version!r}; "
                f"the bridge speaks ACP protocol version {acp.PROTOCOL_VERSION} only"
            )
        method = self.cfg.auth_method
        if method is not None:
            offered = [m.get("id") for m in self.init.auth_methods]
            if offered and method not in offered:
                log.warning("route %s: auth_method %r is not among the agent's %s", self.route, method, offered)
            reply = await self.call("authenticate", acp.AuthenticateParams(method_id=method))
            if reply.error is not None:
                raise BackUnavailable(
                    f"route {self.route}: authenticate with method {method!r} failed: {reply.error.message}"
                )

    async def _host(self, *, task_status: trio.TaskStatus[None]) -> None:
        """Owns the process and its tasks; never raises into its owner's nursery."""
        pgid: int | None = None
        started = False
        try:
            async with trio.open_nursery() as nursery:
                self._scope = nursery.cancel_scope
                self._nursery = nursery
                try:
                    proc: trio.Process = await nursery.start(self._run)
                except OSError as exc:
                    self._die(exc.strerror or str(exc))
                    return
                self.pid = pgid = proc.pid
                log.info("route %s: agent %s started (pid %d) for session %s", self.route, self.argv[0], proc.pid, self.owner)
                assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
                nursery.start_soon(self._reader, proc)
                nursery.start_soon(self._writer, proc.stdin)
                nursery.start_soon(self._stderr, proc.stderr)
                task_status.started()
                started = True
        except Exception as exc:  # the process boundary: our bug, never the owner's crash
            log.exception("route %s: agent connection failed", self.route)
            self._die(f"internal error: {exc!r}")
        finally:
            self._die("stopped")
            if pgid is not None:
                with trio.move_on_after(self.cfg.kill_grace_s + 2, shield=True):
                    await kill_group(pgid, self.cfg.kill_grace_s)
            self._finished.set()
            if not started:
                task_status.started()

    async def _run(self, *, task_status: trio.TaskStatus[trio.Process]) -> None:
        done = await trio.run_process(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,  # its own process group, ended as a whole
            check=False,
            deliver_cancel=self._deliver_cancel,
            task_status=task_status,
        )
        # It exited. Whatever it wrote before is still in the pipe: let the reader take
        # it (a child of the agent may hold stdout open, so this is bounded), then fail
        # what still waits for an answer, and end what is left of its group.
        self.returncode = done.returncode
        self._exited.set()
        with trio.move_on_after(0.5):
            await self._stdout_done.wait()
        self._die(describe_exit(done.returncode))
        log.log(
            logging.INFO if done.returncode == 0 else logging.WARNING,
            "%s: the agent (pid %s) %s", self.label(), self.pid, self.dead,
        )  # fmt: skip
        self._send.close()  # the writer ends
        # Its last words on stderr are often the reason it died: let them reach the log.
        with trio.move_on_after(1.0):
            await self._stderr_done.wait()
        assert self._scope is not None
        self._scope.cancel()

    async def _deliver_cancel(self, proc: trio.Process) -> None:
        """How the agent is ended when its owner stops (runs shielded until it exits)."""
        if self.init.agent_capabilities.session_capabilities.get("close") is not None and self.sessions:
            lines = encode_lines(
                [Request(id=f"close-{sid}", method="session/close", params={"sessionId": sid}) for sid in self.sessions]
            )
            try:
                os.write(proc.stdin.fileno(), lines)  # type: ignore[union-attr]
            except (OSError, AttributeError):
                pass
        if proc.stdin is not None:
            try:
                await proc.stdin.aclose()  # EOF: agents exit when their client goes away
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.sleep(min(0.5, self.cfg.kill_grace_s))
        await kill_group(proc.pid, self.cfg.kill_grace_s)

    async def stop(self) -> None:
        """End the agent and wait until it and its group are gone (bounded)."""
        if self._scope is not None:
            self._scope.cancel()
        with trio.move_on_after(self.cfg.kill_grace_s * 2 + 3, shield=True):
            await self._finished.wait()

    def _die(self, why: str) -> None:
        if self.dead is None:
            self.dead = why
        for pending in self._pending.values():
            pending.done.set()
        self._pending.clear()

    # -- requests ---------------------------------------------------------------------
    def _put(self, msg: Any) -> None:
        if self.dead is not None:
            raise BackUnavailable(f"route {self.route}: the agent {self.dead}")
        try:
            self._send.send_nowait(msg)
        except trio.WouldBlock:
            raise BackError(f"route {self.route}: the agent is not reading its input (queue full)") from None

    def notify(self, method: str, params: Any) -> None:
        self._put(Notification(method=method, params=params))

    def respond(self, rid: Any, result: Any, *, error: BaseException | None = None) -> None:
        """Answer a request of the agent (nothing to do once it is gone)."""
        if self.dead is not None:
            return
        try:
            self._put(error_response(rid, error) if error is not None else Response(id=rid, result=result))
        except BackError as exc:
            log.warning("%s: cannot answer the agent: %s", self.label(), exc.message)

    async def call(
        self, method: str, params: Any, *, timeout: float | None = None, on_settle: Callable[[], None] | None = None
    ) -> Reply:
        """Send a request and wait for its reply; BackUnavailable if the agent dies first.

        `on_settle` runs in the reader as the reply is read, before any later frame:
        `session/prompt` uses it so an update written after the response is not
        mistaken for part of the turn.
        """
        self._next_id += 1
        rid = self._next_id
        sid = getattr(params, "session_id", None)
        pending = self._pending[rid] = _Pending(on_settle, method, sid)
        try:
            self._put(Request(id=rid, method=method, params=params))
            if timeout is None:
                await pending.done.wait()
            else:
                with trio.move_on_after(timeout):
                    await pending.done.wait()
                if not pending.done.is_set():
                    raise BackError(f"route {self.route}: the agent did not answer {method} within {timeout:g} s")
        finally:
            self._pending.pop(rid, None)
        if pending.error is not None:
            raise pending.error
        if pending.reply is None:
            raise BackUnavailable(f"route {self.route}: the agent {self.dead or 'stopped'} before it answered {method}")
        return pending.reply

    # -- tasks ------------------------------------------------------------------------
    async def _writer(self, stdin: trio.abc.SendStream) -> None:
        buf = bytearray()
        recv = self._recv
        while True:
            try:
                items = [await recv.receive()]
            except trio.EndOfChannel:
                return
            while True:
                try:
                    items.append(recv.receive_nowait())
                except trio.WouldBlock:
                    break
            buf.clear()
            encode_lines(items, buf)
            try:
                await stdin.send_all(buf)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return  # the reader sees the exit and reports it

    async def _reader(self, proc: trio.Process) -> None:
        stream = proc.stdout
        assert stream is not None
        lines = LineReader(self.cfg.max_frame_bytes)
        sessions = self.sessions
        decode_update = _update_decoder.decode
        while True:
            try:
                data = bytes(await stream.receive_some(_READ))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            touched: list[TurnHandle] = []
            last: TurnHandle | None = None
            for frame in lines.feed(data) if data else lines.feed_eof():
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
            if not data:
                break
        self._stdout_done.set()
        with trio.move_on_after(self.cfg.kill_grace_s):
            await self._exited.wait()
            return  # `_run` reports the exit
        log.warning("%s: the agent closed its stdout but runs on; ending it", self.label())
        self._die("closed its output")
        assert self._scope is not None
        self._scope.cancel()

    def _frame(self, frame: bytes | Oversized) -> TurnHandle | None:
        """Any frame but a well-formed session/update: replies, requests, the odd ones."""
        if isinstance(frame, Oversized):
            if self._overflow:
                self._overflow = False  # its end: reported as it crossed the bound
                log.info("%s: the oversized line ended after %d bytes", self.label(), frame.size)
            else:
                self._oversized(frame)
            return None
        try:
            msg = parse(frame)
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
        if type(msg) is Reply:
            pending = self._pending.pop(msg.id, None) if type(msg.id) is int else None
            if pending is None:
                log.debug("%s: reply to an unknown or abandoned request %r", self.label(), msg.id)
                return None
            pending.reply = msg
            if pending.on_settle is not None:
                pending.on_settle()
            pending.done.set()
            return None
        self._serve(msg)  # type: ignore[arg-type]
        return None

    def _oversized(self, frame: Oversized) -> None:
        """Fail what a line over max_frame_bytes belongs to, judged from its head."""
        bound = self.cfg.max_frame_bytes
        said = f"the agent sent a line over max_frame_bytes ({bound} bytes)"
        log.warning("%s: %s: %d bytes so far; dropped", self.label(), said, frame.size)
        seen = _sniff(frame.head)
        rid, method, sid = seen.get("id"), seen.get("method"), seen.get("sessionId")
        if isinstance(method, str):
            if rid is not None:  # the agent's own request: answered, the turn goes on
                self._answer_error(rid, FrameTooLarge(f"{method}: the request is over max_frame_bytes ({bound} bytes)"))
                return
            failed = [k for k, p in self._pending.items() if p.method == "session/prompt" and (sid is None or p.sid == sid)]
        elif type(rid) is int:
            failed = [rid] if rid in self._pending else []
        else:
            failed = list(self._pending)  # cannot tell what it was: everything in flight
        for key in failed:
            pending = self._pending.pop(key)
            what = f"as its answer to {pending.method}" if key == rid else f"during {pending.method}"
            pending.error = BackError(f"route {self.route}: {said} {what}")
            if pending.method == "session/prompt" and key != rid and pending.sid is not None and self.dead is None:
                # The agent is still at that turn: ask it to stop (ACP prompt turn, cancellation).
                try:
                    self.notify("session/cancel", acp.SessionIdParams(session_id=pending.sid))
                except BackError as exc:
                    log.warning("%s: cannot cancel the failed turn: %s", self.label(), exc.message)
            pending.done.set()

    def _odd_line(self, frame: bytes, why: str) -> None:
        # Nothing but ACP may go to stdout (protocols.md §1.1); one stray line does not
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

    async def _stderr(self, stream: trio.abc.ReceiveStream) -> None:
        tail = b""
        while True:
            try:
                data = await stream.receive_some(_READ)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                if tail.strip():
                    self._log_stderr(tail)
                self._stderr_done.set()
                return
            tail += data
            *lines, tail = tail.split(b"\n")
            if len(tail) > _LOG_LINE * 4:
                lines.append(tail)
                tail = b""
            for line in lines:
                if line.strip():
                    self._log_stderr(line)

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if len(text) > _LOG_LINE:
            text = text[:_LOG_LINE] + f"… ({len(text)} chars)"
        agent_log.info("%s pid %s: %s", self.label(), self.pid, text)

    # -- requests from the agent --------------------------------------------------------
    def _serve(self, call: Call) -> None:
        if self._calls >= _MAX_CALLS:
            self._answer_error(call.id, Busy(f"too many requests in flight ({_MAX_CALLS})"))
            return
        assert self._nursery is not None
        self._calls += 1
        self._nursery.start_soon(self._serve_one, call)

    async def _serve_one(self, call: Call) -> None:
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
            result = await handler.on_call(call.method, call.params)
        except BridgeError as exc:
            if not isinstance(exc, (MethodNotFound, NotFound)):
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
