"""The store interface and its records.

Events are stored in batches: the session encodes a run of consecutive events
(`bridge.core.events.encode_events`) into one blob, stored with its first and last
sequence numbers. Replay reads the batches whose `last_seq` is past the point the
reader has seen, and filters inside the first one. One insert per batch keeps the
store off the streaming hot path. A session writes with `save`: its record, the turn
records that changed and the batch, in one transaction.

Everything a read needs is indexed, so no read or write costs more as a session's
history or the store grows (issue 16): events are appended in batches and read from
the batch holding the first one wanted (`read_batches(after_seq=...)`); turns are rows
read by their first sequence number; each session row keeps a summary (turn count,
the last stop reason) that listing shows without reading turns; a front's typed state
(`SessionRecord.states`, bridge/session/state.py) is one row per front, written only
when it changed; A2A tasks are rows of their own (`TaskRecord`), listed by status time
in the store.

Every method is async because the SQLite implementation runs in a thread of its own.

Operators' calls (`agent-bridge store`, bridge/store_cli.py, and the daemon's retention,
bridge/store/retention.py): `stats` counts without reading a blob; `prunable` and
`prune` find and delete old sessions in bounded chunks, never one with an open turn;
`vacuum` gives free pages back to the file system.

A turn cut short (the process running it was killed: `kill -9`, OOM, power) has a
record with no end and an event log with no `TurnEnded`. `close_cut_turns` ends it
in the store as a live end would (`cut_turn_end`): the record gets `failed` with
`CUT_TURN_ERROR`, and a `TurnEnded` with the session's next sequence number is
appended to its log, so every front's replay ends it exactly like a live end. A
store knows which turns it may close: each open store is an *owner*, and a turn
whose owner still runs (another process sharing the state directory) is left alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import msgspec

from bridge.core.events import StopReason, TurnEnded, TurnError, encode_events
from bridge.store.visible import Visible

__all__ = [
    "CUT_META_KEY",
    "CUT_TASK_STATE",
    "CUT_TURN_ERROR",
    "SessionRecord",
    "Store",
    "StoreStats",
    "StoredBatch",
    "TaskPage",
    "TaskRecord",
    "TurnRecord",
    "cut_turn_end",
]

# What a cut turn ended with. `kind` "interrupted" is what the A2A front already
# shows for such a turn, and what the chat projection renders as `interrupted`.
CUT_TURN_ERROR = TurnError(message="the daemon stopped during this turn", kind="interrupted")
# `TurnRecord.meta` key set on a turn closed by `close_cut_turns` (REST status).
CUT_META_KEY = "cut"
# The state a task whose running turn was cut is left in (A2A `TASK_STATE_FAILED`, what
# the A2A front shows for such a task): the store's one word of the A2A front's states.
CUT_TASK_STATE = "TASK_STATE_FAILED"


class SessionRecord(msgspec.Struct, kw_only=True):
    session_id: str
    route: str
    cwd: str = ""
    # The front whose client opened it: "acp", "chat", "a2a", "mcp" or "cli" (None: unknown,
    # a session stored before schema 4).
    front: str | None = None
    title: str | None = None
    created_at: float  # unix seconds
    updated_at: float
    # The peer's own id for this conversation (A2A contextId, chat session_id, ACP sessionId).
    back_ref: str | None = None
    # Route option values chosen in this session.
    options: dict[str, str] = {}
    # Small things a front or back keeps beside the session, set once (JSON-able):
    # the ACP editor's `mcpServers`. What grows goes in `states` or `TaskRecord`s.
    meta: dict[str, object] = {}
    last_seq: int = 0
    closed: bool = False
    # The summary listing shows without reading turns, kept by the journal.
    turn_count: int = 0
    # The last turn's stop reason (a StopReason value); None before the first turn ends
    # and while a turn runs.
    last_stop: str | None = None
    last_cut: bool = False  # ... and it was cut short (closed by `close_cut_turns`)
    # Each front's typed state by its key (bridge/session/state.py), as JSON-able
    # builtins; stored one row per key, each written only when it changed.
    states: dict[str, dict[str, object]] = {}

    # `meta` holds what fronts keep, webhook tokens among it: no repr shows it (STYLE.md rule 21).
    def __repr__(self) -> str:
        return f"SessionRecord(session_id={self.session_id!r}, route={self.route!r}, last_seq={self.last_seq}, closed={self.closed})"

    def __rich_repr__(self) -> Iterator[tuple[str, object]]:
        yield "session_id", self.session_id
        yield "route", self.route
        yield "last_seq", self.last_seq
        yield "closed", self.closed


class TurnRecord(msgspec.Struct, kw_only=True):
    turn_id: str
    session_id: str
    started_at: float
    first_seq: int
    ended_at: float | None = None
    last_seq: int | None = None
    # None while running; else a StopReason value ("end_turn", "failed", ...).
    stop_reason: str | None = None
    error: str | None = None
    meta: dict[str, object] = {}
    # A front's own stream position where this turn starts (the chat front's frame
    # `sequence` before its `chat:start`), so a replay can start at the turn holding a
    # position instead of at the first event: `Store.turn_at_stream_seq`.
    stream_seq: int | None = None


class TaskRecord(msgspec.Struct, kw_only=True):
    """An A2A task (bridge/fronts/a2a/state.py): its own row, written when it changes,
    listed by `(status_ts, task_id)` with its filters in the store."""

    task_id: str  # the id of its first turn
    session_id: str  # the session running it (a context's primary or a side session)
    route: str
    context_id: str
    created_at: float
    turn_id: str  # its latest turn (a continuation adds turns)
    state: str  # the A2A front's TaskState name
    status_ts: float
    # The rest of what the A2A front keeps of it (JSON-able): message ids, messages
    # as sent, references, push configs. Written with the row, never read by listing.
    data: dict[str, object] = {}

    # `data` holds webhook tokens: no repr shows it (STYLE.md rule 21).
    def __repr__(self) -> str:
        return f"TaskRecord(task_id={self.task_id!r}, state={self.state!r})"

    def __rich_repr__(self) -> Iterator[tuple[str, object]]:
        yield "task_id", self.task_id
        yield "state", self.state


class TaskPage(msgspec.Struct, kw_only=True, frozen=True):
    tasks: list[TaskRecord]
    total: int  # every task matching the filters, whatever the page
    # The (status_ts, task_id) of the page's last task when more follow, else None.
    next: tuple[float, str] | None = None


class StoreStats(msgspec.Struct, kw_only=True, frozen=True):
    """What a store holds (`agent-bridge store stats`)."""

    sessions: int
    turns: int
    open_turns: int  # running now, or cut short and not closed yet
    events: int
    batches: int  # stored blobs holding the events
    tasks: int
    schema_version: int | None = None  # None: not a file (MemoryStore)
    file_bytes: int = 0  # the database file
    wal_bytes: int = 0  # its write-ahead log
    free_bytes: int = 0  # free pages inside the file: what `vacuum` gives back


class StoredBatch(msgspec.Struct, kw_only=True, frozen=True):
    first_seq: int
    last_seq: int
    blob: bytes


def cut_turn_end(turn: TurnRecord, session: SessionRecord) -> tuple[TurnRecord, StoredBatch]:
    """The record and the one-event batch that close `turn`, cut short, in `session`
    (whose `last_seq` is the last stored event). The end time is the session's last
    store write, not now: the turn was cut after it, and a restart days later must not
    make the turn look days long."""
    seq = session.last_seq + 1
    ended = TurnEnded(seq=seq, turn_id=turn.turn_id, stop_reason=StopReason.FAILED, error=CUT_TURN_ERROR)
    record = msgspec.structs.replace(
        turn,
        ended_at=max(turn.started_at, session.updated_at),
        last_seq=seq,
        stop_reason=StopReason.FAILED.value,
        error=CUT_TURN_ERROR.message,
        meta={**turn.meta, CUT_META_KEY: True},
    )
    session.turn_count = max(session.turn_count, 1)
    session.last_stop, session.last_cut = StopReason.FAILED.value, True
    return record, StoredBatch(first_seq=seq, last_seq=seq, blob=encode_events([ended]))


class Store(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def put_session(self, record: SessionRecord) -> None:
        """Insert or replace the session record, every one of its `states` with it."""

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The record with its `states`."""

    async def list_sessions(
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0,
        front: str | None = None, status: str | None = None, q: str | None = None, visible: Visible | None = None,
    ) -> tuple[list[SessionRecord], int]:  # fmt: skip
        """Newest `updated_at` first (ties: session_id); returns (page, total matching).
        Records come with their `states`. `front`, `status` and `q` (a title search) are
        the filters of bridge/store/listing.py; a value outside their sets is `InvalidParams`.
        `visible`: only the sessions one caller may see (page and total alike)."""

    async def count_sessions(self, *, visible: Visible | None = None) -> dict[str, dict[str, int]]:
        """{"status": {...}, "front": {...}, "route": {...}}: how many sessions have each
        (bridge/store/listing.py `fold_counts`), from one pass over the session rows
        (those `visible` shows, when given)."""

    async def delete_session(self, session_id: str) -> bool:
        """Remove the session, its turns, tasks, states and events; False if it did not exist."""

    async def get_turn(self, turn_id: str) -> TurnRecord | None: ...

    async def list_turns(
        self, session_id: str, *, after_seq: int = 0, before_seq: int | None = None, limit: int | None = None,
        newest_first: bool = False,
    ) -> list[TurnRecord]:  # fmt: skip
        """Turns whose `first_seq` is in (after_seq, before_seq), oldest first (or newest
        first), at most `limit`."""

    async def turn_at_stream_seq(self, session_id: str, stream_seq: int) -> TurnRecord | None:
        """The last turn whose `stream_seq` is set and at most `stream_seq`."""

    async def set_stream_seqs(self, session_id: str, marks: dict[str, int]) -> None:
        """Set `stream_seq` of stored turns (turn id → position): a front noting where
        earlier turns start in its stream, found by projecting them once."""

    async def save(
        self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None,
        tasks: Sequence[TaskRecord] = (), states: Sequence[str] = (),
    ) -> None:  # fmt: skip
        """In one transaction: the session record (without its states), the turn and task
        records, the batch, and the session's `states` named: what a session writes at each
        flush. A state named but missing from `session.states` is removed."""

    async def read_batches(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None, limit: int | None = None
    ) -> list[StoredBatch]:
        """Batches holding events in (after_seq, through_seq], in order, at most `limit`;
        the first may hold earlier events too (a reader filters them)."""

    async def get_task(self, task_id: str) -> TaskRecord | None: ...

    async def list_tasks(
        self, *, route: str, context_id: str | None = None, state: str | None = None, after_ts: float | None = None,
        limit: int = 50, cursor: tuple[float, str] | None = None, visible: Visible | None = None,
    ) -> TaskPage:  # fmt: skip
        """The route's tasks (or one context's), newest `status_ts` first (ties: task_id),
        with `state` equal and `status_ts` > `after_ts` when given, starting after
        `cursor` (the `next` of the page before). `visible`: only the tasks of sessions
        one caller may see (by its session's owner; page and total alike)."""

    async def close_cut_turns(self) -> list[TurnRecord]:
        """End every turn with no end whose owner is gone (see the module docstring),
        each with its session record and `TurnEnded` batch in one transaction, and its
        task (if a task's latest turn) in `CUT_TASK_STATE`; returns the closed records.
        Called once at start-up, before any session runs."""

    async def stats(self) -> StoreStats:
        """Counts and sizes, read from indexes and the session rows (no event is read)."""

    async def prunable(
        self, before_ts: float, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[tuple[float, str]]:
        """(updated_at, session_id) of the sessions last updated before `before_ts` with
        no open turn, oldest first (ties: session_id descending), starting after `after`
        (the last pair of the page before), at most `limit`."""

    async def prune(self, session_ids: Sequence[str], *, before_ts: float) -> list[str]:
        """Delete, in one transaction, each of `session_ids` that is still last updated
        before `before_ts` with no open turn, with its turns, tasks, states and events;
        returns the ids deleted. A caller bounds the transaction by the ids it gives."""

    async def vacuum(self) -> bool:
        """Give the store's free space back to the file system (SQLite `VACUUM`, then its
        write-ahead log truncated); False when the log could not be truncated yet (another
        process is reading). `Overloaded` when another process holds the write lock past
        the busy timeout."""
