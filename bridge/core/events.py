"""Canonical events: the facts a session reports, in order, each with a sequence number.

A back produces them; the session stamps `seq` (per session, gapless, from 1) and
stores them; every front renders them in its own protocol. Any event may carry
`parent_tool_call_id`, the tool call of the sub-agent (fork) that produced it.

Events are mutable only so the session can stamp `seq` without a copy on the hot
path; nothing else changes an event after it is emitted.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

import msgspec

from bridge.core.content import ContentBlock

__all__ = [
    "ArtifactUpdated",
    "CommandInfo",
    "CommandsAvailable",
    "ConfigOption",
    "ConfigValue",
    "Event",
    "EventDecoder",
    "MessageChunk",
    "OptionsChanged",
    "PlanEntry",
    "PlanUpdated",
    "ProgressReported",
    "Question",
    "QuestionAnswered",
    "QuestionAsked",
    "QuestionOption",
    "StopReason",
    "ToolCallContent",
    "ToolCallStarted",
    "ToolCallUpdated",
    "ToolLocation",
    "TurnEnded",
    "TurnError",
    "TurnStarted",
    "UsageReported",
    "encode_events",
    "decode_events",
]


class StopReason(str, Enum):
    """Why a turn ended (ACP stop reasons plus the two other protocols need)."""

    END_TURN = "end_turn"
    MAX_TOKENS = "max_tokens"
    MAX_TURN_REQUESTS = "max_turn_requests"
    REFUSAL = "refusal"
    CANCELLED = "cancelled"
    FAILED = "failed"  # carries a TurnError; ACP answers the prompt with a JSON-RPC error
    INPUT_REQUIRED = "input_required"  # the back keeps the turn open for the next message


class _Data(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """Plain value objects inside events."""


class _Event(msgspec.Struct, kw_only=True, omit_defaults=True, tag_field="event", gc=False):
    seq: int = 0
    parent_tool_call_id: str | None = None


# -- values ---------------------------------------------------------------------


class ToolLocation(_Data):
    path: str
    line: int | None = None


class ToolCallContent(_Data):
    """One item of a tool call's content: a content block, a diff or a terminal."""

    type: Literal["content", "diff", "terminal"] = "content"
    content: ContentBlock | None = None
    path: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    terminal_id: str | None = None


class PlanEntry(_Data):
    content: str
    priority: Literal["high", "medium", "low"] = "medium"
    status: Literal["pending", "in_progress", "completed"] = "pending"


class QuestionOption(_Data):
    """A choice offered to the user. `kind` follows ACP PermissionOption kinds."""

    id: str
    label: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"] | None = None
    description: str | None = None


class Question(_Data):
    """Something only the user can answer.

    permission: approve a tool call (options carry allow/reject kinds);
    choice: pick one option (or several with `multi_select`), free text allowed if `allow_text`;
    form: fill `schema` (a JSON Schema object), ACP elicitation / MCP form shaped.
    """

    id: str
    kind: Literal["permission", "choice", "form"]
    prompt: str
    options: list[QuestionOption] = []
    multi_select: bool = False
    allow_text: bool = False
    schema: dict[str, Any] | None = None
    tool_call_id: str | None = None
    header: str | None = None


class CommandInfo(_Data):
    name: str
    description: str = ""
    hint: str | None = None


class ConfigValue(_Data):
    value: str
    name: str
    description: str | None = None


class ConfigOption(_Data):
    id: str
    name: str
    current: str
    values: list[ConfigValue] = []
    description: str | None = None
    category: str | None = None


class TurnError(_Data):
    """Why a turn failed, in words a user can act on. `kind` classifies it for metrics."""

    message: str
    kind: str = "back"
    data: Any = None


# -- events ---------------------------------------------------------------------


class TurnStarted(_Event, tag="turn_started"):
    """A prompt, as the client sent it: its blocks, and when its protocol names them,
    the client's own message id and metadata (A2A `Message.messageId`, `metadata`,
    `extensions`: a2a.proto `Message`), so a back that can take them passes them on."""

    turn_id: str
    prompt: list[ContentBlock]
    message_id: str | None = None
    meta: dict[str, Any] | None = None


class MessageChunk(_Event, tag="message_chunk"):
    """A piece of the agent's reply (or of its reasoning when `thought`)."""

    content: ContentBlock
    message_id: str | None = None
    thought: bool = False


class ProgressReported(_Event, tag="progress"):
    """Status text about the work, not part of the answer: an A2A agent's WORKING
    status message (a2a.proto `TaskStatus.message`). Fronts show it beside the reply
    (ACP: a thought chunk; A2A: a status update), never inside it."""

    content: list[ContentBlock]
    message_id: str | None = None


class ToolCallStarted(_Event, tag="tool_call_started"):
    tool_call_id: str
    title: str
    kind: str = "other"
    status: Literal["pending", "in_progress", "completed", "failed"] = "pending"
    name: str | None = None
    raw_input: Any = None
    content: list[ToolCallContent] | None = None
    locations: list[ToolLocation] | None = None


class ToolCallUpdated(_Event, tag="tool_call_updated"):
    """Only the fields that changed are set; `content`/`locations` replace the lists."""

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    status: Literal["pending", "in_progress", "completed", "failed"] | None = None
    raw_input: Any = None
    raw_output: Any = None
    content: list[ToolCallContent] | None = None
    locations: list[ToolLocation] | None = None


class PlanUpdated(_Event, tag="plan_updated"):
    """Always the complete plan; a front replaces what it showed."""

    entries: list[PlanEntry]


class QuestionAsked(_Event, tag="question_asked"):
    question: Question


class QuestionAnswered(_Event, tag="question_answered"):
    """The answer bound to its question. `selected` holds option ids."""

    question_id: str
    selected: list[str] = []
    text: str | None = None
    values: dict[str, Any] | None = None
    cancelled: bool = False
    # "front": no front could show the question (e.g. an editor without forms), so
    # nobody saw it; the back may then ask in the chat instead.
    by: Literal["user", "policy", "timeout", "front"] = "user"


class ArtifactUpdated(_Event, tag="artifact_updated"):
    artifact_id: str
    parts: list[ContentBlock]
    name: str | None = None
    append: bool = False
    last: bool = False


class UsageReported(_Event, tag="usage"):
    used: int = 0
    size: int = 0
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_amount: float | None = None
    cost_currency: str | None = None


class CommandsAvailable(_Event, tag="commands"):
    commands: list[CommandInfo]


class OptionsChanged(_Event, tag="options"):
    options: list[ConfigOption]


class TurnEnded(_Event, tag="turn_ended"):
    turn_id: str
    stop_reason: StopReason
    error: TurnError | None = None


Event = (
    TurnStarted
    | MessageChunk
    | ProgressReported
    | ToolCallStarted
    | ToolCallUpdated
    | PlanUpdated
    | QuestionAsked
    | QuestionAnswered
    | ArtifactUpdated
    | UsageReported
    | CommandsAvailable
    | OptionsChanged
    | TurnEnded
)

_encoder = msgspec.msgpack.Encoder()
EventDecoder = msgspec.msgpack.Decoder(list[Event])


def encode_events(events: list[Event]) -> bytes:
    """One stored batch of events (msgpack: compact, and msgspec's fastest path)."""
    return _encoder.encode(events)


def decode_events(blob: bytes) -> list[Event]:
    return EventDecoder.decode(blob)
