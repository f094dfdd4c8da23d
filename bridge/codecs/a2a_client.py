"""The A2A client side's wire: calls and replies for each dialect (1.0, 0.3) and binding, sans-I/O.

`Wire(interface)` builds the HTTP call for an operation (`send`, `get_task`,
`cancel`, `subscribe`) and decodes what comes back, always into the 1.0 structs of
`bridge.schema.a2a`: a 0.3 agent's replies are lifted by `bridge.codecs.a2a_v03_client`,
the message we send lowered by `bridge.codecs.a2a_v03_message`, so nothing above
this module knows there are two dialects (A2A spec §3 operations, §9 JSON-RPC
binding, §11 HTTP+JSON binding).

Binding rules followed:
- JSON-RPC: every call is a POST of a JSON-RPC request to the interface URL; a
  streamed reply is SSE whose every `data:` is a whole JSON-RPC response.
- HTTP+JSON: the REST paths of A2A spec §5.3 (0.3 under `/v1`); a streamed reply is
  SSE of bare StreamResponses; errors are an HTTP status + `google.rpc.Status`.
- 1.0 requests carry `A2A-Version: 1.0` (A2A spec §3, service parameters: a request
  without it is read as 0.3).

Errors: `A2AError` is the agent's own error object (code, reason, message);
`InvalidResponse` is a reply we cannot read.
"""

from __future__ import annotations

from typing import Any, NamedTuple
from urllib.parse import quote

import msgspec

from bridge.codecs import safejson
from bridge.codecs.a2a_dialect import Binding, Dialect, Interface
from bridge.codecs.a2a_v03_client import lift_event_v03, lift_rest_event_v03, lift_rest_task_v03, lift_task_v03
from bridge.codecs.a2a_v03_message import lift_message_v03, lift_rest_message_v03, lower_message_v03, lower_rest_message_v03
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "A2AError",
    "HttpCall",
    "InvalidResponse",
    "Wire",
]



class HttpCall(NamedTuple):
    op: str
    method: str
    url: str
    body: bytes | None
    params: dict[str, str] | None
    headers: dict[str, str]
    stream: bool


class A2AError(Exception):
    """An error the agent answered with (a JSON-RPC error, or an HTTP+JSON Status)."""

    def __init__(self, code: int | None, message: str, *, reason: str | None = None, status: int | None = None, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason
        self.status = status
        self.data = data

    def is_(self, name: str) -> bool:
        """Whether this is the A2A error `name` of `schema.a2a.ERRORS` (by code or reason)."""
        code, _, reason = s.ERRORS[name]
        return self.code == code or self.reason == reason

    def __str__(self) -> str:
        bits = [f"{self.code}" if self.code is not None else None, self.reason]
        tag = " ".join(b for b in bits if b)
        return f"{self.message} ({tag})" if tag else self.message


class InvalidResponse(Exception):
    pass


# -- decoders, built once (STYLE.md rule 7) -------------------------------------------------
_enc = msgspec.json.Encoder()
_rpc_send = safejson.Decoder(s.RpcResponse[s.SendMessageResponse])
_rpc_task = safejson.Decoder(s.RpcResponse[s.Task])
_rpc_stream = safejson.Decoder(s.RpcResponse[s.StreamResponse])
_rpc_send03 = safejson.Decoder(s.RpcResponse[v.SendResultV03])
_rpc_task03 = safejson.Decoder(s.RpcResponse[v.TaskV03])
_rpc_stream03 = safejson.Decoder(s.RpcResponse[v.StreamResultV03])
_send = safejson.Decoder(s.SendMessageResponse)
_task = safejson.Decoder(s.Task)
_stream = safejson.Decoder(s.StreamResponse)
_rest_send03 = safejson.Decoder(v.RestSendMessageResponseV03)
_rest_task03 = safejson.Decoder(v.RestTaskV03)
_rest_stream03 = safejson.Decoder(v.RestStreamResponseV03)
_rest_error = safejson.Decoder(s.RestError)
_rpc_error_only = safejson.Decoder(s.RpcResponse[Any])


def _decode(decoder: safejson.Decoder[Any], body: bytes, what: str) -> Any:
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise InvalidResponse(f"{what} does not match the A2A schema: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise InvalidResponse(f"{what} is not valid JSON: {exc}") from exc


def _rpc_error(err: s.RpcError) -> A2AError:
    reason = None
    data = err.data if err.data is not msgspec.UNSET else None
    if isinstance(data, list):
        for d in data:
            if isinstance(d, dict) and d.get("@type") == s.ERROR_INFO_TYPE:
                reason = d.get("reason") if isinstance(d.get("reason"), str) else None
                break
    return A2AError(err.code, err.message or "(no message)", reason=reason, data=data)


class Wire:
    """The calls of one interface. Not thread-safe; one per back (ids only count up)."""

    def __init__(self, iface: Interface) -> None:
        self.iface = iface
        self.base = iface.url.rstrip("/")
        self._id = 0
        v10 = iface.dialect is Dialect.V1_0
        rpc = iface.binding is Binding.JSONRPC
        ctype = "application/json" if rpc or not v10 else "application/a2a+json"
        self._headers = {"Content-Type": ctype, "Accept": "application/json"}
        self._stream_headers = {"Content-Type": ctype, "Accept": "text/event-stream"}
        if v10:
            # Without it a 1.0 server reads the request as 0.3 (A2A spec §3, service parameters).
            self._headers[s.A2A_VERSION_HEADER] = self._stream_headers[s.A2A_VERSION_HEADER] = "1.0"

    # -- calls ---------------------------------------------------------------------------
    def send(self, message: s.Message, *, stream: bool, return_immediately: bool = False) -> HttpCall:
        op = "stream" if stream else "send"
        v10, rpc = self.iface.dialect is Dialect.V1_0, self.iface.binding is Binding.JSONRPC
        params: Any
        if v10:
            config = s.SendMessageConfiguration(return_immediately=return_immediately) if return_immediately else None
            params = s.SendMessageRequest(message=message, configuration=config)
        elif rpc:
            # 0.3 spells returnImmediately as `blocking: false`; a stream takes no configuration.
            config03 = None if stream else v.MessageSendConfigurationV03(blocking=not return_immediately)
            params = v.MessageSendParamsV03(message=lower_message_v03(message), configuration=config03)
        else:
            rest03 = None if stream else v.RestSendMessageConfigurationV03(blocking=not return_immediately)
            params = v.RestSendMessageRequestV03(message=lower_rest_message_v03(message), configuration=rest03)
        return self._call(op, params, stream=stream)

    def get_task(self, task_id: str, history_length: int | None = None) -> HttpCall:
        if self.iface.binding is Binding.JSONRPC:
            cls = s.GetTaskRequest if self.iface.dialect is Dialect.V1_0 else v.TaskQueryParamsV03
            return self._call("get_task", cls(id=task_id, history_length=history_length), task_id=task_id)
        query = {"historyLength": str(history_length)} if history_length is not None else None
        return self._call("get_task", None, task_id=task_id, query=query)

    def cancel(self, task_id: str) -> HttpCall:
        if self.iface.binding is Binding.JSONRPC:
            cls = s.CancelTaskRequest if self.iface.dialect is Dialect.V1_0 else v.TaskIdParamsV03
            return self._call("cancel", cls(id=task_id), task_id=task_id)
        return self._call("cancel", s.CancelTaskRequest(id=task_id), task_id=task_id)

    def subscribe(self, task_id: str) -> HttpCall:
        if self.iface.binding is Binding.JSONRPC:
            cls = s.SubscribeToTaskRequest if self.iface.dialect is Dialect.V1_0 else v.TaskIdParamsV03
            return self._call("subscribe", cls(id=task_id), task_id=task_id, stream=True)
        return self._call("subscribe", None, task_id=task_id, stream=True)

    def _call(
        self,
        op: str,
        params: Any,
        *,
        task_id: str = "",
        stream: bool = False,
        query: dict[str, str] | None = None,
    ) -> HttpCall:
        headers = self._stream_headers if stream else self._headers
        if self.iface.binding is Binding.JSONRPC:
            m10, m03 = s.METHODS[op]
            method = m10 if self.iface.dialect is Dialect.V1_0 else m03
            assert method is not None, f"{op} has no 0.3 JSON-RPC method"
            self._id += 1
            body = _enc.encode(s.RpcRequest(id=self._id, method=method, params=params))
            return HttpCall(op, "POST", self.iface.url, body, None, headers, stream)  # the URL exactly as the card gives it
        http_method, path = s.REST_PATHS[op]
        path = path.replace("{id}", quote(task_id, safe=""))
        prefix = "" if self.iface.dialect is Dialect.V1_0 else "/v1"
        body = _enc.encode(params) if params is not None else None
        if http_method == "GET":
            headers = {k: val for k, val in headers.items() if k != "Content-Type"}
        return HttpCall(op, http_method, f"{self.base}{prefix}{path}", body, query, headers, stream)

    # -- replies -------------------------------------------------------------------------
    def decode_send(self, body: bytes) -> s.Task | s.Message:
        """The reply to SendMessage: a Task or a bare Message (raises A2AError)."""
        what = "the agent's reply to SendMessage"
        if self.iface.binding is Binding.JSONRPC:
            if self.iface.dialect is Dialect.V1_0:
                result = self._rpc(_rpc_send, body, what)
                return _one_of(result.task, result.message, what)
            r03 = self._rpc(_rpc_send03, body, what)
            return lift_task_v03(r03) if isinstance(r03, v.TaskV03) else lift_message_v03(r03)
        if self.iface.dialect is Dialect.V1_0:
            res = _decode(_send, body, what)
            return _one_of(res.task, res.message, what)
        rest = _decode(_rest_send03, body, what)
        if rest.task is not None:
            return lift_rest_task_v03(rest.task)
        if rest.message is not None:
            return lift_rest_message_v03(rest.message)
        raise InvalidResponse(f"{what} holds neither a task nor a message")

    def decode_task(self, body: bytes) -> s.Task:
        what = "the agent's task"
        if self.iface.binding is Binding.JSONRPC:
            if self.iface.dialect is Dialect.V1_0:
                return self._rpc(_rpc_task, body, what)  # type: ignore[no-any-return]
            return lift_task_v03(self._rpc(_rpc_task03, body, what))
        if self.iface.dialect is Dialect.V1_0:
            return _decode(_task, body, what)  # type: ignore[no-any-return]
        return lift_rest_task_v03(_decode(_rest_task03, body, what))

    def decode_event(self, data: bytes) -> s.StreamResponse:
        """One SSE `data:` of a stream (raises A2AError for an error event)."""
        what = "an event of the agent's stream"
        if self.iface.binding is Binding.JSONRPC:
            if self.iface.dialect is Dialect.V1_0:
                return self._rpc(_rpc_stream, data, what)  # type: ignore[no-any-return]
            return lift_event_v03(self._rpc(_rpc_stream03, data, what))
        if self.iface.dialect is Dialect.V1_0:
            event = _decode(_stream, data, what)
        else:
            event = lift_rest_event_v03(_decode(_rest_stream03, data, what))
        if event.task is None and event.message is None and event.status_update is None and event.artifact_update is None:
            err = self.decode_http_error(200, data)
            raise err or InvalidResponse(f"{what} holds none of task, message, statusUpdate, artifactUpdate")
        return event  # type: ignore[no-any-return]

    def decode_http_error(self, status: int, body: bytes) -> A2AError | None:
        """The A2A error in an error reply's body, if it holds one."""
        try:
            if self.iface.binding is Binding.JSONRPC:
                env = _rpc_error_only.decode(body)
                return _rpc_error(env.error) if env.error is not None else None
            err = _rest_error.decode(body).error
        except (msgspec.DecodeError, msgspec.ValidationError):
            return None
        if err is None:
            return None
        reason = None
        for d in err.details or ():
            if d.get("@type") == s.ERROR_INFO_TYPE and isinstance(d.get("reason"), str):
                reason = d["reason"]
                break
        code = next((c for c, _, r in s.ERRORS.values() if r == reason), None)
        return A2AError(code, err.message or err.status or f"HTTP {status}", reason=reason, status=status, data=err.details)

    @staticmethod
    def _rpc(decoder: safejson.Decoder[Any], body: bytes, what: str) -> Any:
        env = _decode(decoder, body, what)
        if env.error is not None:
            raise _rpc_error(env.error)
        if env.result is msgspec.UNSET:
            raise InvalidResponse(f"{what} is a JSON-RPC response with neither result nor error")
        return env.result


def _one_of(task: s.Task | None, message: s.Message | None, what: str) -> s.Task | s.Message:
    if task is not None:
        return task
    if message is not None:
        return message
    raise InvalidResponse(f"{what} holds neither a task nor a message")
