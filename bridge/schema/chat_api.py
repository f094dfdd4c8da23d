"""The chat REST API's bodies (`/api/sessions...`, `/api/routes`, the canonical commands), as Structs.

Requests are decoded with these Structs (bridge/fronts/chat/rest.py, events_api.py).
Unlike the wire protocols' messages (STYLE.md rule 8), a request body here rejects an
unknown field, naming it (`Object contains unknown field `rout``, a 400): this API is
ours alone, so an unknown field is a typo that would otherwise be silently ignored
(`{"rout": "x"}` opening a session on the default route).

Responses are built as plain values by the handlers; the response Structs below say
their shape once, for the OpenAPI document (`GET /api/openapi.json`,
bridge/fronts/api_docs/openapi.py), and the tests check real answers against it, so
the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from bridge.core.content import ContentBlock

__all__ = [
    "AnswerBody",
    "Answered",
    "CancelBody",
    "Cancelled",
    "Command",
    "CreateSession",
    "Deleted",
    "ErrorBody",
    "Health",
    "OptionInfo",
    "OptionValue",
    "PromptBody",
    "PromptSource",
    "RouteInfo",
    "RouteList",
    "SessionCounts",
    "SessionCreated",
    "SessionDetail",
    "SessionInfo",
    "SessionList",
    "TurnAccepted",
]


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, gc=False):
    """A request body: unknown fields are an error naming them."""


class _Out(msgspec.Struct, kw_only=True, gc=False):
    """A response body: every field is on the wire, nulls included."""


# -- requests ---------------------------------------------------------------------------


class CreateSession(_Body):
    """`POST /api/sessions`: `route` (default: the config's `default_route`, or the only
    route), `intent` (the session's title, its whitespace folded, the first 80 characters)."""

    route: str | None = None
    intent: str | None = None


class PromptBody(_Body):
    """`POST /api/sessions/{id}/prompt`: exactly one of `text` and `content`."""

    text: str | None = None
    content: list[ContentBlock] | None = None


class AnswerBody(_Body):
    """`POST /api/sessions/{id}/answer`: the option ids chosen, the text typed, or a form's values."""

    question_id: str
    selected: list[str] = []
    text: str | None = None
    values: dict[str, Any] | None = None


class CancelBody(_Body):
    """`POST /api/sessions/{id}/cancel`: no field (an empty body is the same)."""


# -- responses --------------------------------------------------------------------------

Status = Literal["created", "running", "waiting_for_input", "completed", "failed", "interrupted"]


class ErrorBody(_Out):
    """Every REST error: the HTTP status says the kind (bridge/errors.py), `detail` the cause."""

    detail: str


class SessionCreated(_Out):
    session_id: str


class Command(_Out):
    """A slash command: `/name` followed by what `hint` describes."""

    name: str
    description: str
    hint: str | None


class SessionInfo(_Out):
    """A session as a listing shows it (bridge/fronts/chat/views.py); also the change feed's `session` event."""

    session_id: str
    route: str
    title: str | None
    intent: str | None
    status: Status
    front: str | None  # acp, a2a, chat, mcp, cli; null: stored before fronts were recorded
    back: str | None  # the route's back kind; null: the route is gone
    turn_count: int
    created_at: str  # RFC 3339, UTC
    updated_at: str


class SessionDetail(SessionInfo):
    """`GET /api/sessions/{id}`: with its commands and the last event sequence number."""

    commands: list[Command]
    last_seq: int


class SessionCounts(_Out):
    status: dict[str, int]
    front: dict[str, int]
    route: dict[str, int]


class SessionList(_Out):
    sessions: list[SessionInfo]
    total: int
    limit: int
    offset: int
    counts: SessionCounts | msgspec.UnsetType = msgspec.UNSET  # with `counts=1`


class Deleted(_Out):
    session_id: str
    deleted: bool


class TurnAccepted(_Out):
    turn_id: str


class Answered(_Out):
    answered: bool


class Cancelled(_Out):
    cancelled: bool  # false: nothing was running


class OptionValue(_Out):
    value: str
    name: str


class OptionInfo(_Out):
    id: str
    name: str
    current: str
    values: list[OptionValue]


class Health(_Out):
    status: str  # "ok", "FAILED" or "not checked"


class RouteInfo(_Out):
    name: str
    back: str | None
    description: str | None
    default: bool
    commands: list[Command]
    options: list[OptionInfo]
    health: Health


class PromptSource(_Out):
    name: str
    status: str


class RouteList(_Out):
    routes: list[RouteInfo]
    prompt_sources: list[PromptSource]
