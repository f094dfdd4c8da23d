"""ACP ↔ canonical translation, sans-I/O.

`from_turn(event)` gives the `session/update` an editor should see (or None when ACP
has no place for the event), `replayed(event)` the same for a stored event that
`session/load` replays; `to_turn(update)` reads an ACP agent's update back into
the canonical model. Sub-agent events keep their parent in `_meta` (ACP v1 has no
sub-agent concept; ACP, Extensibility: `_meta`): `{"agentBridge": {"parentToolCallId": ...}}`.

Two canonical kinds have no ACP update of their own, so they ride on the nearest one
and come back through `to_turn` (bridge → bridge keeps them):

- a data block (`DataContent`) is an embedded resource (ACP schema, `EmbeddedResource`)
  `{"uri": "data:application/json", "mimeType": <a JSON type>, "text": <the JSON>}`
  (`bridge/codecs/acp_content.py`);
- progress (`ProgressReported`) is an `agent_thought_chunk` marked
  `_meta: {"agentBridge": {"progress": true}}`: status text beside the answer, never in it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bridge.codecs.acp_content import block_in, wire_block
from bridge.codecs.option_kinds import infer_kind
from bridge.core import events as ev
from bridge.core.content import DataContent, EmbeddedResource, TextContent
from bridge.schema import acp

__all__ = [
    "META_KEY",
    "config_options",
    "from_turn",
    "modes",
    "elicitation_request",
    "permission_request",
    "permission_tool_call",
    "replayed",
    "to_turn",
    "track_tool_call",
    "user_chunks",
]

META_KEY = "agentBridge"
def _meta(event: ev.Event) -> dict[str, Any] | None:
    if event.parent_tool_call_id is None:
        return None
    return {META_KEY: {"parentToolCallId": event.parent_tool_call_id}}


def _progress_meta(event: ev.Event) -> dict[str, Any]:
    ours: dict[str, Any] = {"progress": True}
    if event.parent_tool_call_id is not None:
        ours["parentToolCallId"] = event.parent_tool_call_id
    return {META_KEY: ours}


def _tool_content(items: list[ev.ToolCallContent] | None) -> list[acp.ToolCallContentItem] | None:
    if items is None:
        return None
    out = []
    for c in items:
        if c.type == "diff":
            out.append(acp.ToolCallContentItem(type="diff", path=c.path, old_text=c.old_text, new_text=c.new_text))
        elif c.type == "terminal":
            out.append(acp.ToolCallContentItem(type="terminal", terminal_id=c.terminal_id))
        else:
            out.append(acp.ToolCallContentItem(type="content", content=None if c.content is None else wire_block(c.content)))
    return out


def _locations(items: list[ev.ToolLocation] | None) -> list[acp.ToolCallLocation] | None:
    return None if items is None else [acp.ToolCallLocation(path=loc.path, line=loc.line) for loc in items]


def config_options(options: list[ev.ConfigOption]) -> list[acp.SessionConfigOption]:
    return [
        acp.SessionConfigOption(
            id=o.id,
            name=o.name,
            current_value=o.current,
            options=[acp.ConfigSelectOption(value=v.value, name=v.name, description=v.description) for v in o.values],
            description=o.description,
            category=o.category,
        )
        for o in options
    ]


def modes(options: list[ev.ConfigOption]) -> acp.SessionModeState | None:
    """The option of category "mode", also as ACP's (deprecated) session modes."""
    for o in options:
        if o.category == "mode":
            return acp.SessionModeState(
                current_mode_id=o.current,
                available_modes=[acp.SessionMode(id=v.value, name=v.name, description=v.description) for v in o.values],
            )
    return None


def from_turn(event: ev.Event) -> acp.SessionUpdate | list[acp.SessionUpdate] | None:
    """The update for `event`; a list only for an artifact of several parts."""
    t = type(event)
    if t is ev.MessageChunk:
        e: Any = event
        cls = acp.AgentThoughtChunk if e.thought else acp.AgentMessageChunk
        content = e.content if type(e.content) is not DataContent else wire_block(e.content)
        return cls(content=content, message_id=e.message_id, meta=None if e.parent_tool_call_id is None else _meta(e))
    if t is ev.ProgressReported:
        e = event
        meta = _progress_meta(e)
        chunks = [acp.AgentThoughtChunk(content=wire_block(b), message_id=e.message_id, meta=meta) for b in e.content]
        return chunks[0] if len(chunks) == 1 else chunks or None
    if t is ev.ToolCallStarted:
        e = event
        return acp.ToolCall(
            tool_call_id=e.tool_call_id,
            title=e.title,
            name=e.name,
            kind=e.kind,
            status=e.status,
            content=_tool_content(e.content),
            locations=_locations(e.locations),
            raw_input=e.raw_input,
            meta=_meta(event),
        )
    if t is ev.ToolCallUpdated:
        e = event
        return acp.ToolCallUpdate(
            tool_call_id=e.tool_call_id,
            title=e.title,
            kind=e.kind,
            status=e.status,
            content=_tool_content(e.content),
            locations=_locations(e.locations),
            raw_input=e.raw_input,
            raw_output=e.raw_output,
            meta=_meta(event),
        )
    if t is ev.PlanUpdated:
        e = event
        return acp.Plan(
            entries=[acp.PlanEntry(content=p.content, priority=p.priority, status=p.status) for p in e.entries],
            meta=_meta(event),
        )
    if t is ev.UsageReported:
        e = event
        cost = acp.Cost(amount=e.cost_amount, currency=e.cost_currency or "USD") if e.cost_amount is not None else None
        return acp.UsageUpdate(used=e.used, size=e.size, cost=cost)
    if t is ev.CommandsAvailable:
        e = event
        return acp.AvailableCommandsUpdate(
            available_commands=[
                acp.AvailableCommand(
                    name=c.name, description=c.description, input=acp.CommandInput(hint=c.hint) if c.hint else None
                )
                for c in e.commands
            ]
        )
    if t is ev.OptionsChanged:
        options: list[ev.ConfigOption] = event.options  # type: ignore[union-attr]
        update = acp.ConfigOptionUpdate(config_options=config_options(options))
        mode = next((o.current for o in options if o.category == "mode"), None)
        # Clients still on (deprecated) session modes learn of the change too.
        return update if mode is None else [update, acp.CurrentModeUpdate(current_mode_id=mode)]
    if t is ev.ArtifactUpdated:
        # A2A artifacts read as the agent's message (ACP schema, `agent_message_chunk`
        # with `messageId`, as A2A `TaskArtifactUpdateEvent` streams parts): one chunk per
        # part, the artifact id as the message id, its name in _meta.
        e = event
        meta = {META_KEY: {"artifactName": e.name}} if e.name else _meta(event)
        chunks = [acp.AgentMessageChunk(content=wire_block(part), message_id=e.artifact_id, meta=meta) for part in e.parts]
        return chunks[0] if len(chunks) == 1 else chunks or None
    # TurnStarted (replayed by the ACP front itself), questions, turn end: no update.
    return None


def user_chunks(event: ev.TurnStarted) -> list[acp.UserMessageChunk]:
    """The prompt of a stored turn, replayed on `session/load`."""
    return [acp.UserMessageChunk(content=wire_block(block), message_id=f"user-{event.turn_id}") for block in event.prompt]


def replayed(event: ev.Event) -> acp.SessionUpdate | list[acp.SessionUpdate] | None:
    """A stored event as `session/load` replays it (ACP schema, `session/load`: the
    conversation streamed back as `session/update` notifications, user messages too)."""
    if isinstance(event, ev.TurnStarted):
        return user_chunks(event)  # type: ignore[return-value]
    if isinstance(event, ev.TurnEnded) and event.error is not None and event.error.kind == "interrupted":
        # A turn cut by a stopped daemon (closed at its start, bridge/store/base.py): a
        # replay has no prompt answer to carry its stop reason (`session/load` replays
        # only updates), so it ends with a line saying so.
        return acp.AgentMessageChunk(
            content=TextContent(text=f"\n\n[interrupted: {event.error.message}]"),
            message_id=f"interrupted-{event.turn_id}",
        )
    return from_turn(event)


def permission_request(
    session_id: str, question: ev.Question, tool_call: acp.ToolCallFields | None = None
) -> acp.RequestPermissionParams:
    """`session/request_permission` for `question` (ACP schema, `RequestPermissionRequest`).

    Its `toolCall` (a `ToolCallUpdate`) is the tool call the question is about, with what
    the editor has been told of it (`tool_call`, kept by `track_tool_call`), so every
    field the agent gave reaches the editor. A question about no tool call gets a tool
    call of its own, named by the question.

    ACP requires each option's kind (`PermissionOptionKind`); clients pick by it (auto
    approval, auto rejection) and style their buttons with it. An option without one
    (a chat or A2A peer's `{label, description}`) gets the kind its words say
    (`infer_kind`). One whose words say nothing ("Apply", "Later") gets `allow_once`, never
    a reject kind: a client that rejects by kind (an auto-reject policy) must never pick
    an option that may act; the worst an allow kind on an unread option can do is make an
    auto-approving client pick a refusal, which acts on nothing.
    """
    options = [
        acp.PermissionOption(option_id=o.id, name=o.label, kind=o.kind or infer_kind(o.label, o.description) or "allow_once")
        for o in question.options
    ]
    if question.tool_call_id is not None:
        if tool_call is None or tool_call.tool_call_id != question.tool_call_id:
            tool_call = acp.ToolCallFields(tool_call_id=question.tool_call_id)
        else:
            tool_call = msgspec.structs.replace(tool_call)  # a snapshot: `track_tool_call` goes on folding
    else:
        tool_call = acp.ToolCallFields(tool_call_id=question.id, title=question.prompt, kind="other", status="pending")
    return acp.RequestPermissionParams(session_id=session_id, tool_call=tool_call, options=options)


def track_tool_call(known: dict[str, acp.ToolCallFields], event: ev.ToolCallStarted | ev.ToolCallUpdated) -> None:
    """Fold `event` into what an editor knows of its tool call (ACP schema,
    `ToolCallUpdate`: the fields an update sets replace the earlier ones)."""
    fields = known.get(event.tool_call_id)
    if fields is None:
        fields = known[event.tool_call_id] = acp.ToolCallFields(tool_call_id=event.tool_call_id)
    for name in ("title", "kind", "status", "raw_input"):
        value = getattr(event, name)
        if value is not None:
            setattr(fields, name, value)
    if type(event) is ev.ToolCallUpdated and event.raw_output is not None:
        fields.raw_output = event.raw_output
    if event.content is not None:
        fields.content = _tool_content(event.content)
    if event.locations is not None:
        fields.locations = _locations(event.locations)


def elicitation_request(session_id: str, question: ev.Question) -> acp.ElicitationParams:
    schema = question.schema or {"type": "object", "properties": {}}
    return acp.ElicitationParams(
        session_id=session_id, mode="form", message=question.prompt, requested_schema=schema, tool_call_id=question.tool_call_id
    )


def permission_tool_call(fields: acp.ToolCallFields, *, announced: bool) -> ev.Event | None:
    """The tool call of an agent's permission request (ACP schema,
    `RequestPermissionRequest.toolCall`, a `ToolCallUpdate`) as a canonical event, so every
    front shows what the agent said of it: a ToolCallStarted for a tool call the agent had
    not announced, else a ToolCallUpdated of the fields it set (None when it set none)."""
    f = fields
    if not announced:
        return to_turn(
            acp.ToolCall(
                tool_call_id=f.tool_call_id, title=f.title or "Tool call", kind=f.kind, status=f.status, content=f.content,
                locations=f.locations, raw_input=f.raw_input, meta=f.meta,
            )
        )  # fmt: skip
    if all(v is None for v in (f.title, f.kind, f.status, f.content, f.locations, f.raw_input, f.raw_output)):
        return None
    return to_turn(
        acp.ToolCallUpdate(
            tool_call_id=f.tool_call_id, title=f.title, kind=f.kind, status=f.status, content=f.content,
            locations=f.locations, raw_input=f.raw_input, raw_output=f.raw_output, meta=f.meta,
        )
    )  # fmt: skip


def to_turn(update: acp.SessionUpdate) -> ev.Event | None:
    """An ACP agent's update in the canonical model (None: nothing to keep)."""
    meta = update.meta.get(META_KEY, {}) if update.meta else {}
    parent = meta.get("parentToolCallId") if isinstance(meta, dict) else None
    t = type(update)
    u: Any = update
    if t is acp.AgentMessageChunk or t is acp.AgentThoughtChunk:
        content = block_in(u.content) if type(u.content) is EmbeddedResource else u.content
        if t is acp.AgentThoughtChunk and isinstance(meta, dict) and meta.get("progress") is True:
            return ev.ProgressReported(content=[content], message_id=u.message_id, parent_tool_call_id=parent)
        return ev.MessageChunk(content=content, message_id=u.message_id, thought=t is acp.AgentThoughtChunk, parent_tool_call_id=parent)
    if t is acp.ToolCall:
        return ev.ToolCallStarted(
            tool_call_id=u.tool_call_id,
            title=u.title,
            name=u.name,
            kind=u.kind or "other",
            status=u.status or "pending",
            raw_input=u.raw_input,
            content=_tool_content_in(u.content),
            locations=_locations_in(u.locations),
            parent_tool_call_id=parent,
        )
    if t is acp.ToolCallUpdate:
        return ev.ToolCallUpdated(
            tool_call_id=u.tool_call_id,
            title=u.title,
            kind=u.kind,
            status=u.status,
            raw_input=u.raw_input,
            raw_output=u.raw_output,
            content=_tool_content_in(u.content),
            locations=_locations_in(u.locations),
            parent_tool_call_id=parent,
        )
    if t is acp.Plan:
        return ev.PlanUpdated(
            entries=[ev.PlanEntry(content=p.content, priority=p.priority, status=p.status) for p in u.entries],  # type: ignore[arg-type]
            parent_tool_call_id=parent,
        )
    if t is acp.UsageUpdate:
        return ev.UsageReported(
            used=u.used,
            size=u.size,
            cost_amount=u.cost.amount if u.cost else None,
            cost_currency=u.cost.currency if u.cost else None,
        )
    if t is acp.AvailableCommandsUpdate:
        return ev.CommandsAvailable(
            commands=[
                ev.CommandInfo(name=c.name, description=c.description, hint=c.input.hint if c.input else None)
                for c in u.available_commands
            ]
        )
    if t is acp.ConfigOptionUpdate:
        return ev.OptionsChanged(
            options=[
                ev.ConfigOption(
                    id=o.id,
                    name=o.name,
                    current=o.current_value,
                    values=[ev.ConfigValue(value=v.value, name=v.name, description=v.description) for v in o.options],
                    description=o.description,
                    category=o.category,
                )
                for o in u.config_options
            ]
        )
    return None


def _tool_content_in(items: list[acp.ToolCallContentItem] | None) -> list[ev.ToolCallContent] | None:
    if items is None:
        return None
    return [
        ev.ToolCallContent(
            type=c.type,
            content=None if c.content is None else block_in(c.content),
            path=c.path,
            old_text=c.old_text if isinstance(c.old_text, str) else None,
            new_text=c.new_text,
            terminal_id=c.terminal_id,
        )
        for c in items
    ]


def _locations_in(items: list[acp.ToolCallLocation] | None) -> list[ev.ToolLocation] | None:
    return None if items is None else [ev.ToolLocation(path=loc.path, line=loc.line) for loc in items]
