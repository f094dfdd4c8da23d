"""One SSE response of the chat front's canonical API: a bounded queue and its writer.

`SseOut.put(frame)` queues an encoded event (bridge/codecs/sse.py `encode_event`) from
anywhere, never blocking; `serve(send, receive, prologue=...)` is the request's task:
it starts the response, runs `prologue(write)` (a replay that writes itself, under the
client's own pace), then writes what is queued, everything waiting in one
`http.response.body` (STYLE.md rule 13), and a `: ping` comment after `heartbeat_s`
without a write. `Cache-Control: no-cache` and `X-Accel-Buffering: no` keep proxies
from buffering (DESIGN.md complaint 1).

Bounded (STYLE.md rule 14): more than `max_frames` events or `max_bytes` bytes waiting
closes the stream (`dropped`), and a client that accepts no write for `slow_s` is cut
off: a slow client costs its own stream, never the session's pace or another client.
The client's disconnect ends the writer; `close(tail)` ends it after what is queued.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

__all__ = ["SseOut"]

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
_RETRY = b"retry: 1000\n\n"  # WHATWG HTML §9.2.6: the reconnection time, in ms
_PING = b": ping\n\n"
_DROPPED = b": dropped: this client fell behind; reconnect with Last-Event-ID\n\n"
_END_S = 1.0  # the last write (the response's end) waits at most this long

Write = Callable[[bytes], Awaitable[None]]


class SseOut:
    __slots__ = ("_frames", "_bytes", "_max_frames", "_max_bytes", "_lot", "_tail", "closed", "dropped", "on_close")

    def __init__(self, *, max_frames: int, max_bytes: int) -> None:
        self._frames: list[bytes] = []
        self._bytes = 0
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._lot = trio.lowlevel.ParkingLot()
        self._tail = b""
        self.closed = False  # nothing more is queued
        self.dropped = False  # closed because the client fell too far behind
        self.on_close: Callable[[], None] | None = None

    def put(self, frame: bytes) -> None:
        if self.closed:
            return
        if len(self._frames) >= self._max_frames or self._bytes + len(frame) > self._max_bytes:
            self.dropped = True
            self.close(_DROPPED)
            return
        self._frames.append(frame)
        self._bytes += len(frame)
        if self._lot:
            self._lot.unpark()

    def close(self, tail: bytes = b"") -> None:
        """Write what is queued, then `tail`, then end the response."""
        if not self.closed:
            self.closed = True
            self._tail = tail
            self._lot.unpark_all()
            if self.on_close is not None:
                self.on_close()

    async def serve(
        self, send: Any, receive: Any, *, headers: list[tuple[str, str]], heartbeat_s: float, slow_s: float,
        prologue: Callable[[Write], Awaitable[None]] | None = None,
    ) -> None:  # fmt: skip
        """The whole response, until `close` and the queue is written, or the client leaves."""
        raw = _HEADERS + [(k.encode(), v.encode()) for k, v in headers]
        await send({"type": "http.response.start", "status": 200, "headers": raw})

        response = trio.CancelScope()

        async def write(body: bytes) -> None:
            with trio.move_on_after(slow_s) as scope:
                await send({"type": "http.response.body", "body": body, "more_body": True})
            if scope.cancelled_caught:  # it accepted nothing for `slow_s`: cut off
                self.dropped = True
                response.cancel()
                await trio.lowlevel.checkpoint()

        ended = False
        try:
            with response:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch, receive, response)
                    await write(_RETRY)
                    if prologue is not None:
                        await prologue(write)
                    await self._write(write, heartbeat_s)
                    ended = True
                    response.cancel()
        finally:
            self.close()
        if ended or self.dropped:
            # Shielded and bounded: a disconnect may land inside hypercorn's end of the
            # response (bridge/fronts/a2a/stream.py says more), and a client that reads
            # nothing must not hold this task.
            with trio.move_on_after(_END_S, shield=True):
                tail = self._tail if ended else b""
                await send({"type": "http.response.body", "body": tail, "more_body": False})

    async def _write(self, write: Write, heartbeat_s: float) -> None:
        while True:
            if self._frames:
                batch, self._frames, self._bytes = self._frames, [], 0
                await write(b"".join(batch))
                continue
            if self.closed:
                return
            with trio.move_on_after(heartbeat_s) as idle:
                await self._lot.park()
            if idle.cancelled_caught and not self._frames and not self.closed:
                await write(_PING)

    async def _watch(self, receive: Any, scope: trio.CancelScope) -> None:
        # The request had no body to read: what comes now is the disconnect.
        while (await receive())["type"] != "http.disconnect":
            pass
        self.close()
        scope.cancel()
