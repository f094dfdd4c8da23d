"""Operators' work on the SQLite store: counts and sizes, deleting old sessions, VACUUM.

Each function runs in the store's thread on its connection (bridge/store/sqlite.py), in
the transaction the store opened for it; `vacuum` runs outside one (SQLite refuses
VACUUM inside a transaction).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

from bridge.errors import Overloaded
from bridge.store.base import StoreStats
from bridge.store.sqlite_conn import is_busy

__all__ = ["delete_sessions", "prunable", "prune", "stats", "vacuum"]


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def stats(c: sqlite3.Connection, path: str) -> StoreStats:
    """Counts from indexes (turns, batches, tasks, open turns: the partial index) and the
    session rows: events are gapless per session, so a session's `last_seq` is its count."""
    sessions, events = c.execute("SELECT COUNT(*), COALESCE(SUM(last_seq), 0) FROM sessions").fetchone()
    (turns,) = c.execute("SELECT COUNT(*) FROM turns").fetchone()
    (open_turns,) = c.execute("SELECT COUNT(*) FROM turns WHERE ended_at IS NULL").fetchone()
    (batches,) = c.execute("SELECT COUNT(*) FROM events").fetchone()
    (tasks,) = c.execute("SELECT COUNT(*) FROM tasks").fetchone()
    (version,) = c.execute("PRAGMA user_version").fetchone()
    (page_size,) = c.execute("PRAGMA page_size").fetchone()
    (free_pages,) = c.execute("PRAGMA freelist_count").fetchone()
    return StoreStats(
        sessions=sessions, turns=turns, open_turns=open_turns, events=events, batches=batches, tasks=tasks,
        schema_version=version, file_bytes=_size(path), wal_bytes=_size(path + "-wal"), free_bytes=free_pages * page_size,
    )  # fmt: skip


# Oldest first by the reverse of `sessions_by_update` (updated_at DESC, session_id): ties
# come by session_id descending, so the index gives the order and no sort is needed.
_PRUNABLE = (
    "SELECT updated_at, session_id FROM sessions WHERE updated_at < ?{after} "
    "AND session_id NOT IN (SELECT session_id FROM turns WHERE ended_at IS NULL) "
    "ORDER BY updated_at ASC, session_id DESC LIMIT ?"
)
_AFTER = " AND (updated_at > ? OR (updated_at = ? AND session_id < ?))"


def prunable(c: sqlite3.Connection, before_ts: float, limit: int, after: tuple[float, str] | None) -> list[tuple[float, str]]:
    if after is None:
        rows = c.execute(_PRUNABLE.format(after=""), (before_ts, limit)).fetchall()
    else:
        rows = c.execute(_PRUNABLE.format(after=_AFTER), (before_ts, after[0], after[0], after[1], limit)).fetchall()
    return [(ts, sid) for ts, sid in rows]


def delete_sessions(c: sqlite3.Connection, session_ids: Sequence[str]) -> int:
    """Delete the sessions and everything of theirs; how many sessions existed."""
    keys = [(sid,) for sid in session_ids]
    c.executemany("DELETE FROM events WHERE session_id = ?", keys)
    c.executemany("DELETE FROM turns WHERE session_id = ?", keys)
    c.executemany("DELETE FROM tasks WHERE session_id = ?", keys)
    c.executemany("DELETE FROM front_states WHERE session_id = ?", keys)
    return c.executemany("DELETE FROM sessions WHERE session_id = ?", keys).rowcount


def prune(c: sqlite3.Connection, session_ids: Sequence[str], before_ts: float) -> list[str]:
    """Each of `session_ids` checked again in this transaction (a turn may have started
    since it was listed), then deleted."""
    gone: list[str] = []
    for sid in dict.fromkeys(session_ids):
        row = c.execute("SELECT updated_at FROM sessions WHERE session_id = ?", (sid,)).fetchone()
        if row is None or not row[0] < before_ts:
            continue
        if c.execute("SELECT 1 FROM turns WHERE session_id = ? AND ended_at IS NULL LIMIT 1", (sid,)).fetchone():
            continue
        gone.append(sid)
    delete_sessions(c, gone)
    return gone


def vacuum(c: sqlite3.Connection) -> bool:
    """VACUUM, then the WAL checkpointed and truncated: whether it could be (no reader
    held it). Both wait up to the connection's `busy_timeout` for other processes."""
    try:
        c.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        if is_busy(exc):
            raise Overloaded(f"the store is busy (another process holds it: {exc}); try again") from exc
        raise
    (busy, _, _) = c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return busy == 0
