"""HTTP+JSON requests of the A2A server side, sans-I/O: paths, bodies and queries as 1.0 request structs.

The operation comes from the path (A2A spec §5.3, §11; 0.3 paths under `/v1`), the
dialect from the `A2A-Version` header (checked against the path by the front). GET
operations take their parameters from the path and the query (camelCase, or
snake_case); bodies are decoded like JSON-RPC params. a2a-sdk's 0.3 client writes
ProtoJSON with proto field names (`request` for the message, `message_id`,
`content`), so 0.3 bodies have their keys made camelCase first, except inside
`metadata` and data parts, which are the user's own.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import msgspec

from bridge.codecs import safejson
from bridge.codecs.a2a_dialect import Dialect
from bridge.codecs.a2a_server import DECODERS, A2AFault, decode_json
from bridge.codecs.a2a_v03_message import lift_rest_message_v03
from bridge.codecs.a2a_v03_server import lift_push_v03
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = ["REST_ROUTES", "decode_rest", "rest_request"]

# (HTTP method, path under the interface URL, operation, dialect). ListTasks and the
# push-config DELETE have no 0.3 REST route (a2a-sdk's 0.3 adapter has none either).
# The first route that matches serves a request, and `{id}` matches "ID:subscribe"
# too: `GET /tasks/{id}:subscribe` (A2A spec §11, the HTTP+JSON binding table; the
# proto says GET, @a2a-js's REST client sends GET, a2a-sdk takes both) comes before
# GetTask's `GET /tasks/{id}`.
REST_ROUTES: list[tuple[str, str, str, Dialect]] = [
    ("GET", "/tasks/{id}:subscribe", "subscribe", Dialect.V1_0),
    ("GET", "/v1/tasks/{id}:subscribe", "subscribe", Dialect.V0_3),
    *[(m, p, op, Dialect.V1_0) for op, (m, p) in s.REST_PATHS.items()],
    *[(m, "/v1" + p, op, Dialect.V0_3) for op, (m, p) in s.REST_PATHS.items()
      if op not in ("list_tasks", "delete_push_config", "extended_card")],  # fmt: skip
    ("GET", "/v1/card", "extended_card", Dialect.V0_3),
]

_any = safejson.Decoder(Any)


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _camel_keys(value: Any) -> Any:
    """ProtoJSON written with proto field names → JSON names; `metadata` and data
    parts' payloads are the user's own and keep their keys."""
    if isinstance(value, list):
        return [_camel_keys(x) for x in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for k, x in value.items():
        name = _camel(k)
        if name == "metadata":
            out[name] = x
        elif name == "data" and isinstance(x, dict) and set(x) == {"data"}:
            out[name] = x  # a DataPart {"data": Struct}
        else:
            out[name] = _camel_keys(x)
    return out


def decode_rest(op: str, dialect: Dialect, body: bytes, path: dict[str, str]) -> Any:
    """A HTTP+JSON request's body (and path ids) as the 1.0 request struct of `op`."""
    task_id = path.get("id", "")
    if op in ("get_task", "list_tasks", "subscribe", "list_push_configs", "extended_card"):
        return None  # from the path and the query (`query_*`)
    if op == "cancel":
        return s.CancelTaskRequest(id=task_id)
    if op == "get_push_config":
        return s.GetTaskPushNotificationConfigRequest(task_id=task_id, id=path.get("config_id", ""))
    if op == "delete_push_config":
        return s.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=path.get("config_id", ""))
    if dialect is Dialect.V1_0:
        value = decode_json(DECODERS[Dialect.V1_0][op], body or b"{}")
        if op == "create_push_config":
            value.task_id = task_id
        return value
    try:
        raw = _camel_keys(_any.decode(body or b"{}"))
    except msgspec.DecodeError as exc:
        raise A2AFault("Parse", f"the body is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise A2AFault("InvalidParams", "the body must be a JSON object")
    try:
        if op in ("send", "stream"):
            if "request" in raw and "message" not in raw:
                raw["message"] = raw.pop("request")  # the proto field name of `message`
            req = msgspec.convert(raw, v.RestSendMessageRequestV03)
            c = raw.get("configuration") if isinstance(raw.get("configuration"), dict) else None
            config = None
            if c is not None:
                given = c.get("pushNotification")
                push = msgspec.convert(given, v.PushNotificationConfigV03) if isinstance(given, dict) else None
                config = s.SendMessageConfiguration(
                    accepted_output_modes=c.get("acceptedOutputModes"),
                    task_push_notification_config=lift_push_v03("", push) if push else None,
                    history_length=c.get("historyLength") or None,  # 0 means all in this proto
                    return_immediately=not c.get("blocking", False),  # proto3: absent is false
                )
            return s.SendMessageRequest(message=lift_rest_message_v03(req.message), configuration=config, metadata=req.metadata)
        config = raw.get("config")
        outer = config if isinstance(config, dict) else {}  # any other type: the fields are read from the top
        inner = outer.get("pushNotificationConfig", raw.get("pushNotificationConfig", raw))
        push03 = msgspec.convert(inner, v.PushNotificationConfigV03)
        if not push03.id and isinstance(raw.get("configId"), str):
            push03.id = raw["configId"]
        return lift_push_v03(task_id, push03)
    except msgspec.ValidationError as exc:
        raise A2AFault("InvalidParams", f"invalid params: {exc}") from exc


def _query(query_string: bytes) -> dict[str, str]:
    raw = parse_qs(query_string.decode("latin-1"))
    return {_camel(key): values[-1] for key, values in raw.items()}


def _int(q: dict[str, str], key: str) -> int | None:
    if key not in q:
        return None
    try:
        return int(q[key])
    except ValueError:
        raise A2AFault("InvalidParams", f"{key} must be an integer, got {q[key]!r}") from None


def rest_request(op: str, dialect: Dialect, body: bytes, path: dict[str, str], query_string: bytes) -> Any:
    """The 1.0 request struct of a HTTP+JSON call: GET operations from the path and query."""
    q = _query(query_string)
    if op == "get_task":
        return s.GetTaskRequest(id=path["id"], history_length=_int(q, "historyLength"))
    if op == "list_tasks":
        flag = q.get("includeArtifacts", "").lower()
        if flag not in ("", "true", "false", "1", "0"):
            raise A2AFault("InvalidParams", f"includeArtifacts must be true or false, got {q['includeArtifacts']!r}")
        return s.ListTasksRequest(
            context_id=q.get("contextId"), status=q.get("status"), page_size=_int(q, "pageSize"), page_token=q.get("pageToken"),
            history_length=_int(q, "historyLength"), status_timestamp_after=q.get("statusTimestampAfter"),
            include_artifacts=flag in ("true", "1"),
        )  # fmt: skip
    if op == "subscribe":
        return s.SubscribeToTaskRequest(id=path["id"])
    if op == "list_push_configs":
        return s.ListTaskPushNotificationConfigsRequest(task_id=path["id"], page_size=_int(q, "pageSize"), page_token=q.get("pageToken"))
    if op == "extended_card":
        return s.GetExtendedAgentCardRequest()
    return decode_rest(op, dialect, body, path)
