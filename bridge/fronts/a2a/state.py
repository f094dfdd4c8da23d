"""What the A2A front keeps with each session it made: its tasks, push configs and side sessions.

One `A2AContext` per session, stored as `SessionRecord.meta["a2a"]` (bridge/session/state.py;
the on-disk shape is the one this front has always written, so records of an older
daemon read back unchanged). Its presence marks a session the A2A front made: ListTasks
lists only those, and a `contextId` naming any other session is unknown.

- `ctx`: a side session's context (the primary session's id); None on a primary.
- `side`: a primary's side sessions (parallel tasks of one context, bridge/fronts/a2a/tasks.py).
- `held`: the interrupted task waiting in this session for the client's next message.
- `cont`: continuation turn → its task (a task interrupted then resumed spans turns).
- `tasks`: task id → `A2ATask`: its last `state` and `ts` once its turn ended, the `turns`
  after its first, the client's message ids (`mids`), the client's messages as sent
  (`sent`, by turn id or question id, each up to `SENT_MAX_BYTES`, the session's newest
  `SENT_MAX_MESSAGES` within `SENT_BUDGET_BYTES`, since the record is rewritten at every
  turn end: task history shows them so; any other is rebuilt from the events), `refs` (referenceTaskIds),
  `quoted` (blocks of referenced replies put before the prompt) and `push` configs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import msgspec

from bridge.schema import a2a as s
from bridge.session import FrontState

__all__ = ["A2AContext", "A2APushConfig", "A2ATask", "SENT_BUDGET_BYTES", "SENT_MAX_BYTES", "SENT_MAX_MESSAGES"]

_enc = msgspec.json.Encoder()
SENT_MAX_BYTES = 16 * 1024  # a client message kept as sent (it is rewritten with every record)
SENT_MAX_MESSAGES = 32  # ... and per session, the newest ones
SENT_BUDGET_BYTES = 128 * 1024


class A2APushConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A task's webhook as registered (A2A 1.0 `TaskPushNotificationConfig`, specification/a2a.proto),
    with the dialect its client spoke, which decides the body POSTed (bridge/fronts/a2a/push.py)."""

    id: str
    url: str
    dialect: str = "1.0"  # records written before the dialect was kept
    token: str | None = None
    scheme: str | None = None
    credentials: str | None = None

    # `token` and `credentials` are the receiver's secrets: no repr shows them (STYLE.md rule 21).
    def __repr__(self) -> str:
        return f"A2APushConfig(id={self.id!r}, dialect={self.dialect!r})"

    def __rich_repr__(self) -> Iterator[tuple[str, str]]:
        yield "id", self.id
        yield "dialect", self.dialect


class A2ATask(msgspec.Struct, kw_only=True, omit_defaults=True):
    state: str | None = None
    ts: float | None = None
    turns: list[str] = []
    mids: dict[str, str] = {}
    sent: dict[str, s.Message] = {}
    refs: list[str] = []
    quoted: int = 0
    push: list[A2APushConfig] = []


class A2AContext(FrontState):
    key: ClassVar[str] = "a2a"

    ctx: str | None = None
    side: list[str] = []
    held: str | None = None
    cont: dict[str, str] = {}
    tasks: dict[str, A2ATask] = {}

    def task(self, task_id: str) -> A2ATask:
        """The state of `task_id`, made empty if it has none yet."""
        task = self.tasks.get(task_id)
        if task is None:
            task = self.tasks[task_id] = A2ATask()
        return task

    def keep_sent(self, task_id: str, key: str, message: s.Message) -> bool:
        """Keep the client's message as sent, unless it is large; the session's oldest ones (the
        oldest tasks' first) go past `SENT_MAX_MESSAGES` or `SENT_BUDGET_BYTES`. Whether `message` is kept."""
        size = len(_enc.encode(message))
        if size > SENT_MAX_BYTES:
            return False
        kept = [(t, k, len(_enc.encode(m))) for t in self.tasks.values() for k, m in t.sent.items()]
        count, total = len(kept) + 1, sum(n for _, _, n in kept) + size
        for task, k, n in kept:
            if count <= SENT_MAX_MESSAGES and total <= SENT_BUDGET_BYTES:
                break
            del task.sent[k]
            count, total = count - 1, total - n
        self.task(task_id).sent[key] = message
        return True
