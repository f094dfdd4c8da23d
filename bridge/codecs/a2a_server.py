"""The A2A server side's wire, sans-I/O: requests in, in either dialect and binding; answers out in the one asked.

Everything is lifted to the 1.0 structs of `bridge.schema.a2a` on the way in and
lowered on the way out (`bridge.codecs.a2a_v03_server`), so the front works in one
vocabulary (A2A spec §3 operations, §9 JSON-RPC binding, §5 errors):

- The dialect is the `A2A-Version` header: missing or empty means 0.3 (A2A spec §3,
  service parameters); an unknown version, or a method of the other dialect, is
  VersionNotSupportedError.
- JSON-RPC (STYLE.md rule 6): an envelope with `Raw` params, the method looked up
  in the dialect's table (-32601 when neither dialect has it), then the params with
  that method's decoder, built at import. HTTP+JSON requests:
  `bridge.codecs.a2a_server_rest`.
- Answers: `answer(op, dialect, binding, result)` is the JSON of the result;
  `rpc_result` wraps it; `EventEncoder` frames stream events; `rpc_error` /
  `rest_error` carry a `google.rpc.ErrorInfo` (A2A spec §5, error handling).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec
from msgspec import UNSET, UnsetType

from bridge.codecs import safejson
from bridge.codecs.a2a_dialect import Binding, Dialect
from bridge.codecs.jsonrpc import readable_id
from bridge.codecs.a2a_v03_message import lower_message_v03, lower_rest_message_v03
from bridge.codecs.a2a_v03_server import (
    lift_params_v03,
    lower_event_rest_v03,
    lower_event_v03,
    lower_push_config_rest_v03,
    lower_push_config_v03,
    lower_task_rest_v03,
    lower_task_v03,
)
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "A2AFault",
    "EventEncoder",
    "DECODERS",
    "answer",
    "decode_envelope",
    "decode_json",
    "decode_params",
    "dialect_of",
    "rest_error",
    "rpc_error",
    "rpc_op",
    "rpc_result",
]

_enc = msgspec.json.Encoder()


class A2AFault(Exception):
    """An A2A error to answer with; `name` is a key of `schema.a2a.ERRORS`; `request_id`
    the JSON-RPC id of a request refused before its envelope was accepted, when readable."""

    def __init__(self, name: str, message: str, *, metadata: dict[str, Any] | None = None, request_id: Any = None) -> None:
        super().__init__(message)
        assert name in s.ERRORS, name
        self.name = name
        self.message = message
        self.metadata = metadata
        self.request_id = request_id

    @property
    def code(self) -> int:
        return s.ERRORS[self.name][0]

    @property
    def http(self) -> int:
        return s.ERRORS[self.name][1]

    @property
    def reason(self) -> str:
        return s.ERRORS[self.name][2]


class RateLimitedFault(A2AFault):
    """A request over the bridge's `[limits]`. A2A 1.0 defines no such error (§5.4): the
    JSON-RPC code is internal (-32603), HTTP+JSON answers 429 (RFC 6585 §4), and the
    details say what it is the google.rpc way A2A errors use: an ErrorInfo with reason
    RATE_LIMIT_EXCEEDED in our domain and a RetryInfo with the delay."""

    def __init__(self, message: str, *, retry_after_s: int, metadata: dict[str, Any] | None = None) -> None:
        super().__init__("Internal", message, metadata=metadata)
        self.retry_after_s = retry_after_s

    @property
    def http(self) -> int:
        return 429

    @property
    def reason(self) -> str:
        return "RATE_LIMIT_EXCEEDED"


def dialect_of(header: str | None) -> Dialect:
    """The dialect of a request's `A2A-Version` (missing: 0.3, A2A spec §3, service parameters)."""
    if not header or not header.strip():
        return Dialect.V0_3
    major, _, minor = header.strip().partition(".")
    if major == "1":
        return Dialect.V1_0
    if major == "0" and minor.split(".")[0] == "3":
        return Dialect.V0_3
    raise A2AFault("VersionNotSupported", f"A2A version {header.strip()!r} is not supported; this agent speaks 1.0 and 0.3")


# -- JSON-RPC in --------------------------------------------------------------------------------


class Envelope(msgspec.Struct, gc=False):
    jsonrpc: str | UnsetType = UNSET
    id: int | str | None | UnsetType = UNSET
    method: str | UnsetType = UNSET
    params: msgspec.Raw | UnsetType = UNSET


_envelope = safejson.Decoder(Envelope)
_OPS: dict[Dialect, dict[str, str]] = {
    Dialect.V1_0: {m10: op for op, (m10, _) in s.METHODS.items()},
    Dialect.V0_3: {m03: op for op, (_, m03) in s.METHODS.items() if m03},
}


def decode_envelope(body: bytes) -> Envelope:
    """The request's envelope; an Invalid Request carries the request's id when it can be
    read (JSON-RPC 2.0 §5: null only when the id cannot be detected)."""
    try:
        env = _envelope.decode(body)
    except msgspec.ValidationError as exc:
        kind = body.lstrip()[:1]
        what = "batch requests are not supported" if kind == b"[" else f"not a JSON-RPC request: {exc}"
        raise A2AFault("InvalidRequest", what, request_id=readable_id(body)) from exc
    except msgspec.DecodeError as exc:
        raise A2AFault("Parse", f"the body is not JSON: {exc}") from exc
    rid = env.id if env.id is not UNSET else None
    if env.jsonrpc != "2.0":
        raise A2AFault("InvalidRequest", "'jsonrpc' must be exactly \"2.0\"", request_id=rid)
    if not isinstance(env.method, str) or not env.method:
        raise A2AFault("InvalidRequest", "the request names no method", request_id=rid)
    return env


def rpc_op(method: str, dialect: Dialect) -> str:
    op = _OPS[dialect].get(method)
    if op is not None:
        return op
    other = Dialect.V0_3 if dialect is Dialect.V1_0 else Dialect.V1_0
    if method in _OPS[other]:
        hint = "send the header A2A-Version: 1.0" if other is Dialect.V1_0 else f"use {s.METHODS[_OPS[other][method]][0]}"
        raise A2AFault("VersionNotSupported", f"{method} is an A2A {other.value} method but the request is A2A {dialect.value}; {hint}")
    raise A2AFault("MethodNotFound", f"method not found: {method}")


_PARAMS_10: dict[str, type] = {
    "send": s.SendMessageRequest,
    "stream": s.SendMessageRequest,
    "get_task": s.GetTaskRequest,
    "list_tasks": s.ListTasksRequest,
    "cancel": s.CancelTaskRequest,
    "subscribe": s.SubscribeToTaskRequest,
    "create_push_config": s.TaskPushNotificationConfig,
    "get_push_config": s.GetTaskPushNotificationConfigRequest,
    "list_push_configs": s.ListTaskPushNotificationConfigsRequest,
    "delete_push_config": s.DeleteTaskPushNotificationConfigRequest,
    "extended_card": s.GetExtendedAgentCardRequest,
}
_PARAMS_03: dict[str, type] = {
    "send": v.MessageSendParamsV03,
    "stream": v.MessageSendParamsV03,
    "get_task": v.TaskQueryParamsV03,
    "cancel": v.TaskIdParamsV03,
    "subscribe": v.TaskIdParamsV03,
    "create_push_config": v.TaskPushNotificationConfigV03,
    "get_push_config": v.GetTaskPushNotificationConfigParamsV03,
    "list_push_configs": v.ListTaskPushNotificationConfigParamsV03,
    "delete_push_config": v.DeleteTaskPushNotificationConfigParamsV03,
    "extended_card": v.TaskIdParamsV03,  # takes none; anything is ignored
}
DECODERS = {  # per dialect, per operation: the params as a request struct
    Dialect.V1_0: {op: safejson.Decoder(t) for op, t in _PARAMS_10.items()},
    Dialect.V0_3: {op: safejson.Decoder(t) for op, t in _PARAMS_03.items()},
}


def decode_json(decoder: safejson.Decoder[Any], body: bytes) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise A2AFault("InvalidParams", f"invalid params: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise A2AFault("Parse", f"the params are not JSON: {exc}") from exc


def decode_params(op: str, dialect: Dialect, raw: msgspec.Raw | UnsetType) -> Any:
    """The params of a JSON-RPC call as the 1.0 request struct of `op`."""
    body = bytes(raw) if raw is not UNSET else b"{}"
    if op == "extended_card":
        return s.GetExtendedAgentCardRequest()
    value = decode_json(DECODERS[dialect][op], body)
    return value if dialect is Dialect.V1_0 else lift_params_v03(op, value)



# -- answers ------------------------------------------------------------------------------------


def answer(op: str, dialect: Dialect, binding: Binding, result: Any) -> bytes:
    """The JSON of an operation's result, in the dialect and binding asked."""
    if dialect is Dialect.V1_0:
        if op == "send":
            wrapped = s.SendMessageResponse(task=result) if isinstance(result, s.Task) else s.SendMessageResponse(message=result)
            return _enc.encode(wrapped)
        if op == "delete_push_config":
            return b"null" if binding is Binding.JSONRPC else b"{}"
        return _enc.encode(result)
    rpc = binding is Binding.JSONRPC
    if op == "send":
        if rpc:
            return _enc.encode(lower_task_v03(result) if isinstance(result, s.Task) else lower_message_v03(result))
        wrapped03 = v.RestSendMessageResponseV03(
            task=lower_task_rest_v03(result) if isinstance(result, s.Task) else None,
            message=lower_rest_message_v03(result) if isinstance(result, s.Message) else None,
        )
        return _enc.encode(wrapped03)
    if op in ("get_task", "cancel"):
        return _enc.encode(lower_task_v03(result) if rpc else lower_task_rest_v03(result))
    if op in ("create_push_config", "get_push_config"):
        return _enc.encode(lower_push_config_v03(result) if rpc else lower_push_config_rest_v03(result))
    if op == "list_push_configs":
        configs = result.configs
        if rpc:
            return _enc.encode([lower_push_config_v03(c) for c in configs])
        return _enc.encode({"configs": [lower_push_config_rest_v03(c) for c in configs]})
    if op == "delete_push_config":
        return b"null" if rpc else b"{}"
    return _enc.encode(result)  # the agent card: already the merged document


def rpc_result(rid: Any, result: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + _enc.encode(rid) + b',"result":' + result + b"}"


def _error_info(fault: A2AFault) -> dict[str, Any]:
    domain = "agent-bridge" if isinstance(fault, RateLimitedFault) else "a2a-protocol.org"
    return {"@type": s.ERROR_INFO_TYPE, "reason": fault.reason, "domain": domain, "metadata": fault.metadata or {}}


def _details(fault: A2AFault) -> list[dict[str, Any]]:
    details = [_error_info(fault)]
    if isinstance(fault, RateLimitedFault):  # google.rpc.RetryInfo: a Duration in its JSON form
        details.append({"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{fault.retry_after_s}s"})
    return details


def rpc_error(rid: Any, fault: A2AFault) -> bytes:
    error = {"code": fault.code, "message": fault.message, "data": _details(fault)}
    return _enc.encode({"jsonrpc": "2.0", "id": rid, "error": error})


_GRPC = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 413: "INVALID_ARGUMENT",
         415: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 501: "UNIMPLEMENTED"}  # fmt: skip
_PRECONDITION = {"TaskNotCancelable", "PushNotificationNotSupported", "UnsupportedOperation", "ExtendedAgentCardNotConfigured",
                 "ExtensionSupportRequired", "VersionNotSupported"}  # fmt: skip


def rest_error(fault: A2AFault, dialect: Dialect, *, status: int | None = None) -> tuple[int, bytes]:
    """(HTTP status, `google.rpc.Status` body) of an HTTP+JSON error (A2A spec §11, error handling).

    0.3 clients read `{"type": "<Name>Error", "message"}` (a2a-sdk's compat
    transport), so a 0.3 answer carries both shapes."""
    code = status or fault.http
    grpc = "FAILED_PRECONDITION" if fault.name in _PRECONDITION else _GRPC.get(code, "UNKNOWN")
    body: dict[str, Any] = {"error": {"code": code, "status": grpc, "message": fault.message, "details": _details(fault)}}
    if dialect is Dialect.V0_3:
        body["type"] = f"{fault.name}Error"
        body["message"] = fault.message
    return code, _enc.encode(body)


# -- stream events --------------------------------------------------------------------------------


class EventEncoder(NamedTuple):
    """How one stream frames events: dialect, binding, and its JSON-RPC id."""

    dialect: Dialect
    binding: Binding
    rid: bytes  # the request id as JSON (JSON-RPC only)

    def payload(self, event: s.StreamResponse) -> bytes:
        if self.dialect is Dialect.V1_0:
            return _enc.encode(event)
        if self.binding is Binding.JSONRPC:
            return _enc.encode(lower_event_v03(event))
        return _enc.encode(lower_event_rest_v03(event))

    def frame(self, payload: bytes) -> bytes:
        """One SSE event: JSON-RPC wraps the payload in a response (A2A spec §9, streaming)."""
        if self.binding is Binding.JSONRPC:
            return b'data: {"jsonrpc":"2.0","id":' + self.rid + b',"result":' + payload + b"}\n\n"
        return b"data: " + payload + b"\n\n"

    @property
    def key(self) -> tuple[Dialect, Binding]:
        """Streams with the same key share one payload per event."""
        return (self.dialect, self.binding if self.dialect is Dialect.V0_3 else Binding.JSONRPC)

