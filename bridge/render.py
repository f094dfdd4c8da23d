"""`agent-bridge ask`'s output: every canonical event (bridge/core/events.py) as text on
a terminal or in a pipe, or as JSON lines for scripts (`--json`).

Text is printed as it arrives (message chunks and artifacts: an A2A agent answers in
artifacts), thoughts dimmed, plans, tool calls and their updates on their own lines with
their status, a question as its prompt and numbered options, usage and the stop reason at
the end. Structured data is printed as pretty JSON; an image, audio, a link or a file as a
one-line placeholder; status text (progress) as a dim line on stderr, never in the answer.
The prompt the user typed (`TurnStarted`) is not echoed; available commands and options
are one dim line each. Every write first erases the live status line
(bridge/status_line.py), and tells it what happened.

`--json` prints each event in the canonical encoding, one per line: the same JSON the
canonical events API sends (bridge/fronts/chat/events_api.py) and `store export` writes.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from typing import BinaryIO, ClassVar, TextIO

import msgspec
import trio

from bridge.core import events as ev
from bridge.core.content import (
    AudioContent,
    ContentBlock,
    DataContent,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    text_of,
)
from bridge.status_line import StatusLine

__all__ = ["JsonLines", "Renderer", "activity_of", "terminal_safe"]

_STATUS = {"pending": "…", "in_progress": "▸", "completed": "✓", "failed": "✗"}
_json = msgspec.json.Encoder()
# On a terminal, what an agent sends may not move the cursor, set the title or the
# clipboard (OSC 52): every control character goes but newline, tab and colours (SGR).
_UNSAFE = re.compile(r"\x1b(?!\[[0-9;]*m)|[\x00-\x08\x0b-\x1a\x1c-\x1f\x7f-\x9f]")
_KEPT_TOOL_CALLS = 4096  # titles and statuses remembered for their updates (the oldest go)


def terminal_safe(text: str) -> str:
    """`text` without what could move a terminal's cursor or command it (colours kept)."""
    return _UNSAFE.sub("", text)


def _isatty(stream: TextIO | BinaryIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or not a file
        return False


def _text(block: ContentBlock | None) -> str:
    """What a terminal shows of one block: text as is, data as pretty JSON (on its own
    lines), anything else as a one-line placeholder."""
    if isinstance(block, TextContent):
        return block.text
    if block is None:
        return ""
    if isinstance(block, DataContent):
        return "\n" + json.dumps(block.data, indent=2, ensure_ascii=False) + "\n"
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, ResourceLink):
        return f"[link {block.uri}]"
    if isinstance(block, EmbeddedResource):
        if block.resource.text is not None:
            return block.resource.text
        return f"[file {block.resource.uri}" + (f", {block.resource.mime_type}]" if block.resource.mime_type else "]")
    return f"[{type(block).__name__}]"


def activity_of(event: ev.Event, titles: dict[str, str]) -> str | None:
    """What the status line says after `event` (None: it says what it said)."""
    if isinstance(event, ev.TurnStarted):
        return "waiting for the agent"
    if isinstance(event, ev.MessageChunk):
        return "thinking" if event.thought else "writing"
    if isinstance(event, ev.ProgressReported):
        return text_of(event.content) or "working"
    if isinstance(event, ev.ToolCallStarted | ev.ToolCallUpdated):
        title = titles.get(event.tool_call_id, event.tool_call_id)
        return f"{title} ({event.status})" if event.status else title
    if isinstance(event, ev.PlanUpdated):
        done = sum(e.status == "completed" for e in event.entries)
        return f"plan {done}/{len(event.entries)}"
    if isinstance(event, ev.ArtifactUpdated):
        return f"artifact {event.name or event.artifact_id}"
    if isinstance(event, ev.QuestionAsked):
        return "waiting for an answer"
    if isinstance(event, ev.QuestionAnswered):
        return "answered"
    return None


class Renderer:
    """A session subscriber that writes text to a terminal or a pipe."""

    protocol: ClassVar[str] = "cli"  # `agent-bridge ask`: the events-relayed metric's label

    def __init__(
        self,
        out: TextIO,
        *,
        color: bool,
        err: TextIO | None = None,
        status: StatusLine | None = None,
        on_question: Callable[[ev.Question], None] | None = None,
    ) -> None:
        self.out = out
        self.err = err if err is not None else sys.stderr
        self.color = color
        self.status = status
        self.on_question = on_question
        # Notes go to stderr, which may be a terminal when stdout is not (`ask ... > file`).
        self._err_tty = _isatty(self.err)
        self._mode: str | None = None  # "text" | "thought" while a run of chunks goes on
        self._titles: dict[str, str] = {}
        self._tool_status: dict[str, str] = {}

    def _style(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _emit(self, text: str) -> None:
        """Write to stdout, through the status line when there is one (it knows where
        the cursor is), and flush."""
        if self.status is not None:
            self.status.write(text)
        else:
            self.out.write(text)
            self.out.flush()

    def _ended_run(self) -> str:
        if self._mode is None:
            return ""
        self._mode = None
        return "\n"

    def line(self, text: str) -> None:
        """`text` on a line of its own."""
        self._emit(self._ended_run() + (_UNSAFE.sub("", text) if self.color else text) + "\n")

    def note(self, text: str) -> None:
        """A message of `ask` itself (not the agent's): dim, on stderr."""
        ended = self._ended_run()
        if ended:
            self._emit(ended)
        if self.status is not None:
            self.status.clear()
        self.err.write(self._style("2", _UNSAFE.sub("", text) if self.color or self._err_tty else text) + "\n")
        self.err.flush()

    def _write(self, mode: str, prefix: str, text: str) -> None:
        head = ""
        if self._mode != mode:
            head = ("\n" if self._mode is not None else "") + prefix
            self._mode = mode
        if self.color:
            text = _UNSAFE.sub("", text)
        self._emit(head + (self._style("2", text) if mode == "thought" else text))

    # -- Subscriber ------------------------------------------------------------------
    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        await trio.lowlevel.checkpoint()

    def deliver(self, event: ev.Event) -> None:
        if self.status is not None:
            if isinstance(event, ev.ToolCallStarted):
                self._titles[event.tool_call_id] = event.title
            activity = activity_of(event, self._titles)
            if activity is not None:
                self.status.note(activity)
        self._render(event)
        if self.status is not None and isinstance(event, ev.TurnEnded):
            self.status.close()

    def show_question(self, q: ev.Question) -> None:
        """The question as its prompt (a header first) and its numbered options."""
        self.line(self._style("1", "? " + (f"[{q.header}] " if q.header else "") + q.prompt))
        for i, opt in enumerate(q.options, 1):
            self.line(f"  {i}. {opt.label}" + (f" — {opt.description}" if opt.description else ""))

    def _tool(self, prefix: str, tool_call_id: str, status: str | None, tail: str) -> None:
        status = status or self._tool_status.get(tool_call_id, "in_progress")
        self._tool_status[tool_call_id] = status
        for kept in (self._tool_status, self._titles):
            while len(kept) > _KEPT_TOOL_CALLS:
                del kept[next(iter(kept))]
        title = self._titles.get(tool_call_id, tool_call_id)
        self.line(self._style("33", f"{prefix}{_STATUS.get(status, status)} {title}") + tail)

    def _render(self, event: ev.Event) -> None:
        prefix = "  ↳ " if event.parent_tool_call_id else ""
        if isinstance(event, ev.MessageChunk):
            self._write("thought" if event.thought else "text", prefix, _text(event.content))
        elif isinstance(event, ev.ArtifactUpdated):
            self._write("text", prefix, "".join(_text(p) for p in event.parts))
        elif isinstance(event, ev.ProgressReported):
            self.note(prefix + text_of(event.content))
        elif isinstance(event, ev.PlanUpdated):
            self.line(self._style("36", prefix + "plan: ") + "  ".join(f"{_STATUS[e.status]} {e.content}" for e in event.entries))
        elif isinstance(event, ev.ToolCallStarted):
            self._titles[event.tool_call_id] = event.title
            self._tool(prefix, event.tool_call_id, event.status, f" ({event.kind})")
        elif isinstance(event, ev.ToolCallUpdated):
            if event.title:
                self._titles[event.tool_call_id] = event.title
            body = ""
            for item in event.content or []:
                if item.type == "diff":
                    body += f" [diff {item.path}]"
                elif item.type == "terminal":
                    body += f" [terminal {item.terminal_id}]"
                elif item.content is not None:
                    body += " " + _text(item.content).strip().replace("\n", " ⏎ ")[:120]
            if event.status or body or event.title:  # an update of its input or output alone shows nothing new
                self._tool(prefix, event.tool_call_id, event.status, body)
        elif isinstance(event, ev.UsageReported):
            tokens = f"{event.input_tokens or 0} in / {event.output_tokens or 0} out" if event.output_tokens is not None else f"{event.used}/{event.size}"
            cost = f", {event.cost_amount} {event.cost_currency or ''}".rstrip() if event.cost_amount is not None else ""
            self.line(self._style("2", f"usage: {tokens}{cost}"))
        elif isinstance(event, ev.QuestionAsked):
            self.show_question(event.question)
            if self.on_question is not None:
                self.on_question(event.question)
        elif isinstance(event, ev.QuestionAnswered):
            how = "cancelled" if event.cancelled else ", ".join([*event.selected, *([event.text] if event.text else [])])
            how = how or ("form filled" if event.values is not None else "answered")
            self.line(self._style("2", f"answer ({event.by}): {how}"))
        elif isinstance(event, ev.CommandsAvailable):
            self.line(self._style("2", "commands: " + " ".join("/" + c.name for c in event.commands)))
        elif isinstance(event, ev.OptionsChanged):
            self.line(self._style("2", "options: " + ", ".join(f"{o.id}={o.current}" for o in event.options)))
        elif isinstance(event, ev.TurnEnded):
            if event.error:
                self.line(self._style("31", f"error: {event.error.message}"))
            self.line(self._style("2", f"[{event.stop_reason.value}]"))
        # TurnStarted: the prompt the user just typed, not echoed


# DEL and the C1 controls as UTF-8 (U+0080..U+009F: CSI is U+009B), which JSON may carry
# raw and a terminal may obey; only ever inside a string, where `\u00XX` is the same JSON.
_C1 = re.compile(rb"\x7f|\xc2[\x80-\x9f]")


def _escape_c1(m: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % m.group()[-1]


class JsonLines:
    """A session subscriber that writes each event as one line of canonical JSON. On a
    terminal, C1 controls are escaped too (JSON escapes the C0 ones, ESC among them)."""

    protocol: ClassVar[str] = "cli"

    def __init__(self, out: BinaryIO, *, on_question: Callable[[ev.Question], None] | None = None) -> None:
        self.out = out
        self.on_question = on_question
        self._tty = _isatty(out)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        await trio.lowlevel.checkpoint()

    def deliver(self, event: ev.Event) -> None:
        line = _json.encode(event)
        self.out.write((_C1.sub(_escape_c1, line) if self._tty else line) + b"\n")
        self.out.flush()
        if isinstance(event, ev.QuestionAsked) and self.on_question is not None:
            self.on_question(event.question)
