"""The built-in scripted agent: deterministic, no network, shows every event kind.

Words at the start of the prompt choose what it does (README, "The demo agent");
several may be combined (`plan: tool: hello`), and `/word rest` works like `word: rest`.
Keep these words stable: tests and every front's documentation rely on them.
"""

from __future__ import annotations

import re

import trio

from bridge.backs.base import AgentInfo, SessionContext, TurnHandle
from bridge.config import Route
from bridge.core.content import DataContent, ImageContent, ResourceLink, TextContent, text_of
from bridge.core.events import (
    CommandInfo,
    MessageChunk,
    ProgressReported,
    PlanEntry,
    PlanUpdated,
    Question,
    QuestionOption,
    StopReason,
    ToolCallContent,
    ToolCallStarted,
    ToolCallUpdated,
    ToolLocation,
    UsageReported,
)
from bridge.errors import BackError

__all__ = ["DATA", "DemoBack", "PIXEL_PNG", "WORDS", "parse_words"]

# What `data:` and `image:` send: an integer, a float, a nested object and a null, so a
# hop that turns structure into text (or 42 into 42.0) shows; and a 1×1 PNG.
DATA = {"key": "value", "count": 42, "ratio": 0.5, "nested": {"ok": True, "none": None}}
PIXEL_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="

WORDS: dict[str, str] = {
    "think": "reasons aloud first (thought chunks)",
    "plan": "sends a three-step plan and updates it as it goes",
    "tool": "runs a read tool call: pending → in_progress → completed",
    "ask": "asks permission before an edit and acts on the answer",
    "choose": "asks a multiple-choice question (with free text allowed)",
    "name": "asks a free-text question (no options) and greets the answer",
    "form": "asks a form to fill (name, count, colour, yes/no) and echoes its values",
    "fork": "runs a sub-agent whose events carry the parent tool call id",
    "progress": "reports its progress (status text beside the answer, not in it)",
    "data": "answers with structured data (a JSON object) before the text",
    "image": "answers with an image and a link to a file",
    "slow": "streams for several seconds (to try cancelling)",
    "all": "think, plan, tool, ask and fork in one turn",
    "fail": "fails the turn with an error",
    "refuse": "refuses (stop reason refusal)",
    "max_tokens": "stops with max_tokens",
    "max_turns": "stops with max_turn_requests",
    "bench": "bench:N streams N tiny chunks as fast as it can",
}

_WORD = re.compile(r"^\s*(?:/([a-z_]+)\b|([a-z_]+):(\d*))")


def parse_words(text: str) -> tuple[dict[str, str], str]:
    """Leading demo words (with their optional number) and the rest of the prompt."""
    words: dict[str, str] = {}
    while True:
        m = _WORD.match(text)
        if not m or (m.group(1) or m.group(2)) not in WORDS:
            return words, text.strip()
        words[m.group(1) or m.group(2)] = m.group(3) or ""
        text = text[m.end() :]


class DemoBack:
    def __init__(self, name: str, route: Route) -> None:
        self.cfg = route.back
        self.info = AgentInfo(
            name="agent-bridge-demo",
            title=route.title or "agent-bridge demo",
            version="1.0.0",
            description=route.description,
            commands=[CommandInfo(name=w, description=d, hint="text for the agent") for w, d in WORDS.items()],
        )

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> _DemoSession:
        # The turn counter names messages and tool calls (`m3-read`); it is kept as the
        # back ref so a session loaded after a restart does not reuse the ids of its
        # stored turns (ACP: a toolCallId is unique within its session).
        n = int(ctx.back_ref) if ctx.back_ref and ctx.back_ref.isdigit() else 0
        return _DemoSession(self.cfg.chunk_delay_s, self.cfg.slow_duration_s, n)

    async def ready(self) -> None:
        """Nothing to look up: the agent is built in."""

    async def probe(self, *, deep: bool) -> str:
        return "built-in scripted agent"

    async def aclose(self) -> None:
        """Nothing shared between sessions to free."""


class _DemoSession:
    def __init__(self, delay: float, slow_s: float, n: int = 0) -> None:
        self.delay = delay
        self.slow_s = slow_s
        self.n = n

    async def cancel(self) -> None:
        pass  # the turn sees `turn.cancel_requested` at its next step

    async def set_option(self, option_id: str, value: str) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def prompt(self, turn: TurnHandle) -> StopReason:
        self.n += 1
        turn.set_back_ref(str(self.n))
        words, rest = parse_words(text_of(turn.prompt))
        if "bench" in words:
            return await self._bench(turn, int(words["bench"] or 1000))
        if "all" in words:
            words.update(dict.fromkeys(("think", "plan", "tool", "ask", "fork"), ""))
        run = _DemoScript(turn, self.delay, f"m{self.n}")
        steps = [w for w in ("tool", "ask", "choose", "name", "form", "fork", "slow") if w in words]
        if "think" in words:
            await run.say(f"The user wrote {rest!r}. Let me work out what to do.", thought=True)
        if "progress" in words:
            turn.emit(ProgressReported(content=[TextContent(text="Working on it.")], message_id=f"m{self.n}-p"))
        if "plan" in words:
            run.plan = [PlanEntry(content=f"Step: {s}") for s in steps or ["answer"]]
            run.plan_status(-1)
        for i, step in enumerate(steps):
            run.plan_status(i, "in_progress")
            if await getattr(run, step)(rest, self.slow_s) is StopReason.CANCELLED:
                return StopReason.CANCELLED
            run.plan_status(i, "completed")
        if turn.cancel_requested:
            return StopReason.CANCELLED
        if "fail" in words:
            raise BackError("the demo agent failed on purpose (prompt began with fail:)")
        if "refuse" in words:
            await run.say("I won't do that.")
            return StopReason.REFUSAL
        if "data" in words:
            turn.emit(MessageChunk(content=DataContent(data=DATA), message_id=f"m{self.n}-a"))
        if "image" in words:
            turn.emit(MessageChunk(content=ImageContent(data=PIXEL_PNG, mime_type="image/png"), message_id=f"m{self.n}-a"))
            link = ResourceLink(uri="file:///README.md", name="README.md", mime_type="text/markdown")
            turn.emit(MessageChunk(content=link, message_id=f"m{self.n}-a"))
        await run.say(f"You said: {rest}" if rest else "Hello from the agent-bridge demo.")
        if not steps and "plan" in words:
            run.plan_status(0, "completed")
        turn.emit(UsageReported(used=run.tokens, size=200_000, input_tokens=len(rest.split()), output_tokens=run.tokens))
        if turn.cancel_requested:
            return StopReason.CANCELLED
        if "max_tokens" in words:
            return StopReason.MAX_TOKENS
        if "max_turns" in words:
            return StopReason.MAX_TURN_REQUESTS
        return StopReason.END_TURN

    async def _bench(self, turn: TurnHandle, n: int) -> StopReason:
        chunk = TextContent(text="x")
        for i in range(n):
            turn.emit(MessageChunk(content=chunk, message_id="bench"))
            if i % 256 == 255:
                await turn.flow()
                if turn.cancel_requested:
                    return StopReason.CANCELLED
        return StopReason.END_TURN


class _DemoScript:
    """One turn of the demo as it is played: small helpers that emit and pace events."""

    def __init__(self, turn: TurnHandle, delay: float, message_id: str) -> None:
        self.turn = turn
        self.delay = delay
        self.message_id = message_id
        self.tokens = 0
        self.plan: list[PlanEntry] = []

    async def say(self, text: str, *, thought: bool = False, parent: str | None = None) -> bool:
        """Stream `text` word by word; False if a cancel arrived."""
        mid = f"{self.message_id}-{'t' if thought else 'a'}{'-' + parent if parent else ''}"
        for word in re.findall(r"\S+\s*", text):
            if self.turn.cancel_requested:
                return False
            self.tokens += 1
            self.turn.emit(
                MessageChunk(content=TextContent(text=word), message_id=mid, thought=thought, parent_tool_call_id=parent)
            )
            await self.turn.flow()  # a checkpoint, so a cancel lands between words
            if self.delay:
                await trio.sleep(self.delay)
        return True

    def plan_status(self, index: int, status: str = "pending") -> None:
        if not self.plan:
            return
        if index >= 0:
            self.plan[index].status = status  # type: ignore[assignment]
        self.turn.emit(PlanUpdated(entries=[PlanEntry(content=e.content, status=e.status) for e in self.plan]))

    async def tool(self, rest: str, _slow: float, *, parent: str | None = None) -> StopReason | None:
        tid = f"{self.message_id}-read{'-' + parent if parent else ''}"
        self.turn.emit(
            ToolCallStarted(
                tool_call_id=tid,
                title="Read README.md",
                kind="read",
                status="pending",
                name="Read",
                raw_input={"path": "README.md"},
                locations=[ToolLocation(path="README.md", line=1)],
                parent_tool_call_id=parent,
            )
        )
        await trio.sleep(self.delay)
        self.turn.emit(ToolCallUpdated(tool_call_id=tid, status="in_progress", parent_tool_call_id=parent))
        await trio.sleep(self.delay * 2)
        body = "# agent-bridge\nOne daemon, four agent protocols.\n"
        self.turn.emit(
            ToolCallUpdated(
                tool_call_id=tid,
                status="completed",
                content=[ToolCallContent(content=TextContent(text=body))],
                raw_output={"bytes": len(body)},
                parent_tool_call_id=parent,
            )
        )
        return None

    async def ask(self, rest: str, _slow: float) -> StopReason | None:
        tid = f"{self.message_id}-edit"
        self.turn.emit(
            ToolCallStarted(
                tool_call_id=tid,
                title="Edit notes.txt",
                kind="edit",
                status="pending",
                name="Edit",
                raw_input={"path": "notes.txt", "text": rest},
                locations=[ToolLocation(path="notes.txt")],
            )
        )
        options = [
            QuestionOption(id="allow", label="Allow", kind="allow_once"),
            QuestionOption(id="allow_always", label="Always allow", kind="allow_always"),
            QuestionOption(id="reject", label="Reject", kind="reject_once"),
            QuestionOption(id="reject_always", label="Never allow", kind="reject_always"),
        ]
        answer = await self.turn.ask(
            Question(id=f"{tid}-q", kind="permission", prompt="Edit notes.txt?", options=options, tool_call_id=tid)
        )
        if answer.cancelled and self.turn.cancel_requested:
            return StopReason.CANCELLED
        if answer.selected and answer.selected[0].startswith("allow"):
            diff = ToolCallContent(type="diff", path="notes.txt", old_text=None, new_text=rest or "(empty)")
            self.turn.emit(ToolCallUpdated(tool_call_id=tid, status="completed", content=[diff]))
            await self.say("Edited notes.txt. ")
        else:
            # A rejection is an answer, not a cancel: the turn goes on (complaint 9).
            self.turn.emit(ToolCallUpdated(tool_call_id=tid, status="failed", raw_output={"rejected": True}))
            await self.say("Understood, I left notes.txt alone. ")
        return None

    async def choose(self, rest: str, _slow: float) -> StopReason | None:
        options = [
            QuestionOption(id="red", label="Red"),
            QuestionOption(id="green", label="Green"),
            QuestionOption(id="blue", label="Blue"),
        ]
        answer = await self.turn.ask(
            Question(
                id=f"{self.message_id}-color",
                kind="choice",
                prompt="Which colours do you like?",
                header="Colours",
                options=options,
                multi_select=True,
                allow_text=True,
            )
        )
        if answer.cancelled:
            return StopReason.CANCELLED if self.turn.cancel_requested else None
        picked = [o.label for o in options if o.id in answer.selected]
        if answer.text:
            picked.append(answer.text)
        await self.say(f"You chose: {', '.join(picked)}. ")
        return None

    async def name(self, rest: str, _slow: float) -> StopReason | None:
        q = Question(id=f"{self.message_id}-name", kind="choice", prompt="What is your name?", allow_text=True)
        answer = await self.turn.ask(q)
        if answer.cancelled:
            return StopReason.CANCELLED if self.turn.cancel_requested else None
        await self.say(f"Hello, {answer.text}! ")
        return None

    async def form(self, rest: str, _slow: float) -> StopReason | None:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Name"},
                "count": {"type": "integer", "title": "How many", "default": 1},
                "colour": {"type": "string", "title": "Colour", "oneOf": [{"const": "red", "title": "Red"}, {"const": "blue", "title": "Blue"}]},
                "urgent": {"type": "boolean", "title": "Urgent"},
            },
            "required": ["name", "colour"],
        }
        answer = await self.turn.ask(Question(id=f"{self.message_id}-form", kind="form", prompt="Fill in the order.", schema=schema))
        if answer.cancelled:
            return StopReason.CANCELLED if self.turn.cancel_requested else None
        values = answer.values or {}
        await self.say("You filled in: " + ", ".join(f"{k}={values[k]!r}" for k in sorted(values)) + ". ")
        return None

    async def fork(self, rest: str, slow: float) -> StopReason | None:
        tid = f"{self.message_id}-agent"
        self.turn.emit(
            ToolCallStarted(tool_call_id=tid, title="Sub-agent: research", kind="think", status="in_progress", name="Agent")
        )
        await self.say("Looking into it in a sub-agent.", thought=True, parent=tid)
        await self.tool(rest, slow, parent=tid)
        summary = "The sub-agent read README.md."
        await self.say(summary, parent=tid)
        self.turn.emit(
            ToolCallUpdated(
                tool_call_id=tid,
                status="completed",
                content=[ToolCallContent(content=TextContent(text=summary))],
                raw_output={"result": summary},
            )
        )
        return StopReason.CANCELLED if self.turn.cancel_requested else None

    async def slow(self, rest: str, slow: float) -> StopReason | None:
        steps = max(1, int(slow / 0.1))
        for i in range(steps):
            if self.turn.cancel_requested:
                return StopReason.CANCELLED
            self.tokens += 1
            self.turn.emit(MessageChunk(content=TextContent(text=f"tick {i + 1}. "), message_id=f"{self.message_id}-slow"))
            await self.turn.flow()
            with trio.move_on_after(0.1):
                await self.turn.wait_cancel_requested()
        return StopReason.CANCELLED if self.turn.cancel_requested else None

