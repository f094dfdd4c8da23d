"""The store interface and its records.

Events are stored in batches: the session encodes a run of consecutive events
(`bridge.core.events.encode_events`) into one blob, stored with its first and last
sequence numbers. Replay reads the batches whose `last_seq` is past the point the
reader has seen, and filters inside the first one. One insert per batch keeps the
store off the streaming hot path. A session writes with `save`: its record, the turn
records that changed and the batch, in one transaction.

Every method is async because the SQLite implementation runs in a thread of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

__all__ = ["SessionRecord", "Store", "StoredBatch", "TurnRecord"]


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
