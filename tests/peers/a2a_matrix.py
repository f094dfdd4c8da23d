"""The pair matrix's A2A agent on a2a-sdk 1.3: the demo's words (tests/matrix/kinds.py)
as far as A2A can say them (`a2a_agent.py --matrix` serves it).

- the answer: text parts streamed as chunks of one artifact (a2a.proto
  `TaskArtifactUpdateEvent`, `append`, `last_chunk`); `data:` a data part, `image:` a
  raw image/png part and a url part, in that artifact;
- `progress:` a WORKING status message (a2a.proto `TaskStatusUpdateEvent`);
- `ask:` / `choose:` INPUT_REQUIRED with the option data agent-bridge reads
  (`{"options": [{"id", "label", "kind"?}], "multiSelect"?, "allowText"?}`), answered by
  the next message on the task (a data part `{"selected": [...], "text"?}`);
- `fail:` FAILED, `refuse:` REJECTED, each with its message; `slow:` chunks until
  CancelTask.

A2A has no thought, plan, tool call, sub-agent, usage or max-tokens stop: those words
only change nothing but the answer, as the matrix's A2A rows say.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types import a2a_pb2 as pb
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict
from matrix_words import DATA, PIXEL_PNG, parse

__all__ = ["MatrixAgent"]

PERMISSION = {
    "options": [
        {"id": "allow", "label": "Allow", "kind": "allow_once"},
        {"id": "allow_always", "label": "Always allow", "kind": "allow_always"},
        {"id": "reject", "label": "Reject", "kind": "reject_once"},
        {"id": "reject_always", "label": "Never allow", "kind": "reject_always"},
    ]
}
COLOURS = {
    "options": [{"id": "red", "label": "Red"}, {"id": "green", "label": "Green"}, {"id": "blue", "label": "Blue"}],
    "multiSelect": True,
    "allowText": True,
}


def _data(value: Any) -> pb.Part:
    return pb.Part(data=ParseDict(value, struct_pb2.Value()))


class _Answer:
    """One artifact streamed in chunks: the turn's answer."""

    def __init__(self, up: TaskUpdater) -> None:
        self.up = up
        self.sent = False

    async def add(self, parts: list[pb.Part], *, last: bool = False) -> None:
        await self.up.add_artifact(parts, artifact_id="answer", name="answer", append=self.sent, last_chunk=last)
        self.sent = True

    async def say(self, text: str) -> None:
        for word in text.split(" "):
            await self.add([pb.Part(text=word + " ")])


class MatrixAgent(AgentExecutor):
    def __init__(self) -> None:
        self.waiting: dict[str, tuple[str, set[str], str]] = {}  # task id → (question word, words, rest)
        self.cancelled: set[str] = set()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        msg = context.message
        task_id, context_id = context.task_id, context.context_id
        assert msg is not None and task_id and context_id
        up = TaskUpdater(event_queue, task_id, context_id)
        out = _Answer(up)
        waiting = self.waiting.pop(task_id, None)
        if waiting is not None:
            await up.start_work()
            word, words, rest = waiting
            await self._answered(out, word, msg)
            await self._finish(up, out, words, rest)
            return
        words, rest = parse(context.get_user_input())
        if context.current_task is None:
            task = pb.Task(id=task_id, context_id=context_id, status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED), history=[msg])
            await event_queue.enqueue_event(task)
        await up.start_work()
        if "progress" in words:
            await up.update_status(pb.TASK_STATE_WORKING, up.new_agent_message([pb.Part(text="Working on it.")]))
        for word, options, prompt in (("ask", PERMISSION, "Edit notes.txt?"), ("choose", COLOURS, "Which colours do you like?")):
            if word in words:
                self.waiting[task_id] = (word, words, rest)
                await up.requires_input(up.new_agent_message([pb.Part(text=prompt), _data(options)]))
                return
        if "slow" in words:
            for i in range(100):
                if task_id in self.cancelled:
                    return
                await out.add([pb.Part(text=f"tick {i + 1}. ")])
                await asyncio.sleep(0.1)
        await self._finish(up, out, words, rest)

    async def _answered(self, out: _Answer, word: str, msg: pb.Message) -> None:
        answer: dict[str, Any] = {}
        for p in msg.parts:
            if p.HasField("data"):
                got = json.loads(json.dumps(MessageToDict(p.data)))
                answer = got if isinstance(got, dict) else {}
        selected = [str(s) for s in answer.get("selected") or ()]
        if word == "ask":
            allowed = bool(selected) and selected[0].startswith("allow")
            await out.say("Edited notes.txt." if allowed else "Understood, I left notes.txt alone.")
            return
        picked = [o["label"] for o in COLOURS["options"] if o["id"] in selected]  # type: ignore[index]
        if answer.get("text"):
            picked.append(str(answer["text"]))
        await out.say(f"You chose: {', '.join(picked)}.")

    async def _finish(self, up: TaskUpdater, out: _Answer, words: set[str], rest: str) -> None:
        if "fail" in words:
            await up.failed(up.new_agent_message([pb.Part(text="the agent failed on purpose (prompt began with fail:)")]))
            return
        if "refuse" in words:
            await up.reject(up.new_agent_message([pb.Part(text="I won't do that.")]))
            return
        if "data" in words:
            await out.add([_data(DATA)])
        if "image" in words:
            image = pb.Part(raw=base64.b64decode(PIXEL_PNG), media_type="image/png", filename="pixel.png")
            link = pb.Part(url="file:///README.md", media_type="text/markdown", filename="README.md")
            await out.add([image, link])
        await out.say("You said:")
        await out.add([pb.Part(text=rest)], last=True)
        await up.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id and context.context_id
        self.cancelled.add(context.task_id)
        self.waiting.pop(context.task_id, None)
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
