"""One A2A task projected from canonical events, sans-I/O (the server side; a2a.proto ↔ ACP schema).

A task is one turn (the task id is the turn id) or, when a turn ended interrupted
(input_required, auth_required), that turn and the turns that continue it.
`TaskProjector` is fed the task's canonical events in order, live from the session
or replayed from the store, and returns the A2A 1.0 stream events each one makes;
`snapshot()` is the Task at that point (status, artifacts, history).

Mapping:
- The agent's reply (message chunks) → artifact updates, one artifact per reply
  message: the first chunk `append: false`, the next ones `append: true`; every
  artifact still open gets `lastChunk: true` when the turn ends. Reply artifacts
  are all named "response", in every task of a context, so a refinement keeps the
  name (seed 004). `ArtifactUpdated` (an A2A back) keeps its own id, name, chunking.
- Thoughts, tool calls, plans and whatever a sub-agent says → WORKING status
  updates whose message is tagged `metadata.agentBridge.kind`; never artifacts.
  Progress (`ProgressReported`: status text about the work) → a WORKING status update
  whose message holds its content (a2a.proto `TaskStatus.message`, role agent), kept
  as the task's status message while it works (GetTask shows it).
- History (a2a.proto `Task.history`): the client's messages as it sent them (parts,
  messageId, metadata, extensions: `sent`, by turn id for a prompt and question id for
  an answer; rebuilt from the canonical events when not kept), the agent's questions
  (the INPUT_REQUIRED status messages) and its status messages, in order.
- A question → INPUT_REQUIRED; the status message is the question text and a data
  part `{"questionId", "kind", "options": [{"id", "label", "kind"?, "description"?}],
  "multiSelect", "allowText", "header"?, "schema"?}`: the shape the A2A back reads
  (bridge/codecs/a2a.py `question_for`), so one agent-bridge can front another.
  `bridge.codecs.a2a_answer` reads the client's reply; once answered → WORKING.
- Stop reasons (a2a.proto `TaskState` ↔ ACP `StopReason`): end_turn → COMPLETED; max_tokens, max_turn_requests →
  COMPLETED with `metadata.agentBridge.stopReason`; refusal → REJECTED; cancelled →
  CANCELED; failed → FAILED (status message: the error), or AUTH_REQUIRED when the
  back needs the user to sign in; input_required → INPUT_REQUIRED (the next message
  on the task continues it in a new turn).
"""

from __future__ import annotations

from typing import Any

from bridge.codecs.a2a import META_KEY, parts_from_blocks
from bridge.codecs.a2a_task_parts import AUTH_ERROR_KIND, Artifact, Entry, final_state, iso_time, tag
from bridge.core.content import ContentBlock, TextContent
from bridge.core.events import (
    ArtifactUpdated,
    Event,
    MessageChunk,
    PlanUpdated,
    ProgressReported,
    Question,
    QuestionAnswered,
    QuestionAsked,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
    TurnStarted,
)
from bridge.schema import a2a as s

__all__ = [
    "AUTH_ERROR_KIND",
    "REPLY_ARTIFACT_NAME",
    "STOP_STATES",
    "TaskProjector",
    "final_state",
    "iso_time",
]

REPLY_ARTIFACT_NAME = "response"
STOP_STATES = s.TERMINAL_STATES | s.INTERRUPTED_STATES  # where a blocking call returns and streams end
_S = s.TaskState

class TaskProjector:
    """One task as A2A sees it; `feed` every canonical event of its turns, in order."""

    def __init__(
        self, task_id: str, context_id: str, *, message_ids: dict[str, str] | None = None, refs: list[str] | None = None,
        quoted: int = 0, sent: dict[str, s.Message] | None = None,
    ) -> None:  # fmt: skip
        self.task_id = task_id
        self.context_id = context_id
        self.state = _S.SUBMITTED
        self.timestamp = 0.0
        self.status_message: s.Message | None = None
        self.turns: list[str] = []
        self.current_turn: str | None = None  # the turn running now (None between turns)
        self.questions: dict[str, Question] = {}  # open, oldest first
        # Client message ids, by turn id (a prompt) or question id (an answer).
        self.message_ids = message_ids if message_ids is not None else {}
        # The client's messages as sent, by turn id (a prompt) or question id (an answer).
        self.sent = sent if sent is not None else {}
        # The first message's referenceTaskIds, and how many blocks quoting them the
        # bridge put before its prompt (for the agent, not the history).
        self.refs = refs
        self.quoted = quoted
        self._history: dict[str, Entry] = {}
        self._artifacts: dict[str, Artifact] = {}
        self._tools: dict[str, dict[str, Any]] = {}
        self._status_meta: dict[str, Any] | None = None

    # -- reading -----------------------------------------------------------------------
    @property
    def open_question(self) -> Question | None:
        return next(iter(self.questions.values()), None)

    @property
    def stopped(self) -> bool:
        """Terminal or interrupted: a blocking call returns, a stream ends."""
        return self.state in STOP_STATES

    def snapshot(self, *, history_length: int | None = None, include_artifacts: bool = True) -> s.Task:
        history: list[s.Message] | None = None
        if history_length != 0:
            entries = list(self._history.values())
            if history_length is not None:
                entries = entries[-history_length:]
            history = [self._message(e) for e in entries] or None
        artifacts = [a.build() for a in self._artifacts.values()] if include_artifacts and self._artifacts else None
        return s.Task(
            id=self.task_id,
            context_id=self.context_id,
            status=self._status(),
            artifacts=artifacts,
            history=history,
            metadata=self._status_meta,
        )

    # -- writing -----------------------------------------------------------------------
    def begin(self, turn_id: str, prompt: list[ContentBlock], ts: float, *, message_id: str | None = None,
              meta: dict[str, Any] | None = None) -> None:  # fmt: skip
        """A turn of this task starts with this prompt (the user message goes into history)."""
        if turn_id in self.turns:
            return
        self.turns.append(turn_id)
        first = turn_id == self.task_id
        sent = self.sent.get(turn_id)
        if sent is not None:
            self._history[f"u:{turn_id}"] = Entry.sent(sent)
        else:
            mid = self.message_ids.get(turn_id) or message_id or f"{turn_id}-user"
            entry = self._history[f"u:{turn_id}"] = Entry(mid, s.ROLE_USER, (meta or {}).get("metadata"))
            entry.parts = parts_from_blocks(prompt[self.quoted :] if first else prompt)
            entry.refs = self.refs if first else None
            entry.extensions = (meta or {}).get("extensions")
        if not self.timestamp:
            self.timestamp = ts

    def feed(self, event: Event, ts: float) -> list[s.StreamResponse]:
        if isinstance(event, MessageChunk):
            if event.thought or event.parent_tool_call_id is not None:
                return self._progress_chunk(event, ts)
            return self._reply_chunk(event)
        if isinstance(event, ArtifactUpdated):
            return self._artifact_event(event)
        if isinstance(event, ProgressReported):
            return [self._set(_S.WORKING, self._progress(event), ts, keep=True)]
        if isinstance(event, TurnStarted):
            self.begin(event.turn_id, event.prompt, ts, message_id=event.message_id, meta=event.meta)
            self.current_turn = event.turn_id
            self._status_meta = None
            return [self._set(_S.WORKING, None, ts)]
        if isinstance(event, (ToolCallStarted, ToolCallUpdated)):
            return [self._set(_S.WORKING, self._tool(event), ts)]
        if isinstance(event, PlanUpdated):
            return [self._set(_S.WORKING, self._plan(event), ts)]
        if isinstance(event, QuestionAsked):
            q = event.question
            self.questions[q.id] = q
            if len(self.questions) > 1:
                return []  # the client answers the oldest first; this one is asked next
            return [self._set(_S.INPUT_REQUIRED, self._asked(q), ts)]
        if isinstance(event, QuestionAnswered):
            return self._answered(event, ts)
        if isinstance(event, TurnEnded):
            return self._ended(event, ts)
        return []  # usage, commands, options: nothing A2A shows

    def feed_canceled(self, ts: float) -> s.StreamResponse:
        """An interrupted task whose turn is over is canceled: nothing runs to stop (A2A spec §3, CancelTask)."""
        self.questions.clear()
        self._status_meta = None
        return self._set(_S.CANCELED, None, ts)

    # -- internals ---------------------------------------------------------------------
    def _status(self) -> s.TaskStatus:
        return s.TaskStatus(state=self.state, message=self.status_message, timestamp=iso_time(self.timestamp) if self.timestamp else None)

    def _set(self, state: str, message: s.Message | None, ts: float, *, keep: bool = False) -> s.StreamResponse:
        """A status update; the status message is kept while the task waits on it, failed,
        or (`keep`) says how the work goes."""
        self.state = state
        self.timestamp = ts
        self.status_message = message if keep or state in (_S.INPUT_REQUIRED, _S.AUTH_REQUIRED, _S.FAILED) else None
        status = s.TaskStatus(state=state, message=message, timestamp=iso_time(ts))
        update = s.TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id, status=status, metadata=self._status_meta)
        return s.StreamResponse(status_update=update)

    def _message(self, e: Entry) -> s.Message:
        parts = ([s.Part(text="".join(e.texts))] if e.texts else []) + e.parts
        return s.Message(
            message_id=e.message_id,
            role=e.role,
            parts=parts or [s.Part(text="")],
            context_id=self.context_id,
            task_id=self.task_id,
            metadata=e.metadata,
            extensions=e.extensions or None,
            reference_task_ids=e.refs or None,
        )

    def _agent_message(self, mid: str, parts: list[s.Part], metadata: dict[str, Any]) -> s.Message:
        return s.Message(
            message_id=mid, role=s.ROLE_AGENT, parts=parts, context_id=self.context_id, task_id=self.task_id, metadata=metadata
        )

    def _reply_chunk(self, event: MessageChunk) -> list[s.StreamResponse]:
        key = event.message_id or self.current_turn or self.task_id
        art = self._artifacts.get(key)
        append = art is not None
        if art is None:
            art = self._artifacts[key] = Artifact(key, REPLY_ARTIFACT_NAME)
        art.open = True
        c = event.content
        part = s.Part(text=c.text) if isinstance(c, TextContent) and c.meta is None else parts_from_blocks([c])[0]
        art.add(part)
        artifact = s.Artifact(artifact_id=art.id, parts=[part], name=art.name)
        return [s.StreamResponse(artifact_update=s.TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, artifact=artifact, append=append
        ))]  # fmt: skip

    def _artifact_event(self, event: ArtifactUpdated) -> list[s.StreamResponse]:
        art = self._artifacts.get(event.artifact_id)
        known = art is not None
        if art is None:
            art = self._artifacts[event.artifact_id] = Artifact(event.artifact_id, event.name)
        elif not event.append:
            art.parts = []  # a whole new version of the artifact
        if event.name:
            art.name = event.name
        parts = parts_from_blocks(event.parts)
        for p in parts:
            art.add(p)
        art.open = not event.last
        artifact = s.Artifact(artifact_id=art.id, parts=parts or [s.Part(text="")], name=art.name)
        update = s.TaskArtifactUpdateEvent(
            task_id=self.task_id, context_id=self.context_id, artifact=artifact, append=event.append and known, last_chunk=event.last
        )
        return [s.StreamResponse(artifact_update=update)]

    def _progress_chunk(self, event: MessageChunk, ts: float) -> list[s.StreamResponse]:
        kind = "thought" if event.thought else "subagent"
        mid = event.message_id or f"{self.current_turn or self.task_id}-{kind}"
        key = f"p:{mid}:{event.parent_tool_call_id or ''}:{kind}"
        meta = tag(kind, parentToolCallId=event.parent_tool_call_id)
        entry = self._history.get(key)
        if entry is None:
            entry = self._history[key] = Entry(mid, s.ROLE_AGENT, meta)
        c = event.content
        if isinstance(c, TextContent):
            entry.texts.append(c.text)
            part = s.Part(text=c.text)
        else:
            part = parts_from_blocks([c])[0]
            entry.parts.append(part)
        return [self._set(_S.WORKING, self._agent_message(mid, [part], meta), ts)]

    def _progress(self, event: ProgressReported) -> s.Message:
        mid = event.message_id or f"{self.current_turn or self.task_id}-progress-{len(self._history)}"
        meta = tag("progress")
        entry = self._history.setdefault(f"progress:{mid}", Entry(mid, s.ROLE_AGENT, meta))
        parts = parts_from_blocks(event.content) or [s.Part(text="")]
        for b, part in zip(event.content, parts, strict=False):
            if isinstance(b, TextContent):
                entry.texts.append(b.text)  # joined once when history is read, like thought chunks
            else:
                entry.parts.append(part)
        return self._agent_message(mid, parts, meta)

    def _asked(self, q: Question) -> s.Message:
        """The question's status message, kept in history where it was asked."""
        message = self._question_message(q)
        entry = self._history.setdefault(f"q:{q.id}", Entry(message.message_id, s.ROLE_AGENT, message.metadata))
        entry.parts = message.parts
        return message

    def _tool(self, event: ToolCallStarted | ToolCallUpdated) -> s.Message:
        info = self._tools.setdefault(event.tool_call_id, {"id": event.tool_call_id})
        for field in ("title", "kind", "status"):
            value = getattr(event, field)
            if value is not None:
                info[field] = value
        if isinstance(event, ToolCallStarted) and event.name:
            info["name"] = event.name
        if event.raw_input is not None:
            info["input"] = event.raw_input
        if isinstance(event, ToolCallUpdated) and event.raw_output is not None:
            info["output"] = event.raw_output
        if event.content:
            texts = [c.content.text for c in event.content if isinstance(c.content, TextContent)]
            diffs = [c.path for c in event.content if c.type == "diff" and c.path]
            if texts:
                info["content"] = "".join(texts)
            if diffs:
                info["edits"] = diffs
        text = f"{info.get('title') or 'Tool call'} ({info.get('status', 'pending')})"
        meta = tag("tool_call", parentToolCallId=event.parent_tool_call_id)
        parts = [s.Part(text=text), s.Part(data={"toolCall": dict(info)})]
        entry = self._history.setdefault(f"tool:{event.tool_call_id}", Entry(f"tool-{event.tool_call_id}", s.ROLE_AGENT, meta))
        entry.parts = parts
        return self._agent_message(entry.message_id, parts, meta)

    def _plan(self, event: PlanUpdated) -> s.Message:
        entries = [{"content": e.content, "priority": e.priority, "status": e.status} for e in event.entries]
        text = "\n".join(f"[{e.status}] {e.content}" for e in event.entries) or "(empty plan)"
        meta = tag("plan")
        parts = [s.Part(text=text), s.Part(data={"plan": entries})]
        entry = self._history.setdefault(f"plan:{self.current_turn}", Entry(f"{self.current_turn}-plan", s.ROLE_AGENT, meta))
        entry.parts = parts
        return self._agent_message(entry.message_id, parts, meta)

    def _question_message(self, q: Question) -> s.Message:
        data: dict[str, Any] = {"questionId": q.id, "kind": q.kind}
        if q.options:
            data["options"] = [
                {k: v for k, v in (("id", o.id), ("label", o.label), ("kind", o.kind), ("description", o.description)) if v is not None}
                for o in q.options
            ]
        data["multiSelect"] = q.multi_select
        data["allowText"] = q.allow_text or q.kind == "form"
        if q.header:
            data["header"] = q.header
        if q.schema is not None:
            data["schema"] = q.schema
        if q.tool_call_id:
            data["toolCallId"] = q.tool_call_id
        meta = tag("question")
        return self._agent_message(q.id, [s.Part(text=q.prompt), s.Part(data=data)], meta)

    def _answered(self, event: QuestionAnswered, ts: float) -> list[s.StreamResponse]:
        question = self.questions.pop(event.question_id, None)
        if question is None:
            return []
        sent = self.sent.get(event.question_id)
        if sent is not None and event.by == "user" and not event.cancelled:
            self._history[f"a:{event.question_id}"] = Entry.sent(sent)
        elif event.by == "user" and not event.cancelled:
            labels = [o.label for o in question.options if o.id in event.selected]
            text = ", ".join(labels + ([event.text] if event.text else []))
            mid = self.message_ids.get(event.question_id) or f"{event.question_id}-answer"
            entry = self._history[f"a:{event.question_id}"] = Entry(mid, s.ROLE_USER)
            data: dict[str, Any] = {"selected": list(event.selected)}
            if event.text is not None:
                data["text"] = event.text
            if event.values is not None:
                data["values"] = event.values
            entry.parts = [s.Part(text=text or "(answered)"), s.Part(data=data)]
        if self.state != _S.INPUT_REQUIRED:
            return []
        nxt = self.open_question
        if nxt is not None:
            return [self._set(_S.INPUT_REQUIRED, self._asked(nxt), ts)]
        return [self._set(_S.WORKING, None, ts)]

    def _ended(self, event: TurnEnded, ts: float) -> list[s.StreamResponse]:
        out: list[s.StreamResponse] = []
        for art in self._artifacts.values():
            if art.open:
                art.open = False
                closing = s.Artifact(artifact_id=art.id, parts=[s.Part(text="")], name=art.name)
                out.append(s.StreamResponse(artifact_update=s.TaskArtifactUpdateEvent(
                    task_id=self.task_id, context_id=self.context_id, artifact=closing, append=True, last_chunk=True
                )))  # fmt: skip
        self.questions.clear()
        self.current_turn = None
        state, noted = final_state(event.stop_reason, event.error.kind if event.error else None)
        self._status_meta = {META_KEY: {"stopReason": noted}} if noted else None
        message = None
        if event.error is not None:
            message = self._agent_message(f"{event.turn_id}-error", [s.Part(text=event.error.message)], tag("error"))
        elif state == _S.INPUT_REQUIRED:
            message = self._agent_message(f"{event.turn_id}-input", [s.Part(text="The agent needs more input.")], tag("question"))
            self._history.setdefault(f"q:{event.turn_id}-input", Entry(message.message_id, s.ROLE_AGENT, message.metadata)).parts = message.parts
        out.append(self._set(state, message, ts))
        return out
