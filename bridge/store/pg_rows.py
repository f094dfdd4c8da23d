"""The PostgreSQL store's statements, and records to parameters and back.

Records become rows with SQLite's row code (bridge/store/sqlite_rows.py: the same
columns and JSON encodings). psycopg prepares a statement it runs often
(`prepare_threshold`), so each statement's text is constant or one of a few shapes.
A store flush is ONE statement (`save_statement`):
data-modifying WITH queries (PostgreSQL 7.8.4) for the session, turns, tasks, front
states and the batch, and `pg_notify` in the same statement, delivered at its commit
(PostgreSQL NOTIFY: "not delivered until and unless the transaction is committed").
One round trip, one transaction, all or nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import msgspec

from bridge.store.base import SessionRecord, TaskRecord, TurnRecord
from bridge.store.sqlite_rows import (
    SESSION_COLUMNS, SESSION_WRITE_COLUMNS, TASK_COLUMNS, TURN_COLUMNS, session_record, session_row, state_rows, task_row,
    turn_row,
)  # fmt: skip

__all__ = [
    "EVENTS_CHANNEL", "PUT_BATCH", "PUT_SESSION", "PUT_TURN", "SESSION_COLUMNS", "SESSION_WITH_STATES", "TASK_COLUMNS",
    "TURN_COLUMNS", "save_params", "save_statement", "sessions_with_states", "upsert", "values",
]  # fmt: skip

# What every write of a batch notifies: "<session_id> <last_seq>" (bridge/cluster/).
EVENTS_CHANNEL = "bridge_events"

_STATE_DECODER = msgspec.json.Decoder(dict[str, object])
_TURN_OWNER_COLUMNS = f"{TURN_COLUMNS}, owner"
_STATE_COLUMNS = "session_id, key, data"


def _names(columns: str) -> list[str]:
    return [c.strip() for c in columns.split(",")]


def upsert(table: str, columns: str, key: str, source: str) -> str:
    """INSERT ... ON CONFLICT DO UPDATE of every column: SQLite's INSERT OR REPLACE."""
    rest = ", ".join(f"{c} = EXCLUDED.{c}" for c in _names(columns) if c not in _names(key))
    return f"INSERT INTO {table} ({columns}) {source} ON CONFLICT ({key}) DO UPDATE SET {rest}"


def values(columns: str, rows: int = 1) -> str:
    """`VALUES (%s, ...), ...`: `rows` rows of `columns`' placeholders. Rows as VALUES,
    not arrays to `unnest`: each parameter takes its column's type, and psycopg dumps
    scalars several times faster than lists."""
    one = "(" + ", ".join(["%s"] * len(_names(columns))) + ")"
    return "VALUES " + ", ".join([one] * rows)


PUT_SESSION = upsert("sessions", SESSION_WRITE_COLUMNS, "session_id", values(SESSION_WRITE_COLUMNS))
PUT_TURN = upsert("turns", _TURN_OWNER_COLUMNS, "turn_id", values(_TURN_OWNER_COLUMNS))
PUT_BATCH = "INSERT INTO events (session_id, first_seq, last_seq, blob) VALUES (%s, %s, %s, %s)"
# A session and its states in one read: one row per state (NULLs for a session with none).
SESSION_WITH_STATES = ", ".join(f"s.{c}" for c in _names(SESSION_COLUMNS)) + ", f.key, f.data"


@functools.cache
def save_statement(turns: int, tasks: int, put: int, drop: int, batch: bool) -> str:
    """The one statement of a `save` writing so many rows of each (a typical flush:
    the session, a turn or none, the batch). Its text depends on the counts only, so
    the few shapes flushes take are each planned once."""
    parts = [("s", PUT_SESSION)]
    if turns:
        parts.append(("t", upsert("turns", _TURN_OWNER_COLUMNS, "turn_id", values(_TURN_OWNER_COLUMNS, turns))))
    if tasks:
        parts.append(("k", upsert("tasks", TASK_COLUMNS, "task_id", values(TASK_COLUMNS, tasks))))
    if put:
        parts.append(("p", upsert("front_states", _STATE_COLUMNS, "session_id, key", values(_STATE_COLUMNS, put))))
    if drop:
        keys = ", ".join(["%s"] * drop)
        parts.append(("d", f"DELETE FROM front_states WHERE session_id = %s AND key IN ({keys})"))
    if batch:
        parts.append(("e", PUT_BATCH))
    last = f"SELECT pg_notify('{EVENTS_CHANNEL}', %s)" if batch else "SELECT 1"
    return "WITH " + ", ".join(f"{name} AS ({sql})" for name, sql in parts) + " " + last


def save_params(
    session: SessionRecord, turns: Sequence[TurnRecord], tasks: Sequence[TaskRecord], states: Sequence[str],
    batch: tuple[int, int, bytes] | None, owner: str | None,
) -> tuple[str, list[Any]]:  # fmt: skip
    """The statement and parameters of one `save`."""
    sid = session.session_id
    put, drop = state_rows(session, states)
    # Last one wins, as one INSERT OR REPLACE after another would (ON CONFLICT DO UPDATE
    # cannot touch a row twice in one statement).
    turn_rows = list({t.turn_id: turn_row(t, owner) for t in turns}.values())
    task_rows = list({t.task_id: task_row(t) for t in tasks}.values())
    params: list[Any] = list(session_row(session))
    for row in (*turn_rows, *task_rows, *put):
        params += row
    if drop:
        params += [sid, *(k for _, k in drop)]
    if batch is not None:
        params += [sid, batch[0], batch[1], batch[2], f"{sid} {batch[1]}"]
    return save_statement(len(turn_rows), len(task_rows), len(put), len(drop), batch is not None), params


def sessions_with_states(rows: Sequence[tuple[Any, ...]], skip: int = 0) -> list[SessionRecord]:
    """Records from rows of `SESSION_WITH_STATES` (after `skip` leading columns), in
    their order; a row whose session is NULL (an empty page's) is none."""
    found: dict[str, SessionRecord] = {}
    for row in rows:
        row = row[skip:]
        if row[0] is None:
            continue
        record = found.get(row[0])
        if record is None:
            record = found[row[0]] = session_record(row[:-2])
        if row[-2] is not None:
            record.states[row[-2]] = _STATE_DECODER.decode(row[-1])
    return list(found.values())
