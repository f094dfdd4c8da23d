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
from bridge.core.identity import Identity
from bridge.core.events import CommandInfo, ConfigOption, Event, Question, QuestionAnswered, StopReason
from bridge.telemetry import TurnTrace

__all__ = ["AgentInfo", "Back", "BackSession", "ClientServices", "SessionContext", "SessionHost", "TaskSpawner", "TurnHandle"]


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
    host: Any = None  # the live session, a `SessionHost` (None outside a SessionManager)


class ClientServices(Protocol):
    """What the client offers the back besides prompts: an ACP editor's files and
    terminals (ACP schema, `fs/*` and `terminal/*` methods). Set on the session by the ACP front while an
    editor is attached; `call` forwards one `fs/*` or `terminal/*` request and
    returns its raw result, or raises a BridgeError."""

    @property
    def fs_read(self) -> bool: ...

    @property
    def fs_write(self) -> bool: ...

    @property
    def terminal(self) -> bool: ...

    async def call(self, method: str, params: Any) -> msgspec.Raw | None: ...


class TaskSpawner(Protocol):
    """The part of a nursery a back may use (`start_soon`, `start`)."""

    def start_soon(self, fn: Any, *args: Any, name: object = None) -> None: ...

    async def start(self, fn: Any, *args: Any, name: object = None) -> Any: ...


class SessionHost(Protocol):
    """The live session as a back sees it outside a turn."""

    client_services: ClientServices | None

    def emit(self, event: Event) -> None:
        """Report an event that belongs to no turn (commands, usage)."""

    def set_back_options(self, options: list[ConfigOption]) -> None:
        """The options the back's agent offers; announced with the route's own."""

    @property
    def shared_nursery(self) -> TaskSpawner:
        """Lives as long as the daemon: for what a back shares between sessions. A task
        that fails there is logged and ends alone (bridge/session.py, SupervisedNursery)."""


class TurnHandle(Protocol):
    turn_id: str
    prompt: list[ContentBlock]
    options: dict[str, str]
    # The client's own id and metadata for its prompt (A2A `Message.messageId`,
    # `metadata`, `extensions`), or None: a back whose protocol has them passes them on.
    message_id: str | None
    message_meta: dict[str, Any] | None
    # Who asked for the turn (ANONYMOUS when no front said).
    identity: Identity
    # Its span (bridge/telemetry): `trace.carrier()` is the W3C trace context a back
    # sends with the turn (`traceparent`, `tracestate`), empty when tracing is off.
    trace: TurnTrace

    @property
    def cancel_requested(self) -> bool: ...

    async def wait_cancel_requested(self) -> None:
        """Return once the session has asked this turn to stop."""

    def emit(self, event: Event) -> None:
        """Report an event; never blocks. Call `flow()` after a batch."""

    async def flow(self) -> None:
        """Wait while a consumer is congested (backpressure); a checkpoint otherwise."""

    async def ask(self, question: Question, *, parent_tool_call_id: str | None = None) -> QuestionAnswered:
        """Ask the user; returns the answer, or a rejection when time runs out. A
        sub-agent's question names its fork's tool call as `parent_tool_call_id`."""

    def set_back_ref(self, ref: str) -> None:
        """Store the peer's conversation id beside the session."""


class BackSession(Protocol):
    async def prompt(self, turn: TurnHandle) -> StopReason: ...

    async def cancel(self) -> None: ...

    async def set_option(self, option_id: str, value: str) -> None: ...

    async def aclose(self) -> None: ...


class Back(Protocol):
    """A route's back, made once per route by its kind's factory (bridge/registry.py).

    `info` may be filled in late by a back that must look its agent up first (the A2A
    back reads an agent card)."""

    info: AgentInfo

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> BackSession: ...

    async def ready(self) -> None:
        """Awaited by a front before it describes the agent (ACP `initialize`, an A2A
        card): look the agent up if `info` needs it. Never raises: a failure is logged
        and reported by the first prompt."""

    async def probe(self, *, deep: bool) -> str:
        """Is the agent there? What works, in words an operator can act on, or a
        BridgeError saying what does not. Shallow (`deep=False`, `/readyz`, repeated):
        cheap, no agent started; deep (`agent-bridge doctor`, once): the real handshake."""

    async def aclose(self) -> None:
        """Free what the back shares between its sessions (an HTTP client's pool), once
        no session uses it: a route removed on reload (bridge/reload.py), the end of
        `agent-bridge doctor`. Nothing to free: return at once."""
