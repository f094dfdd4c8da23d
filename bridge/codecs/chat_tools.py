"""Tool calls and questions in the chat stream (Blade `api/chat-flow.md`, `api/types.md`; ACP `ToolKind`,
`session/request_permission`), sans-I/O.

Part of `ChatProjector` (codecs/chat.py). A tool call is `add_tool_call` (again, with
the same id, when its title or input change), `set_tool_status` while it runs and
`tool_result` when it ends; a fork's child turn ends just before its parent's result.
A question is an `AskUserQuestion` tool call `awaiting_answer` with its turn `paused`;
its answer is that call's `tool_result` (`{selections, custom}`, `cancelled` if it
was withdrawn) and the turn streams again.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from bridge.codecs.chat_parts import (
    ASK_TOOL,
    KIND_BY_TOOL,
    TOOL_BY_KIND,
    answer_to_chat,
    ask_arguments,
)
from bridge.codecs.chat_turns import ProjectedTurn, TurnBook
from bridge.core import events as ev
from bridge.core.content import text_of
from bridge.schema.chat import (
    AddToolCall,
    Block,
    SetStatus,
    SetToolStatus,
    ToolCallProjection,
    ToolResult,
)

__all__ = ["OPEN_TOOL", "TOOL_STATUS", "ToolCalls", "read_locations", "read_result"]

_enc = msgspec.json.Encoder()

# Canonical tool status → chat (Blade `api/types.md`). The chat enum has no "in progress"; "running"
# is ours (a chat reader maps Blade's `set_tool_status pending` to in_progress, ACP `ToolKind`, `ToolCallStatus`).
TOOL_STATUS = {"pending": "pending", "in_progress": "running", "completed": "done", "failed": "error"}
OPEN_TOOL = {"pending", "running", "awaiting_answer"}


class ToolCalls(TurnBook):
    __slots__ = ()

    def question_for(self, tool_call_id: str) -> ev.Question | None:
        """The open question behind an AskUserQuestion tool call of the current run."""
        entry = self._asks.get(tool_call_id)
        return entry[0] if entry else None

    # -- tools ----------------------------------------------------------------------------
    def _add_tool(
        self, turn: ProjectedTurn, tool: ToolCallProjection, locations: list[ev.ToolLocation] | None = None
    ) -> None:
        self._tools[tool.id] = (turn, tool, self._now())
        turn.proj.tool_calls.append(tool)
        turn.proj.blocks.append(
            Block(type="tool_use", tool_call_id=tool.id, tool_name=tool.tool_name, display_name=tool.display_name)
        )
        turn.block_key = None
        self._patch(
            turn,
            "add_tool_call",
            AddToolCall(
                id=tool.id,
                tool_name=tool.tool_name,
                display_name=tool.display_name,
                arguments=tool.arguments,
                status=tool.status,
                agent_bridge=_call_extension(locations),
            ),
        )

    def _tool_started(self, e: ev.ToolCallStarted) -> None:
        if e.tool_call_id in self._tools:
            self._tool_updated(
                ev.ToolCallUpdated(
                    tool_call_id=e.tool_call_id,
                    title=e.title,
                    status=e.status,
                    raw_input=e.raw_input,
                    content=e.content,
                    locations=e.locations,
                )
            )
            return
        turn = self._turn(e.parent_tool_call_id)
        if turn is None:
            return
        arguments = _enc.encode(e.raw_input).decode() if e.raw_input is not None else "{}"
        name = e.name or TOOL_BY_KIND.get(e.kind, "Tool")
        done = e.status in ("completed", "failed")
        status = "pending" if done else TOOL_STATUS[e.status]  # added open, then its result
        self._add_tool(
            turn,
            ToolCallProjection(
                id=e.tool_call_id, tool_name=name, display_name=e.title, arguments=arguments, status=status
            ),
            e.locations,
        )
        if done:
            self._finish_tool(e.tool_call_id, e.status, e.content, None)

    def _tool_updated(self, e: ev.ToolCallUpdated) -> None:
        entry = self._tools.get(e.tool_call_id)
        if entry is None:  # an update of a call we never saw start: start it, then apply the update
            status = e.status if e.status in ("pending", "in_progress") else "pending"
            self._tool_started(
                ev.ToolCallStarted(
                    tool_call_id=e.tool_call_id,
                    title=e.title or e.tool_call_id,
                    kind=e.kind or "other",
                    status=status,
                    raw_input=e.raw_input,
                    locations=e.locations,
                    parent_tool_call_id=e.parent_tool_call_id,
                )
            )
            entry = self._tools.get(e.tool_call_id)
            if entry is None:
                return
        turn, tool, _t0 = entry
        if not turn.open:
            return
        changed = e.locations is not None  # new locations go out with the call, in our extension
        if e.title is not None and e.title != tool.display_name:
            tool.display_name, changed = e.title, True
        if e.raw_input is not None:
            arguments = _enc.encode(e.raw_input).decode()
            if arguments != tool.arguments:
                tool.arguments, changed = arguments, True
        if changed:  # an add_tool_call with a known id updates it in place
            self._patch(
                turn,
                "add_tool_call",
                AddToolCall(
                    id=tool.id,
                    tool_name=tool.tool_name,
                    display_name=tool.display_name,
                    arguments=tool.arguments,
                    status=tool.status,
                    agent_bridge=_call_extension(e.locations),
                ),
            )
        if e.status in ("completed", "failed"):
            if tool.status not in ("done", "error"):
                self._finish_tool(tool.id, e.status, e.content, e.raw_output)
        elif e.status is not None and TOOL_STATUS[e.status] != tool.status:
            tool.status = TOOL_STATUS[e.status]
            self._patch(turn, "set_tool_status", SetToolStatus(tool_call_id=tool.id, status=tool.status))

    def _finish_tool(
        self, tool_id: str, status: str, content: list[ev.ToolCallContent] | None, raw_output: Any
    ) -> None:
        turn, tool, t0 = self._tools[tool_id]
        run = self._run
        if run is not None:
            child = run.children.get(tool_id)
            if child is not None and child.open:  # a fork's result: its child turn is done
                self._close_turn(child, "completed" if status == "completed" else "failed", self._now())
        tool.status = TOOL_STATUS[status]
        tool.result = _result(content, raw_output)
        now = self._now()
        if t0 is not None and now is not None:
            tool.duration_ms = max(0, round((now - t0) * 1000))
        turn.proj.blocks.append(
            Block(type="tool_result", content=tool.result, tool_call_id=tool.id, tool_name=tool.tool_name)
        )
        turn.block_key = None
        self._patch(
            turn,
            "tool_result",
            ToolResult(
                tool_call_id=tool.id,
                result=tool.result,
                status=tool.status,
                duration_ms=tool.duration_ms,
                agent_bridge=_result_extension(content, raw_output),
            ),
        )

    # -- questions ----------------------------------------------------------------------
    def _asked(self, e: ev.QuestionAsked) -> None:
        turn = self._turn(e.parent_tool_call_id)
        if turn is None:
            return
        q = e.question
        ask_id = q.id if q.id not in self._tools else f"{q.id}:ask"
        self._add_tool(
            turn,
            ToolCallProjection(
                id=ask_id,
                tool_name=ASK_TOOL,
                display_name=q.header or ("Permission" if q.kind == "permission" else "Question"),
                arguments=ask_arguments(q),
                status="awaiting_answer",
            ),
        )
        self._asks[ask_id] = (q, turn)
        self._ask_ids[q.id] = ask_id
        turn.asks += 1
        if turn.proj.status != "paused":
            turn.proj.status = "paused"
            self._patch(turn, "set_status", SetStatus(status="paused"))

    def _answered(self, e: ev.QuestionAnswered) -> None:
        ask_id = self._ask_ids.pop(e.question_id, None)
        if ask_id is None:
            return
        q, turn = self._asks.pop(ask_id)
        _turn, tool, _t0 = self._tools[ask_id]
        if e.cancelled:
            tool.status, tool.result = "cancelled", None
        else:
            tool.status, tool.result = "done", answer_to_chat(q, e)
            if e.by != "user":
                tool.result["by"] = e.by
        turn.asks -= 1
        if not turn.open:
            return
        turn.proj.blocks.append(Block(type="ask_user_answer", content=tool.result, tool_call_id=ask_id))
        turn.block_key = None
        self._patch(turn, "tool_result", ToolResult(tool_call_id=ask_id, result=tool.result, status=tool.status))
        if turn.asks == 0 and turn.proj.status == "paused":
            turn.proj.status = "streaming"
            self._patch(turn, "set_status", SetStatus(status="streaming"))


def _result(content: list[ev.ToolCallContent] | None, raw_output: Any) -> Any:
    """A tool result: its text if it has only text, else its items (diffs kept), else raw output."""
    if not content:
        return raw_output
    items: list[Any] = []
    for c in content:
        if c.type == "diff":
            items.append({"type": "diff", "path": c.path, "old_text": c.old_text, "new_text": c.new_text})
        elif c.type == "terminal":
            items.append({"type": "terminal", "terminal_id": c.terminal_id})
        elif c.content is not None:
            items.append({"type": "text", "text": text_of([c.content])})
    if all(i["type"] == "text" for i in items):
        return "".join(i["text"] for i in items)
    return items


# -- our extension of the tool patches, and reading tool calls back (a chat back) -----


def _call_extension(locations: list[ev.ToolLocation] | None) -> dict[str, Any] | UnsetType:
    if not locations:
        return UNSET
    return {"locations": [{"path": x.path, **({"line": x.line} if x.line is not None else {})} for x in locations]}


def _result_extension(content: list[ev.ToolCallContent] | None, raw_output: Any) -> dict[str, Any] | UnsetType:
    """The raw output apart from the content; `rawOnly` when the result is the raw output
    itself (no content), so the far side shows it as raw output, not as text. Unset
    without a raw output: the result is then read back as it is."""
    if raw_output is None:
        return UNSET
    return {"rawOutput": raw_output, **({} if content else {"rawOnly": True})}


# Where a Blade file tool's input names its file (Claude Code's tool inputs): the path,
# and the line it starts at (`offset` is Read's first line).
_PATH_KEYS = ("file_path", "path", "notebook_path")
_LINE_KEYS = ("line", "offset")
_FILE_KINDS = ("read", "edit", "search")


def read_locations(tool_name: str, raw_input: Any, ext: Any) -> list[ev.ToolLocation] | None:
    """A tool call's locations (ACP `ToolCallLocation`): from our extension when another
    agent-bridge sent it, else from a file tool's input; None when neither says."""
    if isinstance(ext, dict) and isinstance(ext.get("locations"), list):
        try:
            return msgspec.convert(ext["locations"], list[ev.ToolLocation]) or None
        except msgspec.ValidationError:
            return None
    if KIND_BY_TOOL.get(tool_name) not in _FILE_KINDS or not isinstance(raw_input, dict):
        return None
    path = next((v for k in _PATH_KEYS if isinstance(v := raw_input.get(k), str) and v), None)
    if path is None:
        return None
    line = next((v for k in _LINE_KEYS if type(v := raw_input.get(k)) is int and v >= 1), None)
    return [ev.ToolLocation(path=path, line=line)]


def read_result(result: Any, ext: Any) -> tuple[bool, Any]:
    """(whether `result` is content, the raw output): the result is both unless another
    agent-bridge's extension says what its raw output is and whether there is content."""
    if not isinstance(ext, dict):
        return True, result
    return ext.get("rawOnly") is not True, ext.get("rawOutput")
