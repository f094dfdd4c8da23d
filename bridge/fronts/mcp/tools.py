"""Routes as MCP tools: `tools/list` and `tools/call` (MCP 2025-11-25, Server: Tools).

Every route is a tool named after it, taking `prompt` (and `session_id` to continue a
conversation). `tools/call` opens a session of the route (or reopens that one from the
store), runs one turn and answers with the agent's reply text (message chunks that
are neither thoughts nor a sub-agent's, and text artifacts), plus `structuredContent`
`{session_id, stop_reason}`. A refused prompt (an unknown slash command, a missing
argument) and a failed turn are tool errors (`isError`) carrying the message.

While the turn runs, `notifications/progress` go out at most every
`[mcp] progress_interval_s` when something happened (progress = events so far,
message = the running tool call's title); nothing is sent unless the client asked for
progress. `notifications/cancelled` cancels the turn through the session (the back is
told, bounded by the route's `cancel_grace_s`). Nobody can answer the agent's
questions here: a permission is rejected, any other question declined as unseen
(`by="front"`), at once. The session is closed when the call ends (its agent freed).
"""

from __future__ import annotations

import logging
import os
from typing import Any, ClassVar

import mcp_types as types
import trio

from bridge.config import Config
from bridge.core.content import TextContent
from bridge.core.events import (
    ArtifactUpdated,
    Event,
    MessageChunk,
    Question,
    QuestionAsked,
    ToolCallStarted,
    TurnEnded,
)
from bridge.errors import BridgeError, InvalidParams, NotFound
from bridge.session import Session, SessionManager

__all__ = ["call", "tools"]

log = logging.getLogger("bridge.fronts.mcp.front")

_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "prompt": {
            "type": "string",
            "description": "What to ask the agent; may start with one of its slash commands (/name arguments).",
        },
        "session_id": {
            "type": "string",
            "description": "Continue this conversation (the session_id of an earlier call's result).",
        },
    },
    "required": ["prompt"],
    "additionalProperties": False,
}


def tools(config: Config) -> list[types.Tool]:
    return [
        types.Tool(
            name=name,
            title=route.title,
            description=route.description or f"Ask the agent of route {name!r}: one turn, its reply as text.",
            input_schema=_INPUT_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=False, open_world_hint=True),
        )
        for name, route in config.routes.items()
    ]


class _Collector:
    """A session subscriber: the reply text, and what the progress notes need."""

    protocol: ClassVar[str] = "mcp"

    def __init__(self) -> None:
        self.text: list[str] = []
        self.events = 0
        self.status: str | None = None
        self.questions: list[Question] = []
        self.wake = trio.Event()

    def deliver(self, event: Event) -> None:
        t = type(event)
        self.events += 1
        if t is MessageChunk:
            if not event.thought and event.parent_tool_call_id is None and type(event.content) is TextContent:  # type: ignore[attr-defined]
                self.text.append(event.content.text)  # type: ignore[attr-defined]
        elif t is ArtifactUpdated and event.parent_tool_call_id is None:
            self.text += [p.text for p in event.parts if type(p) is TextContent]  # type: ignore[attr-defined]
        elif t is ToolCallStarted:
            self.status = event.title  # type: ignore[attr-defined]
        elif t is QuestionAsked:
            self.questions.append(event.question)  # type: ignore[attr-defined]
        elif t is TurnEnded:
            self.status = None
        self.wake.set()

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


def _error(message: str, **structured: Any) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=message)], is_error=True, structured_content=structured or None
    )


async def call(
    manager: SessionManager, route: str, arguments: dict[str, Any], ctx: Any, progress_interval_s: float
) -> types.CallToolResult:
    prompt = arguments.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return _error("the argument prompt (a non-empty string) is required")
    session_id = arguments.get("session_id")
    try:
        if isinstance(session_id, str) and session_id:
            session = await manager.get(session_id)
            if session.record.route != route:
                return _error(f"session {session_id} belongs to tool {session.record.route!r}, not {route!r}")
        else:
            session = await manager.create(route, cwd=os.getcwd(), meta={"front": "mcp"})
    except BridgeError as exc:
        return _error(exc.message)
    collector = _Collector()
    unsubscribe = session.subscribe(collector)
    try:
        return await _one_turn(session, collector, prompt, ctx, progress_interval_s)
    finally:
        unsubscribe()
        with trio.move_on_after(session.route.cancel_grace_s + 2, shield=True):
            await session.close()


async def _one_turn(
    session: Session, collector: _Collector, prompt: str, ctx: Any, interval: float
) -> types.CallToolResult:
    try:
        turn = session.start_turn([TextContent(text=prompt)])
    except BridgeError as exc:  # a refused slash command, a busy session, shutting down
        return _error(exc.message, session_id=session.id)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch, session, collector, ctx, interval)
            ended = await turn.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        # The client cancelled the call (notifications/cancelled): so is the turn.
        with trio.move_on_after(session.route.cancel_grace_s + 1, shield=True):
            session.cancel()
            await turn.wait()
        raise
    structured = {"session_id": session.id, "stop_reason": ended.stop_reason.value}
    if ended.error is not None:
        return _error(ended.error.message, **structured)
    return types.CallToolResult(content=[types.TextContent(text="".join(collector.text))], structured_content=structured)


async def _watch(session: Session, collector: _Collector, ctx: Any, interval: float) -> None:
    """Progress notes (at most every `interval`) and answers to the questions nobody here can see."""
    reported = 0
    while True:
        await collector.wake.wait()
        collector.wake = trio.Event()
        questions, collector.questions = collector.questions, []
        for question in questions:
            _decline(session, question)
        if collector.events > reported:
            reported = collector.events
            await ctx.session.report_progress(float(reported), None, collector.status)
            await trio.sleep(interval)


def _decline(session: Session, question: Question) -> None:
    reject = next((o.id for o in question.options if o.kind in ("reject_once", "reject_always")), None)
    try:
        if question.kind == "permission" and reject is not None:
            session.answer(question.id, selected=[reject])  # "deny", never "cancel the turn"
        else:
            session.answer(question.id, cancelled=True, by="front")
    except (NotFound, InvalidParams):
        pass  # already answered (a timeout, a cancel)
    log.info("MCP tool call: question %s answered for nobody (%s)", question.id, "rejected" if reject else "declined")
