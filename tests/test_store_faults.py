"""What the store's faults and retention must never do: lose a write silently, or bring a
pruned session back half alive."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from bridge.errors import InternalError, Overloaded
from bridge.fronts.a2a.state import A2AContext
from bridge.session import SessionManager
from bridge.store import SessionRecord
from bridge.store import sqlite_conn
from bridge.store.memory import MemoryStore
from bridge.store.retention import prune_older
from bridge.store.sqlite import SqliteStore
from test_session import backs_with, make_config

pytestmark = pytest.mark.trio


async def test_a_write_the_lock_keeps_out_fails_loudly_never_silently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_conn, "BUSY_TIMEOUT_MS", 50)
    store = SqliteStore(str(tmp_path))
    await store.open()
    try:
        record = SessionRecord(session_id="s1", route="demo", created_at=1, updated_at=1)
        await store.save(record)
        other = sqlite3.connect(tmp_path / "bridge.sqlite3", isolation_level=None, timeout=0.05)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        try:
            record.title = "changed"
            with pytest.raises(Overloaded, match="busy"):
                await store.save(record)
        finally:
            other.execute("ROLLBACK")
            other.close()
        stored = await store.get_session("s1")
        assert stored is not None and stored.title is None  # nothing was written, and the caller knew
    finally:
        await store.close()


class GatedStore(MemoryStore):
    """`get_session` waits at `gate` once armed; `save` fails while `failing`."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: trio.Event | None = None
        self.reading = trio.Event()
        self.failing = False

    async def get_session(self, session_id: str) -> SessionRecord | None:
        if self.gate is not None:
            self.reading.set()
            await self.gate.wait()
        return await super().get_session(session_id)

    async def save(self, session: SessionRecord, **kw: Any) -> None:
        if self.failing:
            raise InternalError("sqlite: disk I/O error")
        await super().save(session, **kw)


async def _manager(store: GatedStore, nursery: trio.Nursery) -> SessionManager:
    manager = SessionManager(make_config(), store, backs_with(None))
    await nursery.start(manager.run)
    return manager


async def test_retention_never_deletes_a_session_being_loaded_nor_loads_one_being_deleted() -> None:
    store = GatedStore()
    old = time.time() - 10 * 86400
    for sid in ("loading", "pruned"):
        await store.save(SessionRecord(session_id=sid, route="demo", created_at=old, updated_at=old, states={"chat": {"intent": "x"}}), states=["chat"])
    async with trio.open_nursery() as nursery:
        manager = await _manager(store, nursery)
        # A client loads "loading" while retention runs: it is kept, and comes back whole.
        store.gate = trio.Event()
        loaded = trio.Event()

        async def load() -> None:
            await manager.get("loading")
            loaded.set()

        nursery.start_soon(load)
        await store.reading.wait()
        store.gate.set()  # (the read is released; the session is not live yet until `_start`)
        store.gate = None
        n = await prune_older(store, time.time() - 86400, keep=manager.hold_from_prune, release=manager.release_pruned)
        assert n == 1 and await store.get_session("pruned") is None
        await loaded.wait()
        assert (await store.get_session("loading")) is not None
        # A client asking for a session while retention deletes it waits, then hears it is gone.
        assert manager.hold_from_prune("gone-soon") is False
        outcome: list[str] = []

        async def ask() -> None:
            try:
                await manager.get("gone-soon")
            except Exception as exc:
                outcome.append(type(exc).__name__)

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == []  # held back while it is pruned
        manager.release_pruned(["gone-soon"])
        await trio.testing.wait_all_tasks_blocked()
        assert outcome == ["NotFound"]
        nursery.cancel_scope.cancel()


async def test_what_a_failed_save_carried_is_written_by_the_next_one() -> None:
    store = GatedStore()
    async with trio.open_nursery() as nursery:
        manager = await _manager(store, nursery)
        session = await manager.create("demo")
        session.front_state(A2AContext).side.append("side-1")
        store.failing = True
        with pytest.raises(InternalError):
            await session.save_record()
        assert not session.closed  # the client heard the error; the session goes on
        store.failing = False
        await session.save_record()
        stored = await store.get_session(session.id)
        assert stored is not None and stored.states.get("a2a") == {"side": ["side-1"]}
        nursery.cancel_scope.cancel()
