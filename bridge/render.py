"""`agent-bridge ask`: one turn from the terminal, rendered as it streams.

Text is printed as it arrives (message chunks and artifacts: an A2A agent answers in
artifacts), thoughts dimmed, plans and tool calls on their own lines with their status,
usage at the end. Structured data is printed as pretty JSON; an image, audio, a link or
a file as a one-line placeholder; status text (progress) as a dim line on stderr, never
in the answer. Questions are asked on the TTY, or
answered by the `--answer` policy; with neither, the question is refused and the
command fails clearly (it never waits on a prompt nobody can see).
"""

from __future__ import annotations

import json
import sys
from typing import ClassVar, Literal, TextIO

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
from bridge.errors import BridgeError
from bridge.session import Session

__all__ = ["AnswerPolicy", "Renderer"]

AnswerPolicy = Literal["allow", "reject", "first"] | None

_STATUS = {"pending": "…", "in_progress": "▸", "completed": "✓", "failed": "✗"}


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


class Renderer:
    """A session subscriber that writes to a terminal."""

    protocol: ClassVar[str] = "cli"  # `agent-bridge ask`: the events-relayed metric's label

    def __init__(
        self,
        session: Session,
        out: TextIO,
        *,
        policy: AnswerPolicy,
        interactive: bool,
        color: bool,
        err: TextIO | None = None,
    ) -> None:
        self.session = session
        self.out = out
        self.err = err if err is not None else sys.stderr
        self.policy = policy
        self.interactive = interactive
        self.color = color
        self.unanswerable: list[str] = []
        self._mode: str | None = None  # "text" | "thought" while a run of chunks goes on
        self._nursery: trio.Nursery | None = None
        self._titles: dict[str, str] = {}

    def _style(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.color else text

    def _line(self, text: str) -> None:
        if self._mode is not None:
            self.out.write("\n")
            self._mode = None
        self.out.write(text + "\n")
        self.out.flush()

    # -- Subscriber ------------------------------------------------------------------
    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        await trio.lowlevel.checkpoint()

    def _write(self, mode: str, prefix: str, text: str) -> None:
        if self._mode != mode:
            if self._mode is not None:
                self.out.write("\n")
            self.out.write(prefix)
            self._mode = mode
        self.out.write(self._style("2", text) if mode == "thought" else text)
        self.out.flush()

    def deliver(self, event: ev.Event) -> None:
        prefix = "  ↳ " if event.parent_tool_call_id else ""
        if isinstance(event, ev.MessageChunk):
            self._write("thought" if event.thought else "text", prefix, _text(event.content))
        elif isinstance(event, ev.ArtifactUpdated):
            self._write("text", prefix, "".join(_text(p) for p in event.parts))
        elif isinstance(event, ev.ProgressReported):
            if self._mode is not None:  # its own line, never glued to the text before it
                self.out.write("\n")
                self.out.flush()
                self._mode = None
            self.err.write(self._style("2", prefix + text_of(event.content)) + "\n")
            self.err.flush()
        elif isinstance(event, ev.PlanUpdated):
            self._line(self._style("36", prefix + "plan: ") + "  ".join(f"{_STATUS[e.status]} {e.content}" for e in event.entries))
        elif isinstance(event, ev.ToolCallStarted):
            self._titles[event.tool_call_id] = event.title
            self._line(self._style("33", f"{prefix}{_STATUS[event.status]} {event.title}") + f" ({event.kind})")
        elif isinstance(event, ev.ToolCallUpdated) and event.status:
            body = ""
            for item in event.content or []:
                if item.type == "diff":
                    body += f" [diff {item.path}]"
                elif item.content is not None:
                    body += " " + _text(item.content).strip().replace("\n", " ⏎ ")[:120]
            title = self._titles.get(event.tool_call_id, event.tool_call_id)
            self._line(self._style("33", f"{prefix}{_STATUS[event.status]} {title}") + body)
        elif isinstance(event, ev.UsageReported):
            tokens = f"{event.input_tokens or 0} in / {event.output_tokens or 0} out" if event.output_tokens is not None else f"{event.used}/{event.size}"
            self._line(self._style("2", f"usage: {tokens}"))
        elif isinstance(event, ev.QuestionAsked) and self._nursery is not None:
            self._nursery.start_soon(self._ask, event.question)
        elif isinstance(event, ev.QuestionAnswered):
            how = "cancelled" if event.cancelled else ", ".join(event.selected) or event.text or "answered"
            self._line(self._style("2", f"answer ({event.by}): {how}"))
        elif isinstance(event, ev.TurnEnded):
            if event.error:
                self._line(self._style("31", f"error: {event.error.message}"))
            self._line(self._style("2", f"[{event.stop_reason.value}]"))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    async def _ask(self, q: ev.Question) -> None:
        self._line(self._style("1", f"? {q.prompt}"))
        for i, opt in enumerate(q.options, 1):
            self._line(f"  {i}. {opt.label}" + (f" — {opt.description}" if opt.description else ""))
        if self.policy is not None:
            self._by_policy(q)
            return
        if not self.interactive:
            self.unanswerable.append(q.prompt)
            self._line(self._style("31", "cannot ask: stdin is not a terminal; pass --answer allow|reject|first"))
            self._answer(q, cancelled=True)
            return
        while True:
            reply = (await trio.to_thread.run_sync(_read_line, "> ", abandon_on_cancel=True)).strip()
            picks = [p for p in reply.replace(",", " ").split() if p.isdigit() and 1 <= int(p) <= len(q.options)]
            if picks and (q.multi_select or len(picks) == 1):
                self._answer(q, selected=[q.options[int(p) - 1].id for p in picks])
                return
            if reply and q.allow_text and not picks:
                self._answer(q, text=reply)
                return
            self._line(f"answer with a number from 1 to {len(q.options)}")

    def _by_policy(self, q: ev.Question) -> None:
        want = ("allow_once", "allow_always") if self.policy == "allow" else ("reject_once", "reject_always")
        if self.policy == "first" and q.options:
            self._answer(q, selected=[q.options[0].id])
            return
        for opt in q.options:
            if opt.kind in want:
                self._answer(q, selected=[opt.id])
                return
        if self.policy == "allow" and q.options:
            self._answer(q, selected=[q.options[0].id])
        else:
            self._answer(q, cancelled=True)

    def _answer(self, q: ev.Question, **answer: object) -> None:
        try:
            self.session.answer(q.id, **answer)  # type: ignore[arg-type]
        except BridgeError as exc:
            self._line(f"answer not taken: {exc.message}")


def _read_line(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    return sys.stdin.readline()
