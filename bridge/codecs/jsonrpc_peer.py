"""One side of a JSON-RPC 2.0 connection, sans-I/O: ids, pending requests, settling.

`JsonRpcPeer` is what the ACP front, the ACP back and any other NDJSON JSON-RPC
connection share (h11's `Connection` shape: messages in, typed events out; messages
out through one sink, no event loop):

- `request(method, params)` numbers the request, remembers it in the pending table
  and hands the message to the sink; `notify`, `respond` and `respond_error` send
  the rest.
- `receive(line)` parses one frame in two steps (STYLE.md rule 6, through the total
  decoder of `bridge/codecs/safejson.py`) and classifies it: a `Call` to serve, a
  `Notify`, a `CancelRequested` from the peer, or the outcome of one of our requests
  (`RequestResult` / `RequestError`, which carry the `PendingRequest` they settle), or
  `UnknownReply` for an answer to nothing we are waiting for. A frame that is not
  JSON-RPC raises `ProtocolError` (the caller decides whether to answer it).
- `cancel(id)` withdraws one of our requests with `$/cancel_request` (ACP schema,
  `$/cancel_request`: "the receiver should answer the request with -32800"); `forget`
  drops it silently (a timeout), `fail_all` drops every one (the peer is gone).

Batching: the sink is the connection's bounded outbox; its writer drains everything
waiting and encodes it with `encode_lines` into one write (STYLE.md rule 13). Without
a sink the peer queues messages itself, and `data_to_send()` encodes them: that is how
the tests drive it synchronously.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, Raw

from bridge.codecs.jsonrpc import Call, Notify, ProtocolError, Reply, decode_params, encode_lines, error_response, parse
from bridge.schema.acp import CancelRequestParams
from bridge.schema.jsonrpc import ErrorObject, Notification, Request, RequestId, Response

__all__ = [
    "CANCEL_REQUEST",
    "CancelRequested",
    "Event",
    "JsonRpcPeer",
    "PendingRequest",
    "RequestError",
    "RequestResult",
    "UnknownReply",
]

T = TypeVar("T")

# ACP schema, `$/cancel_request` (protocol-level notification, params `{requestId}`).
CANCEL_REQUEST = "$/cancel_request"


class PendingRequest:
    """One request we sent and have no answer to yet; `context` is the caller's."""

    __slots__ = ("id", "method", "context")

    def __init__(self, id: int, method: str, context: Any) -> None:
        self.id = id
        self.method = method
        self.context = context

    def __repr__(self) -> str:
        return f"PendingRequest({self.id}, {self.method!r})"


class RequestResult:
    """The peer answered `request` with a result (JSON kept raw until `decode`)."""

    __slots__ = ("request", "result")

    def __init__(self, request: PendingRequest, result: Raw | None) -> None:
        self.request = request
        self.result = result

    def decode(self, typ: type[T]) -> T:
        """The result as `typ`; `InvalidParams` (with its `$.path`) when it does not fit."""
        return decode_params(self.result if self.result is not None else Raw(b"null"), typ)


class RequestError:
    """The peer answered `request` with a JSON-RPC error object."""

    __slots__ = ("request", "error")

    def __init__(self, request: PendingRequest, error: ErrorObject) -> None:
        self.request = request
        self.error = error


class UnknownReply:
    """An answer to no request we wait for (never sent, already settled, or given up)."""

    __slots__ = ("id", "error")

    def __init__(self, id: RequestId | None, error: ErrorObject | None) -> None:
        self.id = id
        self.error = error  # a null-id error: the peer could not read a frame of ours


class CancelRequested:
    """The peer withdrew its request `request_id` (ACP schema, `$/cancel_request`)."""

    __slots__ = ("request_id",)

    def __init__(self, request_id: RequestId) -> None:
        self.request_id = request_id


Event = Call | Notify | CancelRequested | RequestResult | RequestError | UnknownReply

_cancel_params = msgspec.json.Decoder(CancelRequestParams)


class JsonRpcPeer:
    """Our outgoing ids and pending requests, and the classification of what comes in."""

    __slots__ = ("pending", "_next_id", "_queue", "send")

    def __init__(self, sink: Callable[[Any], None] | None = None) -> None:
        self.pending: dict[RequestId, PendingRequest] = {}
        self._next_id = 0
        self._queue: list[Any] = []
        # Every message we send goes through `send` (the connection's outbox `put`).
        self.send: Callable[[Any], None] = sink if sink is not None else self._queue.append

    # -- out ------------------------------------------------------------------------------
    def request(self, method: str, params: Any = UNSET, *, context: Any = None) -> PendingRequest:
        self._next_id += 1
        pending = self.pending[self._next_id] = PendingRequest(self._next_id, method, context)
        self.send(Request(id=self._next_id, method=method, params=params))
        return pending

    def notify(self, method: str, params: Any = UNSET) -> None:
        self.send(Notification(method=method, params=params))

    def respond(self, id: RequestId, result: Any) -> None:
        self.send(Response(id=id, result=result))

    def respond_error(self, id: RequestId | None, exc: BaseException) -> None:
        """Answer with the error `exc` maps to (bridge/errors.py; -32603 for our bugs)."""
        self.send(error_response(id, exc))

    def cancel(self, id: RequestId) -> PendingRequest | None:
        """Withdraw a request still pending: forget it and send `$/cancel_request`."""
        pending = self.pending.pop(id, None)
        if pending is not None:
            self.send(Notification(method=CANCEL_REQUEST, params=CancelRequestParams(request_id=id)))
        return pending

    def forget(self, id: RequestId) -> PendingRequest | None:
        """Stop waiting for a request (its answer, if it comes, is an `UnknownReply`)."""
        return self.pending.pop(id, None)

    def fail_all(self) -> list[PendingRequest]:
        """Every request still pending, forgotten (the peer is gone)."""
        gone = list(self.pending.values())
        self.pending.clear()
        return gone

    def data_to_send(self) -> bytes:
        """Everything queued (no sink given), as NDJSON, in one piece."""
        out = bytes(encode_lines(self._queue))
        self._queue.clear()
        return out

    # -- in -------------------------------------------------------------------------------
    def receive(self, line: bytes) -> Event:
        """Classify one frame; `ProtocolError` when it is not JSON-RPC 2.0."""
        msg = parse(line)
        if type(msg) is Reply:
            return self.settle(msg)
        if type(msg) is Notify and msg.method == CANCEL_REQUEST and msg.params is not None:
            try:
                return CancelRequested(_cancel_params.decode(msg.params).request_id)
            except (msgspec.ValidationError, msgspec.DecodeError):
                return msg  # not a request id: the caller ignores it like any notification
        return msg

    def settle(self, reply: Reply) -> RequestResult | RequestError | UnknownReply:
        """The outcome `reply` gives the request it answers."""
        pending = self.pending.pop(reply.id, None) if reply.id is not None else None
        if pending is None:
            return UnknownReply(reply.id, reply.error)
        if reply.error is not None:
            return RequestError(pending, reply.error)
        return RequestResult(pending, reply.result)


__all__ += ["Call", "Notify", "ProtocolError"]
