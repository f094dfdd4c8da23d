"""Chat event stream wire messages (Blade `api/chat-flow.md`, seed 002).

Every frame is one JSON object `{"event": NAME, "data": {...}}` on a plain WebSocket
(Blade carries the same events over Socket.IO, Blade `api/websocket.md`). Client frames are decoded in
two steps (STYLE.md rule 6): `ClientFrame` with `data` left `msgspec.Raw`, then the
data with the decoder for that event (`CLIENT_EVENTS`). Unknown fields are tolerated
everywhere, so newer peers keep working.

Projections (`TurnProjection`, `ToolCallProjection`) keep their null fields on the
wire (`parent_fork_tool_call_id: null` marks a root turn, Blade `api/chat-flow.md`, forks); patch bodies and
client frames omit what is unset.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Raw, UnsetType

__all__ = [
    "CLIENT_EVENTS",
    "AddContent",
    "AddToolCall",
    "AskUserAnswer",
    "AuthInfo",
    "Block",
    "ChatEnd",
    "ChatStart",
    "ClientFrame",
    "CommandItem",
    "FileItem",
    "ImageUrl",
    "ImageUrlItem",
    "MessageItem",
    "PatchEnvelope",
    "RunOptions",
    "SendMessage",
    "ServerFrame",
    "SessionCommands",
    "SessionRef",
    "SetStatus",
    "SetToolStatus",
    "Subscribe",
    "Subscribed",
    "SystemError",
    "TextItem",
    "ToolCallProjection",
    "ToolResult",
    "TurnProjection",
    "Usage",
]


class _Chat(msgspec.Struct, kw_only=True, omit_defaults=True, gc=False):
    """Client frames and patch bodies: unset fields stay off the wire."""


class _Projection(msgspec.Struct, kw_only=True, gc=False):
    """Snapshots, envelopes and the tool patches: every field is on the wire, nulls included."""


# -- client → server (Blade `api/chat-flow.md`, `chat:send`) ---------------------------------------


class AuthInfo(_Chat, kw_only=True):
    token: str = ""

    def __repr__(self) -> str:  # a token never reaches a log (STYLE.md rule 21)
        return "AuthInfo(token=<redacted>)"


class ClientFrame(_Chat, kw_only=True):
    """The envelope. `auth` is read on the first frame only (Blade `api/websocket.md`, Socket.IO `auth`)."""

    event: str = ""
    data: Raw | UnsetType = UNSET
    auth: AuthInfo | None = None


class SessionRef(_Chat, kw_only=True):
    session_id: str


class Subscribe(_Chat, kw_only=True):
    session_id: str
    # Replay every frame after this sequence number, then go live; absent: live only.
    after_sequence: Annotated[int, msgspec.Meta(ge=0)] | None = None


class TextItem(_Chat, tag="text", tag_field="type", kw_only=True):
    text: str


class ImageUrl(_Chat, kw_only=True):
    url: str
    detail: str | None = None


class ImageUrlItem(_Chat, tag="image_url", tag_field="type", kw_only=True):
    image_url: ImageUrl


class FileItem(_Chat, tag="file", tag_field="type", kw_only=True):
    name: str
    data: str  # base64
    mime_type: str | None = None


MessageItem = TextItem | ImageUrlItem | FileItem


class AskUserAnswer(_Chat, kw_only=True):
    """Blade `api/chat-flow.md`, AskUserQuestion: keys are question indexes as strings from "0"; each question needs one of the two."""

    tool_call_id: str
    selections: dict[str, list[int]] = {}
    custom: dict[str, str] = {}


class SendMessage(_Chat, kw_only=True):
    session_id: str
    message: str | list[MessageItem] = ""
    askuser_answer: AskUserAnswer | None = None
    headless: bool = False
    output_schema: dict[str, Any] | None = None
    mode: str | None = None
    model: str | None = None
    # W3C Trace Context (§3.2, §3.3) of the client's span, as the HTTP headers would carry it
    # (our extension: Blade's chat:send has no place for it); read by bridge/telemetry.
    traceparent: str | None = None
    tracestate: str | None = None


# The decoder of each client event's `data` (unknown event → "unknown_event").
CLIENT_EVENTS: dict[str, type] = {
    "session:subscribe": Subscribe,
    "session:unsubscribe": SessionRef,
    "chat:send": SendMessage,
    "chat:stop": SessionRef,
}


class RunOptions(_Chat, kw_only=True):
    """What a `chat:send` asked for beyond its message, kept beside the session."""

    headless: bool = False
    output_schema: dict[str, Any] | None = None
    # The output check's outcome, {"matched": bool, "result": {...}}, stored when the run
    # first ends so that reads and replays never run the schema again (issue 13).
    check: dict[str, Any] | None = None


# -- server → client (Blade `api/chat-flow.md`, server events; `api/types.md`) ---------------------


class ServerFrame(msgspec.Struct, gc=False):
    event: str
    data: Any


class Block(_Chat, kw_only=True):
    """One block of a turn: `text`/`thinking` (string), `tool_use`, `tool_result`,
    `plan_status` (the plan entries), `ask_user_answer`, `image_url`, `file`."""

    type: str
    content: Any = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    display_name: str | None = None


class ToolCallProjection(_Projection, kw_only=True):
    id: str
    tool_name: str
    display_name: str
    arguments: str = "{}"  # a JSON string, as in Blade `api/types.md`
    # pending | running | done | error | cancelled | awaiting_answer
    status: str = "pending"
    result: Any = None
    duration_ms: int | None = None


class Usage(_Projection, kw_only=True):
    input_tokens: int = 0
    output_tokens: int = 0


class TurnProjection(_Projection, kw_only=True):
    id: str
    session_id: str
    sequence: int = 0
    turn_id: str
    loop_id: str = "root"
    kind: Literal["message", "compaction"] = "message"
    role: Literal["user", "assistant", "system"] = "assistant"
    # streaming | completed | paused | failed | interrupted
    status: str = "streaming"
    blocks: list[Block] = []
    tool_calls: list[ToolCallProjection] = []
    usage: Usage | None = None
    duration_ms: int | None = None
    started_at: float | None = None
    context_window: int | None = None
    parent_fork_tool_call_id: str | None = None


class AddContent(_Chat, kw_only=True):
    type: str
    content: Any = None  # the whole block as it now stands
    text_delta: str | None = None  # what this patch appended (text and thinking)
    index: int | None = None  # the block's place in `blocks`


# `agentBridge`: our own extension of a tool patch, what Blade's fields cannot say (a
# call's locations; a result's raw output apart from its content), so a chat back on
# another agent-bridge reads the call exactly. Off the wire when unset; a Blade-style
# client ignores fields it does not know.
_EXTENSION = msgspec.field(default=UNSET, name="agentBridge")


class AddToolCall(_Projection, kw_only=True):
    id: str
    tool_name: str
    display_name: str
    arguments: str = "{}"
    status: str = "pending"
    agent_bridge: Any | UnsetType = _EXTENSION


class ToolResult(_Projection, kw_only=True):
    tool_call_id: str
    result: Any = None
    status: str = "done"
    duration_ms: int | None = None
    agent_bridge: Any | UnsetType = _EXTENSION


class SetStatus(_Projection, kw_only=True):
    status: str


class SetToolStatus(_Projection, kw_only=True):
    tool_call_id: str
    status: str


class PatchEnvelope(_Projection, kw_only=True):
    session_id: str
    sequence: int
    turn_id: str
    loop_id: str
    patch_type: Literal["add_content", "add_tool_call", "tool_result", "set_status", "set_tool_status"] | str
    data: Any


class ChatStart(_Projection, kw_only=True):
    session_id: str
    sequence: int
    chat_run_id: str | None = None


class ChatEnd(_Projection, kw_only=True):
    session_id: str
    sequence: int
    status: str  # completed | interrupted | failed
    result: Any = None
    finish_reason: str = "completed"
    chat_run_id: str | None = None


class SystemError(_Chat, kw_only=True):
    """Blade `api/chat-flow.md`, server events. Connection errors carry no sequence; a failed turn's error does."""

    message: str
    code: str
    detail: Any = None
    session_id: str | None = None
    sequence: int | None = None


class Subscribed(_Chat, kw_only=True):
    """Acknowledges `session:subscribe` (Socket.IO has acks, a plain WebSocket has not):
    `sequence` is the last frame of the session sent before going live."""

    session_id: str
    sequence: int


class CommandItem(_Chat, kw_only=True):
    """A slash command: `/name` followed by what `hint` describes (its arguments)."""

    name: str
    description: str
    hint: str | None = None


class SessionCommands(_Chat, kw_only=True):
    """`session:commands`: every slash command of the session (the agent's own and the
    route's prompts), sent after `session:subscribed` and again whenever they change.
    State, not part of a run: it carries no sequence and is not replayed."""

    session_id: str
    commands: list[CommandItem]
