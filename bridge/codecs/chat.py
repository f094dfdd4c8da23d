"""Canonical events → the chat event stream (Blade `api/chat-flow.md`), sans-I/O.

`ChatProjector` consumes one session's canonical events in order and yields its chat
frames, each already encoded as `{"event": NAME, "data": {...}}` with the session's
chat `sequence` (gapless, from 1). The frames are a pure function of the event log
(plus the headless options a `chat:send` recorded), so re-deriving from the stored
log gives the same sequence numbers: a resume after `after_sequence` is a
re-derivation that keeps only the later frames (`skip_through`), from a checkpoint.

Checkpoints. A run's checkpoint is the `sequence` just before its `chat:start` (after
the frames that close an earlier run whose end was never stored). A run's frames
depend only on its checkpoint, its own events (its `TurnStarted` up to the next run's),
its run options and its stored turn times: nothing the projector holds crosses a run.
At every run's end `_run`, the tool calls and the questions are cleared, and a run
still open when the next one starts is ended first (`end_unended_run`), so at a
checkpoint a projector holds only `sequence`; the events between two runs (outside
any run) give no frame. So a projector made at a run's checkpoint (`sequence` set to
it) and fed from the run's `TurnStarted` gives exactly the frames a re-derivation
from the first event gives from there: a reader replays from the run holding the
position it wants, never from the first event (bridge/fronts/chat/replay.py).
`on_checkpoint(turn_id, sequence)` is told each run's checkpoint as it starts.

One canonical turn is one chat run:
`chat:start → turn:start/turn:end (user) → turn:start (assistant, "root") →
turn:patch* → turn:end → [system:error] → chat:end`. Sub-agent events (a parent tool
call id, Blade `api/chat-flow.md`, forks) go to a child turn with `parent_fork_tool_call_id`, opened by the first
such event and ended when the parent tool call finishes. A question becomes an
`AskUserQuestion` tool call `awaiting_answer` and the turn `paused` (Blade `api/chat-flow.md`, AskUserQuestion); the run
stays open (no `chat:end`) until the canonical turn ends, so an `askuser_answer` can
arrive at any time. `add_tool_call` and `tool_result` also append a `tool_use` /
`tool_result` (`ask_user_answer`) block to the turn, so `add_content.index` counts them.

The stream has no item for structured data nor for status text (Blade `api/types.md`),
so they degrade: a data block is a text item holding its JSON — except in a headless
run, whose `chat:end` result carries it as the output (the value itself; several are a
list) — and progress is a `thinking` item, beside the answer, never in it.

Text and thinking blocks end at `block_max_chars` (the next chunk opens a new block):
`add_content.content` carries the whole block, and that bound keeps a long stream
from costing quadratic bytes. Plain text is still the concatenation of text blocks.

Timing fields (`started_at`, `duration_ms`) come from `clock` when observed live and
from the stored turn times when re-derived; they are the only fields that may differ.

The reverse direction (a chat server's frames → canonical events) is `ChatReader`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from bridge.codecs.chat_parts import blocks_of_prompt, headless_result, result_of_check, stored_check
from bridge.codecs.chat_reader import ChatReader
from bridge.codecs.chat_tools import OPEN_TOOL, TOOL_STATUS, ToolCalls
from bridge.codecs.chat_turns import Frame, ProjectedRun, ProjectedTurn, encode_frame
from bridge.core import events as ev
from bridge.core.content import DataContent, ImageContent, TextContent, data_text, text_of
from bridge.schema.chat import (
    AddContent,
    Block,
    ChatEnd,
    ChatStart,
    CommandItem,
    SessionCommands,
    SetToolStatus,
    SystemError,
    Usage,
)

__all__ = ["ChatProjector", "ChatReader", "Frame", "TOOL_STATUS", "commands_frame", "encode_frame"]

_TURN_STATUS = {
    ev.StopReason.CANCELLED: "interrupted",
    ev.StopReason.FAILED: "failed",
    ev.StopReason.INPUT_REQUIRED: "paused",
}
_FINISH = {
    ev.StopReason.END_TURN: "completed",
    ev.StopReason.MAX_TURN_REQUESTS: "max_turns",
    ev.StopReason.MAX_TOKENS: "max_tokens",
    ev.StopReason.REFUSAL: "refusal",
    ev.StopReason.CANCELLED: "interrupted",
    ev.StopReason.FAILED: "error",
    ev.StopReason.INPUT_REQUIRED: "input_required",
}

_CUT_KIND = "interrupted"


class ChatProjector(ToolCalls):
    """Canonical events in, chat frames out (see the module docstring)."""

    __slots__ = ()

    # -- public ---------------------------------------------------------------------
    def feed(self, event: ev.Event) -> list[Frame]:
        """The chat frames of one canonical event (often one, sometimes none or several)."""
        out: list[Frame] = []
        self._out = out
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(self, event)
        return out

    def end_unended_run(self) -> list[Frame]:
        """Close a run whose end was never stored, as the next run's start does: a reader
        that stops before the next run's `TurnStarted` then ends at that run's checkpoint."""
        out: list[Frame] = []
        self._out = out
        self._end_unended_run()
        return out

    # -- runs ------------------------------------------------------------------------
    def _end_unended_run(self) -> None:
        if self._run is not None:  # its end was never stored (the daemon stopped): close it
            self._turn_ended(ev.TurnEnded(turn_id=self._run.turn_id, stop_reason=ev.StopReason.CANCELLED))

    def _turn_started(self, e: ev.TurnStarted) -> None:
        self._end_unended_run()
        if self.on_checkpoint is not None:
            self.on_checkpoint(e.turn_id, self.sequence)
        times = self.turn_times.get(e.turn_id)
        t0 = times[0] if times else self._now()
        self._frame("chat:start", ChatStart(session_id=self.session_id, sequence=self._next(), chat_run_id=e.turn_id))
        user = self._open_turn(f"{e.turn_id}:user", role="user", t0=t0)
        user.proj.blocks = blocks_of_prompt(e.prompt)
        user.proj.status = "completed"
        self._turn_frame("turn:start", user)
        self._close_turn(user, "completed", t0)
        root = self._open_turn(f"{e.turn_id}:root", t0=t0)
        self._run = ProjectedRun(e.turn_id, root, t0)
        self._turn_frame("turn:start", root)

    def _turn_ended(self, e: ev.TurnEnded) -> None:
        run = self._run
        if run is None:
            return
        stop = e.stop_reason
        status = _TURN_STATUS.get(stop, "completed")
        # A turn cut by a stopped daemon, closed at its next start (bridge/store/base.py
        # CUT_TURN_ERROR), is `failed` to the canonical model but `interrupted` in chat.
        cut = stop is ev.StopReason.FAILED and e.error is not None and e.error.kind == _CUT_KIND
        if cut:
            status = "interrupted"
        end = self.turn_times.get(run.turn_id, (None, None))[1] or self._now()
        gone = {"interrupted": "cancelled", "failed": "error"}.get(status)
        for turn, tool, _t in list(self._tools.values()):
            if gone and tool.status in OPEN_TOOL and turn.open:
                tool.status = gone
                self._patch(turn, "set_tool_status", SetToolStatus(tool_call_id=tool.id, status=gone))
        for child in reversed(run.order):
            if child.open:
                self._close_turn(child, "completed" if status == "paused" else status, self._now())
        self._close_turn(run.root, status, end)
        chat_status = {"interrupted": "interrupted", "failed": "failed"}.get(status, "completed")
        finish = "interrupted" if cut else _FINISH.get(stop, "completed")
        result: Any = None
        options = self._run_options(run.turn_id)
        if options is not None and (options.headless or options.output_schema is not None):
            output = "".join(b.content for b in run.root.proj.blocks if b.type == "text")
            data = (run.data[0] if len(run.data) == 1 else run.data) if run.data else None
            if run.data:  # structured output is the output, as a value (checked as its JSON)
                output = data_text(DataContent(data=data))
            if chat_status == "completed":
                check = options.check  # stored when the run first ended: not validated again
                if check is None:
                    matched, result = headless_result(output, options)
                    if run.data and options.output_schema is None:
                        result = {"output": data}
                    self._keep_check(run.turn_id, stored_check(output, matched, result))
                else:
                    matched, result = bool(check.get("matched")), result_of_check(output, options, check)
                if not matched:
                    chat_status, finish = "failed", "output_schema"
            else:
                result = {"output": data if run.data else output}
        if stop is ev.StopReason.FAILED:
            message = e.error.message if e.error else "the turn failed"
            detail = {"kind": e.error.kind if e.error else "back"}
            self._frame(
                "system:error",
                SystemError(
                    message=message,
                    code="turn_failed",
                    detail=detail,
                    session_id=self.session_id,
                    sequence=self._next(),
                ),
            )
            result = {**(result or {}), "error": message}
        self._frame(
            "chat:end",
            ChatEnd(
                session_id=self.session_id,
                sequence=self._next(),
                status=chat_status,
                result=result,
                finish_reason=finish,
                chat_run_id=run.turn_id,
            ),
        )
        self._run = None
        self._tools.clear()
        self._asks.clear()
        self._ask_ids.clear()

    # -- content ----------------------------------------------------------------------
    def _chunk(self, e: ev.MessageChunk) -> None:
        turn = self._turn(e.parent_tool_call_id)
        if turn is None:
            return
        c = e.content
        if type(c) is TextContent:
            self._text(turn, "thinking" if e.thought else "text", e.message_id, c.text, new=False)
        elif isinstance(c, ImageContent):
            self._block(turn, Block(type="image_url", content=f"data:{c.mime_type};base64,{c.data}"))
        elif isinstance(c, DataContent):
            run = self._run
            options = self._run_options(run.turn_id) if run is not None and turn is run.root else None
            if options is not None and (options.headless or options.output_schema is not None):
                run.data.append(c.data)  # type: ignore[union-attr]
            else:
                self._text(turn, "text", f"data:{e.message_id}:{len(turn.proj.blocks)}", data_text(c), new=True)
        else:
            for b in blocks_of_prompt([c]):
                self._block(turn, b)

    def _progress(self, e: ev.ProgressReported) -> None:
        turn = self._turn(e.parent_tool_call_id)
        if turn is not None and (text := text_of(e.content)):
            self._text(turn, "thinking", f"progress:{e.message_id}", text, new=False)

    def _text(self, turn: ProjectedTurn, kind: str, key_id: str | None, delta: str, *, new: bool) -> None:
        key = (kind, key_id)
        blocks = turn.proj.blocks
        if not new and turn.block_key == key and len(blocks[-1].content) + len(delta) <= self._max:
            block = blocks[-1]
            block.content += delta
        else:
            block = Block(type=kind, content=delta)
            blocks.append(block)
            turn.block_key = key
        self._patch(
            turn, "add_content", AddContent(type=kind, content=block.content, text_delta=delta, index=len(blocks) - 1)
        )

    def _block(self, turn: ProjectedTurn, block: Block) -> None:
        turn.proj.blocks.append(block)
        turn.block_key = None
        self._patch(
            turn, "add_content", AddContent(type=block.type, content=block.content, index=len(turn.proj.blocks) - 1)
        )

    def _plan(self, e: ev.PlanUpdated) -> None:
        turn = self._turn(e.parent_tool_call_id)
        if turn is None:
            return
        entries = [msgspec.structs.asdict(p) for p in e.entries]
        blocks = turn.proj.blocks
        if turn.plan_index is None:
            # The plan keeps one block per turn; each update replaces it in place.
            turn.plan_index = len(blocks)
            blocks.append(Block(type="plan_status", content=entries))
            turn.block_key = None
        else:
            blocks[turn.plan_index].content = entries
        self._patch(turn, "add_content", AddContent(type="plan_status", content=entries, index=turn.plan_index))

    def _artifact(self, e: ev.ArtifactUpdated) -> None:
        turn = self._turn(e.parent_tool_call_id)
        if turn is None:
            return
        first = not e.append
        for part in e.parts:
            if isinstance(part, TextContent):
                self._text(turn, "text", f"artifact:{e.artifact_id}", part.text, new=first)
                first = False
            else:
                self._chunk(ev.MessageChunk(content=part, parent_tool_call_id=e.parent_tool_call_id))

    def _usage(self, e: ev.UsageReported) -> None:
        turn = self._turn(e.parent_tool_call_id)
        if turn is None:
            return
        usage = turn.proj.usage or Usage()
        usage.input_tokens = e.input_tokens if e.input_tokens is not None else usage.input_tokens
        usage.output_tokens = e.output_tokens if e.output_tokens is not None else usage.output_tokens
        turn.proj.usage = usage
        if e.size:
            turn.proj.context_window = e.size


_HANDLERS: dict[type, Callable[[ChatProjector, Any], None]] = {
    ev.TurnStarted: ChatProjector._turn_started,
    ev.MessageChunk: ChatProjector._chunk,
    ev.ProgressReported: ChatProjector._progress,
    ev.ToolCallStarted: ChatProjector._tool_started,
    ev.ToolCallUpdated: ChatProjector._tool_updated,
    ev.PlanUpdated: ChatProjector._plan,
    ev.QuestionAsked: ChatProjector._asked,
    ev.QuestionAnswered: ChatProjector._answered,
    ev.ArtifactUpdated: ChatProjector._artifact,
    ev.UsageReported: ChatProjector._usage,
    ev.TurnEnded: ChatProjector._turn_ended,
}


def commands_frame(session_id: str, commands: list[ev.CommandInfo]) -> bytes:
    """`session:commands {session_id, commands}`: the session's slash commands, complete."""
    items = [CommandItem(name=c.name, description=c.description, hint=c.hint) for c in commands]
    return encode_frame("session:commands", SessionCommands(session_id=session_id, commands=items))
