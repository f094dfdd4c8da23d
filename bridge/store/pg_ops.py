"""The PostgreSQL store's heavier work: closing cut turns, deleting sessions, counts.

Each function runs in a worker thread on a pooled connection (bridge/store/pg.py);
each opens its own transaction(s), or is one statement (its own transaction).

Cut turns (bridge/store/base.py): a turn with no end whose owner has no row in
`instances`, or one that expired on the database's clock, belongs to an instance that
is gone (killed, cut off past its lease). Several instances may sweep at once: each
turn is taken with `FOR UPDATE SKIP LOCKED` and closed in a transaction of its own
(its session row locked too), so each is closed exactly once, and no sweeper ever
holds two turns' locks while it waits for another (no deadlock between sweepers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bridge.store.base import CUT_TASK_STATE, StoreStats, TurnRecord, cut_turn_end
from bridge.store.pg_rows import EVENTS_CHANNEL, PUT_BATCH, PUT_SESSION, PUT_TURN, SESSION_COLUMNS, TURN_COLUMNS
from bridge.store.pg_schema import DB_NOW
from bridge.store.sqlite_rows import session_record, session_row, turn_record, turn_row

__all__ = ["close_cut_turns", "delete_sessions", "prunable", "prune", "stats"]

_CUT_CANDIDATE = (
    f"SELECT {TURN_COLUMNS}, owner FROM turns t WHERE ended_at IS NULL AND owner IS DISTINCT FROM %s "
    f"AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.instance_id = t.owner AND i.expires_at > {DB_NOW}) "
    "AND turn_id <> ALL(%s::text[]) ORDER BY started_at, first_seq LIMIT 1 FOR UPDATE SKIP LOCKED"
)


def _close_one(c: Any, me: str, skipped: list[str]) -> TurnRecord | None | bool:
    """Close the next cut turn in one transaction: its record, None when it has no
    session (left alone, as SQLite does), False when there is none left."""
    with c.transaction():
        row = c.execute(_CUT_CANDIDATE, (me, skipped)).fetchone()
        if row is None:
            return False
        owner, turn = row[-1], turn_record(row[:-1])
        found = c.execute(f"SELECT {SESSION_COLUMNS} FROM sessions WHERE session_id = %s FOR UPDATE", (turn.session_id,)).fetchone()
        if found is None:
            skipped.append(turn.turn_id)
            return None
        session = session_record(found)
        (stored,) = c.execute("SELECT MAX(last_seq) FROM events WHERE session_id = %s", (turn.session_id,)).fetchone()
        session.last_seq = max(session.last_seq, stored or 0)
        record, batch = cut_turn_end(turn, session)
        session.last_seq = batch.last_seq
        c.execute(PUT_SESSION, session_row(session))
        c.execute(PUT_TURN, turn_row(record, owner))
        c.execute(PUT_BATCH, (session.session_id, batch.first_seq, batch.last_seq, batch.blob))
        c.execute("UPDATE tasks SET state = %s, status_ts = %s WHERE turn_id = %s", (CUT_TASK_STATE, record.ended_at, record.turn_id))
        c.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, f"{session.session_id} {batch.last_seq}"))
        return record


def close_cut_turns(c: Any, me: str, forget_after_s: float) -> list[TurnRecord]:
    """Close every cut turn not `me`'s, oldest first; then forget the instances expired
    for longer than `forget_after_s` (their turns are closed: nothing names them)."""
    closed: list[TurnRecord] = []
    skipped: list[str] = []
    while (done := _close_one(c, me, skipped)) is not False:
        if done is not None:
            closed.append(done)  # type: ignore[arg-type]
    c.execute(f"DELETE FROM instances WHERE expires_at < {DB_NOW} - %s", (forget_after_s,))
    return closed


def stats(c: Any) -> StoreStats:
    """Counts (events: each session's `last_seq`, as SQLite's) and the database's size;
    PostgreSQL has no write-ahead log or free pages of the store's own to show."""
    row = c.execute(
        "SELECT (SELECT COUNT(*) FROM sessions), (SELECT COALESCE(SUM(last_seq), 0)::int8 FROM sessions), "
        "(SELECT COUNT(*) FROM turns), (SELECT COUNT(*) FROM turns WHERE ended_at IS NULL), "
        "(SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM tasks), "
        "(SELECT value FROM bridge_meta WHERE key = 'schema_version'), pg_database_size(current_database())"
    ).fetchone()
    sessions, events, turns, open_turns, batches, tasks, version, size = row
    return StoreStats(
        sessions=sessions, turns=turns, open_turns=open_turns, events=events, batches=batches, tasks=tasks,
        schema_version=int(version), file_bytes=size,
    )  # fmt: skip


# Oldest first by the reverse of `sessions_by_update` (updated_at DESC, session_id); the
# `updated_at >= %s` of a next page repeats the OR's bound where the index can use it.
_PRUNABLE = (
    "SELECT updated_at, session_id FROM sessions WHERE updated_at < %s{after} "
    "AND session_id NOT IN (SELECT session_id FROM turns WHERE ended_at IS NULL) "
    "ORDER BY updated_at ASC, session_id DESC LIMIT %s"
)
_AFTER = " AND updated_at >= %s AND (updated_at > %s OR (updated_at = %s AND session_id < %s))"


def prunable(c: Any, before_ts: float, limit: int, after: tuple[float, str] | None) -> list[tuple[float, str]]:
    if after is None:
        rows = c.execute(_PRUNABLE.format(after=""), (before_ts, limit)).fetchall()
    else:
        rows = c.execute(_PRUNABLE.format(after=_AFTER), (before_ts, after[0], after[0], after[0], after[1], limit)).fetchall()
    return [(ts, sid) for ts, sid in rows]


# One statement: the sessions deleted (those that `{keep}` still allows) and, by their
# ids, everything of theirs (PostgreSQL 7.8.4: a WITH query's RETURNING feeds the others).
_DELETE = (
    "WITH s AS (DELETE FROM sessions WHERE session_id = ANY(%s::text[]){keep} RETURNING session_id), "
    "e AS (DELETE FROM events WHERE session_id IN (SELECT session_id FROM s)), "
    "t AS (DELETE FROM turns WHERE session_id IN (SELECT session_id FROM s)), "
    "k AS (DELETE FROM tasks WHERE session_id IN (SELECT session_id FROM s)), "
    "f AS (DELETE FROM front_states WHERE session_id IN (SELECT session_id FROM s)) "
    "SELECT session_id FROM s"
)
_STILL_PRUNABLE = (
    " AND updated_at < %s AND NOT EXISTS "
    "(SELECT 1 FROM turns o WHERE o.session_id = sessions.session_id AND o.ended_at IS NULL)"
)


def delete_sessions(c: Any, session_ids: Sequence[str]) -> int:
    """Delete the sessions and everything of theirs; how many sessions existed. Rows of
    a session id with no session row go too (SQLite's deletes take them)."""
    ids = list(session_ids)
    with c.transaction():
        for table in ("events", "turns", "tasks", "front_states"):
            c.execute(f"DELETE FROM {table} WHERE session_id = ANY(%s::text[])", (ids,))
        return int(c.execute("DELETE FROM sessions WHERE session_id = ANY(%s::text[])", (ids,)).rowcount)


def prune(c: Any, session_ids: Sequence[str], before_ts: float) -> list[str]:
    """Each of `session_ids` checked again in the deleting statement (a turn may have
    started since it was listed), then deleted; in the order given."""
    ids = list(dict.fromkeys(session_ids))
    gone = {sid for (sid,) in c.execute(_DELETE.format(keep=_STILL_PRUNABLE), (ids, before_ts)).fetchall()}
    return [sid for sid in ids if sid in gone]
