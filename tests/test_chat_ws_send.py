"""`close_frame_on_protocol_error` without a socket: what it lets through to hypercorn.

hypercorn's `WSStream` buffers a message's parts in one StringIO or BytesIO and reads
`Connection.events()` once per read; the wrapper stands between the two. Real wsproto
connections from hypercorn's own `Handshake`, fed client frames (tests/daemon_support.py
`ws_frame`); the one case wsproto never produces (a message changing type before its
final fragment) is played by a scripted connection. The same faults against the real
daemon: tests/test_e2e_ws_protocol.py.
"""

from __future__ import annotations

import base64
import gc
import os
import weakref
from types import SimpleNamespace
from typing import Any

from hypercorn.protocol.ws_stream import Handshake
from wsproto.connection import ConnectionState
from wsproto.events import BytesMessage, CloseConnection, TextMessage

from bridge.fronts.chat.ws_send import close_frame_on_protocol_error
from daemon_support import ws_frame

TEXT, BINARY, CLOSE = 1, 2, 8


def handshake() -> Handshake:
    key = base64.b64encode(os.urandom(16))
    headers = [(b"connection", b"Upgrade"), (b"upgrade", b"websocket"), (b"sec-websocket-key", key), (b"sec-websocket-version", b"13")]
    return Handshake(headers, "1.1")


def accepted() -> Any:
    """A server connection made by hypercorn's handshake, through the wrapper."""
    stream = SimpleNamespace(handshake=handshake())
    close_frame_on_protocol_error(stream)
    _, _, conn = stream.handshake.accept(None, [])
    return conn


def test_a_wrapped_connection_is_freed_without_the_cycle_collector() -> None:
    """The wrapper once kept closures on the handshake and the connection that pointed
    back at them: every closed WebSocket stayed in memory (with hypercorn's buffers)
    until a full collection, and RSS grew with each wave of clients."""
    gc.disable()
    try:
        stream = SimpleNamespace(handshake=handshake())
        close_frame_on_protocol_error(stream)
        _, _, conn = stream.handshake.accept(None, [])
        conn.receive_data(ws_frame(b"hello", TEXT) + ws_frame(b"\x03\xe8", CLOSE))
        assert [type(e) for e in conn.events()] == [TextMessage, CloseConnection]
        refs = [weakref.ref(stream.handshake), weakref.ref(conn)]
        del stream, conn
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_a_protocol_error_moves_the_connection_to_remote_closing_so_hypercorn_answers_it() -> None:
    conn = accepted()
    conn.receive_data(ws_frame(b"ab", TEXT, fin=False) + ws_frame(b"cd", BINARY))  # RFC 6455 §5.4
    events = list(conn.events())
    assert isinstance(events[-1], CloseConnection) and events[-1].code == 1002
    assert conn.state is ConnectionState.REMOTE_CLOSING


def test_no_data_message_reaches_hypercorn_once_a_close_is_sent() -> None:
    conn = accepted()
    conn.receive_data(ws_frame(b"x" * 100, BINARY))
    assert [type(e) for e in conn.events()] == [BytesMessage]
    conn.send(CloseConnection(code=1009))  # what hypercorn does for an oversized message
    conn.receive_data(ws_frame(b"more", BINARY) + ws_frame(b'{"a": 1}', TEXT) + ws_frame(b"\x03\xe8", CLOSE))
    events = list(conn.events())
    assert [type(e) for e in events] == [CloseConnection]
    assert conn.state is ConnectionState.CLOSED


class ScriptedHandshake:
    """hypercorn's `Handshake` as far as the wrapper sees it: `accept` makes the connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def accept(self, *args: Any, **kwargs: Any) -> Any:
        return 101, [], self._conn


class Scripted:
    """A connection whose `events()` yields what it is told (the state is wsproto's)."""

    def __init__(self, events: list[Any]) -> None:
        self._state = ConnectionState.OPEN
        self._events = events

    @property
    def state(self) -> ConnectionState:
        return self._state

    def events(self) -> Any:
        return iter(self._events)


def test_a_message_changing_type_before_its_final_fragment_fails_with_1002() -> None:
    script = Scripted([TextMessage(data="a", frame_finished=False, message_finished=False), BytesMessage(data=b"b")])
    stream = SimpleNamespace(handshake=ScriptedHandshake(script))
    close_frame_on_protocol_error(stream)
    _, _, conn = stream.handshake.accept(None, [])
    events = list(conn.events())
    assert [type(e) for e in events] == [TextMessage, CloseConnection]
    assert events[-1].code == 1002
    assert conn.state is ConnectionState.REMOTE_CLOSING
