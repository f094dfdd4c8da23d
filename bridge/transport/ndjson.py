"""One newline-delimited JSON-RPC connection on trio: a reader task, a bounded outbox
and its writer, around the sans-I/O peer of `bridge/codecs/jsonrpc_peer.py`.

Used by the ACP front (stdio and the unix socket) and the ACP back (an agent's pipes);
the MCP stdio transport uses only its reading (`receive_frames`).

- Reading: `receive_frames` reads up to 64 KiB and hands the complete lines to the
  caller, bounded by `LineReader` (bridge/codecs/ndjson.py): a line over
  `max_frame_bytes` is dropped as it streams and reported as `Oversized`.
- Writing (STYLE.md rule 13): producers `put` into the `Outbox` without awaiting; one
  writer takes everything waiting and sends it with one `send_all`. The outbox is
  bounded by backpressure: above its bound it is *congested* and well-behaved producers
  (the session's `_flow`, the reader) wait in `wait_uncongested` (STYLE.md rule 14).
- `NdjsonConnection.request` sends through the peer and waits for the outcome; a wait
  that ends without one (its timeout, or the waiting task cancelled) withdraws the
  request with `$/cancel_request` (ACP schema, `CancelRequestNotification`).
- `serve_call` is the supervising boundary of one incoming request (STYLE.md rule 17):
  a `BridgeError` becomes its mapped JSON-RPC error, anything else is logged as our bug
  and answered -32603, and nothing reaches the connection or its other requests. While
  it runs, its handler's cancel scope is kept by request id (`serving`), so the peer's
  `$/cancel_request` for it (`cancel_served`) stops that handler alone, and the request
  is answered -32800 (ACP schema, `ErrorCode` "Request cancelled").
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import trio

from bridge.codecs.jsonrpc import Call, encode_lines
from bridge.codecs.jsonrpc_peer import (
    JsonRpcPeer,
    PendingRequest,
    RequestError,
    RequestResult,
    UnknownReply,
)
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.errors import BridgeError, InternalError, InvalidRequest, RequestCancelled

__all__ = ["ANSWERED", "NdjsonConnection", "Outbox", "receive_frames", "write_batches"]

READ_BYTES = 65536

# A call handler's result meaning "answered already, or will be by another task".
ANSWERED: Any = object()


async def receive_frames(stream: trio.abc.ReceiveStream, lines: LineReader) -> tuple[list[bytes | Oversized], bool]:
    """The frames completed by one read, and whether the stream ended (its last frames
    then included). A broken or closed stream is an end like EOF."""
    try:
        data = await stream.receive_some(READ_BYTES)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        data = b""
    if data:
        return lines.feed(data), False
    return lines.feed_eof(), True


class Outbox:
    """A connection's outgoing queue, drained by one writer in batches."""

    __slots__ = ("max_items", "_items", "_readable", "_reader_waiting", "_drained", "_closed")

    def __init__(self, max_items: int) -> None:
        self.max_items = max_items
        self._items: deque[Any] = deque()
        self._readable = trio.lowlevel.ParkingLot()
        self._reader_waiting = False  # a plain flag: ParkingLot's len() is a Python call per put
        self._drained = trio.lowlevel.ParkingLot()
        self._closed = False

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: Any) -> None:
        if self._closed:
            return  # the peer is gone; nothing more can reach it
        self._items.append(item)
        if self._reader_waiting:
            self._reader_waiting = False
            self._readable.unpark()

    def congested(self) -> bool:
        return len(self._items) >= self.max_items and not self._closed

    async def wait_uncongested(self) -> None:
        while self.congested():
            await self._drained.park()

    async def take(self) -> list[Any]:
        """Everything waiting (at least one item); [] once closed and empty."""
        while not self._items:
            if self._closed:
                return []
            self._reader_waiting = True
            await self._readable.park()
        items = list(self._items)
        self._items.clear()
        self._drained.unpark_all()
        return items

    def close(self) -> None:
        self._closed = True
        self._readable.unpark_all()
        self._drained.unpark_all()


async def write_batches(
    outbox: Outbox, send: trio.abc.SendStream, encode: Callable[[list[Any], bytearray], object] = encode_lines
) -> bool:
    """Drain `outbox` into `send`, one `send_all` per batch, until it is closed and empty
    (True) or the stream breaks (False; the outbox is closed then)."""
    buf = bytearray()
    while True:
        items = await outbox.take()
        if not items:
            return True
        buf.clear()
        encode(items, buf)
        try:
            await send.send_all(buf)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            outbox.close()
            return False


class _Waiter:
    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.outcome: RequestResult | RequestError | None = None


class NdjsonConnection:
    """The peer, the outbox and the waits of one NDJSON JSON-RPC connection.

    The owner runs `write_loop()` in its nursery and feeds every incoming frame it does
    not handle itself to `peer.receive`, settling replies with `settled`.
    """

    __slots__ = ("send_stream", "outbox", "peer", "log", "_waiters", "_serving")

    def __init__(self, send: trio.abc.SendStream, *, max_outbox_items: int, log: logging.Logger) -> None:
        self.send_stream = send
        self.outbox = Outbox(max_outbox_items)
        self.peer = JsonRpcPeer(self.outbox.put)
        self.log = log
        self._waiters: dict[Any, _Waiter] = {}
        self._serving: dict[Any, trio.CancelScope] = {}  # incoming request id → its handler's scope

    async def write_loop(self) -> bool:
        """The writer task: True once the outbox closed and was sent, False if the peer went away."""
        return await write_batches(self.outbox, self.send_stream)

    # -- out ------------------------------------------------------------------------------
    async def request(
        self, method: str, params: Any, *, timeout_s: float | None = None, context: Any = None
    ) -> RequestResult | RequestError | None:
        """Send a request and wait for its outcome (see `wait`)."""
        return await self.wait(self.start_request(method, params, context=context), timeout_s=timeout_s)

    def start_request(self, method: str, params: Any, *, context: Any = None) -> PendingRequest:
        """Send a request now; `wait` for its outcome."""
        pending = self.peer.request(method, params, context=context)
        self._waiters[pending.id] = _Waiter()
        return pending

    async def wait(self, pending: PendingRequest, *, timeout_s: float | None = None) -> RequestResult | RequestError | None:
        """The outcome of a request: None when it does not come within `timeout_s` or the
        connection ends (`abandon_all`). Given up on (the timeout, or the waiting task
        cancelled), the request is withdrawn with `$/cancel_request` (ACP schema,
        `CancelRequestNotification`); its late answer is then an `UnknownReply`."""
        waiter = self._waiters.get(pending.id)
        if waiter is None:
            return None
        try:
            if timeout_s is None:
                await waiter.done.wait()
            else:
                with trio.move_on_after(timeout_s):
                    await waiter.done.wait()
        finally:
            self._waiters.pop(pending.id, None)
            # Settled, failed or abandoned: no longer pending, and nothing is sent.
            self.peer.cancel(pending.id)
        return waiter.outcome

    def withdraw(self, request_id: Any) -> None:
        """Withdraw a request still waiting (`$/cancel_request`): its waiter gets None now,
        the peer's answer to it (-32800, or the result after all) is an `UnknownReply`."""
        if self.peer.cancel(request_id) is not None:
            waiter = self._waiters.get(request_id)
            if waiter is not None:
                waiter.done.set()

    def settled(self, outcome: RequestResult | RequestError | UnknownReply) -> PendingRequest | None:
        """Hand a reply's outcome to whoever waits for it; the request it settled."""
        if type(outcome) is UnknownReply:
            self.log.debug("reply to an unknown or abandoned request %r", outcome.id)
            return None
        waiter = self._waiters.get(outcome.request.id)  # type: ignore[union-attr]
        if waiter is not None:
            waiter.outcome = outcome  # type: ignore[assignment]
            waiter.done.set()
        return outcome.request  # type: ignore[union-attr]

    def fail(self, pending: PendingRequest) -> None:
        """Stop waiting for one request: its waiter gets None now (the caller says why)."""
        self.peer.forget(pending.id)
        waiter = self._waiters.get(pending.id)
        if waiter is not None:
            waiter.done.set()

    def abandon_all(self) -> None:
        """The peer is gone: every request still waiting gets None."""
        self.peer.fail_all()
        for waiter in self._waiters.values():
            waiter.done.set()

    # -- in -------------------------------------------------------------------------------
    @contextmanager
    def serving(self, request_id: Any) -> Iterator[trio.CancelScope]:
        """The cancel scope of one incoming request's handler, found by `cancel_served`
        while it runs. `InvalidRequest` when a request with that id is still being
        served: JSON-RPC 2.0 §5, the response carries the request's id, so two
        outstanding requests with one id could not be told apart."""
        if request_id in self._serving:
            raise InvalidRequest(f"request id {request_id!r} is already in use by a request in flight")
        scope = self._serving[request_id] = trio.CancelScope()
        try:
            with scope:
                yield scope
        finally:
            del self._serving[request_id]

    def cancel_served(self, request_id: Any) -> bool:
        """The peer withdrew its request `request_id` (ACP schema, `$/cancel_request`):
        cancel its handler, if it still runs. Whether one did."""
        scope = self._serving.get(request_id)
        if scope is None:
            return False
        scope.cancel()
        return True

    async def serve_call(self, call: Call, handler: Callable[[Call], Awaitable[Any]], *, what: str) -> None:
        """Run one incoming request's handler and answer it: the handler's result, or
        `ANSWERED` when it answers by itself; an error by meaning (bridge/errors.py);
        -32800 when the peer withdrew it (`cancel_served`) before the handler ended."""
        try:
            with self.serving(call.id) as scope:
                result = await handler(call)
        except BridgeError as exc:
            self.log.warning("%s %s failed: %s", what, call.method, exc.message)
            self.peer.respond_error(call.id, exc)
        except Exception:
            # One request's boundary (STYLE.md rule 17): our bug is this request's -32603
            # and a log line; the connection, its sessions and other clients go on.
            self.log.exception("%s %s failed", what, call.method)
            self.peer.respond_error(call.id, InternalError("internal error"))
        else:
            if scope.cancelled_caught:
                # Only this handler's scope was cancelled; a cancellation from outside
                # (the connection ending) is not caught here and goes on up.
                self.log.info("%s %s cancelled by the peer", what, call.method)
                self.peer.respond_error(call.id, RequestCancelled("request cancelled"))
            elif result is not ANSWERED:
                self.peer.respond(call.id, result)
