"""The pair matrix's words (tests/matrix/kinds.py) as the Blade-style Socket.IO peer plays
them (`socketio_server.py --matrix`), in Blade's own frames (Blade `api/chat-flow.md`):

thinking and text blocks, a `plan_status` block, tool calls (Read with its path and
line; Edit whose result is a diff), AskUserQuestion with labels only ("Allow", "Always
allow", "Reject", "Never allow"; a multi-select with free text) across the paused
`chat:end`, a fork's child turn (`parent_fork_tool_call_id`), an `image_url` block,
usage on `turn:end`, `chat:end` with `finish_reason` max_turns, the headless result
`{output: <data>}` for `data:`, `system:error` for `fail:`, and `slow:` until `chat:stop`.
Blade has no status item (progress is thinking), no refusal or max-tokens finish, no
link block.

`play(run)` drives one `socketio_server.Run` (its `start`, `patch`, `emit`, `end`).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from matrix_words import DATA, PIXEL_PNG, README_BODY, STEPS, parse, thought_text

__all__ = ["play"]

PERMISSION = [{"label": "Allow"}, {"label": "Always allow"}, {"label": "Reject"}, {"label": "Never allow"}]
COLOURS = [{"label": "Red"}, {"label": "Green"}, {"label": "Blue"}]


async def play(run: Any) -> None:
    await _Matrix(run).main()


class _Matrix:
    def __init__(self, run: Any) -> None:
        self.run = run
        self.words, self.rest = parse(run.text)
        self.tid = ""
        self.plan: list[dict[str, str]] = []

    async def say(self, text: str, kind: str = "text", *, tid: str | None = None, loop: str = "root") -> None:
        content = ""
        for delta in re.findall(r"\S+\s*", text):
            content += delta
            await self.run.patch(tid or self.tid, "add_content", {"type": kind, "content": content, "text_delta": delta}, loop)

    async def plan_status(self, index: int, status: str = "pending") -> None:
        if self.plan:
            if index >= 0:
                self.plan[index]["status"] = status
            await self.run.patch(self.tid, "add_content", {"type": "plan_status", "content": [dict(e) for e in self.plan]})

    async def main(self) -> None:
        run, words, rest = self.run, self.words, self.rest
        self.tid = await run.start()
        steps = [w for w in STEPS if w in words]
        if "think" in words:
            await self.say(thought_text(rest), "thinking")
        if "progress" in words:
            await self.say("Working on it.", "thinking")
        if "plan" in words:
            self.plan = [{"content": f"Step: {s}", "priority": "medium", "status": "pending"} for s in steps or ["answer"]]
            await self.plan_status(-1)
        for i, step in enumerate(steps):
            await self.plan_status(i, "in_progress")
            if await getattr(self, step)() == "stopped":
                return
            await self.plan_status(i, "completed")
        if "fail" in words:
            await run.emit("system:error", {"message": "the agent failed on purpose (prompt began with fail:)",
                                            "code": "provider_error", "detail": None})  # fmt: skip
            await run.emit("turn:end", run.proj(self.tid, status="failed"))
            await run.emit("chat:end", {"status": "failed", "result": None, "finish_reason": "tool_error"})
            return
        if "refuse" in words:
            await self.say("I won't do that.")
            await run.end(self.tid)
            return
        if "image" in words:
            await run.patch(self.tid, "add_content", {"type": "image_url", "content": f"data:image/png;base64,{PIXEL_PNG}"})
        await self.say(f"You said: {rest}")
        if not steps and "plan" in words:
            await self.plan_status(0, "completed")
        await run.end(self.tid, finish="max_turns" if "max_turns" in words else "completed",
                      result={"output": DATA} if "data" in words else None)  # fmt: skip

    async def tool(self, *, tid: str | None = None, loop: str = "root", tag: str = "") -> None:
        tc = f"tc_read_{self.run.n}{tag}"
        args = json.dumps({"path": "README.md", "line": 1})
        await self.run.patch(tid or self.tid, "add_tool_call",
                             {"id": tc, "tool_name": "Read", "display_name": "Read README.md", "arguments": args, "status": "pending"}, loop)  # fmt: skip
        await self.run.patch(tid or self.tid, "set_tool_status", {"tool_call_id": tc, "status": "pending"}, loop)
        await self.run.patch(tid or self.tid, "tool_result", {"tool_call_id": tc, "result": README_BODY, "status": "done"}, loop)

    async def _question(self, question: str, header: str, options: list[dict[str, str]], multi: bool) -> dict[str, Any] | None:
        """AskUserQuestion across Blade's paused `chat:end`; the answer, or None after chat:stop."""
        run, session = self.run, self.run.session
        ask_id = f"tc_ask_{run.n}"
        session.answer = asyncio.get_running_loop().create_future()
        arguments = {"questions": [{"question": question, "header": header, "options": options, "multiSelect": multi}]}
        await run.patch(self.tid, "add_tool_call", {"id": ask_id, "tool_name": "AskUserQuestion", "display_name": "Question",
                                                    "arguments": json.dumps(arguments), "status": "awaiting_answer"})  # fmt: skip
        await run.patch(self.tid, "set_status", {"status": "paused"})
        await run.emit("turn:end", run.proj(self.tid, status="paused"))
        await run.emit("chat:end", {"status": "completed", "result": None, "finish_reason": "completed"})
        try:
            answer: dict[str, Any] = await session.answer
        except asyncio.CancelledError:
            if asyncio.current_task().cancelling():  # type: ignore[union-attr]
                raise
            return None  # chat:stop abandoned it (and ended the run)
        session.answer = None
        await run.emit("chat:start", {})
        self.tid = f"{run.turn_id}-resumed"
        await run.emit("turn:start", run.proj(self.tid))
        await run.patch(self.tid, "tool_result", {"tool_call_id": ask_id, "result": answer, "status": "done"})
        return answer

    async def ask(self) -> str | None:
        tc = f"tc_edit_{self.run.n}"
        args = json.dumps({"path": "notes.txt", "text": self.rest})
        await self.run.patch(self.tid, "add_tool_call",
                             {"id": tc, "tool_name": "Edit", "display_name": "Edit notes.txt", "arguments": args, "status": "pending"})  # fmt: skip
        answer = await self._question("Edit notes.txt?", "Permission", PERMISSION, False)
        if answer is None:
            return "stopped"
        picked = ((answer.get("selections") or {}).get("0") or [None])[0]
        if picked in (0, 1):
            diff = [{"type": "diff", "path": "notes.txt", "old_text": None, "new_text": self.rest or "(empty)"}]
            await self.run.patch(self.tid, "tool_result", {"tool_call_id": tc, "result": diff, "status": "done"})
            await self.say("Edited notes.txt. ")
        else:
            await self.run.patch(self.tid, "tool_result", {"tool_call_id": tc, "result": {"rejected": True}, "status": "error"})
            await self.say("Understood, I left notes.txt alone. ")
        return None

    async def choose(self) -> str | None:
        answer = await self._question("Which colours do you like?", "Colours", COLOURS, True)
        if answer is None:
            return "stopped"
        picked = [COLOURS[i]["label"] for i in (answer.get("selections") or {}).get("0") or [] if 0 <= i < len(COLOURS)]
        custom = (answer.get("custom") or {}).get("0")
        await self.say(f"You chose: {', '.join(picked + ([custom] if custom else []))}. ")
        return None

    async def fork(self) -> str | None:
        run, fork = self.run, f"tc_fork_{self.run.n}"
        await run.patch(self.tid, "add_tool_call", {"id": fork, "tool_name": "Agent", "display_name": "Sub-agent: research",
                                                    "arguments": json.dumps({"prompt": self.rest}), "status": "pending"})  # fmt: skip
        child, loop = f"{run.turn_id}-child", "fork-research"
        await run.emit("turn:start", run.proj(child, parent=fork, loop=loop))
        await self.say("Looking into it in a sub-agent.", "thinking", tid=child, loop=loop)
        await self.tool(tid=child, loop=loop, tag="_child")
        summary = "The sub-agent read README.md."
        await self.say(summary, tid=child, loop=loop)
        await run.emit("turn:end", run.proj(child, status="completed", parent=fork, loop=loop))
        await run.patch(self.tid, "tool_result", {"tool_call_id": fork, "result": summary, "status": "done"})
        return None

    async def slow(self) -> str | None:
        run, content = self.run, ""
        for i in range(100):
            if run.session.stop.is_set():
                await run.patch(self.tid, "set_status", {"status": "interrupted"})
                await run.emit("turn:end", run.proj(self.tid, status="interrupted"))
                await run.emit("chat:end", {"status": "interrupted", "result": None, "finish_reason": "completed"})
                return "stopped"
            content += f"tick {i + 1}. "
            await run.patch(self.tid, "add_content", {"type": "text", "content": content, "text_delta": f"tick {i + 1}. "})
            try:
                await asyncio.wait_for(run.session.stop.wait(), 0.1)
            except asyncio.TimeoutError:
                pass
        return None
