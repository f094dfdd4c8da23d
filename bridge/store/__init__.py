"""Durable state: sessions, turns and their event logs, behind one interface.

`Store` is the interface; `MemoryStore` serves unit tests, `SqliteStore` the
daemon (stdlib sqlite3 in WAL mode, called through `trio.to_thread`).
"""

from bridge.store.base import SessionRecord, Store, StoreStats, StoredBatch, TaskPage, TaskRecord, TurnRecord

__all__ = ["SessionRecord", "Store", "StoreStats", "StoredBatch", "TaskPage", "TaskRecord", "TurnRecord", "open_store"]


def open_store(state_dir: str | None) -> Store:
    """The SQLite store in `state_dir` (created if missing); None: in memory."""
    if state_dir is None:
        from bridge.store.memory import MemoryStore

        return MemoryStore()
    from bridge.store.sqlite import SqliteStore

    return SqliteStore(state_dir)
