"""What an A2A agent says about one task, as canonical events, sans-I/O (the client side).

`TaskTracker` turns what an agent says about one task (stream events, Task
snapshots from `GetTask` or a re-subscription, a bare Message) into canonical
events, each piece of content exactly once: it remembers which message ids and
which artifact parts already went out, so a snapshot taken after a broken stream
adds only what was missed (A2A spec §3, SubscribeToTask: a re-attached stream
starts with the Task as it stands).

Status messages of INPUT_REQUIRED, AUTH_REQUIRED and FAILED are not chat: they are a
question or an error, which the back shows otherwise (`bridge.codecs.a2a`). Those of
SUBMITTED and WORKING are status text about the work (a2a.proto `TaskStatus.message`),
not the answer: `ProgressReported`, never a `MessageChunk`, so the reply that follows
is not glued to them. A snapshot's agent messages in `history` are earlier status
messages (where a2a-sdk's task store keeps them), read the same way.
"""

from __future__ import annotations

from bridge.codecs.a2a import QUIET_STATES, block_from_part
from bridge.core.content import ContentBlock, TextContent
from bridge.core.events import ArtifactUpdated, Event, MessageChunk, ProgressReported
from bridge.schema import a2a as s

__all__ = ["TaskTracker"]

_PROGRESS_STATES = frozenset({s.TaskState.SUBMITTED, s.TaskState.WORKING})


def _fingerprint(p: s.Part) -> str | None:
    return p.text if p.text is not None else None


class TaskTracker:
    """One task as the session has seen it; feed it everything, emit what it returns."""

    def __init__(self) -> None:
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.state: str | None = None
        self.status: s.TaskStatus | None = None
        self.reply: s.Message | None = None  # a bare Message answered instead of a task
        self._artifacts: dict[str, list[str | None]] = {}  # artifact id → fingerprint per emitted part
        self._messages: set[str] = set()

    def seen(self, message_id: str) -> None:
        if message_id:
            self._messages.add(message_id)

    def finished(self, *, stale: str | None = None) -> bool:
        """Terminal, interrupted (unless by the question `stale` we just answered), or replied."""
        if self.reply is not None:
            return True
        if self.state in s.TERMINAL_STATES:
            return True
        if self.state in s.INTERRUPTED_STATES:
            msg = self.status.message if self.status else None
            return stale is None or msg is None or msg.message_id != stale
        return False

    def feed(self, event: s.StreamResponse) -> list[Event]:
        if event.artifact_update is not None:
            u = event.artifact_update
            self._ids(u.task_id, u.context_id)
            return self._artifact(u.artifact, append=u.append, last=u.last_chunk)
        if event.status_update is not None:
            u2 = event.status_update
            self._ids(u2.task_id, u2.context_id)
            return self._status(u2.status)
        if event.task is not None:
            return self.feed_task(event.task)
        if event.message is not None:
            return self.feed_message(event.message)
        return []

    def feed_task(self, task: s.Task) -> list[Event]:
        """A snapshot: only what was not emitted yet comes out."""
        self._ids(task.id, task.context_id)
        out: list[Event] = []
        for m in task.history or ():
            if m.role == s.ROLE_AGENT and m.message_id and m.message_id not in self._messages:
                if self.status is None or self.status.message is None or m.message_id != self.status.message.message_id:
                    out += self._message(m, progress=True)
        for a in task.artifacts or ():
            out += self._artifact(a, append=False, last=False)
        out += self._status(task.status, snapshot=True)
        return out

    def feed_message(self, msg: s.Message) -> list[Event]:
        """A bare Message reply: the whole answer; the turn ends (A2A `docs/topics/life-of-a-task.md`)."""
        if msg.context_id:
            self.context_id = msg.context_id
        if msg.task_id and self.task_id is None:
            self.task_id = msg.task_id
        self.reply = msg
        return self._message(msg)

    # -- internals -----------------------------------------------------------------------
    def _ids(self, task_id: str, context_id: str) -> None:
        if task_id:
            self.task_id = task_id
        if context_id:
            self.context_id = context_id

    def _status(self, status: s.TaskStatus, *, snapshot: bool = False) -> list[Event]:
        self.state = status.state
        self.status = status
        msg = status.message
        if msg is None:
            return []
        if status.state in QUIET_STATES:
            self.seen(msg.message_id)  # shown as a question or an error, never again as chat
            return []
        if snapshot and not msg.message_id:
            return []  # cannot tell whether it was shown already
        return self._message(msg, progress=status.state in _PROGRESS_STATES)

    def _message(self, msg: s.Message, *, progress: bool = False) -> list[Event]:
        if msg.message_id:
            if msg.message_id in self._messages:
                return []
            self._messages.add(msg.message_id)
        mid = msg.message_id or None
        if progress:
            return [ProgressReported(content=[block_from_part(p) for p in msg.parts], message_id=mid)] if msg.parts else []
        return [MessageChunk(content=block_from_part(p), message_id=mid) for p in msg.parts]

    def _artifact(self, art: s.Artifact, *, append: bool, last: bool) -> list[Event]:
        aid = art.artifact_id
        emitted = self._artifacts.get(aid)
        known = emitted is not None
        if emitted is None:
            emitted = self._artifacts[aid] = []
        out: list[ArtifactUpdated] = []
        if append and known:
            for p in art.parts:
                emitted.append(_fingerprint(p))
                out.append(ArtifactUpdated(artifact_id=aid, parts=[block_from_part(p)], name=art.name, append=True))
        else:
            # The whole artifact (a first chunk, a replacement or a snapshot): emit what is
            # new. A text part that grew (agents that resend the text so far) yields its tail.
            for i, p in enumerate(art.parts):
                if i < len(emitted):
                    old = emitted[i]
                    if p.text is not None and old is not None and len(p.text) > len(old) and p.text.startswith(old):
                        emitted[i] = p.text
                        block: ContentBlock = TextContent(text=p.text[len(old) :])
                        out.append(ArtifactUpdated(artifact_id=aid, parts=[block], name=art.name, append=True))
                    continue
                emitted.append(_fingerprint(p))
                first = not known and not out
                out.append(ArtifactUpdated(artifact_id=aid, parts=[block_from_part(p)], name=art.name, append=not first))
        if last and out:
            out[-1].last = True
        return list(out)
