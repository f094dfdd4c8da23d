"""A2A 0.3 → 1.0 for the client side: what a 0.3 agent answers our A2A back, sans-I/O.

`bridge.codecs.a2a_client` decodes an agent's replies (SendMessage results, Tasks,
stream events) in the agent's dialect and lifts 0.3 ones here into the 1.0 structs
of `bridge.schema.a2a`, so nothing above it knows there are two dialects. The
message we send is lowered by `bridge.codecs.a2a_v03_message`.

States (`TaskState` in `specification/a2a.proto`; the 0.3 names as a2a-sdk's
`a2a/compat/v0_3` maps them): JSON-RPC 0.3 spells them lowercase kebab
("input-required"); the 0.3 proto of HTTP+JSON writes `TASK_STATE_CANCELLED`, the
British way, where 1.0 writes `TASK_STATE_CANCELED`.
"""

from __future__ import annotations

from bridge.codecs.a2a_v03_message import lift_message_v03, lift_part_v03, lift_rest_message_v03, lift_rest_part_v03
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "lift_event_v03",
    "lift_rest_event_v03",
    "lift_rest_task_v03",
    "lift_task_v03",
]

_STATES_V03 = {
    "submitted": s.TaskState.SUBMITTED,
    "working": s.TaskState.WORKING,
    "input-required": s.TaskState.INPUT_REQUIRED,
    "auth-required": s.TaskState.AUTH_REQUIRED,
    "completed": s.TaskState.COMPLETED,
    "canceled": s.TaskState.CANCELED,
    "failed": s.TaskState.FAILED,
    "rejected": s.TaskState.REJECTED,
    "unknown": s.TaskState.UNSPECIFIED,
}


# -- JSON-RPC --------------------------------------------------------------------------------


def _status(st: v.TaskStatusV03) -> s.TaskStatus:
    return s.TaskStatus(
        state=_STATES_V03.get(st.state, st.state),
        message=lift_message_v03(st.message) if st.message else None,
        timestamp=st.timestamp,
    )


def _artifact(a: v.ArtifactV03) -> s.Artifact:
    return s.Artifact(
        artifact_id=a.artifact_id,
        parts=[lift_part_v03(p) for p in a.parts],
        name=a.name,
        description=a.description,
        metadata=a.metadata,
        extensions=a.extensions,
    )


def lift_task_v03(t: v.TaskV03) -> s.Task:
    return s.Task(
        id=t.id,
        context_id=t.context_id,
        status=_status(t.status),
        artifacts=[_artifact(a) for a in t.artifacts] if t.artifacts is not None else None,
        history=[lift_message_v03(m) for m in t.history] if t.history is not None else None,
        metadata=t.metadata,
    )


def lift_event_v03(e: v.StreamResultV03) -> s.StreamResponse:
    if isinstance(e, v.TaskV03):
        return s.StreamResponse(task=lift_task_v03(e))
    if isinstance(e, v.MessageV03):
        return s.StreamResponse(message=lift_message_v03(e))
    if isinstance(e, v.TaskStatusUpdateEventV03):
        return s.StreamResponse(
            status_update=s.TaskStatusUpdateEvent(task_id=e.task_id, context_id=e.context_id, status=_status(e.status), metadata=e.metadata)
        )
    return s.StreamResponse(
        artifact_update=s.TaskArtifactUpdateEvent(
            task_id=e.task_id,
            context_id=e.context_id,
            artifact=_artifact(e.artifact),
            append=bool(e.append),
            last_chunk=bool(e.last_chunk),
            metadata=e.metadata,
        )
    )


# -- HTTP+JSON -------------------------------------------------------------------------------


def _rest_status(st: v.RestTaskStatusV03) -> s.TaskStatus:
    state = s.TaskState.CANCELED if st.state == "TASK_STATE_CANCELLED" else st.state
    return s.TaskStatus(state=state, message=lift_rest_message_v03(st.message) if st.message else None, timestamp=st.timestamp)


def _rest_artifact(a: v.RestArtifactV03) -> s.Artifact:
    return s.Artifact(
        artifact_id=a.artifact_id,
        parts=[lift_rest_part_v03(p) for p in a.parts],
        name=a.name,
        description=a.description,
        metadata=a.metadata,
        extensions=a.extensions,
    )


def lift_rest_task_v03(t: v.RestTaskV03) -> s.Task:
    return s.Task(
        id=t.id,
        context_id=t.context_id,
        status=_rest_status(t.status),
        artifacts=[_rest_artifact(a) for a in t.artifacts] if t.artifacts is not None else None,
        history=[lift_rest_message_v03(m) for m in t.history] if t.history is not None else None,
        metadata=t.metadata,
    )


def lift_rest_event_v03(r: v.RestStreamResponseV03) -> s.StreamResponse:
    """One event of a 0.3 HTTP+JSON stream; the members it lacks stay None."""
    status = artifact = None
    if r.status_update is not None:
        u = r.status_update
        status = s.TaskStatusUpdateEvent(task_id=u.task_id, context_id=u.context_id, status=_rest_status(u.status), metadata=u.metadata)
    if r.artifact_update is not None:
        a = r.artifact_update
        artifact = s.TaskArtifactUpdateEvent(
            task_id=a.task_id, context_id=a.context_id, artifact=_rest_artifact(a.artifact), append=a.append,
            last_chunk=a.last_chunk, metadata=a.metadata,
        )  # fmt: skip
    return s.StreamResponse(
        task=lift_rest_task_v03(r.task) if r.task else None,
        message=lift_rest_message_v03(r.message) if r.message else None,
        status_update=status,
        artifact_update=artifact,
    )
