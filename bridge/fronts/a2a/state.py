"""What the A2A front keeps: per session a small `A2AContext`, per task a row of its own.

`A2AContext` is stored as `SessionRecord.states["a2a"]` (bridge/session/state.py). Its
presence marks a session the A2A front made (a `contextId` naming any other session is
unknown). It holds only what is small and bounded per session:

- `ctx`: a side session's context (the primary session's id); None on a primary.
- `side`: a primary's side sessions (parallel tasks of one context, bridge/fronts/a2a/tasks.py).
- `held`: the interrupted task waiting in this session for the client's next message.

Each task is a `TaskRecord` row (bridge/store/base.py: its session, context, latest turn,
state and status time), staged with the session's next flush whenever it changes, so no
write grows with the number of tasks a context had (issue 16). Its `data` is an `A2ATask`:
the `turns` after its first (a continuation turn has no row of its own, so its id is no
task), the client's message ids (`mids`, by turn id or question id), the client's
messages as sent (`sent`, by turn id or question id: each up to `SENT_MAX_BYTES`, the
task's newest `SENT_MAX_MESSAGES` within `SENT_BUDGET_BYTES`; the history rebuilds any
other from the events), `refs` (referenceTaskIds), `quoted` (blocks of referenced
replies put before the prompt) and `push` configs.

`Kept` is a task as the front holds it in memory while it runs or was used lately: its
row, its decoded `A2ATask` and its `TaskProjector`, which share the message dicts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import ClassVar

import msgspec

from bridge.core.identity import Identity
from bridge.codecs.a2a_task import TaskProjector
from bridge.schema import a2a as s
from bridge.session import FrontState
from bridge.store import TaskRecord

__all__ = [
    "A2AContext",
    "A2APushConfig",
    "A2ATask",
    "Kept",
    "SENT_BUDGET_BYTES",
    "SENT_MAX_BYTES",
    "SENT_MAX_MESSAGES",
    "decode_task",
]

log = logging.getLogger("bridge.fronts.a2a.front")

_enc = msgspec.json.Encoder()
SENT_MAX_BYTES = 16 * 1024  # a client message kept as sent (it is rewritten with the task's row)
SENT_MAX_MESSAGES = 32  # ... and per task, the newest ones
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
    # Who set it, as its credential said then (subject, issuer, claims): each notification
    # is checked against the route's rules as they are now (bridge/fronts/a2a/push.py).
    # None: made before creators were kept, or with no caller to name.
    creator: Identity | None = None

    # `token` and `credentials` are the receiver's secrets: no repr shows them (STYLE.md rule 21).
    def __repr__(self) -> str:
        return f"A2APushConfig(id={self.id!r}, dialect={self.dialect!r})"

    def __rich_repr__(self) -> Iterator[tuple[str, str]]:
        yield "id", self.id
        yield "dialect", self.dialect


class A2ATask(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A task's `TaskRecord.data` (the field names are those a schema-2 store's tasks had)."""

    turns: list[str] = []
    mids: dict[str, str] = {}
    sent: dict[str, s.Message] = {}
    refs: list[str] = []
    quoted: int = 0
    push: list[A2APushConfig] = []

    def keep_sent(self, key: str, message: s.Message) -> bool:
        """Keep the client's message as sent, unless it is large; this task's oldest ones go
        past `SENT_MAX_MESSAGES` or `SENT_BUDGET_BYTES`. Whether `message` is kept."""
        size = len(_enc.encode(message))
        if size > SENT_MAX_BYTES:
            return False
        kept = [(k, len(_enc.encode(m))) for k, m in self.sent.items()]  # this task's, at most 32
        count, total = len(kept) + 1, sum(n for _, n in kept) + size
        for k, n in kept:  # oldest first
            if count <= SENT_MAX_MESSAGES and total <= SENT_BUDGET_BYTES:
                break
            del self.sent[k]
            count, total = count - 1, total - n
        self.sent[key] = message
        return True


def decode_task(data: dict[str, object]) -> tuple[A2ATask, bool]:
    """A row's `data` as an `A2ATask`, and whether it may be written back: data that does
    not decode (another version's, edited by hand) reads as empty and stays as stored."""
    try:
        return msgspec.convert(data, A2ATask, strict=False), True
    except msgspec.ValidationError as exc:
        log.warning("an A2A task row's data does not decode (%s); read as empty and kept as stored", exc)
        return A2ATask(), False


class A2AContext(FrontState):
    key: ClassVar[str] = "a2a"

    ctx: str | None = None
    side: list[str] = []
    held: str | None = None


class Kept:
    """A task held in memory: its row, its data and its projector (sharing `mids` and `sent`)."""

    __slots__ = ("record", "task", "projector", "writable")

    def __init__(self, record: TaskRecord, task: A2ATask, projector: TaskProjector, *, writable: bool = True) -> None:
        self.record = record  # its columns; `state`, `status_ts` and `data` are made by `row()`
        self.task = task
        self.projector = projector
        self.writable = writable

    @property
    def task_id(self) -> str:
        return self.record.task_id

    def keep_sent(self, key: str, message: s.Message) -> None:
        """The client's message as sent, for the task's history (the projector shares `sent`)."""
        self.task.keep_sent(key, message)

    def row(self) -> TaskRecord:
        """The task's row as it is now, to stage with the session's next flush."""
        p = self.projector
        data = msgspec.to_builtins(self.task) if self.writable else self.record.data
        return msgspec.structs.replace(self.record, state=p.state, status_ts=p.timestamp, data=data)
