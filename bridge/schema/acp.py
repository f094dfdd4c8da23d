"""ACP v1 wire messages (agentclientprotocol.com/protocol/v1; schema v1 of @agentclientprotocol/sdk).

Field names are camelCase on the wire (`rename="camel"`); unknown fields are
tolerated, so newer clients and agents keep working. Content blocks are the
canonical ones (`bridge.core.content`): ACP and MCP share their shapes.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from bridge.core.content import WireBlock as ContentBlock  # the five blocks ACP can carry

__all__ = [
    "PROTOCOL_VERSION",
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "CancelRequestParams",
    "ConfigOptionUpdate",
    "CurrentModeUpdate",
    "PermissionOption",
    "Plan",
    "PlanEntry",
    "SessionNotification",
    "SessionUpdate",
    "ToolCall",
    "ToolCallUpdate",
    "UsageUpdate",
    "UserMessageChunk",
]

PROTOCOL_VERSION = 1


class _Acp(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel", gc=False):
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


# -- client → agent params ----------------------------------------------------------


class FsCapabilities(_Acp):
    read_text_file: bool = False
    write_text_file: bool = False


class ElicitationCapabilities(_Acp):
    form: dict[str, Any] | None = None
    url: dict[str, Any] | None = None


class ClientCapabilities(_Acp):
    fs: FsCapabilities | None = None
    terminal: bool = False
    elicitation: ElicitationCapabilities | None = None


class Implementation(_Acp):
    name: str
    version: str = ""
    title: str | None = None


class InitializeParams(_Acp):
    protocol_version: int
    client_capabilities: ClientCapabilities | None = None
    client_info: Implementation | None = None


class AuthenticateParams(_Acp):
    method_id: str


class NewSessionParams(_Acp):
    cwd: str
    mcp_servers: list[dict[str, Any]] = []
    additional_directories: list[str] | None = None


class LoadSessionParams(_Acp):
    session_id: str
    cwd: str
    mcp_servers: list[dict[str, Any]] = []
    additional_directories: list[str] | None = None


class ListSessionsParams(_Acp):
    cwd: str | None = None
    cursor: str | None = None


class SessionIdParams(_Acp):
    """session/close, session/cancel, session/delete."""

    session_id: str


class SetModeParams(_Acp):
    session_id: str
    mode_id: str


class SetConfigOptionParams(_Acp):
    session_id: str
    config_id: str
    value: str | bool
    type: str | None = None


class PromptParams(_Acp):
    session_id: str
    prompt: list[ContentBlock]


class CancelRequestParams(_Acp):
    """ACP schema, `CancelRequestNotification` (`$/cancel_request`, either direction)."""

    request_id: int | str


# -- agent → client results ---------------------------------------------------------


class AuthMethod(_Acp):
    id: str
    name: str
    description: str | None = None


class PromptCapabilities(_Acp):
    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class AgentCapabilities(_Acp):
    load_session: bool = False
    prompt_capabilities: PromptCapabilities = msgspec.field(default_factory=PromptCapabilities)
    session_capabilities: dict[str, dict[str, Any]] = {}


class InitializeResult(_Acp):
    protocol_version: int
    agent_capabilities: AgentCapabilities
    auth_methods: list[AuthMethod] = []
    agent_info: Implementation | None = None


class SessionMode(_Acp):
    id: str
    name: str
    description: str | None = None


class SessionModeState(_Acp):
    current_mode_id: str
    available_modes: list[SessionMode]


class ConfigSelectOption(_Acp):
    value: str
    name: str
    description: str | None = None


class SessionConfigOption(_Acp):
    id: str
    name: str
    current_value: str
    options: list[ConfigSelectOption]
    # Required on the wire (the discriminator of SessionConfigOption): defaulting to
    # UNSET and filling it in `__post_init__` keeps it out of `omit_defaults`, so it
    # is always written, while a peer that leaves it out still decodes.
    type: str | msgspec.UnsetType = msgspec.UNSET
    description: str | None = None
    category: str | None = None

    def __post_init__(self) -> None:
        if self.type is msgspec.UNSET:
            self.type = "select"


class NewSessionResult(_Acp):
    session_id: str
    modes: SessionModeState | None = None
    config_options: list[SessionConfigOption] | None = None


class LoadSessionResult(_Acp):
    modes: SessionModeState | None = None
    config_options: list[SessionConfigOption] | None = None


class SessionInfo(_Acp):
    session_id: str
    cwd: str
    title: str | None = None
    updated_at: str | None = None


class ListSessionsResult(_Acp):
    sessions: list[SessionInfo]
    next_cursor: str | None = None


class SetConfigOptionResult(_Acp):
    config_options: list[SessionConfigOption]


class PromptResult(_Acp):
    stop_reason: str


# -- session/update -----------------------------------------------------------------


class _Update(_Acp, tag_field="sessionUpdate"):
    pass


class UserMessageChunk(_Update, tag="user_message_chunk"):
    content: ContentBlock
    message_id: str | None = None


class AgentMessageChunk(_Update, tag="agent_message_chunk"):
    content: ContentBlock
    message_id: str | None = None


class AgentThoughtChunk(_Update, tag="agent_thought_chunk"):
    content: ContentBlock
    message_id: str | None = None


class ToolCallLocation(_Acp):
    path: str
    line: int | None = None


class ToolCallContentItem(_Acp):
    """`{type:"content", content}` | `{type:"diff", path, oldText, newText}` | `{type:"terminal", terminalId}`."""

    type: Literal["content", "diff", "terminal"]
    content: ContentBlock | None = None
    path: str | None = None
    # ACP: a null oldText means a new file, so it is always written for diffs.
    old_text: str | None | msgspec.UnsetType = msgspec.UNSET
    new_text: str | None = None
    terminal_id: str | None = None


class ToolCall(_Update, tag="tool_call"):
    tool_call_id: str
    title: str
    name: str | None = None  # programmatic tool name (schema v1 ToolCall.name; older peers ignore it)
    kind: str | None = None
    status: str | None = None
    content: list[ToolCallContentItem] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None


class ToolCallUpdate(_Update, tag="tool_call_update"):
    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[ToolCallContentItem] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None


class PlanEntry(_Acp):
    content: str
    # Both required on the wire (schema v1 PlanEntry); see SessionConfigOption.type.
    priority: str | msgspec.UnsetType = msgspec.UNSET
    status: str | msgspec.UnsetType = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.priority is msgspec.UNSET:
            self.priority = "medium"
        if self.status is msgspec.UNSET:
            self.status = "pending"


class Plan(_Update, tag="plan"):
    entries: list[PlanEntry]


class CommandInput(_Acp):
    hint: str


class AvailableCommand(_Acp):
    name: str
    description: str
    input: CommandInput | None = None


class AvailableCommandsUpdate(_Update, tag="available_commands_update"):
    available_commands: list[AvailableCommand]


class CurrentModeUpdate(_Update, tag="current_mode_update"):
    current_mode_id: str


class ConfigOptionUpdate(_Update, tag="config_option_update"):
    config_options: list[SessionConfigOption]


class SessionInfoUpdate(_Update, tag="session_info_update"):
    title: str | None = None
    updated_at: str | None = None


class Cost(_Acp):
    amount: float
    currency: str


class UsageUpdate(_Update, tag="usage_update"):
    used: int
    size: int
    cost: Cost | None = None


SessionUpdate = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCall
    | ToolCallUpdate
    | Plan
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | ConfigOptionUpdate
    | SessionInfoUpdate
    | UsageUpdate
)


class SessionNotification(_Acp):
    session_id: str
    update: SessionUpdate


# -- agent → client requests --------------------------------------------------------


class PermissionOption(_Acp):
    option_id: str
    name: str
    kind: str


class ToolCallFields(_Acp):
    """A ToolCallUpdate's fields outside `session/update` (no `sessionUpdate` tag): the
    `toolCall` of `session/request_permission` (ACP schema, `RequestPermissionRequest`)."""

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: list[ToolCallContentItem] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input: Any = None
    raw_output: Any = None


class RequestPermissionParams(_Acp):
    session_id: str
    tool_call: ToolCallFields
    options: list[PermissionOption]


class PermissionOutcome(_Acp):
    outcome: Literal["selected", "cancelled"]
    option_id: str | None = None


class RequestPermissionResult(_Acp):
    outcome: PermissionOutcome


class ElicitationParams(_Acp):
    """`elicitation/create` scoped to a session (ACP schema, `CreateElicitationRequest`):
    form mode carries `requestedSchema`; other modes (`url`) are read only to refuse them."""

    session_id: str
    mode: str
    message: str
    requested_schema: dict[str, Any] | None = None
    tool_call_id: str | None = None


class ElicitationResult(_Acp):
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None
