"""The store interface and its records.

Events are stored in batches: the session encodes a run of consecutive events
(`bridge.core.events.encode_events`) into one blob, stored with its first and last
sequence numbers. Replay reads the batches whose `last_seq` is past the point the
reader has seen, and filters inside the first one. One insert per batch keeps the
store off the streaming hot path. A session writes with `save`: its record, the turn
records that changed and the batch, in one transaction.

Every method is async because the SQLite implementation runs in a thread of its own.

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

__all__ = ["CUT_META_KEY", "CUT_TURN_ERROR", "SessionRecord", "Store", "StoredBatch", "TurnRecord", "cut_turn_end"]

# What a cut turn ended with. `kind` "interrupted" is what the A2A front already
# shows for such a turn, and what the chat projection renders as `interrupted`.
CUT_TURN_ERROR = TurnError(message="the daemon stopped during this turn", kind="interrupted")
# `TurnRecord.meta` key set on a turn closed by `close_cut_turns` (REST status).
CUT_META_KEY = "cut"


class SessionRecord(msgspec.Struct, kw_only=True):
    session_id: str
    route: str
    cwd: str = ""
    title: str | None = None
    created_at: float  # unix seconds
    updated_at: float
    # The peer's own id for this conversation (A2A contextId, chat session_id, ACP sessionId).
    back_ref: str | None = None
    # Route option values chosen in this session.
    options: dict[str, str] = {}
    # Anything else a front or back keeps beside the session (JSON-able).
    meta: dict[str, object] = {}
    last_seq: int = 0
    closed: bool = False

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
    return record, StoredBatch(first_seq=seq, last_seq=seq, blob=encode_events([ended]))


class Store(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def put_session(self, record: SessionRecord) -> None:
        """Insert or replace the session record."""

    async def get_session(self, session_id: str) -> SessionRecord | None: ...

    async def list_sessions(
        self, *, route: str | None = None, cwd: str | None = None, limit: int = 50, offset: int = 0
    ) -> tuple[list[SessionRecord], int]:
        """Newest `updated_at` first (ties: session_id); returns (page, total matching)."""

    async def delete_session(self, session_id: str) -> bool:
        """Remove the session, its turns and its events; False if it did not exist."""

    async def get_turn(self, turn_id: str) -> TurnRecord | None: ...

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        """Oldest first."""

    async def save(self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None) -> None:
        """Insert or replace the session record and the turn records, and store the
        batch, in one transaction: what a session writes at each flush."""

    async def read_batches(self, session_id: str, *, after_seq: int = 0) -> list[StoredBatch]:
        """Batches with `last_seq > after_seq`, in order."""

    async def close_cut_turns(self) -> list[TurnRecord]:
        """End every turn with no end whose owner is gone (see the module docstring),
        each with its session record and `TurnEnded` batch in one transaction; returns
        the closed records. Called once at start-up, before any session runs."""
