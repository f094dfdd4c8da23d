"""Routes as MCP tools: `tools/list` and `tools/call` (MCP 2025-11-25, Server: Tools).

Every route is a tool named after it, taking `prompt` (and `session_id` to continue a
conversation). `tools/call` opens a session of the route (or reopens that one from the
store), runs one turn and answers with the agent's reply text (message chunks that
are neither thoughts nor a sub-agent's, and text artifacts), plus `structuredContent`
`{session_id, stop_reason}`. Images, audio, links and embedded resources in the reply
follow as content blocks of their own type (MCP 2025-11-25, Server: Tools, "Tool
Result"). Structured data in the reply (a data block) is the
`structuredContent` itself (an object; anything else, or several, as `{"value": v}`;
with the bridge's `session_id` and `stop_reason`, which win over keys of those names:
an agent's data must not steer a client into another session), with its whole JSON as a
text block too (MCP 2025-11-25, Server: Tools, "Structured Content"). Status text
(progress) is never part of the reply: it is the message of the next progress note. A refused prompt (an unknown slash command, a missing
argument) and a failed turn are tool errors (`isError`) carrying the message.

While the turn runs, `notifications/progress` go out at most every
`[mcp] progress_interval_s` when something happened (progress = events so far,
message = the running tool call's title); nothing is sent unless the client asked for
progress. `notifications/cancelled` cancels the turn through the session (the back is
told, bounded by the route's `cancel_grace_s`). The agent's questions are asked of the
client with `elicitation/create` when it declared form elicitation (`elicit.py`);
otherwise, or if it answers with an error, nobody here can answer: a permission is
rejected, any other question declined as unseen (`by="front"`), at once. The session
is closed when the call ends (its agent freed).
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, ClassVar

import mcp_types as types
import trio
from mcp.shared.exceptions import MCPError

from bridge import telemetry
from bridge.config import Config
from bridge.core.content import (
    AudioContent,
    DataContent,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    data_text,
    text_of,
)
from bridge.core.events import (
    ArtifactUpdated,
    Event,
    MessageChunk,
    ProgressReported,
    Question,
    QuestionAsked,
    ToolCallStarted,
    TurnEnded,
)
from bridge.core.identity import ANONYMOUS, Identity
from bridge.errors import BridgeError, InvalidParams, NotFound, RateLimited, codes_for
from bridge.fronts import owners
from bridge.fronts.mcp.elicit import answer_of, can_elicit, form_of
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


def tools(config: Config, who: Identity | None = None) -> list[types.Tool]:
    """The routes `who` may use (bridge/fronts/owners.py `usable`) as tools; None: every route."""
    return [
        types.Tool(
            name=name,
            title=route.title,
            description=route.description or f"Ask the agent of route {name!r}: one turn, its reply as text.",
            input_schema=_INPUT_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=False, open_world_hint=True),
        )
        for name, route in config.routes.items()
        if who is None or owners.usable(config, who, name)
    ]


class _Collector:
    """A session subscriber: the reply text, and what the progress notes need."""

    protocol: ClassVar[str] = "mcp"

    def __init__(self) -> None:
        self.text: list[str] = []
        self.data: list[DataContent] = []
        self.media: list[types.ContentBlock] = []
        self.events = 0
        self.status: str | None = None
        self.questions: list[Question] = []
        self.wake = trio.Event()

    def deliver(self, event: Event) -> None:
        t = type(event)
        self.events += 1
        if t is MessageChunk:
            if not event.thought and event.parent_tool_call_id is None:  # type: ignore[attr-defined]
                self._part(event.content)  # type: ignore[attr-defined]
        elif t is ArtifactUpdated and event.parent_tool_call_id is None:
            for part in event.parts:  # type: ignore[attr-defined]
                self._part(part)
        elif t is ProgressReported:
            self.status = text_of(event.content) or self.status  # type: ignore[attr-defined]
        elif t is ToolCallStarted:
            self.status = event.title  # type: ignore[attr-defined]
        elif t is QuestionAsked:
            self.questions.append(event.question)  # type: ignore[attr-defined]
        elif t is TurnEnded:
            self.status = None
        self.wake.set()

    def _part(self, block: Any) -> None:
        if type(block) is TextContent:
            self.text.append(block.text)
        elif type(block) is DataContent:
            self.data.append(block)
        elif (media := _media(block)) is not None:
            self.media.append(media)

    def result(self, structured: dict[str, Any]) -> types.CallToolResult:
        content = [types.TextContent(text="".join(self.text))]
        if self.data:
            value = self.data[0].data if len(self.data) == 1 else [d.data for d in self.data]
            obj = dict(value) if isinstance(value, dict) else {"value": value}
            content.append(types.TextContent(text=data_text(DataContent(data=value))))
            structured = {**obj, **structured}  # ours win; the data is whole in the text block
        return types.CallToolResult(content=[*content, *self.media], structured_content=structured)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


def _media(block: Any) -> types.ContentBlock | None:
    """An image, audio, link or embedded resource of the reply as the tool result's own
    content block (MCP 2025-11-25, Server: Tools, "Tool Result": image, audio, resource
    link, embedded resource)."""
    t = type(block)
    if t is ImageContent:
        return types.ImageContent(data=block.data, mime_type=block.mime_type)
    if t is AudioContent:
        return types.AudioContent(data=block.data, mime_type=block.mime_type)
    if t is ResourceLink:
        return types.ResourceLink(
            uri=block.uri, name=block.name, title=block.title, description=block.description,
            mime_type=block.mime_type, size=block.size,
        )  # fmt: skip
    if t is EmbeddedResource:
        r = block.resource
        if r.text is not None:
            return types.EmbeddedResource(resource=types.TextResourceContents(uri=r.uri, mime_type=r.mime_type, text=r.text))
        if r.blob is not None:
            return types.EmbeddedResource(resource=types.BlobResourceContents(uri=r.uri, mime_type=r.mime_type, blob=r.blob))
    return None


def _error(message: str, **structured: Any) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=message)], is_error=True, structured_content=structured or None
    )


async def call(
    manager: SessionManager, route: str, arguments: dict[str, Any], ctx: Any, progress_interval_s: float, who: Identity = ANONYMOUS
) -> types.CallToolResult:
    prompt = arguments.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return _error("the argument prompt (a non-empty string) is required")
    session_id = arguments.get("session_id")
    try:
        if isinstance(session_id, str) and session_id:
            session = await owners.get_checked(manager, session_id, who, "use")
            if session.record.route != route:
                return _error(f"session {session_id} belongs to tool {session.record.route!r}, not {route!r}")
        else:
            owners.check_start(manager.config, route, who)
            # Lazy: stored with its turn's first flush, so a call refused before any turn
            # (over `[limits]`, a bad /command) leaves no empty session behind it.
            session = await manager.create(route, front="mcp", cwd=os.getcwd(), meta=owners.owned_by(who), lazy=True)
    except BridgeError as exc:
        return _error(exc.message)
    collector = _Collector()
    unsubscribe = session.subscribe(collector)
    try:
        created = not (isinstance(session_id, str) and session_id)
        return await _one_turn(session, collector, prompt, ctx, progress_interval_s, who, created=created)
    finally:
        unsubscribe()
        with trio.move_on_after(session.route.cancel_grace_s + 2, shield=True):
            await session.close()


async def _one_turn(
    session: Session, collector: _Collector, prompt: str, ctx: Any, interval: float, who: Identity, *, created: bool
) -> types.CallToolResult:
    try:
        telemetry.incoming("mcp", getattr(ctx, "meta", None), scope=getattr(getattr(ctx, "request", None), "scope", None))  # `_meta` (MCP SEP-414), then headers
        turn = await session.begin_turn([TextContent(text=prompt)], identity=who, front="mcp")
    except RateLimited as exc:
        # Not the tool's failure but the server refusing the request: a JSON-RPC error
        # the client can back off on (-32005, `data.retryAfter` in seconds).
        raise MCPError(codes_for(exc).jsonrpc, exc.message, data=exc.data) from None
    except BridgeError as exc:  # a refused slash command, a busy session, shutting down
        # A session made for this call and refused its turn was never stored: no id to go on with.
        return _error(exc.message) if created else _error(exc.message, session_id=session.id)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(functools.partial(_watch, session, collector, ctx, interval, nursery=nursery))
            ended = await turn.wait()
            nursery.cancel_scope.cancel()
    except BaseException:
        # The client cancelled the call (notifications/cancelled): so is the turn.
        with trio.move_on_after(session.route.cancel_grace_s + 1, shield=True):
            try:
                await session.send_cancel()
            except BridgeError as exc:  # its instance gone: the turn ends there anyway
                log.warning("MCP tool call: the cancel of session %s failed: %s", session.id, exc.message)
            await turn.wait()
        raise
    structured = {"session_id": session.id, "stop_reason": ended.stop_reason.value}
    if ended.error is not None:
        return _error(ended.error.message, **structured)
    return collector.result(structured)


async def _watch(session: Session, collector: _Collector, ctx: Any, interval: float, *, nursery: trio.Nursery) -> None:
    """Progress notes (at most every `interval`), and the questions: asked of the client
    (each in its own task in `nursery`, the turn's) or declined when it cannot answer."""
    reported = 0
    elicit = can_elicit(ctx.session)
    while True:
        await collector.wake.wait()
        collector.wake = trio.Event()
        questions, collector.questions = collector.questions, []
        for question in questions:
            if elicit:
                nursery.start_soon(_elicit, session, question, ctx)
            else:
                await _decline(session, question)
        if collector.events > reported:
            reported = collector.events
            await ctx.session.report_progress(float(reported), None, collector.status)
            await trio.sleep(interval)


async def _elicit(session: Session, question: Question, ctx: Any) -> None:
    """Ask the client (on the tool call's own stream: its request id) and answer with
    what it says; an error from it, or an answer that does not fit, is a decline."""
    try:
        result = await ctx.session.elicit_form(question.prompt, form_of(question), related_request_id=ctx.request_id)
        await session.send_answer(question.id, **answer_of(question, result.action, result.content))
    except NotFound:
        pass  # already answered (a timeout, a cancel)
    except Exception as exc:  # the client's error or a misfit answer: this question only
        log.warning("MCP tool call: the client could not answer question %s (%s); declined", question.id, exc)
        await _decline(session, question)


async def _decline(session: Session, question: Question) -> None:
    reject = next((o.id for o in question.options if o.kind in ("reject_once", "reject_always")), None)
    try:
        if question.kind == "permission" and reject is not None:
            await session.send_answer(question.id, selected=[reject])  # "deny", never "cancel the turn"
        else:
            await session.send_answer(question.id, cancelled=True, by="front")
    except (NotFound, InvalidParams):
        pass  # already answered (a timeout, a cancel)
    except BridgeError as exc:  # the instance running the turn is gone: the turn ends there
        log.warning("MCP tool call: question %s could not be declined: %s", question.id, exc.message)
        return
    log.info("MCP tool call: question %s answered for nobody (%s)", question.id, "rejected" if reject else "declined")
