"""JSON-RPC 2.0 peer bookkeeping, sans-I/O: parse, classify, decode params, encode.

`parse(line)` turns one frame into a `Request`, `Notification` or `Reply`, or raises
a `PeerError` subclass that carries the request id when it could be read.
`decode_params(raw, type)` maps msgspec's errors to `InvalidParams` with the `$.path`.
The requests we send are numbered and settled by `bridge/codecs/jsonrpc_peer.py`.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, Raw, UnsetType

from bridge.codecs import safejson
from bridge.errors import BridgeError, InvalidParams, InvalidRequest, ParseError, codes_for
from bridge.schema.jsonrpc import Envelope, ErrorObject, ErrorResponse, Notification, RequestId, Response

__all__ = [
    "Call",
    "Incoming",
    "Notify",
    "ProtocolError",
    "Reply",
    "decode_params",
    "encode_lines",
    "error_response",
    "parse",
    "readable_id",
]

T = TypeVar("T")

_envelope = safejson.Decoder(Envelope)


class _IdOnly(msgspec.Struct):
    id: RequestId | None | UnsetType = UNSET


_id_only = safejson.Decoder(_IdOnly)


def readable_id(body: bytes) -> RequestId | None:
    """The id of a message the envelope could not accept (a member of the wrong type),
    when the id itself is a string or an integer: JSON-RPC 2.0 §5 answers an invalid
    request with its id, and with null only when the id cannot be detected."""
    try:
        rid = _id_only.decode(body).id
    except msgspec.DecodeError:  # ValidationError included: no object, or an id of no valid type
        return None
    return None if rid is UNSET else rid  # type: ignore[return-value]
_encoder = msgspec.json.Encoder()


class Call(msgspec.Struct, frozen=True):
    id: RequestId
    method: str
    params: Raw | None


class Notify(msgspec.Struct, frozen=True):
    method: str
    params: Raw | None


class Reply(msgspec.Struct, frozen=True):
    id: RequestId | None  # None: the peer's error about a frame of ours it could not read
    result: Raw | None
    error: ErrorObject | None


Incoming = Call | Notify | Reply


class ProtocolError(Exception):
    """A frame we must answer with an error; `id` is None when it could not be read."""

    def __init__(self, error: BridgeError, id: RequestId | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.id = id


def parse(line: bytes) -> Incoming:
    try:
        env = _envelope.decode(line)
    except msgspec.ValidationError as exc:
        raise ProtocolError(InvalidRequest(f"not a JSON-RPC 2.0 message: {exc}"), readable_id(line)) from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(ParseError(f"invalid JSON: {exc}"), None) from exc
    rid = env.id if env.id is not UNSET else None
    if env.jsonrpc != "2.0":
        raise ProtocolError(InvalidRequest('"jsonrpc" must be "2.0"'), rid)  # type: ignore[arg-type]
    params = env.params if env.params is not UNSET else None
    if env.method is not UNSET:
        if env.id is UNSET:
            return Notify(env.method, params)  # type: ignore[arg-type]
        if env.id is None:
            raise ProtocolError(InvalidRequest("a request id must be a string or an integer, not null"), None)
        return Call(env.id, env.method, params)  # type: ignore[arg-type]
    if env.id is None and env.error is not UNSET:
        # A valid error response (JSON-RPC 2.0 §5: id null when the peer could not read
        # ours). Never answer a response: two peers doing so would ping-pong forever.
        return Reply(None, None, env.error)  # type: ignore[arg-type]
    if env.id is UNSET or env.id is None or (env.result is UNSET and env.error is UNSET):
        raise ProtocolError(InvalidRequest("a message needs a method, or an id with a result or an error"), rid)  # type: ignore[arg-type]
    result = env.result if env.result is not UNSET else None
    error = env.error if env.error is not UNSET else None
    return Reply(env.id, result, error)  # type: ignore[arg-type]


_decoders: dict[type, safejson.Decoder[Any]] = {}


def decode_params(raw: Raw | None, typ: type[T]) -> T:
    """The params (or a result) as `typ`: `InvalidParams` with the `$.path` when they do
    not fit, `ParseError` when they are not JSON at all (JSON-RPC 2.0 §5.1, -32700)."""
    dec = _decoders.get(typ)
    if dec is None:
        dec = _decoders[typ] = safejson.Decoder(typ)
    try:
        return dec.decode(raw if raw is not None else b"{}")
    except msgspec.ValidationError as exc:
        raise InvalidParams(f"invalid params: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ParseError(f"invalid JSON in params: {exc}") from exc


def error_response(id: RequestId | None, exc: BaseException, *, a2a: bool = False) -> ErrorResponse:
    codes = codes_for(exc)
    if isinstance(exc, BridgeError):
        message, data = exc.message, exc.data
    else:
        message, data = "internal error", None
    return ErrorResponse(id=id, error=ErrorObject(code=codes.a2a if a2a else codes.jsonrpc, message=message, data=data))


def encode_lines(messages: list[Any], buf: bytearray | None = None) -> bytearray:
    """NDJSON: each message compact on its own line (no raw newline can occur inside)."""
    out = bytearray() if buf is None else buf
    enc = _encoder.encode_into
    for m in messages:
        enc(m, out, -1)
        out += b"\n"
    return out


__all__ += ["Notification", "Response"]
