"""The PostgreSQL store's statements, and records to parameters and back.

Records become rows with SQLite's row code (bridge/store/sqlite_rows.py: the same
columns and JSON encodings). A write of several rows binds one array per column and
inserts `unnest(...)` of them, so its statement's text never depends on how many
rows it writes and PostgreSQL plans it once (psycopg prepares a statement it runs
often, `prepare_threshold`). A store flush is ONE statement (`save_statement`):
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
    SESSION_COLUMNS, TASK_COLUMNS, TURN_COLUMNS, session_record, session_row, state_rows, task_row, turn_row,
)  # fmt: skip

__all__ = [
    "EVENTS_CHANNEL", "PUT_SESSION", "SESSION_COLUMNS", "SESSION_WITH_STATES", "TASK_COLUMNS", "TURN_COLUMNS",
    "save_params", "save_statement", "sessions_with_states", "task_arrays", "turn_arrays", "upsert",
]  # fmt: skip

# What every write of a batch notifies: "<session_id> <last_seq>" (bridge/cluster/).
EVENTS_CHANNEL = "bridge_events"

_STATE_DECODER = msgspec.json.Decoder(dict[str, object])
_TURN_TYPES = ("text", "text", "float8", "int8", "float8", "int8", "text", "text", "text", "int8", "text")
_TASK_TYPES = ("text", "text", "text", "text", "float8", "text", "text", "float8", "text")


def _names(columns: str) -> list[str]:
    return [c.strip() for c in columns.split(",")]


def upsert(table: str, columns: str, key: str, source: str) -> str:
    """INSERT ... ON CONFLICT DO UPDATE of every column: SQLite's INSERT OR REPLACE."""
    rest = ", ".join(f"{c} = EXCLUDED.{c}" for c in _names(columns) if c not in _names(key))
    return f"INSERT INTO {table} ({columns}) {source} ON CONFLICT ({key}) DO UPDATE SET {rest}"


def _values(n: int) -> str:
    return "VALUES (" + ", ".join(["%s"] * n) + ")"


def _unnest(types: Sequence[str]) -> str:
    return "SELECT * FROM unnest(" + ", ".join(f"%s::{t}[]" for t in types) + ")"


PUT_SESSION = upsert("sessions", SESSION_COLUMNS, "session_id", _values(len(_names(SESSION_COLUMNS))))
_TURN_OWNER_COLUMNS = f"{TURN_COLUMNS}, owner"
PUT_TURN = upsert("turns", _TURN_OWNER_COLUMNS, "turn_id", _values(len(_TURN_TYPES)))
_PUT_TURNS = upsert("turns", _TURN_OWNER_COLUMNS, "turn_id", _unnest(_TURN_TYPES))
_PUT_TASKS = upsert("tasks", TASK_COLUMNS, "task_id", _unnest(_TASK_TYPES))
_PUT_STATES = upsert("front_states", "session_id, key, data", "session_id, key", "SELECT %s, * FROM unnest(%s::text[], %s::text[])")
_DROP_STATES = "DELETE FROM front_states WHERE session_id = %s AND key = ANY(%s::text[])"
PUT_BATCH = "INSERT INTO events (session_id, first_seq, last_seq, blob) VALUES (%s, %s, %s, %s)"
# A session and its states in one read: one row per state (NULLs for a session with none).
SESSION_WITH_STATES = ", ".join(f"s.{c}" for c in _names(SESSION_COLUMNS)) + ", f.key, f.data"


@functools.cache
def save_statement(turns: bool, tasks: bool, put: bool, drop: bool, batch: bool) -> str:
    """The one statement of a `save` writing what is present (a few constant texts)."""
    parts = [("s", PUT_SESSION)]
    parts += [("t", _PUT_TURNS)] if turns else []
    parts += [("k", _PUT_TASKS)] if tasks else []
    parts += [("p", _PUT_STATES)] if put else []
    parts += [("d", _DROP_STATES)] if drop else []
    parts += [("e", PUT_BATCH)] if batch else []
    last = f"SELECT pg_notify('{EVENTS_CHANNEL}', %s)" if batch else "SELECT 1"
    return "WITH " + ", ".join(f"{name} AS ({sql})" for name, sql in parts) + " " + last


def _columns(rows: Sequence[tuple[Any, ...]], types: Sequence[str]) -> list[list[Any]]:
    """Rows as one list per column, each of one Python type (psycopg dumps a list by
    its first item: an int among floats must be a float)."""
    cast = {"float8": float, "int8": int, "text": str}
    return [[None if v is None else cast[t](v) for v in column] for column, t in zip(zip(*rows), types, strict=True)]


def turn_arrays(turns: Sequence[TurnRecord], owner: str | None) -> list[list[Any]]:
    # Last one wins, as one INSERT OR REPLACE after another would (ON CONFLICT DO UPDATE
    # cannot touch a row twice in one statement).
    rows = list({t.turn_id: turn_row(t, owner) for t in turns}.values())
    return _columns(rows, _TURN_TYPES)


def task_arrays(tasks: Sequence[TaskRecord]) -> list[list[Any]]:
    rows = list({t.task_id: task_row(t) for t in tasks}.values())
    return _columns(rows, _TASK_TYPES)


def save_params(
    session: SessionRecord, turns: Sequence[TurnRecord], tasks: Sequence[TaskRecord], states: Sequence[str],
    batch: tuple[int, int, bytes] | None, owner: str | None,
) -> tuple[str, list[Any]]:  # fmt: skip
    """The statement and parameters of one `save`."""
    sid = session.session_id
    put, drop = state_rows(session, states)
    params: list[Any] = list(session_row(session))
    if turns:
        params += turn_arrays(turns, owner)
    if tasks:
        params += task_arrays(tasks)
    if put:
        params += [sid, [k for _, k, _ in put], [d for _, _, d in put]]
    if drop:
        params += [sid, [k for _, k in drop]]
    if batch is not None:
        params += [sid, batch[0], batch[1], batch[2], f"{sid} {batch[1]}"]
    return save_statement(bool(turns), bool(tasks), bool(put), bool(drop), batch is not None), params


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
