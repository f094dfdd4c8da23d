"""The pair matrix's ACP agent: the demo's words (tests/matrix/kinds.py) played on the
official ACP Python SDK, reusing the scaffolding of acp_agent_sdk.py.

    python acp_agent_matrix.py

Each word becomes what an ACP agent says for it (ACP schema, `session/update`):
thought chunks, a plan, tool calls with locations, content and a diff,
`session/request_permission` with the four option kinds bound to the tool call,
`elicitation/create` (form: a multi-select field and free text, as the bridge's own ACP
front asks a choice), a sub-agent as tool call + updates carrying
`_meta.agentBridge.parentToolCallId`, data as an embedded JSON resource, an image and a
resource link, progress as a thought chunk marked `_meta.agentBridge.progress`, a
usage_update, each stop reason, a JSON-RPC error for `fail:`, and `slow:` honouring
`session/cancel`.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import acp
from acp import RequestError, text_block, update_agent_message, update_agent_message_text, update_agent_thought_text
from acp.schema import (
    ElicitationFormSessionMode,
    EmbeddedResourceContentBlock,
    PermissionOption,
    PromptResponse,
    ResourceContentBlock,
    TextResourceContents,
    ToolCallLocation,
    ToolCallUpdate,
)
from acp_agent_sdk import ScriptAgent, _args
from matrix_words import DATA, PIXEL_PNG, README_BODY, STEPS, parse, thought_text

MARK = "agentBridge"
OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="reject", name="Reject", kind="reject_once"),
    PermissionOption(option_id="reject_always", name="Never allow", kind="reject_always"),
]
COLOURS = [("red", "Red"), ("green", "Green"), ("blue", "Blue")]


def _meta(update: Any, **marks: Any) -> Any:
    return update.model_copy(update={"field_meta": {MARK: marks}})


class Turn:
    """One prompt as it is played: the session, its cancel flag, the tokens said."""

    def __init__(self, agent: MatrixAgent, sid: str, n: int, cancel: asyncio.Event) -> None:
        self.conn, self.sid, self.n, self.cancel = agent.conn, sid, n, cancel
        self.tokens = 0
        self.plan: list[list[str]] = []

    async def send(self, update: Any) -> None:
        await self.conn.session_update(self.sid, update)

    async def say(self, text: str, *, thought: bool = False, parent: str | None = None) -> bool:
        """Word by word, as the demo streams; False once a cancel arrived."""
        for word in re.findall(r"\S+\s*", text):
            if self.cancel.is_set():
                return False
            self.tokens += 1
            update = (update_agent_thought_text if thought else update_agent_message_text)(word)
            await self.send(_meta(update, parentToolCallId=parent) if parent else update)
        return True

    async def plan_status(self, index: int, status: str = "pending") -> None:
        if not self.plan:
            return
        if index >= 0:
            self.plan[index][1] = status
        await self.send(acp.update_plan([acp.plan_entry(c, status=s) for c, s in self.plan]))  # type: ignore[arg-type]

    async def tool(self, rest: str, parent: str | None = None) -> None:
        tid = f"m{self.n}-read" + (f"-{parent}" if parent else "")
        mark = (lambda u: _meta(u, parentToolCallId=parent)) if parent else (lambda u: u)
        start = acp.start_tool_call(tid, "Read README.md", kind="read", status="pending", raw_input={"path": "README.md"},
                                    locations=[ToolCallLocation(path="README.md", line=1)])  # fmt: skip
        await self.send(mark(start))
        await self.send(mark(acp.update_tool_call(tid, status="in_progress")))
        content = [acp.tool_content(text_block(README_BODY))]
        await self.send(mark(acp.update_tool_call(tid, status="completed", content=content, raw_output={"bytes": len(README_BODY)})))

    async def ask(self, rest: str) -> str | None:
        tid = f"m{self.n}-edit"
        where = [ToolCallLocation(path="notes.txt")]
        raw = {"path": "notes.txt", "text": rest}
        await self.send(acp.start_tool_call(tid, "Edit notes.txt", kind="edit", status="pending", raw_input=raw, locations=where))
        answer = await self.conn.request_permission(
            session_id=self.sid,
            tool_call=ToolCallUpdate(tool_call_id=tid, title="Edit notes.txt", kind="edit", status="pending", locations=where, raw_input=raw),
            options=OPTIONS,
        )
        chosen = getattr(answer.outcome, "option_id", None)
        if chosen is None:
            return "cancelled"
        if chosen.startswith("allow"):
            diff = acp.tool_diff_content("notes.txt", rest or "(empty)")
            await self.send(acp.update_tool_call(tid, status="completed", content=[diff]))
            await self.say("Edited notes.txt. ")
        else:
            await self.send(acp.update_tool_call(tid, status="failed", raw_output={"rejected": True}))
            await self.say("Understood, I left notes.txt alone. ")
        return None

    async def choose(self, rest: str) -> str | None:
        choices = [{"const": i, "title": label} for i, label in COLOURS]
        schema = {
            "type": "object",
            "properties": {
                "choice": {"type": "array", "title": "Colours", "items": {"anyOf": choices}},
                "other": {"type": "string", "title": "Other"},
            },
        }
        mode = ElicitationFormSessionMode.model_validate({"sessionId": self.sid, "requestedSchema": schema})
        try:
            answer = await self.conn.create_elicitation("Which colours do you like?", mode)
        except RequestError as exc:
            await self.say(f"I could not ask: {exc}. ")
            return None
        content = getattr(answer, "content", None)
        if getattr(answer, "action", None) != "accept" or content is None:
            return "cancelled" if self.cancel.is_set() else None
        values = content if isinstance(content, dict) else content.model_dump(by_alias=True)
        picked = [label for i, label in COLOURS if i in (values.get("choice") or [])]
        if values.get("other"):
            picked.append(str(values["other"]))
        await self.say(f"You chose: {', '.join(picked)}. ")
        return None

    async def fork(self, rest: str) -> str | None:
        tid = f"m{self.n}-agent"
        await self.send(acp.start_tool_call(tid, "Sub-agent: research", kind="think", status="in_progress"))
        await self.say("Looking into it in a sub-agent.", thought=True, parent=tid)
        await self.tool(rest, parent=tid)
        summary = "The sub-agent read README.md."
        await self.say(summary, parent=tid)
        content = [acp.tool_content(text_block(summary))]
        await self.send(acp.update_tool_call(tid, status="completed", content=content, raw_output={"result": summary}))
        return "cancelled" if self.cancel.is_set() else None

    async def slow(self, rest: str) -> str | None:
        for i in range(100):
            if self.cancel.is_set():
                return "cancelled"
            self.tokens += 1
            await self.send(update_agent_message_text(f"tick {i + 1}. "))
            try:
                await asyncio.wait_for(self.cancel.wait(), 0.1)
            except asyncio.TimeoutError:
                pass
        return "cancelled" if self.cancel.is_set() else None


class MatrixAgent(ScriptAgent):
    turns = 0

    async def prompt(self, session_id: str, prompt: list[Any], **kw: Any) -> Any:
        words, rest = parse(" ".join(getattr(b, "text", None) or "" for b in prompt))
        MatrixAgent.turns += 1
        run = Turn(self, session_id, MatrixAgent.turns, self.cancelled.setdefault(session_id, asyncio.Event()))
        run.cancel.clear()
        steps = [w for w in STEPS if w in words]
        if "think" in words:
            await run.say(thought_text(rest), thought=True)
        if "progress" in words:
            await run.send(_meta(update_agent_thought_text("Working on it."), progress=True))
        if "plan" in words:
            run.plan = [[f"Step: {s}", "pending"] for s in steps or ["answer"]]
            await run.plan_status(-1)
        for i, step in enumerate(steps):
            await run.plan_status(i, "in_progress")
            if await getattr(run, step)(rest) == "cancelled":
                return PromptResponse(stop_reason="cancelled")
            await run.plan_status(i, "completed")
        if run.cancel.is_set():
            return PromptResponse(stop_reason="cancelled")
        if "fail" in words:
            raise RequestError(-32603, "the agent failed on purpose (prompt began with fail:)")
        if "refuse" in words:
            await run.say("I won't do that.")
            return PromptResponse(stop_reason="refusal")
        if "data" in words:
            data = TextResourceContents(uri="data:application/json", mime_type="application/json", text=json.dumps(DATA))
            await run.send(update_agent_message(EmbeddedResourceContentBlock(type="resource", resource=data)))
        if "image" in words:
            await run.send(update_agent_message(acp.image_block(PIXEL_PNG, "image/png")))
            link = ResourceContentBlock(type="resource_link", uri="file:///README.md", name="README.md", mime_type="text/markdown")
            await run.send(update_agent_message(link))
        await run.say(f"You said: {rest}" if rest else "Hello from the matrix agent.")
        if not steps and "plan" in words:
            await run.plan_status(0, "completed")
        await run.send(acp.schema.UsageUpdate(session_update="usage_update", used=run.tokens, size=200_000))
        if run.cancel.is_set():
            return PromptResponse(stop_reason="cancelled")
        if "max_tokens" in words:
            return PromptResponse(stop_reason="max_tokens")
        if "max_turns" in words:
            return PromptResponse(stop_reason="max_turn_requests")
        return PromptResponse(stop_reason="end_turn")


def main() -> None:
    asyncio.run(acp.run_agent(MatrixAgent(_args())))  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
