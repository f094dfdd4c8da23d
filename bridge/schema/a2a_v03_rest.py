"""A2A 0.3 wire messages of the HTTP+JSON binding: ProtoJSON of the 0.3 proto (`a2a_v0_3_pb2`).

That older proto writes `content` instead of `parts`, nests `file` / `data` parts,
uses `ROLE_*` and `TASK_STATE_*` names with the British `TASK_STATE_CANCELLED`, and
lives under `/v1` paths (A2A `docs/whats-new-v1.md`; a2a-sdk `a2a/compat/v0_3`).
Prefix `Rest`, suffix `V03`; `bridge.schema.a2a_v03` re-exports every name.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from bridge.schema.a2a import TaskState

__all__ = [
    "RestArtifactV03",
    "RestDataPartV03",
    "RestFilePartV03",
    "RestMessageV03",
    "RestPartV03",
    "RestSendMessageConfigurationV03",
    "RestSendMessageRequestV03",
    "RestSendMessageResponseV03",
    "RestStreamResponseV03",
    "RestTaskArtifactUpdateEventV03",
    "RestTaskStatusUpdateEventV03",
    "RestTaskStatusV03",
    "RestTaskV03",
]


class _Rest(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """The settings of `bridge.schema.a2a`'s wire structs: camelCase names, absent defaults
    left out, required fields defaulting to UNSET and filled in `__post_init__`."""


class RestFilePartV03(_Rest):
    file_with_uri: str | None = None
    file_with_bytes: str | None = None  # base64
    mime_type: str | None = None
    name: str | None = None


class RestDataPartV03(_Rest):
    data: dict[str, Any] = {}


class RestPartV03(_Rest):
    text: str | None = None
    file: RestFilePartV03 | None = None
    data: RestDataPartV03 | None = None
    metadata: dict[str, Any] | None = None


class RestMessageV03(_Rest):
    message_id: str = UNSET  # type: ignore[assignment]
    role: str = UNSET  # type: ignore[assignment]
    content: list[RestPartV03] = []
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None

    def __post_init__(self) -> None:
        if self.message_id is UNSET:
            self.message_id = ""
        if self.role is UNSET:
            self.role = "ROLE_UNSPECIFIED"


class RestTaskStatusV03(_Rest):
    state: str = UNSET  # type: ignore[assignment]  # NB: "TASK_STATE_CANCELLED" in this proto
    message: RestMessageV03 | None = None
    timestamp: str | None = None

    def __post_init__(self) -> None:
        if self.state is UNSET:
            self.state = TaskState.UNSPECIFIED


class RestArtifactV03(_Rest):
    artifact_id: str = ""
    parts: list[RestPartV03] = []
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class RestTaskV03(_Rest):
    id: str
    context_id: str = ""
    status: RestTaskStatusV03 = msgspec.field(default_factory=RestTaskStatusV03)
    artifacts: list[RestArtifactV03] | None = None
    history: list[RestMessageV03] | None = None
    metadata: dict[str, Any] | None = None


class RestTaskStatusUpdateEventV03(_Rest):
    task_id: str
    context_id: str = ""
    status: RestTaskStatusV03 = msgspec.field(default_factory=RestTaskStatusV03)
    final: bool = False
    metadata: dict[str, Any] | None = None


class RestTaskArtifactUpdateEventV03(_Rest):
    task_id: str
    context_id: str = ""
    artifact: RestArtifactV03 = msgspec.field(default_factory=RestArtifactV03)
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None


class RestStreamResponseV03(_Rest):
    task: RestTaskV03 | None = None
    message: RestMessageV03 | None = None
    status_update: RestTaskStatusUpdateEventV03 | None = None
    artifact_update: RestTaskArtifactUpdateEventV03 | None = None


class RestSendMessageResponseV03(_Rest):
    task: RestTaskV03 | None = None
    message: RestMessageV03 | None = None


class RestSendMessageConfigurationV03(_Rest):
    accepted_output_modes: list[str] | None = None
    history_length: int | None = None
    blocking: bool | None = None


class RestSendMessageRequestV03(_Rest):
    message: RestMessageV03
    configuration: RestSendMessageConfigurationV03 | None = None
    metadata: dict[str, Any] | None = None
