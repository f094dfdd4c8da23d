"""The contract between a session and the back that runs its turns.

A `Back` is made once per route; it opens one `BackSession` per bridge session.
`BackSession.prompt` runs one turn: it reports what happens through the `TurnHandle`
(`emit` events, `ask` questions, `flow` for backpressure) and returns the stop
reason, or raises `BackError` with a message a user can act on.

Cancellation is cooperative first: the session calls `cancel()`, the back tells its
agent to stop and `prompt` returns `StopReason.CANCELLED`. If it has not returned
within the route's `cancel_grace_s`, the session cancels `prompt`'s task.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec
import trio

from bridge.core.content import ContentBlock
from bridge.core.events import CommandInfo, Event, Question, QuestionAnswered, StopReason

__all__ = ["AgentInfo", "Back", "BackSession", "SessionContext", "TurnHandle"]


class AgentInfo(msgspec.Struct, kw_only=True):
    name: str
    title: str | None = None
    version: str = "0.0.0"
    description: str | None = None
    commands: list[CommandInfo] = []


class SessionContext(msgspec.Struct, kw_only=True):
    """What a back may know of the bridge session it serves."""

    session_id: str
    route: str
    cwd: str
    options: dict[str, str]
    back_ref: str | None = None  # the peer's id stored from an earlier run
    meta: dict[str, Any] = {}


class TurnHandle(Protocol):
    turn_id: str
    prompt: list[ContentBlock]
    options: dict[str, str]

    @property
    def cancel_requested(self) -> bool: ...

    async def wait_cancel_requested(self) -> None:
        """Return once the session has asked this turn to stop."""

    def emit(self, event: Event) -> None:
        """Report an event; never blocks. Call `flow()` after a batch."""

    async def flow(self) -> None:
        """Wait while a consumer is congested (backpressure); a checkpoint otherwise."""

    async def ask(self, question: Question) -> QuestionAnswered:
        """Ask the user; returns the answer, or a rejection when time runs out."""

    def set_back_ref(self, ref: str) -> None:
        """Store the peer's conversation id beside the session."""


class BackSession(Protocol):
    async def prompt(self, turn: TurnHandle) -> StopReason: ...

    async def cancel(self) -> None: ...

    async def set_option(self, option_id: str, value: str) -> None: ...

    async def aclose(self) -> None: ...


class Back(Protocol):
    info: AgentInfo

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> BackSession: ...
