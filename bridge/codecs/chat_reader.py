"""A chat server's frames → canonical events, sans-I/O (for a chat back).

`ChatReader.feed(frame)` takes one `{"event": NAME, "data": {...}}` frame from a chat
event stream server (Blade `api/chat-flow.md`, server events) and returns the canonical events it means:

- `add_content` text/thinking → message/thought chunks (the `text_delta`; the growth
  of `content` when a server sends no delta), `plan_status` → a plan, `image_url` → an
  image chunk, `resource_link`/`file` (our own blocks, as a user turn's) → a resource
  link or an embedded resource. Each block is one message (`message_id` = `turn_id:index`).
- `add_tool_call` → a tool call started (kind from its tool name, ACP `ToolKind`, `ToolCallStatus`), or updated
  when the id is known; an `AskUserQuestion` → a question (`question_from_ask`).
- `tool_result` → the tool call completed/failed with its result as text content and
  raw output; `set_tool_status` → its status (Blade's `pending` after the call was
  added means it runs: in_progress, ACP `ToolKind`, `ToolCallStatus`). An AskUserQuestion's result is not an
  event: answers are the session's own facts.
- A child turn's `parent_fork_tool_call_id` becomes every event's `parent_tool_call_id`.
- `turn:end` usage → usage; `chat:end` → `TurnEnded` with the stop reason (ACP `StopReason` ↔ Blade `chat:end`),
  after a data block for a headless run's structured output (`result.output` that is
  not the plain text, Blade `api/chat-flow.md`, headless) —
  except a `completed` end while an AskUserQuestion is open, which keeps the turn
  open for its answer (Blade AskUserQuestion ↔ ACP `session/request_permission`); `system:error` → `TurnEnded` failed.

`sequence` is the last sequence number seen (what to resume after).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Raw

from bridge.codecs import safejson
from bridge.codecs.chat_parts import ASK_TOOL, KIND_BY_TOOL, answer_to_chat, block_content, question_from_ask
from bridge.codecs.chat_tools import read_locations, read_result
from bridge.core import events as ev
from bridge.core.content import DataContent, ImageContent, TextContent
from bridge.errors import InvalidParams, ParseError
from bridge.schema.chat import AddContent, AddToolCall, AskUserAnswer, SetToolStatus, ToolResult

__all__ = ["ChatReader", "askuser_answer"]


class _In(msgspec.Struct, kw_only=True, gc=False):
    sequence: int | None = None


class _FrameIn(msgspec.Struct, gc=False):
    event: str
    data: Raw = Raw(b"{}")


class _UsageIn(msgspec.Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0


class _TurnIn(_In):
    turn_id: str = ""
    role: str = "assistant"
    usage: _UsageIn | None = None
    context_window: int | None = None
    parent_fork_tool_call_id: str | None = None


class _PatchIn(_In):
    turn_id: str = ""
    patch_type: str = ""
    data: Raw = Raw(b"{}")


class _ChatEndIn(_In):
    status: str = "completed"
    finish_reason: str | None = None
    result: Any = None
    chat_run_id: str | None = None


class _ErrorIn(_In):
    message: str = "the chat server reported an error"
    code: Any = None
    detail: Any = None


_frame = safejson.Decoder(_FrameIn)
_decoders: dict[type, safejson.Decoder[Any]] = {
    t: safejson.Decoder(t)
    for t in (_TurnIn, _PatchIn, _ChatEndIn, _ErrorIn, _In, AddContent, AddToolCall, ToolResult, SetToolStatus)
}
_enc = msgspec.json.Encoder()

_ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
_STATUS_IN: dict[str, _ToolStatus] = {
    "pending": "pending",
    "running": "in_progress",
    "in_progress": "in_progress",
    "done": "completed",
    "error": "failed",
    "cancelled": "failed",
}
_FINISH_IN = {
    "max_turns": ev.StopReason.MAX_TURN_REQUESTS,
    "max_tokens": ev.StopReason.MAX_TOKENS,
    "refusal": ev.StopReason.REFUSAL,
    "input_required": ev.StopReason.INPUT_REQUIRED,
    "interrupted": ev.StopReason.CANCELLED,
    "tool_error": ev.StopReason.FAILED,
    "error": ev.StopReason.FAILED,
    "output_schema": ev.StopReason.FAILED,
}


def _decode(raw: Raw, typ: type) -> Any:
    try:
        return _decoders[typ].decode(raw)
    except msgspec.ValidationError as exc:
        raise InvalidParams(f"invalid chat frame data: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise ParseError(f"invalid JSON in a chat frame: {exc}") from exc


def _json_or_text(text: str) -> Any:
    try:
        return safejson.decode(text) if text else None
    except msgspec.DecodeError:
        return text


def askuser_answer(question: ev.Question, answered: ev.QuestionAnswered) -> AskUserAnswer:
    """The `askuser_answer` of `chat:send` for a canonical answer to a question read by `ChatReader`."""
    return AskUserAnswer(tool_call_id=question.id, **answer_to_chat(question, answered))


class ChatReader:
    def __init__(self, turn_id: str = "") -> None:
        self.turn_id = turn_id  # the canonical turn the frames belong to (set by the back)
        self.sequence = 0
        self.ended = False
        self.result: Any = None  # the last `chat:end.result` (headless output)
        self._parents: dict[str, str | None] = {}
        self._texts: dict[tuple[str, Any], str] = {}
        self._tools: dict[str, str] = {}
        self._asks: dict[str, ev.Question] = {}
        self._answered: set[str] = set()  # asks whose answer the back sent (`answered`)

    def open_questions(self) -> list[ev.Question]:
        return list(self._asks.values())

    def answered(self, tool_call_id: str) -> None:
        """The back sent the answer to this AskUserQuestion: it no longer holds the run
        open, even if the server never reports the call's result (Blade `api/chat-flow.md`, AskUserQuestion)."""
        if self._asks.pop(tool_call_id, None) is not None:
            self._answered.add(tool_call_id)  # its result or status may still come: not a tool

    def feed(self, frame: bytes | str) -> list[ev.Event]:
        try:
            f = _frame.decode(frame)
        except msgspec.ValidationError as exc:
            raise InvalidParams(f"not a chat frame: {exc}") from exc
        except msgspec.DecodeError as exc:
            raise ParseError(f"invalid JSON: {exc}") from exc
        handler = getattr(self, "_on_" + f.event.replace(":", "_"), None)
        return handler(f.data) if handler is not None else []

    def _seen(self, seq: int | None) -> None:
        if seq is not None and seq > self.sequence:
            self.sequence = seq

    # -- run ------------------------------------------------------------------------
    def _on_chat_start(self, raw: Raw) -> list[ev.Event]:
        self._seen(_decode(raw, _In).sequence)
        self.ended = False
        self.result = None
        return []

    def _on_chat_end(self, raw: Raw) -> list[ev.Event]:
        d: _ChatEndIn = _decode(raw, _ChatEndIn)
        self._seen(d.sequence)
        self.result = d.result
        if self.ended or (d.status == "completed" and self._asks):
            # Already failed, or paused on a question: the turn stays open
            # (Blade AskUserQuestion ↔ ACP `session/request_permission`).
            return []
        self.ended = True
        error = None
        if d.status == "interrupted":
            stop = ev.StopReason.CANCELLED
        elif d.status == "failed":
            stop = ev.StopReason.FAILED
        else:
            stop = _FINISH_IN.get(d.finish_reason or "", ev.StopReason.END_TURN)
        out: list[ev.Event] = []
        if stop is ev.StopReason.FAILED:
            r = d.result if isinstance(d.result, dict) else {}
            message = r.get("error") or r.get("err_msg") or "the chat agent failed"
            error = ev.TurnError(message=str(message), kind=d.finish_reason or "failed")
        elif isinstance(d.result, dict) and "output" in d.result and not isinstance(d.result["output"], str | None):
            out.append(ev.MessageChunk(content=DataContent(data=d.result["output"]), message_id=f"{d.chat_run_id or self.turn_id}:output"))
        out.append(ev.TurnEnded(turn_id=self.turn_id or d.chat_run_id or "", stop_reason=stop, error=error))
        return out

    def _on_system_error(self, raw: Raw) -> list[ev.Event]:
        d: _ErrorIn = _decode(raw, _ErrorIn)
        self._seen(d.sequence)
        if self.ended:
            return []
        self.ended = True
        error = ev.TurnError(message=d.message, kind=str(d.code) if d.code is not None else "chat", data=d.detail)
        return [ev.TurnEnded(turn_id=self.turn_id, stop_reason=ev.StopReason.FAILED, error=error)]

    # -- turns ----------------------------------------------------------------------
    def _on_turn_start(self, raw: Raw) -> list[ev.Event]:
        d: _TurnIn = _decode(raw, _TurnIn)
        self._seen(d.sequence)
        if d.role == "assistant":
            self._parents[d.turn_id] = d.parent_fork_tool_call_id
        return []

    def _on_turn_end(self, raw: Raw) -> list[ev.Event]:
        d: _TurnIn = _decode(raw, _TurnIn)
        self._seen(d.sequence)
        if d.role != "assistant" or d.usage is None:
            return []
        u = d.usage
        return [
            ev.UsageReported(
                used=u.input_tokens + u.output_tokens,
                size=d.context_window or 0,
                input_tokens=u.input_tokens,
                output_tokens=u.output_tokens,
                parent_tool_call_id=d.parent_fork_tool_call_id,
            )
        ]

    def _on_turn_patch(self, raw: Raw) -> list[ev.Event]:
        p: _PatchIn = _decode(raw, _PatchIn)
        self._seen(p.sequence)
        parent = self._parents.get(p.turn_id)
        if p.patch_type == "add_content":
            return self._content(p.turn_id, parent, _decode(p.data, AddContent))
        if p.patch_type == "add_tool_call":
            return self._tool_call(parent, _decode(p.data, AddToolCall))
        if p.patch_type == "tool_result":
            return self._tool_result(parent, _decode(p.data, ToolResult))
        if p.patch_type == "set_tool_status":
            d: SetToolStatus = _decode(p.data, SetToolStatus)
            if d.tool_call_id in self._asks or d.tool_call_id in self._answered or d.status == "awaiting_answer":
                return []
            status: _ToolStatus | None = "in_progress" if d.status == "pending" else _STATUS_IN.get(d.status)
            return (
                [ev.ToolCallUpdated(tool_call_id=d.tool_call_id, status=status, parent_tool_call_id=parent)]
                if status
                else []
            )
        return []  # set_status: the turn's state follows from the other events

    def _content(self, turn_id: str, parent: str | None, d: AddContent) -> list[ev.Event]:
        key = (turn_id, d.index if d.index is not None else d.type)
        mid = f"{turn_id}:{key[1]}"
        if d.type in ("text", "thinking"):
            known = self._texts.get(key, "")
            if d.text_delta is not None:
                delta = d.text_delta
                self._texts[key] = known + delta
            else:
                full = d.content if isinstance(d.content, str) else ""
                delta = full[len(known) :] if full.startswith(known) else full
                self._texts[key] = full
            if not delta:
                return []
            return [
                ev.MessageChunk(
                    content=TextContent(text=delta),
                    message_id=mid,
                    thought=d.type == "thinking",
                    parent_tool_call_id=parent,
                )
            ]
        if d.type == "plan_status" and isinstance(d.content, list):
            try:
                entries = msgspec.convert(d.content, list[ev.PlanEntry])
            except msgspec.ValidationError:
                return []
            return [ev.PlanUpdated(entries=entries, parent_tool_call_id=parent)]
        if (
            d.type == "image_url"
            and isinstance(d.content, str)
            and d.content.startswith("data:")
            and ";base64," in d.content
        ):
            head, data = d.content[5:].split(";base64,", 1)
            return [
                ev.MessageChunk(
                    content=ImageContent(data=data, mime_type=head or "image/png"),
                    message_id=mid,
                    parent_tool_call_id=parent,
                )
            ]
        if (block := block_content(d.type, d.content)) is not None:
            return [ev.MessageChunk(content=block, message_id=mid, parent_tool_call_id=parent)]
        return []

    # -- tools ----------------------------------------------------------------------
    def _tool_call(self, parent: str | None, d: AddToolCall) -> list[ev.Event]:
        if d.tool_name == ASK_TOOL:
            if d.id in self._asks or d.id in self._answered:
                return []
            q = question_from_ask(d.id, d.arguments)
            self._asks[d.id] = q
            return [ev.QuestionAsked(question=q, parent_tool_call_id=parent)]
        raw_input = _json_or_text(d.arguments)
        locations = read_locations(d.tool_name, raw_input, d.agent_bridge)
        if d.id in self._tools:
            return [
                ev.ToolCallUpdated(
                    tool_call_id=d.id,
                    title=d.display_name or None,
                    raw_input=raw_input,
                    locations=locations,
                    parent_tool_call_id=parent,
                )
            ]
        self._tools[d.id] = d.tool_name
        status = _STATUS_IN.get(d.status, "pending")
        return [
            ev.ToolCallStarted(
                tool_call_id=d.id,
                title=d.display_name or d.tool_name,
                kind=KIND_BY_TOOL.get(d.tool_name, "other"),
                status=status,
                name=d.tool_name,
                raw_input=raw_input,
                locations=locations,
                parent_tool_call_id=parent,
            )
        ]

    def _tool_result(self, parent: str | None, d: ToolResult) -> list[ev.Event]:
        if self._asks.pop(d.tool_call_id, None) is not None:
            return []
        if d.tool_call_id in self._answered:
            return []
        status: _ToolStatus = "failed" if d.status in ("error", "cancelled") else "completed"
        result = d.result
        is_content, raw_output = read_result(result, d.agent_bridge)
        content: list[ev.ToolCallContent] | None = None
        if not is_content:
            pass
        elif (
            isinstance(result, list)
            and result
            and all(isinstance(i, dict) and i.get("type") in ("text", "diff", "terminal") for i in result)
        ):
            content = []
            for i in result:
                if i["type"] == "diff":
                    content.append(
                        ev.ToolCallContent(
                            type="diff", path=i.get("path"), old_text=i.get("old_text"), new_text=i.get("new_text")
                        )
                    )
                elif i["type"] == "terminal":
                    content.append(ev.ToolCallContent(type="terminal", terminal_id=i.get("terminal_id")))
                else:
                    content.append(ev.ToolCallContent(content=TextContent(text=str(i.get("text", "")))))
        elif result is not None:
            text = result if isinstance(result, str) else _enc.encode(result).decode()
            content = [ev.ToolCallContent(content=TextContent(text=text))]
        return [
            ev.ToolCallUpdated(
                tool_call_id=d.tool_call_id,
                status=status,
                content=content,
                raw_output=raw_output,
                parent_tool_call_id=parent,
            )
        ]
