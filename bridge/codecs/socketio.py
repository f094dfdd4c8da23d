"""Engine.IO v4 and Socket.IO v5 framing, client side, over WebSocket only: sans-I/O.

The chat event stream of Blade runs on Socket.IO (Blade `api/websocket.md`). Over a
WebSocket (`/socket.io/?EIO=4&transport=websocket`, no long-polling, so no upgrade
and no `\\x1e`-joined payloads) every WebSocket text message is one Engine.IO packet:

    0{json}   open: {sid, upgrades, pingInterval, pingTimeout, maxPayload} (ms)
    1         close
    2 / 3     ping / pong: in v4 the *server* pings and the client answers pong
    4<sio>    message: one Socket.IO packet
    6         noop

A Socket.IO packet is `<type>[<attachments>-][<namespace>,][<ack id>][<JSON>]`:

    0 CONNECT        client: the `auth` object; server: {sid}
    1 DISCONNECT
    2 EVENT          ["name", arg...], with an ack id when the sender wants an ACK
    3 ACK            [arg...], the ack id of the event it answers
    4 CONNECT_ERROR  {message, data?} (a bare string from older servers)
    5 / 6            binary event / ack: attachments in binary WebSocket frames,
                     which the chat stream (JSON only) never needs: refused

`SocketIOClient` is the h11-shaped state machine of one connection: `receive(text)`
turns one WebSocket message into typed events (a garbled one raises
`SocketIOError`); `connect`, `emit`, `ack`, `pong` and `disconnect` return the text
to send. Event arguments stay `msgspec.Raw`, so a payload is decoded once, by the
codec that knows its type.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import msgspec
from msgspec import Raw

from bridge.codecs import safejson

__all__ = [
    "AckReceived",
    "ClientState",
    "ConnectRefused",
    "Connected",
    "Disconnected",
    "EventReceived",
    "IllegalClientState",
    "Opened",
    "Pinged",
    "SocketIOClient",
    "SocketIOError",
    "TRANSITIONS",
    "engineio_url",
]

_enc = msgspec.json.Encoder()


class SocketIOError(ValueError):
    """The server sent something that is not Engine.IO/Socket.IO, or not now."""


# -- events out of `receive` ---------------------------------------------------------------


class _Ev(msgspec.Struct, kw_only=True, gc=False):
    pass


class Opened(_Ev):
    """The Engine.IO handshake (`0{...}`); the intervals are in seconds."""

    sid: str
    ping_interval_s: float
    ping_timeout_s: float
    max_payload: int


class Connected(_Ev):
    sid: str | None = None


class ConnectRefused(_Ev):
    """CONNECT_ERROR: the server would not let us in (a wrong token, usually)."""

    message: str
    data: Any = None


class EventReceived(_Ev):
    name: str
    args: list[Raw]
    ack_id: int | None = None


class AckReceived(_Ev):
    ack_id: int
    args: list[Raw]


class Pinged(_Ev):
    """The server's heartbeat: answer `pong()` within its ping timeout."""


class Disconnected(_Ev):
    """The server ended the Socket.IO session (`41`) or the Engine.IO one (`1`)."""

    reason: str


# -- the state machine ----------------------------------------------------------------------
#
# Rules:
# - The server speaks first: its open packet moves WAIT_OPEN → OPEN.
# - The client then sends CONNECT (with its auth) once: OPEN → CONNECTING.
# - The server answers CONNECT (→ CONNECTED) or CONNECT_ERROR (→ CLOSED).
# - Events and acks flow only while CONNECTED; pings from OPEN on.
# - Either side may close at any time (→ CLOSED); a closed connection takes nothing more.


class ClientState(Enum):
    WAIT_OPEN = "wait_open"
    OPEN = "open"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


class _In(Enum):
    OPENED = "opened"
    SEND_CONNECT = "send_connect"
    CONNECTED = "connected"
    REFUSED = "refused"
    CLOSE = "close"


S, I = ClientState, _In

TRANSITIONS: dict[tuple[ClientState, _In], ClientState] = {
    (S.WAIT_OPEN, I.OPENED): S.OPEN,
    (S.OPEN, I.SEND_CONNECT): S.CONNECTING,
    (S.CONNECTING, I.CONNECTED): S.CONNECTED,
    (S.CONNECTING, I.REFUSED): S.CLOSED,
    (S.WAIT_OPEN, I.CLOSE): S.CLOSED,
    (S.OPEN, I.CLOSE): S.CLOSED,
    (S.CONNECTING, I.CLOSE): S.CLOSED,
    (S.CONNECTED, I.CLOSE): S.CLOSED,
    (S.CLOSED, I.CLOSE): S.CLOSED,
}


class IllegalClientState(SocketIOError):
    def __init__(self, state: ClientState, what: str) -> None:
        super().__init__(f"{what} while the Socket.IO connection is {state.value}")
        self.state = state


class _Handshake(msgspec.Struct, gc=False):
    sid: str
    pingInterval: int = 25000  # noqa: N815 - the wire's own names
    pingTimeout: int = 20000  # noqa: N815
    maxPayload: int = 1_000_000  # noqa: N815
    upgrades: list[str] = []


_handshake = safejson.Decoder(_Handshake)
_args = safejson.Decoder(list[Raw])
_any = safejson.Decoder()


def _show(text: str) -> str:
    """A peek at a bad packet for an error message: short, printable."""
    return repr(text[:40] + ("…" if len(text) > 40 else ""))


def engineio_url(url: str) -> str:
    """`url` with the Engine.IO query of a WebSocket-only client (`EIO=4&transport=websocket`)."""
    base, _, query = url.partition("?")
    if not base.endswith("/"):
        base += "/"  # Socket.IO servers route `/socket.io/` with its slash
    kept = [p for p in query.split("&") if p and not p.startswith(("EIO=", "transport="))]
    return base + "?" + "&".join([*kept, "EIO=4", "transport=websocket"])


class SocketIOClient:
    """One client connection's Engine.IO/Socket.IO state (see the module docstring)."""

    __slots__ = ("namespace", "state", "sid", "ping_interval_s", "ping_timeout_s", "max_payload", "_next_ack")

    def __init__(self, namespace: str = "/") -> None:
        if not namespace.startswith("/") or "," in namespace:
            raise ValueError(f"a Socket.IO namespace starts with '/' and has no ',': {namespace!r}")
        self.namespace = namespace
        self.state = ClientState.WAIT_OPEN
        self.sid: str | None = None
        self.ping_interval_s = 25.0
        self.ping_timeout_s = 20.0
        self.max_payload = 1_000_000
        self._next_ack = 0

    def _apply(self, what: _In) -> None:
        try:
            self.state = TRANSITIONS[(self.state, what)]
        except KeyError:
            raise IllegalClientState(self.state, f"cannot {what.value}") from None

    # -- sending ----------------------------------------------------------------------------
    def _prefix(self, kind: str) -> str:
        return "4" + kind + ("" if self.namespace == "/" else self.namespace + ",")

    def connect(self, auth: Any = None) -> str:
        """The CONNECT packet, with `auth` (e.g. `{"token": ...}`) if given."""
        self._apply(_In.SEND_CONNECT)
        body = "" if auth is None else _enc.encode(auth).decode()
        return self._prefix("0") + body

    def emit(self, event: str, data: Any, *, ack: bool = False) -> tuple[str, int | None]:
        """An EVENT packet `["event", data]`; with `ack`, also the id its ACK will carry."""
        if self.state is not ClientState.CONNECTED:
            raise IllegalClientState(self.state, f"cannot emit {event!r}")
        ack_id = None
        if ack:
            ack_id = self._next_ack
            self._next_ack += 1
        body = _enc.encode([event, data]).decode()
        return self._prefix("2") + ("" if ack_id is None else str(ack_id)) + body, ack_id

    def ack(self, ack_id: int, *args: Any) -> str:
        """The ACK of an event the server sent with an ack id."""
        return self._prefix("3") + str(ack_id) + _enc.encode(list(args)).decode()

    def pong(self) -> str:
        return "3"

    def disconnect(self) -> str:
        """Leave the namespace (`41`); the WebSocket close follows."""
        self._apply(_In.CLOSE)
        return self._prefix("1")

    # -- receiving ---------------------------------------------------------------------------
    def receive(self, message: str | bytes) -> list[Any]:
        """The events of one WebSocket message (a list of zero or one, for now)."""
        if isinstance(message, (bytes, bytearray, memoryview)):
            raise SocketIOError("a binary WebSocket frame (Socket.IO attachments are not supported)")
        if not message:
            raise SocketIOError("an empty Engine.IO packet")
        if self.state is ClientState.CLOSED:
            raise IllegalClientState(self.state, "a packet arrived")
        kind, body = message[0], message[1:]
        if kind == "0":
            return [self._opened(body)]
        if self.state is ClientState.WAIT_OPEN:
            raise SocketIOError(f"expected the Engine.IO open packet, got {_show(message)}")
        if kind == "2":
            return [Pinged()]
        if kind == "4":
            return self._socketio(body)
        if kind == "1":
            self._apply(_In.CLOSE)
            return [Disconnected(reason="the server closed the Engine.IO session")]
        if kind in "36" and len(kind) == 1:
            return []  # a pong (we never ping in v4) or a noop
        raise SocketIOError(f"not an Engine.IO packet: {_show(message)}")

    def _opened(self, body: str) -> Opened:
        if self.state is not ClientState.WAIT_OPEN:
            raise IllegalClientState(self.state, "a second open packet arrived")
        try:
            h = _handshake.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SocketIOError(f"the Engine.IO open packet is not valid: {exc}") from exc
        self._apply(_In.OPENED)
        self.sid = h.sid
        self.ping_interval_s = max(h.pingInterval, 1) / 1000
        self.ping_timeout_s = max(h.pingTimeout, 1) / 1000
        self.max_payload = h.maxPayload
        return Opened(
            sid=h.sid, ping_interval_s=self.ping_interval_s, ping_timeout_s=self.ping_timeout_s, max_payload=h.maxPayload
        )

    def _socketio(self, p: str) -> list[Any]:
        if not p or p[0] not in "0123456789":
            raise SocketIOError(f"not a Socket.IO packet: {_show('4' + p)}")
        kind, rest = int(p[0]), p[1:]
        if kind in (5, 6):
            raise SocketIOError("a binary Socket.IO packet (attachments are not supported)")
        if kind > 6:
            raise SocketIOError(f"unknown Socket.IO packet type {kind}")
        namespace = "/"
        if rest.startswith("/"):
            namespace, comma, rest = rest.partition(",")
            if not comma:
                rest = ""
            namespace = namespace.partition("?")[0]
        if namespace != self.namespace:
            return []  # another namespace: not ours
        digits = 0
        while digits < len(rest) and rest[digits] in "0123456789":  # not str.isdigit: "²" is one
            digits += 1
        if digits > 15:
            raise SocketIOError("a Socket.IO ack id longer than 15 digits")
        ack_id = int(rest[:digits]) if digits else None
        body = rest[digits:]
        if kind == 0:
            if self.state is not ClientState.CONNECTING:
                raise IllegalClientState(self.state, "CONNECT arrived")
            self._apply(_In.CONNECTED)
            # Socket.IO v5 §CONNECT: the payload is an object; any other JSON has no sid.
            payload = self._json(body) if body else None
            sid = payload.get("sid") if isinstance(payload, dict) else None
            return [Connected(sid=sid if isinstance(sid, str) else None)]
        if kind == 4:
            if self.state is not ClientState.CONNECTING:
                raise IllegalClientState(self.state, "CONNECT_ERROR arrived")
            self._apply(_In.REFUSED)
            data = self._json(body) if body else None
            if isinstance(data, dict):
                return [ConnectRefused(message=str(data.get("message") or "connection refused"), data=data.get("data"))]
            return [ConnectRefused(message=str(data) if data is not None else "connection refused")]
        if kind == 1:
            self._apply(_In.CLOSE)
            return [Disconnected(reason="the server disconnected the Socket.IO session")]
        if self.state is not ClientState.CONNECTED:
            raise IllegalClientState(self.state, "an event arrived")
        args = self._list(body)
        if kind == 3:
            if ack_id is None:
                raise SocketIOError("an ACK without an ack id")
            return [AckReceived(ack_id=ack_id, args=args)]
        if not args:
            raise SocketIOError("an EVENT without a name")
        try:
            name = safejson.decode(args[0], type=str)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise SocketIOError(f"an EVENT whose name is not a string: {exc}") from exc
        return [EventReceived(name=name, args=args[1:], ack_id=ack_id)]

    @staticmethod
    def _json(body: str) -> Any:
        try:
            return _any.decode(body)
        except msgspec.DecodeError as exc:
            raise SocketIOError(f"invalid JSON in a Socket.IO packet: {exc}") from exc

    @staticmethod
    def _list(body: str) -> list[Raw]:
        try:
            return _args.decode(body or "[]")
        except msgspec.ValidationError as exc:  # (a DecodeError too: caught first)
            raise SocketIOError(f"a Socket.IO EVENT or ACK whose data is not an array: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise SocketIOError(f"invalid JSON in a Socket.IO packet: {exc}") from exc
