"""1.0 → 0.3 for what an A2A server answers, sans-I/O (the reverse of `a2a_wire`'s lifts).

The A2A front works in the 1.0 structs of `bridge.schema.a2a`; a client that asked
in 0.3 gets the 0.3 shapes of `bridge.schema.a2a_v03` (protocols.md §2.3–2.4):

- JSON-RPC (`*_rpc`): `kind`-tagged objects, lowercase kebab states ("input-required",
  "canceled"), roles "user"/"agent", parts `{"kind": "text"|"file"|"data"}`, and
  `final: true` on the status update that ends a stream (1.0 has no such flag: the
  stream's end says it).
- HTTP+JSON (`*_rest`): ProtoJSON of the 0.3 proto: `content` instead of `parts`,
  nested `file` / `data` parts, `ROLE_*`, `TASK_STATE_*` with the British
  `TASK_STATE_CANCELLED`.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "lower_event_rest",
    "lower_event_rpc",
    "lower_message_rest",
    "lower_message_rpc",
    "lower_push_config_rest",
    "lower_push_config_rpc",
    "lower_task_rest",
    "lower_task_rpc",
]

_STATES = {
    s.TaskState.SUBMITTED: "submitted",
    s.TaskState.WORKING: "working",
    s.TaskState.INPUT_REQUIRED: "input-required",
    s.TaskState.AUTH_REQUIRED: "auth-required",
    s.TaskState.COMPLETED: "completed",
    s.TaskState.CANCELED: "canceled",
    s.TaskState.FAILED: "failed",
    s.TaskState.REJECTED: "rejected",
}
_FINAL = s.TERMINAL_STATES | s.INTERRUPTED_STATES


def _data(value: Any) -> dict[str, Any]:
    # 0.3 data parts hold an object; a bare JSON value is wrapped.
    return value if isinstance(value, dict) else {"value": value}


# -- JSON-RPC ------------------------------------------------------------------------------


def _part_rpc(p: s.Part) -> v.PartV03:
    if p.raw is not None or p.url is not None:
        f = v.FileContentV03(bytes=p.raw, uri=p.url if p.raw is None else None, mime_type=p.media_type, name=p.filename)
        return v.FilePartV03(file=f, metadata=p.metadata)
    if p.data is not UNSET:
        return v.DataPartV03(data=_data(p.data), metadata=p.metadata)
    return v.TextPartV03(text=p.text or "", metadata=p.metadata)


def lower_message_rpc(m: s.Message) -> v.MessageV03:
    return v.MessageV03(
        message_id=m.message_id,
        role="user" if m.role == s.ROLE_USER else "agent",
        parts=[_part_rpc(p) for p in m.parts],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
        reference_task_ids=m.reference_task_ids,
    )


def _status_rpc(st: s.TaskStatus) -> v.TaskStatusV03:
    return v.TaskStatusV03(
        state=_STATES.get(st.state, "unknown"),
        message=lower_message_rpc(st.message) if st.message else None,
        timestamp=st.timestamp,
    )


def _artifact_rpc(a: s.Artifact) -> v.ArtifactV03:
    return v.ArtifactV03(
        artifact_id=a.artifact_id, parts=[_part_rpc(p) for p in a.parts], name=a.name, description=a.description,
        metadata=a.metadata, extensions=a.extensions,
    )  # fmt: skip


def lower_task_rpc(t: s.Task) -> v.TaskV03:
    return v.TaskV03(
        id=t.id,
        context_id=t.context_id,
        status=_status_rpc(t.status),
        artifacts=[_artifact_rpc(a) for a in t.artifacts] if t.artifacts is not None else None,
        history=[lower_message_rpc(m) for m in t.history] if t.history is not None else None,
        metadata=t.metadata,
    )


def lower_event_rpc(e: s.StreamResponse) -> v.StreamResultV03:
    if e.status_update is not None:
        u = e.status_update
        return v.TaskStatusUpdateEventV03(
            task_id=u.task_id, context_id=u.context_id, status=_status_rpc(u.status), final=u.status.state in _FINAL, metadata=u.metadata
        )
    if e.artifact_update is not None:
        a = e.artifact_update
        return v.TaskArtifactUpdateEventV03(
            task_id=a.task_id, context_id=a.context_id, artifact=_artifact_rpc(a.artifact), append=a.append,
            last_chunk=a.last_chunk, metadata=a.metadata,
        )  # fmt: skip
    if e.task is not None:
        return lower_task_rpc(e.task)
    assert e.message is not None
    return lower_message_rpc(e.message)


def lower_push_config_rpc(c: s.TaskPushNotificationConfig) -> v.TaskPushNotificationConfigV03:
    auth = None
    if c.authentication is not None:
        schemes = [c.authentication.scheme] if c.authentication.scheme else []
        auth = v.PushNotificationAuthenticationInfoV03(schemes=schemes, credentials=c.authentication.credentials)
    inner = v.PushNotificationConfigV03(url=c.url, id=c.id, token=c.token, authentication=auth)
    return v.TaskPushNotificationConfigV03(task_id=c.task_id, push_notification_config=inner)


# -- HTTP+JSON -------------------------------------------------------------------------------


def _rest_state(state: str) -> str:
    return "TASK_STATE_CANCELLED" if state == s.TaskState.CANCELED else state


def _part_rest(p: s.Part) -> v.RestPartV03:
    if p.raw is not None or p.url is not None:
        f = v.RestFilePartV03(
            file_with_bytes=p.raw, file_with_uri=p.url if p.raw is None else None, mime_type=p.media_type, name=p.filename
        )
        return v.RestPartV03(file=f, metadata=p.metadata)
    if p.data is not UNSET:
        return v.RestPartV03(data=v.RestDataPartV03(data=_data(p.data)), metadata=p.metadata)
    return v.RestPartV03(text=p.text or "", metadata=p.metadata)


def lower_message_rest(m: s.Message) -> v.RestMessageV03:
    return v.RestMessageV03(
        message_id=m.message_id,
        role=m.role,
        content=[_part_rest(p) for p in m.parts],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
    )


def _status_rest(st: s.TaskStatus) -> v.RestTaskStatusV03:
    return v.RestTaskStatusV03(
        state=_rest_state(st.state), message=lower_message_rest(st.message) if st.message else None, timestamp=st.timestamp
    )


def _artifact_rest(a: s.Artifact) -> v.RestArtifactV03:
    return v.RestArtifactV03(
        artifact_id=a.artifact_id, parts=[_part_rest(p) for p in a.parts], name=a.name, description=a.description,
        metadata=a.metadata, extensions=a.extensions,
    )  # fmt: skip


def lower_task_rest(t: s.Task) -> v.RestTaskV03:
    return v.RestTaskV03(
        id=t.id,
        context_id=t.context_id,
        status=_status_rest(t.status),
        artifacts=[_artifact_rest(a) for a in t.artifacts] if t.artifacts is not None else None,
        history=[lower_message_rest(m) for m in t.history] if t.history is not None else None,
        metadata=t.metadata,
    )


def lower_event_rest(e: s.StreamResponse) -> v.RestStreamResponseV03:
    if e.status_update is not None:
        u = e.status_update
        status = v.RestTaskStatusUpdateEventV03(
            task_id=u.task_id, context_id=u.context_id, status=_status_rest(u.status), final=u.status.state in _FINAL, metadata=u.metadata
        )
        return v.RestStreamResponseV03(status_update=status)
    if e.artifact_update is not None:
        a = e.artifact_update
        art = v.RestTaskArtifactUpdateEventV03(
            task_id=a.task_id, context_id=a.context_id, artifact=_artifact_rest(a.artifact), append=a.append,
            last_chunk=a.last_chunk, metadata=a.metadata,
        )  # fmt: skip
        return v.RestStreamResponseV03(artifact_update=art)
    if e.task is not None:
        return v.RestStreamResponseV03(task=lower_task_rest(e.task))
    assert e.message is not None
    return v.RestStreamResponseV03(message=lower_message_rest(e.message))


def lower_push_config_rest(c: s.TaskPushNotificationConfig) -> dict[str, Any]:
    """The 0.3 proto `TaskPushNotificationConfig`: a resource name and the config."""
    inner: dict[str, Any] = {"id": c.id or "", "url": c.url}
    if c.token:
        inner["token"] = c.token
    if c.authentication is not None:
        auth: dict[str, Any] = {"schemes": [c.authentication.scheme] if c.authentication.scheme else []}
        if c.authentication.credentials:
            auth["credentials"] = c.authentication.credentials
        inner["authentication"] = auth
    return {"name": f"tasks/{c.task_id}/pushNotificationConfigs/{c.id or ''}", "pushNotificationConfig": inner}
