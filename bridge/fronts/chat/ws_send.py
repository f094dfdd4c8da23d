"""How the chat front writes to a WebSocket: the queue, and the two writers.

- `FrameQueue`: a connection's outgoing frames, swapped out whole by its writer.
- `AsgiSender`: one ASGI `websocket.send` per frame (any ASGI server).
- `HypercornSender`: every waiting frame in one socket write, through hypercorn's
  WebSocket stream and wsproto; each frame is still its own WebSocket message. Under
  hypercorn the ASGI path costs one awaited socket write per message, about 0.7x
  the trio-websocket ceiling; this path passes it (bench/ws_stream.py). It is used
  only when the ASGI `send` really is hypercorn's `WSStream.app_send`.
"""

from __future__ import annotations

import functools
from typing import Any

import trio

__all__ = [
    "AsgiSender",
    "FrameQueue",
    "Gone",
    "HypercornSender",
    "close_frame_on_protocol_error",
    "hypercorn_stream",
    "sender_for",
]


class Gone(Exception):
    """The client went away under a write."""


class AsgiSender:
    def __init__(self, send: Any) -> None:
        self.send = send

    async def send_many(self, texts: list[str]) -> None:
        for text in texts:
            await self.send({"type": "websocket.send", "text": text})

    async def close(self, code: int, reason: str) -> None:
        await self.send({"type": "websocket.close", "code": code, "reason": reason})

    async def ping(self) -> None:
        pass  # ASGI has no ping message: hypercorn's own pings keep this path alive


class HypercornSender(AsgiSender):
    """Every waiting frame in one write, through hypercorn's WebSocket stream and wsproto.

    Only our writer sends data messages, so they keep their order (and their
    permessage-deflate context, if negotiated); hypercorn's pongs are control frames.
    """

    _CHUNK = 64 * 1024

    def __init__(
        self, send: Any, stream: Any, data_event: Any, text_message: Any, ping: Any, protocol_error: Any
    ) -> None:
        super().__init__(send)
        self.stream = stream
        self._data = data_event
        self._text = text_message
        self._ping = ping
        self._protocol_error = protocol_error

    async def ping(self) -> None:
        st = self.stream
        if st.closed:
            raise Gone
        try:
            data = st.connection.send(self._ping())
        except self._protocol_error as exc:
            raise Gone from exc
        await st.send(self._data(stream_id=st.stream_id, data=data))

    async def send_many(self, texts: list[str]) -> None:
        st = self.stream
        parts: list[bytes] = []
        size = 0
        for text in texts:
            if st.closed:
                raise Gone
            try:
                part = st.connection.send(self._text(data=text))
            except self._protocol_error as exc:  # the client already closed
                raise Gone from exc
            parts.append(part)
            size += len(part)
            if size >= self._CHUNK:
                await st.send(self._data(stream_id=st.stream_id, data=b"".join(parts)))
                parts, size = [], 0
        if parts:
            await st.send(self._data(stream_id=st.stream_id, data=b"".join(parts)))


def hypercorn_stream(send: Any) -> Any:
    """hypercorn's WSStream behind an ASGI `send`, if that is what serves us."""
    try:
        from hypercorn.protocol.ws_stream import WSStream
    except ImportError:  # another ASGI server
        return None
    stream = getattr(send, "__self__", None)
    if isinstance(stream, WSStream) and all(hasattr(stream, a) for a in ("handshake", "send", "stream_id", "closed")):
        return stream
    return None


def close_frame_on_protocol_error(stream: Any) -> None:
    """Make hypercorn send the close frame when wsproto fails the connection, and never
    hand hypercorn's message buffer a message it cannot hold.

    A frame wsproto refuses (a text message that is not UTF-8: RFC 6455 §8.1, close
    1007; a bad opcode or mask, or a data frame inside a fragmented message, §5.4:
    1002) comes out of `Connection.events()` as a `CloseConnection` while the
    connection is still OPEN. hypercorn 0.18 (`WSStream._handle_events`) answers a
    close only in REMOTE_CLOSING, so it drops the TCP connection without one, where
    §7.1.7 says the endpoint SHOULD send a Close frame with the status code. Wrapping
    `events()` so that such a close moves the connection to REMOTE_CLOSING makes
    hypercorn answer it with that code.

    The same wrapper keeps data messages from hypercorn once the connection is no
    longer OPEN. When a message outgrows `websocket_max_message_size` hypercorn sends
    1009 and stops reading events, but leaves the message's first part in its buffer
    (one StringIO or BytesIO per connection); the client's next data frame, sent
    before it saw the close, was appended to it, and a message of the other type
    raised TypeError in hypercorn's read loop. Once we sent or received a Close, data
    frames are discarded (§1.4: after a Close, no further data is sent or delivered).
    And should a message ever change type before its final fragment (wsproto refuses
    that, §5.4, but hypercorn's buffer cannot hold it), the connection fails with 1002.

    Called before `websocket.accept`: the connection is made inside the accept, and
    the client's first frame may be read before the accept's `send` returns to us.
    Both wrappers are subclasses swapped in (`__class__`), not closures kept on the
    objects: a closure would tie each connection into a reference cycle, freed only by
    a full collection (memory after many connections close, bench/ws_stream.py).
    """
    handshake = getattr(stream, "handshake", None)
    if callable(getattr(handshake, "accept", None)):
        handshake.__class__ = _accepting_class(type(handshake))


@functools.cache
def _accepting_class(base: type) -> type:
    class AcceptingWithCloseFrames(base):  # type: ignore[misc, valid-type]
        def accept(self, *args: Any, **kwargs: Any) -> Any:
            status, headers, conn = super().accept(*args, **kwargs)
            if hasattr(conn, "_state"):
                conn.__class__ = _closing_class(type(conn))
            return status, headers, conn

    return AcceptingWithCloseFrames


@functools.cache
def _closing_class(base: type) -> type:
    from wsproto.connection import ConnectionState
    from wsproto.events import CloseConnection, Message
    from wsproto.frame_protocol import CloseReason

    class FailingWithCloseFrame(base):  # type: ignore[misc, valid-type]
        # The type of the message whose final fragment is still to come. Kept across
        # calls: a message's parts arrive over several reads, and hypercorn may stop
        # iterating half-way (its 1009 `break`).
        _partial: type | None = None

        def events(self) -> Any:
            for event in super().events():
                if isinstance(event, Message):
                    if self.state is not ConnectionState.OPEN:
                        continue  # closing: nothing more reaches hypercorn's buffer or the app
                    if self._partial is not None and type(event) is not self._partial:
                        self._state = ConnectionState.REMOTE_CLOSING
                        yield CloseConnection(code=CloseReason.PROTOCOL_ERROR, reason="a new message inside a fragmented one")
                        return
                    self._partial = None if event.message_finished else type(event)
                elif isinstance(event, CloseConnection) and self.state is ConnectionState.OPEN:
                    self._state = ConnectionState.REMOTE_CLOSING
                yield event

    return FailingWithCloseFrame


class FrameQueue:
    """A connection's outgoing frames, bounded by the connection (STYLE.md rules 13, 14).

    Not `transport.ndjson.Outbox`: the writer here is started when frames arrive, so no
    one parks on an empty queue, and an idle connection keeps only an empty list
    (a deque and two parking lots cost ~2 KiB per connection).
    """

    __slots__ = ("items", "_drained")

    def __init__(self) -> None:
        self.items: list[str] = []
        self._drained: trio.Event | None = None

    def __len__(self) -> int:
        return len(self.items)

    def take(self) -> list[str]:
        items, self.items = self.items, []
        if self._drained is not None:
            self._drained.set()
            self._drained = None
        return items

    async def wait_below(self, limit: int) -> None:
        while len(self.items) >= limit:
            if self._drained is None:
                self._drained = trio.Event()
            await self._drained.wait()


def sender_for(send: Any, stream: Any, batch: bool) -> AsgiSender:
    if stream is not None and batch and hasattr(stream, "connection"):
        from hypercorn.protocol.events import Data
        from wsproto.events import Ping, TextMessage
        from wsproto.utilities import LocalProtocolError

        return HypercornSender(send, stream, Data, TextMessage, Ping, LocalProtocolError)
    return AsgiSender(send)
