"""A2A 0.3 wire messages: the JSON-RPC shapes (`kind`-tagged) and the HTTP+JSON ones.

Sources: A2A `docs/whats-new-v1.md` (what changed from 0.3); the 0.3 JSON schema as shipped in
a2a-sdk (`a2a/compat/v0_3/types.py`) for JSON-RPC; the 0.3 proto (`a2a_v0_3_pb2`)
for HTTP+JSON, which serves ProtoJSON of that older proto: `content` instead of
`parts`, nested `file`/`data` parts, `ROLE_*` and `TASK_STATE_*` names with the
British `TASK_STATE_CANCELLED`, and paths under `/v1`.

- JSON-RPC, suffix `V03`: tagged by `kind` (`"task"`, `"message"`, `"status-update"`,
  `"artifact-update"`; parts `"text"`, `"file"`, `"data"`), lowercase kebab states.
- HTTP+JSON, prefix `Rest`, suffix `V03`: `bridge.schema.a2a_v03_rest`, re-exported here.

The codecs lift both into the 1.0 structs of `bridge.schema.a2a` and lower 1.0
ones into them: `bridge.codecs.a2a_v03_message` (parts and messages),
`bridge.codecs.a2a_v03_client` (the client side), `bridge.codecs.a2a_v03_server`
(the server side).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET

from bridge.schema.a2a_card import AgentCardSignature, AgentExtension, AgentProvider
from bridge.schema.a2a_v03_rest import (  # re-exported: one module name for every 0.3 shape
    RestFilePartV03,
    RestDataPartV03,
    RestPartV03,
    RestMessageV03,
    RestTaskStatusV03,
    RestArtifactV03,
    RestTaskV03,
    RestTaskStatusUpdateEventV03,
    RestTaskArtifactUpdateEventV03,
    RestStreamResponseV03,
    RestSendMessageResponseV03,
    RestSendMessageConfigurationV03,
    RestSendMessageRequestV03,
)

__all__ = [
    "AgentCapabilitiesV03",
    "AgentCardV03",
    "AgentInterfaceV03",
    "AgentSkillV03",
    "ArtifactV03",
    "DataPartV03",
    "DeleteTaskPushNotificationConfigParamsV03",
    "FileContentV03",
    "FilePartV03",
    "GetTaskPushNotificationConfigParamsV03",
    "ListTaskPushNotificationConfigParamsV03",
    "MessageSendConfigurationV03",
    "MessageSendParamsV03",
    "MessageV03",
    "PartV03",
    "PushNotificationAuthenticationInfoV03",
    "PushNotificationConfigV03",
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
    "SecuritySchemeV03",
    "SendResultV03",
    "StreamResultV03",
    "TaskArtifactUpdateEventV03",
    "TaskIdParamsV03",
    "TaskPushNotificationConfigV03",
    "TaskQueryParamsV03",
    "TaskStatusUpdateEventV03",
    "TaskStatusV03",
    "TaskV03",
    "TextPartV03",
]


class _A2A(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """Same settings as the 1.0 base: camelCase names, absent defaults left out, and
    required fields defaulting to UNSET, filled in `__post_init__` (always written)."""


# == JSON-RPC (`kind`-tagged) =========================================================


class _V03(_A2A):
    pass


class TextPartV03(_V03, tag="text", tag_field="kind"):
    text: str = UNSET  # type: ignore[assignment]  # required: always written, even when empty
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.text is UNSET:
            self.text = ""


class FileContentV03(_V03):
    """`FileWithBytes` or `FileWithUri`: exactly one of `bytes` (base64) / `uri`."""

    bytes: str | None = None
    uri: str | None = None
    mime_type: str | None = None
    name: str | None = None


class FilePartV03(_V03, tag="file", tag_field="kind"):
    file: FileContentV03 = msgspec.field(default_factory=FileContentV03)
    metadata: dict[str, Any] | None = None


class DataPartV03(_V03, tag="data", tag_field="kind"):
    data: dict[str, Any] = {}
    metadata: dict[str, Any] | None = None


PartV03 = TextPartV03 | FilePartV03 | DataPartV03


class MessageV03(_V03, tag="message", tag_field="kind"):
    message_id: str = UNSET  # type: ignore[assignment]
    role: str = UNSET  # type: ignore[assignment]  # "user" | "agent"
    parts: list[PartV03] = []
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None

    def __post_init__(self) -> None:
        if self.message_id is UNSET:
            self.message_id = ""
        if self.role is UNSET:
            self.role = "agent"


class TaskStatusV03(_V03):
    # "submitted", "working", "input-required", "auth-required", "completed", "canceled",
    # "failed", "rejected", "unknown"
    state: str = UNSET  # type: ignore[assignment]
    message: MessageV03 | None = None
    timestamp: str | None = None

    def __post_init__(self) -> None:
        if self.state is UNSET:
            self.state = "unknown"


class ArtifactV03(_V03):
    artifact_id: str = ""
    parts: list[PartV03] = []
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class TaskV03(_V03, tag="task", tag_field="kind"):
    id: str
    context_id: str = ""
    status: TaskStatusV03 = msgspec.field(default_factory=TaskStatusV03)
    artifacts: list[ArtifactV03] | None = None
    history: list[MessageV03] | None = None
    metadata: dict[str, Any] | None = None


class TaskStatusUpdateEventV03(_V03, tag="status-update", tag_field="kind"):
    task_id: str
    context_id: str = ""
    status: TaskStatusV03 = msgspec.field(default_factory=TaskStatusV03)
    final: bool = UNSET  # type: ignore[assignment]  # required in 0.3: always written
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.final is UNSET:
            self.final = False


class TaskArtifactUpdateEventV03(_V03, tag="artifact-update", tag_field="kind"):
    task_id: str
    context_id: str = ""
    artifact: ArtifactV03 = msgspec.field(default_factory=ArtifactV03)
    append: bool | None = None
    last_chunk: bool | None = None
    metadata: dict[str, Any] | None = None


SendResultV03 = TaskV03 | MessageV03
StreamResultV03 = TaskV03 | MessageV03 | TaskStatusUpdateEventV03 | TaskArtifactUpdateEventV03


class PushNotificationAuthenticationInfoV03(_V03):
    schemes: list[str] = []
    credentials: str | None = None


class PushNotificationConfigV03(_V03):
    url: str = ""
    id: str | None = None
    token: str | None = None
    authentication: PushNotificationAuthenticationInfoV03 | None = None


class MessageSendConfigurationV03(_V03):
    accepted_output_modes: list[str] | None = None
    blocking: bool | None = None
    history_length: int | None = None
    push_notification_config: PushNotificationConfigV03 | None = None


class MessageSendParamsV03(_V03):
    message: MessageV03
    configuration: MessageSendConfigurationV03 | None = None
    metadata: dict[str, Any] | None = None


class TaskQueryParamsV03(_V03):
    id: str
    history_length: int | None = None
    metadata: dict[str, Any] | None = None


class TaskIdParamsV03(_V03):
    id: str
    metadata: dict[str, Any] | None = None


class TaskPushNotificationConfigV03(_V03):
    task_id: str
    push_notification_config: PushNotificationConfigV03


class GetTaskPushNotificationConfigParamsV03(_V03):
    id: str
    push_notification_config_id: str | None = None
    metadata: dict[str, Any] | None = None


class ListTaskPushNotificationConfigParamsV03(_V03):
    id: str
    metadata: dict[str, Any] | None = None


class DeleteTaskPushNotificationConfigParamsV03(_V03):
    id: str
    push_notification_config_id: str
    metadata: dict[str, Any] | None = None


class AgentInterfaceV03(_V03):
    url: str = ""
    transport: str = ""


class AgentCapabilitiesV03(_V03):
    streaming: bool | None = None
    push_notifications: bool | None = None
    state_transition_history: bool | None = None
    extensions: list[AgentExtension] | None = None


class SecuritySchemeV03(_V03):
    """OpenAPI-style, discriminated by `type`: apiKey, http, oauth2, openIdConnect, mutualTLS."""

    type: str = ""
    description: str | None = None
    scheme: str | None = None  # http
    bearer_format: str | None = None  # http
    location: str | None = msgspec.field(default=None, name="in")  # apiKey: header | query | cookie
    name: str | None = None  # apiKey
    flows: dict[str, Any] | None = None  # oauth2
    oauth2_metadata_url: str | None = None
    open_id_connect_url: str | None = None


class AgentSkillV03(_V03):
    id: str = ""
    name: str = ""
    description: str = ""
    tags: list[str] = []
    examples: list[str] | None = None
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None
    security: list[dict[str, list[str]]] | None = None


class AgentCardV03(_V03):
    name: str = ""
    description: str = ""
    url: str = ""
    preferred_transport: str | None = None  # default "JSONRPC"
    additional_interfaces: list[AgentInterfaceV03] | None = None
    protocol_version: str | None = None  # "0.3.0"
    version: str = ""
    provider: AgentProvider | None = None
    documentation_url: str | None = None
    icon_url: str | None = None
    capabilities: AgentCapabilitiesV03 = msgspec.field(default_factory=AgentCapabilitiesV03)
    security_schemes: dict[str, SecuritySchemeV03] | None = None
    security: list[dict[str, list[str]]] | None = None
    default_input_modes: list[str] = []
    default_output_modes: list[str] = []
    skills: list[AgentSkillV03] = []
    supports_authenticated_extended_card: bool | None = None
    signatures: list[AgentCardSignature] | None = None
