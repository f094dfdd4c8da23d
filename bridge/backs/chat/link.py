"""One WebSocket to a chat server, in either dialect, feeding a turn's inbox.

`Link.run` connects (trio-websocket), authenticates and subscribes, then is the
connection's one reader: each chat frame, the subscription's acknowledgement and
the connection's end become items in the turn's bounded inbox, in the order they
arrived. Writes (`emit`) come from the turn task and go straight to the socket
(trio-websocket serialises them).

- "ws": the bearer token goes in the upgrade's `Authorization` header; frames are
  `{"event", "data"}` text; `session:subscribed {sequence}` acknowledges the
  subscription. We ping every `ping_interval_s` and count a missing pong as a drop.
- "socketio": `codecs.socketio` frames it. The token goes in CONNECT's `auth`
  (Blade `api/websocket.md`); the subscription is acknowledged with a Socket.IO ACK; the server's pings
  are answered, and silence past its pingInterval + pingTimeout counts as a drop.

Before `task_status.started()` a failure raises (BackError: refused, unreachable,
garbled handshake); afterwards nothing is raised: the end of the connection, for
whatever reason, is a `Dropped` item, and the turn decides whether to reconnect.
When the inbox is full the reader waits, so the socket is read no faster than the
turn consumes it (backpressure; a Socket.IO server may drop a reader that stalls
past its ping timeout, which the turn then resumes).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import msgspec
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
)

from bridge.backs.chat.server import ChatServer, where
from bridge.backs.secrets import Secret
from bridge.codecs import chat_client, safejson, socketio
from bridge.errors import BackError

__all__ = ["Dropped", "Frame", "Link", "Subscribed", "check"]

log = logging.getLogger("bridge.backs.chat.back")

_enc = msgspec.json.Encoder()


class _Unauthorized(Exception):
    """The server refused an OAuth token during the handshake: renew it, connect once more."""


class Frame(NamedTuple):
    gen: int
    data: bytes


class Subscribed(NamedTuple):
    gen: int
    ok: bool
    sequence: int | None
    message: str | None


class Dropped(NamedTuple):
    gen: int
    reason: str


class _Event(msgspec.Struct, gc=False):
    event: str = ""


_event = safejson.Decoder(_Event)


def _closed(exc: ConnectionClosed) -> str:
    r = exc.reason
    text = f"{r.code} {r.name}" if r is not None else "without a close frame"
    return f"the socket closed ({text}{': ' + r.reason if r is not None and r.reason else ''})"


class Link:
    """One connection (see the module docstring). `gen` tags its items: a turn that
    reconnected ignores what an older link still reports."""

    def __init__(
        self, server: ChatServer, gen: int, inbox: trio.MemorySendChannel[Any], session_id: str | None, *, nursery: trio.Nursery
    ) -> None:
        self.server = server
        self.nursery = nursery  # for the "ws" keepalive, beside `run`
        self.cfg = server.cfg
        self.gen = gen
        self.inbox = inbox
        self.session_id = session_id
        self.sio: socketio.SocketIOClient | None = None
        self.ws: WebSocketConnection | None = None
        self.subscribe_ack: int | None = None
        self.gone = False
        self.drop_reason: str | None = None  # why we closed it ourselves
        self._released = trio.Event()  # the owner closed it (`close`)

    @property
    def url(self) -> str:
        if self.cfg.dialect == "socketio":
            return socketio.engineio_url(self.server.ws_url)
        return self.server.ws_url

    # -- connecting -----------------------------------------------------------------------
    async def run(
        self, after: int | None, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED, retried: bool = False
    ) -> None:
        """Connect, hand-shake and read until the link ends. A refused OAuth token (HTTP 401,
        a refused Socket.IO CONNECT) is renewed and the connection tried once more (`retried`)."""
        server, cfg = self.server, self.cfg
        token = await server.token()
        headers = []
        if token is not None and cfg.dialect == "ws":
            headers.append((b"authorization", f"Bearer {token.reveal()}".encode()))
        ssl_context = server.ssl_context() if server.ws_url.startswith("wss:") else None
        started = False
        try:
            async with open_websocket_url(
                self.url,
                ssl_context=ssl_context,
                extra_headers=headers,
                message_queue_size=1,
                max_message_size=cfg.max_frame_bytes,
                connect_timeout=cfg.connect_timeout_s,
                disconnect_timeout=1,
            ) as ws:
                self.ws = ws
                with trio.fail_after(cfg.connect_timeout_s):
                    await self._handshake(ws, token, after, retried=retried)
                task_status.started()
                started = True
                try:
                    reason = await self._read(ws)
                except trio.Cancelled:
                    # The turn was cut off: keep the socket until it has said what it
                    # needs to (chat:stop) and closed it, within a second.
                    with trio.CancelScope(shield=True), trio.move_on_after(1):
                        await self._released.wait()
                    raise
                self.gone = True
                await self.inbox.send(Dropped(self.gen, reason))
        except _Unauthorized:
            await self.run(after, task_status=task_status, retried=True)
            return
        except (ConnectionRejected, trio.TooSlowError, HandshakeError, ConnectionClosed, socketio.SocketIOError, OSError) as exc:
            if not started and not retried and isinstance(exc, ConnectionRejected) and exc.status_code == 401 and server.unauthorized(token):
                await self.run(after, task_status=task_status, retried=True)
                return
            err = self._failure(exc)
            if not started:
                raise err from (exc if isinstance(exc, (HandshakeError, OSError)) else None)
            if not self.gone:  # the connection failed under the reader: the turn hears of it
                self.gone = True
                await self.inbox.send(Dropped(self.gen, err.message))
            else:
                log.debug("route %s: closing the socket: %s", server.name, err.message)

    def _failure(self, exc: BaseException) -> BackError:
        """A connection failure in words (BackUnavailable when trying again may help)."""
        server, cfg = self.server, self.cfg
        at = where(cfg.url)
        if isinstance(exc, ConnectionRejected):
            status = exc.status_code
            hint = f" ({server.auth_hint()})" if status in (401, 403) else ""
            return server.error(
                f"the chat server at {at} refused the WebSocket: HTTP {status}{hint}{_detail(exc.body)}", unavailable=status >= 500
            )
        if isinstance(exc, ConnectionTimeout):
            return server.error(
                f"cannot reach the chat server at {at}: no connection within connect_timeout_s ({cfg.connect_timeout_s:g} s)",
                unavailable=True,
            )
        if isinstance(exc, trio.TooSlowError):
            return server.error(
                f"the chat server at {at} did not complete the handshake within connect_timeout_s ({cfg.connect_timeout_s:g} s)",
                unavailable=True,
            )
        if isinstance(exc, ConnectionClosed):
            return server.error(f"the chat server at {at} closed the connection during the handshake: {_closed(exc)}", unavailable=True)
        if isinstance(exc, socketio.SocketIOError):
            return server.error(f"the chat server at {at} does not speak Socket.IO as expected: {exc}")
        why = exc.__cause__ if isinstance(exc, HandshakeError) and exc.__cause__ is not None else exc
        detail = why.strerror if isinstance(why, OSError) and why.strerror else str(why) or type(why).__name__
        return server.error(f"cannot reach the chat server at {at}: {detail}", unavailable=True)

    async def _handshake(self, ws: WebSocketConnection, token: Secret | None, after: int | None, *, retried: bool = False) -> None:
        if self.cfg.dialect == "socketio":
            sio = self.sio = socketio.SocketIOClient(self.cfg.namespace)
            while sio.state is not socketio.ClientState.CONNECTED:
                for e in sio.receive(await ws.get_message()):
                    if isinstance(e, socketio.Opened):
                        await ws.send_message(sio.connect({"token": token.reveal()} if token is not None else None))
                    elif isinstance(e, socketio.Pinged):
                        await ws.send_message(sio.pong())
                    elif isinstance(e, socketio.ConnectRefused):
                        if not retried and self.server.unauthorized(token):
                            raise _Unauthorized
                        raise self.server.error(
                            f"the chat server at {where(self.cfg.url)} refused the Socket.IO connection: {e.message} "
                            f"({self.server.auth_hint()})"
                        )
                    elif isinstance(e, socketio.Disconnected):
                        raise self.server.error(f"the chat server at {where(self.cfg.url)} ended the connection during the handshake: {e.reason}", unavailable=True)
        if self.session_id is not None:
            await self._emit("session:subscribe", chat_client.subscribe(self.session_id, after), ack=True)

    # -- reading --------------------------------------------------------------------------
    async def _read(self, ws: WebSocketConnection) -> str:
        """Read until the connection ends; the reason it ended."""
        if self.sio is not None:
            try:
                return await self._read_socketio(ws, self.sio)
            except ConnectionClosed as exc:
                return _closed(exc)
        if self.cfg.ping_interval_s is not None:
            # Not a nursery of our own: a cut-off must reach `run` as a plain Cancelled.
            self.nursery.start_soon(self._keepalive, ws, self.cfg.ping_interval_s)
        return await self._read_ws(ws)

    async def _read_ws(self, ws: WebSocketConnection) -> str:
        while True:
            try:
                message = await ws.get_message()
            except ConnectionClosed as exc:
                return self.drop_reason or _closed(exc)
            data = message.encode() if isinstance(message, str) else message
            try:
                event = _event.decode(data).event
            except (msgspec.DecodeError, msgspec.ValidationError):
                event = ""  # the turn's codec says what is wrong with it
            if event == "session:subscribed":
                ok, seq, why = chat_client.subscribed_sequence(_data_of(data))
                await self.inbox.send(Subscribed(self.gen, ok, seq, why))
            else:
                await self.inbox.send(Frame(self.gen, data))

    async def _keepalive(self, ws: WebSocketConnection, interval: float) -> None:
        while not ws.closed:
            await trio.sleep(interval)
            with trio.move_on_after(interval) as waited:
                try:
                    await ws.ping()
                except ConnectionClosed:
                    return
            if waited.cancelled_caught:
                self.drop_reason = f"no pong within ping_interval_s ({interval:g} s)"
                with trio.move_on_after(1):
                    await ws.aclose(1001, "no pong")
                return

    async def _read_socketio(self, ws: WebSocketConnection, sio: socketio.SocketIOClient) -> str:
        # Engine.IO v4: the server pings every pingInterval; no ping within that plus its
        # pingTimeout means the connection is dead (the client rule of the protocol).
        quiet_s = sio.ping_interval_s + sio.ping_timeout_s
        while True:
            with trio.move_on_after(quiet_s) as waited:
                message = await ws.get_message()
            if waited.cancelled_caught:
                with trio.move_on_after(1):
                    await ws.aclose(1001, "ping timeout")
                return f"no ping from the server within its pingInterval + pingTimeout ({quiet_s:g} s)"
            if self.gone:
                return "closed by us"
            try:
                events = sio.receive(message)
            except socketio.SocketIOError as exc:
                log.warning("route %s: the chat server sent a bad Socket.IO packet: %s", self.server.name, exc)
                with trio.move_on_after(1):
                    await ws.aclose(1002, "protocol error")
                return f"the server sent a bad Socket.IO packet ({exc})"
            for e in events:
                if isinstance(e, socketio.Pinged):
                    await ws.send_message(sio.pong())
                elif isinstance(e, socketio.EventReceived):
                    await self.inbox.send(Frame(self.gen, chat_client.chat_frame(e.name, bytes(e.args[0]) if e.args else b"")))
                    if e.ack_id is not None:
                        await ws.send_message(sio.ack(e.ack_id))
                elif isinstance(e, socketio.AckReceived) and e.ack_id == self.subscribe_ack:
                    ok, seq, why = chat_client.subscribed_sequence(bytes(e.args[0]) if e.args else None)
                    await self.inbox.send(Subscribed(self.gen, ok, seq, why))
                elif isinstance(e, socketio.Disconnected):
                    return e.reason

    # -- writing --------------------------------------------------------------------------
    async def _emit(self, event: str, data: Any, *, ack: bool = False) -> None:
        assert self.ws is not None
        if self.sio is not None:
            text, ack_id = self.sio.emit(event, data, ack=ack)
            if event == "session:subscribe":
                self.subscribe_ack = ack_id
        else:
            text = _enc.encode({"event": event, "data": data}).decode()
        await self.ws.send_message(text)

    async def emit(self, event: str, data: Any) -> bool:
        """Send one event; False if the connection is gone (its reader reports why)."""
        if self.gone or self.ws is None:
            return False
        try:
            await self._emit(event, data, ack=event == "chat:stop" and self.sio is not None)
        except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError, socketio.SocketIOError):
            return False
        return True

    async def close(self) -> None:
        """Leave politely, within a second, whatever the caller's cancellation state."""
        ws, self.gone = self.ws, True
        try:
            if ws is None or ws.closed:
                return
            with trio.move_on_after(1, shield=True):
                try:
                    if self.sio is not None and self.sio.state is socketio.ClientState.CONNECTED:
                        await ws.send_message(self.sio.disconnect())
                    await ws.aclose()
                except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
        finally:
            self._released.set()


class _DataOf(msgspec.Struct, gc=False):
    data: msgspec.Raw = msgspec.Raw(b"null")


_data_of_frame = safejson.Decoder(_DataOf)


def _data_of(frame: bytes) -> bytes | None:
    try:
        return bytes(_data_of_frame.decode(frame).data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _detail(body: bytes | None) -> str:
    if not body:
        return ""
    try:
        value = safejson.decode(body)
    except msgspec.DecodeError:
        return ""
    detail = value.get("detail") if isinstance(value, dict) else None
    return f": {detail}" if isinstance(detail, str) else ""


async def check(server: ChatServer) -> str:
    """Connect and authenticate without subscribing to anything, then leave (a probe)."""
    send, _recv = trio.open_memory_channel[Any](1)
    failure: BackError | None = None
    async with trio.open_nursery() as nursery:
        link = Link(server, 0, send, None, nursery=nursery)
        try:
            await nursery.start(link.run, None)
        except BackError as exc:  # raised out of the nursery, not wrapped in its group
            failure = exc
        else:
            await link.close()
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    how = f"Socket.IO (namespace {server.cfg.namespace}) connected" if link.sio is not None else "WebSocket open"
    return f"{how} at {where(server.cfg.url)}"

