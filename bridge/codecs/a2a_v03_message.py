"""A2A 0.3 ↔ 1.0 for parts and messages, both directions, both bindings, sans-I/O.

Both sides convert messages: the client side (`bridge.codecs.a2a_v03_client`) lowers
the message it sends and lifts the agent's replies; the server side
(`bridge.codecs.a2a_v03_server`) lifts the client's message and lowers its answers.
Each conversion is written here once.

Shapes (`specification/a2a.proto` for 1.0; 0.3 as `docs/whats-new-v1.md` lists the
changes, and a2a-sdk's `a2a/compat/v0_3`):
- JSON-RPC 0.3: `kind`-tagged parts `{"kind": "text"|"file"|"data"}`, a `file` object
  holding `bytes` or `uri`, roles "user"/"agent".
- HTTP+JSON 0.3 (ProtoJSON of the 0.3 proto): `content` instead of `parts`, nested
  `file` / `data` parts, `ROLE_*` roles.
- 1.0: flat parts (exactly one of `text`, `raw`, `url`, `data`), `ROLE_*` roles.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

__all__ = [
    "lift_message_v03",
    "lift_part_v03",
    "lift_rest_message_v03",
    "lift_rest_part_v03",
    "lower_message_v03",
    "lower_part_v03",
    "lower_rest_message_v03",
    "lower_rest_part_v03",
]

_ROLES_V03 = {"user": s.ROLE_USER, "agent": s.ROLE_AGENT}


def _data(value: Any) -> dict[str, Any]:
    # 0.3 data parts hold an object; a bare JSON value is wrapped.
    return value if isinstance(value, dict) else {"value": value}


# -- 0.3 → 1.0 ------------------------------------------------------------------------------


def lift_part_v03(p: v.PartV03) -> s.Part:
    if isinstance(p, v.TextPartV03):
        return s.Part(text=p.text, metadata=p.metadata)
    if isinstance(p, v.FilePartV03):
        f = p.file
        return s.Part(raw=f.bytes, url=f.uri if f.bytes is None else None, filename=f.name, media_type=f.mime_type, metadata=p.metadata)
    return s.Part(data=p.data, metadata=p.metadata)


def lift_message_v03(m: v.MessageV03) -> s.Message:
    return s.Message(
        message_id=m.message_id,
        role=_ROLES_V03.get(m.role, m.role),
        parts=[lift_part_v03(p) for p in m.parts],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
        reference_task_ids=m.reference_task_ids,
    )


def lift_rest_part_v03(p: v.RestPartV03) -> s.Part:
    if p.file is not None:
        f = p.file
        return s.Part(raw=f.file_with_bytes, url=f.file_with_uri, filename=f.name, media_type=f.mime_type, metadata=p.metadata)
    if p.data is not None:
        return s.Part(data=p.data.data, metadata=p.metadata)
    return s.Part(text=p.text or "", metadata=p.metadata)


def lift_rest_message_v03(m: v.RestMessageV03) -> s.Message:
    return s.Message(
        message_id=m.message_id,
        role=m.role,
        parts=[lift_rest_part_v03(p) for p in m.content],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
    )


# -- 1.0 → 0.3 ------------------------------------------------------------------------------


def lower_part_v03(p: s.Part) -> v.PartV03:
    if p.raw is not None or p.url is not None:
        f = v.FileContentV03(bytes=p.raw, uri=p.url if p.raw is None else None, mime_type=p.media_type, name=p.filename)
        return v.FilePartV03(file=f, metadata=p.metadata)
    if p.data is not UNSET:
        return v.DataPartV03(data=_data(p.data), metadata=p.metadata)
    return v.TextPartV03(text=p.text or "", metadata=p.metadata)


def lower_message_v03(m: s.Message) -> v.MessageV03:
    return v.MessageV03(
        message_id=m.message_id,
        role="user" if m.role == s.ROLE_USER else "agent",
        parts=[lower_part_v03(p) for p in m.parts],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
        reference_task_ids=m.reference_task_ids,
    )


def lower_rest_part_v03(p: s.Part) -> v.RestPartV03:
    if p.raw is not None or p.url is not None:
        f = v.RestFilePartV03(
            file_with_bytes=p.raw, file_with_uri=p.url if p.raw is None else None, mime_type=p.media_type, name=p.filename
        )
        return v.RestPartV03(file=f, metadata=p.metadata)
    if p.data is not UNSET:
        return v.RestPartV03(data=v.RestDataPartV03(data=_data(p.data)), metadata=p.metadata)
    return v.RestPartV03(text=p.text or "", metadata=p.metadata)


def lower_rest_message_v03(m: s.Message) -> v.RestMessageV03:
    return v.RestMessageV03(
        message_id=m.message_id,
        role=m.role,
        content=[lower_rest_part_v03(p) for p in m.parts],
        context_id=m.context_id,
        task_id=m.task_id,
        metadata=m.metadata,
        extensions=m.extensions,
    )
