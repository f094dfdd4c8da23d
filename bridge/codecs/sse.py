"""Server-Sent Events parsing, sans-I/O (WHATWG HTML §9.2.6 "Interpreting an event stream").

`SSEDecoder.feed(data)` takes bytes as they arrive and returns the events completed
so far; `feed_eof()` marks the end of input: a half-received event is dropped there,
as the spec says, and it returns whether the stream ended cleanly (on an event
boundary). Lines end in CR, LF or CRLF, also when a CRLF is split across two
reads. Comment lines (`:` heartbeats) produce no event but count as activity.

Bounded (STYLE.md rule 14): an event whose data grows beyond `max_event_bytes`
raises `EventTooLarge`; the stream cannot be trusted after that, so the caller
drops the connection.

Used by the A2A back for both A2A bindings (A2A spec §9, §11: JSON-RPC wraps every
`data:` in a JSON-RPC response, HTTP+JSON sends the bare StreamResponse).

`encode_event(data, event=..., id=...)` is the other direction: one event's bytes, a
`data:` line per line of `data` (the spec splits the field on line ends), for the chat
front's canonical event stream and change feed.
"""

from __future__ import annotations

from bridge.codecs.numbers import small_int

__all__ = ["EventTooLarge", "SSEDecoder", "SSEEvent", "encode_event"]


class SSEEvent:
    """One dispatched event. `data` is the joined `data:` lines (bytes, LF-separated)."""

    __slots__ = ("data", "event", "id", "retry")

    def __init__(self, data: bytes, event: str = "message", id: str | None = None, retry: int | None = None) -> None:
        self.data = data
        self.event = event
        self.id = id
        self.retry = retry

    def __repr__(self) -> str:
        return f"SSEEvent(event={self.event!r}, data={self.data[:60]!r}, id={self.id!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SSEEvent)
            and (self.data, self.event, self.id, self.retry) == (other.data, other.event, other.id, other.retry)
        )


class EventTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a server-sent event of at least {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class SSEDecoder:
    __slots__ = ("max_event_bytes", "_buf", "_data", "_size", "_event", "_id", "_retry", "_skip_lf", "last_event_id", "comments")

    def __init__(self, max_event_bytes: int = 8 * 1024 * 1024) -> None:
        self.max_event_bytes = max_event_bytes
        self._buf = b""  # an incomplete line
        self._data: list[bytes] = []
        self._size = 0
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._skip_lf = False  # the last read ended in CR: a leading LF belongs to it
        self.last_event_id: str | None = None  # the spec's "last event ID buffer"
        self.comments = 0  # heartbeats seen (for diagnostics)

    def feed(self, data: bytes) -> list[SSEEvent]:
        if not data:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if data[:1] == b"\n":
                data = data[1:]
        if self._buf:
            data = self._buf + data
            self._buf = b""
        # Everything up to the last line terminator is complete; the rest waits.
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            self._hold(data)
            return []
        if data[cut : cut + 1] == b"\r" and cut == len(data) - 1:
            self._skip_lf = True
        rest = data[cut + 1 :]
        if rest:
            self._hold(rest)
        out: list[SSEEvent] = []
        for line in data[: cut + 1].splitlines():
            self._line(line, out)
        return out

    def feed_eof(self) -> bool:
        """End of input. A trailing unterminated event is dropped (spec); True if the
        stream ended on an event boundary."""
        clean = not self._buf and not self._data and not self._event and self._id is None
        self._buf = b""
        self._skip_lf = False
        self._reset()
        return clean

    # -- internals -------------------------------------------------------------------
    def _hold(self, partial: bytes) -> None:
        if len(partial) + self._size > self.max_event_bytes:
            raise EventTooLarge(len(partial) + self._size, self.max_event_bytes)
        self._buf = partial

    def _reset(self) -> None:
        self._data = []
        self._size = 0
        self._event = ""
        self._id = None
        self._retry = None

    def _line(self, line: bytes, out: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                out.append(
                    SSEEvent(b"\n".join(self._data), self._event or "message", self.last_event_id, self._retry)
                )
            self._reset()
            return
        if line[0] == 58:  # b":" — a comment (heartbeat)
            self.comments += 1
            return
        field, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                raise EventTooLarge(self._size, self.max_event_bytes)
            self._data.append(value)
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field == b"id":
            if b"\x00" not in value:
                self.last_event_id = self._id = value.decode("utf-8", "replace")
        elif field == b"retry":
            retry = small_int(value)  # ASCII digits only (WHATWG HTML §9.2.6); 18 at most
            if retry is not None:
                self._retry = retry
        # Any other field is ignored (spec).


def encode_event(data: bytes, *, event: str | None = None, id: str | int | None = None) -> bytes:
    """One event (WHATWG HTML §9.2.6): `id:`, `event:`, then `data` as `data:` lines.

    `event` and `id` must hold no line end (our own names and numbers); `data` may: each
    of its lines becomes a `data:` line, which a decoder joins again with LF."""
    head = b""
    if id is not None:
        head += b"id: %s\n" % str(id).encode()
    if event is not None:
        head += b"event: %s\n" % event.encode()
    if b"\n" in data or b"\r" in data:
        return head + b"".join(b"data: %s\n" % line for line in data.splitlines()) + b"\n"
    return head + b"data: " + data + b"\n\n"
