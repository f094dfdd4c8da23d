"""A2A 1.0 wire messages (ProtoJSON), their envelopes, errors and protocol facts.

Sources: `specification/a2a.proto` (package `lf.a2a.v1`) and the A2A spec
(`docs/specification.md`: §3 operations, §5 bindings and errors, §9 JSON-RPC, §11
HTTP+JSON). The JSON-RPC and HTTP+JSON bindings carry the same objects; 0.3 shapes
live in `bridge.schema.a2a_v03`, the agent card in `bridge.schema.a2a_card`. The A2A
back and the A2A front share these modules.

Enums (task states, roles) stay plain strings: an agent newer than us may send a
value we do not know, and that must not make the whole event undecodable. Wire
structs tolerate unknown fields (STYLE.md rule 8); `Any` fields default to UNSET so
an absent value and a JSON null stay distinct.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from bridge.schema.a2a_card import (  # re-exported: the card is part of the A2A schema
    APIKeySecurityScheme,
    AgentCapabilities,
    AgentCard,
    AgentCardSignature,
    AgentExtension,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    MutualTlsSecurityScheme,
    OAuth2SecurityScheme,
    OAuthFlow,
    OAuthFlows,
    OpenIdConnectSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

__all__ = [
    "A2A_VERSION_HEADER",
    "APIKeySecurityScheme",
    "AgentCapabilities",
    "AgentCard",
    "AgentCardSignature",
    "AgentExtension",
    "AgentInterface",
    "AgentProvider",
    "AgentSkill",
    "Artifact",
    "AuthenticationInfo",
    "CancelTaskRequest",
    "DeleteTaskPushNotificationConfigRequest",
    "ERRORS",
    "ERROR_INFO_TYPE",
    "ErrorInfo",
    "GetExtendedAgentCardRequest",
    "GetTaskPushNotificationConfigRequest",
    "GetTaskRequest",
    "HTTPAuthSecurityScheme",
    "INTERRUPTED_STATES",
    "ListTaskPushNotificationConfigsRequest",
    "ListTaskPushNotificationConfigsResponse",
    "ListTasksRequest",
    "ListTasksResponse",
    "METHODS",
    "Message",
    "MutualTlsSecurityScheme",
    "OAuth2SecurityScheme",
    "OAuthFlow",
    "OAuthFlows",
    "OpenIdConnectSecurityScheme",
    "Part",
    "REST_PATHS",
    "ROLE_AGENT",
    "ROLE_USER",
    "RestError",
    "RestStatus",
    "RpcError",
    "RpcRequest",
    "RpcResponse",
    "SecurityRequirement",
    "SecurityScheme",
    "SendMessageConfiguration",
    "SendMessageRequest",
    "SendMessageResponse",
    "StreamResponse",
    "StringList",
    "SubscribeToTaskRequest",
    "TERMINAL_STATES",
    "Task",
    "TaskArtifactUpdateEvent",
    "TaskPushNotificationConfig",
    "TaskState",
    "TaskStatus",
    "TaskStatusUpdateEvent",
]

T = TypeVar("T")

A2A_VERSION_HEADER = "A2A-Version"
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
ROLE_USER = "ROLE_USER"
ROLE_AGENT = "ROLE_AGENT"


class TaskState:
    """The 1.0 `TaskState` names (`enum TaskState`, `specification/a2a.proto`)."""

    UNSPECIFIED = "TASK_STATE_UNSPECIFIED"
    SUBMITTED = "TASK_STATE_SUBMITTED"
    WORKING = "TASK_STATE_WORKING"
    COMPLETED = "TASK_STATE_COMPLETED"
    FAILED = "TASK_STATE_FAILED"
    CANCELED = "TASK_STATE_CANCELED"
    REJECTED = "TASK_STATE_REJECTED"
    INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
    AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"


TERMINAL_STATES = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED, TaskState.REJECTED})
INTERRUPTED_STATES = frozenset({TaskState.INPUT_REQUIRED, TaskState.AUTH_REQUIRED})

# Operation → (1.0 JSON-RPC method, 0.3 JSON-RPC method) (A2A spec §5.3).
METHODS: dict[str, tuple[str, str | None]] = {
    "send": ("SendMessage", "message/send"),
    "stream": ("SendStreamingMessage", "message/stream"),
    "get_task": ("GetTask", "tasks/get"),
    "list_tasks": ("ListTasks", None),
    "cancel": ("CancelTask", "tasks/cancel"),
    "subscribe": ("SubscribeToTask", "tasks/resubscribe"),
    "create_push_config": ("CreateTaskPushNotificationConfig", "tasks/pushNotificationConfig/set"),
    "get_push_config": ("GetTaskPushNotificationConfig", "tasks/pushNotificationConfig/get"),
    "list_push_configs": ("ListTaskPushNotificationConfigs", "tasks/pushNotificationConfig/list"),
    "delete_push_config": ("DeleteTaskPushNotificationConfig", "tasks/pushNotificationConfig/delete"),
    "extended_card": ("GetExtendedAgentCard", "agent/getAuthenticatedExtendedCard"),
}

# Operation → (HTTP method, path template) for HTTP+JSON; 0.3 puts `/v1` in front.
REST_PATHS: dict[str, tuple[str, str]] = {
    "send": ("POST", "/message:send"),
    "stream": ("POST", "/message:stream"),
    "get_task": ("GET", "/tasks/{id}"),
    "list_tasks": ("GET", "/tasks"),
    "cancel": ("POST", "/tasks/{id}:cancel"),
    "subscribe": ("POST", "/tasks/{id}:subscribe"),
    "create_push_config": ("POST", "/tasks/{id}/pushNotificationConfigs"),
    "get_push_config": ("GET", "/tasks/{id}/pushNotificationConfigs/{config_id}"),
    "list_push_configs": ("GET", "/tasks/{id}/pushNotificationConfigs"),
    "delete_push_config": ("DELETE", "/tasks/{id}/pushNotificationConfigs/{config_id}"),
    "extended_card": ("GET", "/extendedAgentCard"),
}

# A2A error → (JSON-RPC code, HTTP status, ErrorInfo reason) (A2A spec §5, error
# codes; a2a-sdk `a2a/utils/errors.py`).
ERRORS: dict[str, tuple[int, int, str]] = {
    "TaskNotFound": (-32001, 404, "TASK_NOT_FOUND"),
    "TaskNotCancelable": (-32002, 400, "TASK_NOT_CANCELABLE"),
    "PushNotificationNotSupported": (-32003, 400, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
    "UnsupportedOperation": (-32004, 400, "UNSUPPORTED_OPERATION"),
    "ContentTypeNotSupported": (-32005, 400, "CONTENT_TYPE_NOT_SUPPORTED"),
    "InvalidAgentResponse": (-32006, 500, "INVALID_AGENT_RESPONSE"),
    "ExtendedAgentCardNotConfigured": (-32007, 400, "EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
    "ExtensionSupportRequired": (-32008, 400, "EXTENSION_SUPPORT_REQUIRED"),
    "VersionNotSupported": (-32009, 400, "VERSION_NOT_SUPPORTED"),
    "InvalidParams": (-32602, 400, "INVALID_PARAMS"),
    "InvalidRequest": (-32600, 400, "INVALID_REQUEST"),
    "MethodNotFound": (-32601, 404, "METHOD_NOT_FOUND"),
    "Internal": (-32603, 500, "INTERNAL_ERROR"),
    "Parse": (-32700, 400, "INVALID_REQUEST"),
}


class _A2A(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    """Base of every A2A wire struct: camelCase names, absent defaults left out.

    A field the spec requires defaults to UNSET and is filled in `__post_init__`:
    a peer that leaves it out still decodes, and we always write it (a value that
    is not the default is never omitted).
    """


# == 1.0 ===========================================================================


class Part(_A2A):
    """Exactly one of text / raw (base64) / url / data, plus optional metadata."""

    text: str | None = None
    raw: str | None = None
    url: str | None = None
    data: Any = UNSET
    metadata: dict[str, Any] | None = None
    filename: str | None = None
    media_type: str | None = None


class Message(_A2A):
    message_id: str = UNSET  # type: ignore[assignment]  # required: see _A2A
    role: str = UNSET  # type: ignore[assignment]  # "ROLE_USER" | "ROLE_AGENT"
    parts: list[Part] = []
    context_id: str | None = None
    task_id: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None
    reference_task_ids: list[str] | None = None

    def __post_init__(self) -> None:
        if self.message_id is UNSET:
            self.message_id = ""
        if self.role is UNSET:
            self.role = "ROLE_UNSPECIFIED"


class TaskStatus(_A2A):
    state: str = UNSET  # type: ignore[assignment]  # required: see _A2A
    message: Message | None = None
    timestamp: str | None = None

    def __post_init__(self) -> None:
        if self.state is UNSET:
            self.state = TaskState.UNSPECIFIED


class Artifact(_A2A):
    artifact_id: str = ""
    parts: list[Part] = []
    name: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    extensions: list[str] | None = None


class Task(_A2A):
    id: str
    context_id: str = ""
    status: TaskStatus = msgspec.field(default_factory=TaskStatus)
    artifacts: list[Artifact] | None = None
    history: list[Message] | None = None
    metadata: dict[str, Any] | None = None


class TaskStatusUpdateEvent(_A2A):
    task_id: str
    context_id: str = ""
    status: TaskStatus = msgspec.field(default_factory=TaskStatus)
    metadata: dict[str, Any] | None = None


class TaskArtifactUpdateEvent(_A2A):
    task_id: str
    context_id: str = ""
    artifact: Artifact = msgspec.field(default_factory=Artifact)
    append: bool = False
    last_chunk: bool = False
    metadata: dict[str, Any] | None = None


class StreamResponse(_A2A):
    """Exactly one member is set (member-discriminated, A2A spec §3, SendMessage)."""

    task: Task | None = None
    message: Message | None = None
    status_update: TaskStatusUpdateEvent | None = None
    artifact_update: TaskArtifactUpdateEvent | None = None


class SendMessageResponse(_A2A):
    task: Task | None = None
    message: Message | None = None


class AuthenticationInfo(_A2A):
    scheme: str = ""
    credentials: str | None = None


class TaskPushNotificationConfig(_A2A):
    url: str = ""
    task_id: str = ""
    id: str | None = None
    token: str | None = None
    authentication: AuthenticationInfo | None = None
    tenant: str | None = None


class SendMessageConfiguration(_A2A):
    accepted_output_modes: list[str] | None = None
    task_push_notification_config: TaskPushNotificationConfig | None = None
    history_length: int | None = None
    return_immediately: bool = False


class SendMessageRequest(_A2A):
    message: Message
    configuration: SendMessageConfiguration | None = None
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class GetTaskRequest(_A2A):
    id: str
    history_length: int | None = None
    tenant: str | None = None


class ListTasksRequest(_A2A):
    context_id: str | None = None
    status: str | None = None
    page_size: int | None = None
    page_token: str | None = None
    history_length: int | None = None
    status_timestamp_after: str | None = None
    include_artifacts: bool | None = None
    tenant: str | None = None


class ListTasksResponse(_A2A):
    """Every field is always written, empty or not (as a2a-sdk writes it)."""

    tasks: list[Task] = UNSET  # type: ignore[assignment]
    next_page_token: str = UNSET  # type: ignore[assignment]  # "" on the last page
    page_size: int = UNSET  # type: ignore[assignment]
    total_size: int = UNSET  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.tasks is UNSET:
            self.tasks = []
        if self.next_page_token is UNSET:
            self.next_page_token = ""
        if self.page_size is UNSET:
            self.page_size = 0
        if self.total_size is UNSET:
            self.total_size = 0


class CancelTaskRequest(_A2A):
    id: str
    metadata: dict[str, Any] | None = None
    tenant: str | None = None


class SubscribeToTaskRequest(_A2A):
    id: str
    tenant: str | None = None


class GetTaskPushNotificationConfigRequest(_A2A):
    task_id: str
    id: str
    tenant: str | None = None


class DeleteTaskPushNotificationConfigRequest(_A2A):
    task_id: str
    id: str
    tenant: str | None = None


class ListTaskPushNotificationConfigsRequest(_A2A):
    task_id: str
    page_size: int | None = None
    page_token: str | None = None
    tenant: str | None = None


class ListTaskPushNotificationConfigsResponse(_A2A):
    configs: list[TaskPushNotificationConfig] = []
    next_page_token: str = ""


class GetExtendedAgentCardRequest(_A2A):
    tenant: str | None = None


# -- envelopes and errors ---------------------------------------------------------------


class ErrorInfo(_A2A):
    """`google.rpc.ErrorInfo`, the first entry of an error's details (A2A spec §5, error codes)."""

    type: str = msgspec.field(default=UNSET, name="@type")  # type: ignore[assignment]
    reason: str = ""
    domain: str = UNSET  # type: ignore[assignment]
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.type is UNSET:
            self.type = ERROR_INFO_TYPE
        if self.domain is UNSET:
            self.domain = "a2a-protocol.org"


class RpcError(msgspec.Struct, omit_defaults=True, gc=False):
    code: int
    message: str = ""
    data: Any = UNSET


class RpcRequest(msgspec.Struct, gc=False):
    """A JSON-RPC request (`jsonrpc` always written: strict peers require it)."""

    id: int | str
    method: str
    params: Any
    jsonrpc: str = "2.0"


class RpcResponse(msgspec.Struct, Generic[T], gc=False):
    """A JSON-RPC response whose result is decoded straight into `T` (one pass)."""

    id: int | str | None = None
    result: T | UnsetType = UNSET
    error: RpcError | None = None
    jsonrpc: str = "2.0"


class RestStatus(_A2A):
    """`google.rpc.Status`, the body of an HTTP+JSON error."""

    code: int = 0
    status: str = ""
    message: str = ""
    details: list[dict[str, Any]] | None = None


class RestError(_A2A):
    error: RestStatus | None = None
