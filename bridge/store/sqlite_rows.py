"""Rows of the SQLite store: its columns and statements, and records to rows and back.

JSON columns (`options`, `meta`, a front state's and a task's `data`) are encoded with
msgspec; `meta` and `data` decode as plain JSON objects (bridge/store/base.py). A
session row also keeps the owner its `meta` names as a column of its own (written,
never read back: `meta` is the record's), for listings filtered by owner.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from bridge.core.access import owner_of
from bridge.store.base import SessionRecord, TaskRecord, TurnRecord

__all__ = [
    "DROP_STATE", "PUT_BATCH", "PUT_SESSION", "PUT_STATE", "PUT_TASK", "PUT_TURN", "SESSION_COLUMNS", "SESSION_WRITE_COLUMNS",
    "TASK_COLUMNS", "TURN_COLUMNS", "json_text", "session_record", "session_row", "state_rows", "task_record", "task_row",
    "turn_record", "turn_row", "with_states",
]  # fmt: skip

_JSON_ENCODER = msgspec.json.Encoder()
_OPTIONS_DECODER = msgspec.json.Decoder(dict[str, str])
_META_DECODER = msgspec.json.Decoder(dict[str, object])
_STATE_DECODER = msgspec.json.Decoder(dict[str, object])


SESSION_COLUMNS = (
    "session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq, closed,"
    " turn_count, last_stop, last_cut, front"
)
TURN_COLUMNS = "turn_id, session_id, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta, stream_seq"
TASK_COLUMNS = "task_id, session_id, route, context_id, created_at, turn_id, state, status_ts, data"
# What a row is written with: the record's columns and its owner ('' for none).
SESSION_WRITE_COLUMNS = f"{SESSION_COLUMNS}, owner"
PUT_SESSION = f"INSERT OR REPLACE INTO sessions ({SESSION_WRITE_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
PUT_TURN = f"INSERT OR REPLACE INTO turns ({TURN_COLUMNS}, owner) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
PUT_TASK = f"INSERT OR REPLACE INTO tasks ({TASK_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)"
PUT_STATE = "INSERT OR REPLACE INTO front_states (session_id, key, data) VALUES (?,?,?)"
DROP_STATE = "DELETE FROM front_states WHERE session_id = ? AND key = ?"
PUT_BATCH = "INSERT INTO events (session_id, first_seq, last_seq, blob) VALUES (?,?,?,?)"


def json_text(value: Any) -> str:
    return _JSON_ENCODER.encode(value).decode()


def session_row(r: SessionRecord) -> tuple[Any, ...]:
    return (
        r.session_id, r.route, r.cwd, r.title, r.created_at, r.updated_at, r.back_ref,
        json_text(r.options), json_text(r.meta), r.last_seq, int(r.closed), r.turn_count, r.last_stop, int(r.last_cut), r.front,
        owner_of(r.meta) or "",
    )  # fmt: skip


def session_record(row: tuple[Any, ...]) -> SessionRecord:
    sid, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq, closed, turns, stop, cut, front = row
    return SessionRecord(
        session_id=sid, route=route, cwd=cwd, title=title, created_at=created_at, updated_at=updated_at,
        back_ref=back_ref, options=_OPTIONS_DECODER.decode(options), meta=_META_DECODER.decode(meta),
        last_seq=last_seq, closed=bool(closed), turn_count=turns, last_stop=stop, last_cut=bool(cut), front=front,
    )  # fmt: skip


def with_states(c: sqlite3.Connection, records: list[SessionRecord]) -> list[SessionRecord]:
    """`records` with their `states`, read in one query."""
    if records:
        by_id = {r.session_id: r for r in records}
        marks = ",".join("?" * len(by_id))
        sql = f"SELECT session_id, key, data FROM front_states WHERE session_id IN ({marks})"
        for sid, key, data in c.execute(sql, list(by_id)):
            by_id[sid].states[key] = _STATE_DECODER.decode(data)
    return records


def state_rows(r: SessionRecord, keys: Sequence[str]) -> tuple[list[tuple[Any, ...]], list[tuple[str, str]]]:
    """(rows to write, (session, key) to remove) for the states named."""
    put = [(r.session_id, k, json_text(r.states[k])) for k in keys if k in r.states]
    drop = [(r.session_id, k) for k in keys if k not in r.states]
    return put, drop


def turn_row(r: TurnRecord, owner: str | None) -> tuple[Any, ...]:
    return (
        r.turn_id, r.session_id, r.started_at, r.first_seq, r.ended_at, r.last_seq,
        r.stop_reason, r.error, json_text(r.meta), r.stream_seq, owner,
    )  # fmt: skip


def turn_record(row: tuple[Any, ...]) -> TurnRecord:
    turn_id, sid, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta, stream_seq = row
    return TurnRecord(
        turn_id=turn_id, session_id=sid, started_at=started_at, first_seq=first_seq, ended_at=ended_at,
        last_seq=last_seq, stop_reason=stop_reason, error=error, meta=_META_DECODER.decode(meta), stream_seq=stream_seq,
    )  # fmt: skip


def task_row(r: TaskRecord) -> tuple[Any, ...]:
    return (r.task_id, r.session_id, r.route, r.context_id, r.created_at, r.turn_id, r.state, r.status_ts, json_text(r.data))


def task_record(row: tuple[Any, ...]) -> TaskRecord:
    task_id, sid, route, context_id, created_at, turn_id, state, status_ts, data = row
    return TaskRecord(
        task_id=task_id, session_id=sid, route=route, context_id=context_id, created_at=created_at,
        turn_id=turn_id, state=state, status_ts=status_ts, data=_META_DECODER.decode(data),
    )  # fmt: skip

