"""Records and stores for the store tests: each contract test runs against
MemoryStore, SqliteStore and PgStore alike (`STORE_KINDS`, `opened`; PgStore on a new
database of the test run's PostgreSQL server, the `pg_url` fixture)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bridge.store import SessionRecord, Store, StoredBatch, TaskRecord, TurnRecord
from bridge.store.memory import MemoryStore
from bridge.store.pg import PgStore
from bridge.store.sqlite import SqliteStore

STORE_KINDS = ["memory", "sqlite", "pg"]


def session(sid: str, *, route: str = "claude", cwd: str = "/w", updated_at: float = 1.0, **kw: Any) -> SessionRecord:
    return SessionRecord(session_id=sid, route=route, cwd=cwd, created_at=0.5, updated_at=updated_at, **kw)


def turn(tid: str, sid: str = "s1", *, started_at: float = 1.0, first_seq: int = 1, **kw: Any) -> TurnRecord:
    return TurnRecord(turn_id=tid, session_id=sid, started_at=started_at, first_seq=first_seq, **kw)


def batch(first: int, last: int) -> StoredBatch:
    return StoredBatch(first_seq=first, last_seq=last, blob=f"[{first}..{last}]\x00\xff".encode("latin-1"))


def task(task_id: str, sid: str = "s1", *, route: str = "r", context_id: str | None = None, state: str = "TASK_STATE_COMPLETED",
         status_ts: float = 1.0, **kw: Any) -> TaskRecord:  # fmt: skip
    return TaskRecord(
        task_id=task_id, session_id=sid, route=route, context_id=context_id or sid, created_at=0.5,
        turn_id=kw.pop("turn_id", task_id), state=state, status_ts=status_ts, **kw,
    )  # fmt: skip


def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> Store:
    """A store of `kind`, not open; "pg" needs the test's `request` (for `pg_url`)."""
    if kind == "memory":
        return MemoryStore()
    if kind == "pg":
        assert request is not None, "a PgStore needs the test's request"
        return PgStore(request.getfixturevalue("pg_url"))
    return SqliteStore(str(tmp_path / "state"))


@contextlib.asynccontextmanager
async def opened(kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> AsyncIterator[Store]:
    s = make_store(kind, tmp_path, request)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
