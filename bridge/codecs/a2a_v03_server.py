"""A2A 0.3 ↔ 1.0 for the server side: what a 0.3 client asks our A2A front, and what it is answered, sans-I/O.

The A2A front works in the 1.0 structs of `bridge.schema.a2a`. A client that asked in
0.3 (`bridge.codecs.a2a_server` tells by the `A2A-Version` header) has its request
params lifted here, and its answers lowered here into the 0.3 shapes of
`bridge.schema.a2a_v03`; messages go through `bridge.codecs.a2a_v03_message`.

Shapes (`specification/a2a.proto` for 1.0; 0.3 as `docs/whats-new-v1.md` lists the
changes, and a2a-sdk's `a2a/compat/v0_3`):
- JSON-RPC (`*_v03`): `kind`-tagged objects, lowercase kebab states ("input-required",
  "canceled"), and `final: true` on the status update that ends a stream (1.0 has
  no such flag: the stream's end says it, A2A spec §3, SendStreamingMessage).
- HTTP+JSON (`*_rest_v03`): ProtoJSON of the 0.3 proto, `TASK_STATE_*` with the
  British `TASK_STATE_CANCELLED`; push configs as a resource name and the config.
- 0.3 requests: `configuration.blocking` (1.0: `returnImmediately`, its opposite),
  `pushNotificationConfig` (1.0: `taskPushNotificationConfig`), push auth `schemes`
  (1.0: one `scheme`).
"""

from __future__ import annotations

from typing import Any

from bridge.codecs.a2a_v03_message import lift_message_v03, lower_message_v03, lower_part_v03, lower_rest_message_v03, lower_rest_part_v03
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "lift_params_v03",
    "lift_push_v03",
    "lower_event_rest_v03",
    "lower_event_v03",
    "lower_push_config_rest_v03",
    "lower_push_config_v03",
    "lower_task_rest_v03",
    "lower_task_v03",
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


# -- requests in: 0.3 → 1.0 ------------------------------------------------------------------

def lift_push_v03(task_id: str, c: v.PushNotificationConfigV03) -> s.TaskPushNotificationConfig:
    auth = None
    if c.authentication is not None:
        scheme = c.authentication.schemes[0] if c.authentication.schemes else ""
        auth = s.AuthenticationInfo(scheme=scheme, credentials=c.authentication.credentials)
    return s.TaskPushNotificationConfig(url=c.url, task_id=task_id, id=c.id, token=c.token, authentication=auth)


def lift_params_v03(op: str, p: Any) -> Any:
    """The params of a 0.3 JSON-RPC call (decoded by `bridge.codecs.a2a_server`) as the 1.0 request struct of `op`."""
    if op in ("send", "stream"):
        c = p.configuration
        config = None
        if c is not None:
            push = lift_push_v03("", c.push_notification_config) if c.push_notification_config else None
            config = s.SendMessageConfiguration(
                accepted_output_modes=c.accepted_output_modes,
                task_push_notification_config=push,
                history_length=c.history_length,
                return_immediately=c.blocking is False,  # 0.3 blocks unless told not to
            )
        return s.SendMessageRequest(message=lift_message_v03(p.message), configuration=config, metadata=p.metadata)
    if op == "get_task":
        return s.GetTaskRequest(id=p.id, history_length=p.history_length)
    if op == "cancel":
        return s.CancelTaskRequest(id=p.id, metadata=p.metadata)
    if op == "subscribe":
        return s.SubscribeToTaskRequest(id=p.id)
    if op == "create_push_config":
        return lift_push_v03(p.task_id, p.push_notification_config)
    if op == "get_push_config":
        return s.GetTaskPushNotificationConfigRequest(task_id=p.id, id=p.push_notification_config_id or "")
    if op == "list_push_configs":
        return s.ListTaskPushNotificationConfigsRequest(task_id=p.id)
    if op == "delete_push_config":
        return s.DeleteTaskPushNotificationConfigRequest(task_id=p.id, id=p.push_notification_config_id)
    raise AssertionError(op)


# -- answers out, JSON-RPC: 1.0 → 0.3 -------------------------------------------------------


def _status_rpc(st: s.TaskStatus) -> v.TaskStatusV03:
    return v.TaskStatusV03(
        state=_STATES.get(st.state, "unknown"),
        message=lower_message_v03(st.message) if st.message else None,
        timestamp=st.timestamp,
    )


def _artifact_rpc(a: s.Artifact) -> v.ArtifactV03:
    return v.ArtifactV03(
        artifact_id=a.artifact_id, parts=[lower_part_v03(p) for p in a.parts], name=a.name, description=a.description,
        metadata=a.metadata, extensions=a.extensions,
    )  # fmt: skip


def lower_task_v03(t: s.Task) -> v.TaskV03:
    return v.TaskV03(
        id=t.id,
        context_id=t.context_id,
        status=_status_rpc(t.status),
        artifacts=[_artifact_rpc(a) for a in t.artifacts] if t.artifacts is not None else None,
        history=[lower_message_v03(m) for m in t.history] if t.history is not None else None,
        metadata=t.metadata,
    )


def lower_event_v03(e: s.StreamResponse) -> v.StreamResultV03:
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
        return lower_task_v03(e.task)
    assert e.message is not None
    return lower_message_v03(e.message)


def lower_push_config_v03(c: s.TaskPushNotificationConfig) -> v.TaskPushNotificationConfigV03:
    auth = None
    if c.authentication is not None:
        schemes = [c.authentication.scheme] if c.authentication.scheme else []
        auth = v.PushNotificationAuthenticationInfoV03(schemes=schemes, credentials=c.authentication.credentials)
    inner = v.PushNotificationConfigV03(url=c.url, id=c.id, token=c.token, authentication=auth)
    return v.TaskPushNotificationConfigV03(task_id=c.task_id, push_notification_config=inner)


# -- answers out, HTTP+JSON: 1.0 → 0.3 ------------------------------------------------------


def _status_rest(st: s.TaskStatus) -> v.RestTaskStatusV03:
    return v.RestTaskStatusV03(
        state="TASK_STATE_CANCELLED" if st.state == s.TaskState.CANCELED else st.state,
        message=lower_rest_message_v03(st.message) if st.message else None,
        timestamp=st.timestamp,
    )


def _artifact_rest(a: s.Artifact) -> v.RestArtifactV03:
    return v.RestArtifactV03(
        artifact_id=a.artifact_id, parts=[lower_rest_part_v03(p) for p in a.parts], name=a.name, description=a.description,
        metadata=a.metadata, extensions=a.extensions,
    )  # fmt: skip


def lower_task_rest_v03(t: s.Task) -> v.RestTaskV03:
    return v.RestTaskV03(
        id=t.id,
        context_id=t.context_id,
        status=_status_rest(t.status),
        artifacts=[_artifact_rest(a) for a in t.artifacts] if t.artifacts is not None else None,
        history=[lower_rest_message_v03(m) for m in t.history] if t.history is not None else None,
        metadata=t.metadata,
    )


def lower_event_rest_v03(e: s.StreamResponse) -> v.RestStreamResponseV03:
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
        return v.RestStreamResponseV03(task=lower_task_rest_v03(e.task))
    assert e.message is not None
    return v.RestStreamResponseV03(message=lower_rest_message_v03(e.message))


def lower_push_config_rest_v03(c: s.TaskPushNotificationConfig) -> dict[str, Any]:
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
