"""Schema 2 → 3 in place: what schema 2 kept in `sessions.meta` moves to its own rows.

Schema 2 kept each front's state as keys of the session's `meta` JSON, rewritten at
every flush (issue 16). Schema 3 has a row per front state and per A2A task:

- `meta["a2a"]` (the A2A front's `A2AContext`: `ctx`, `side`, `held`, `cont`, and
  `tasks: {task_id: {state, ts, turns, mids, sent, refs, quoted, push}}`) becomes one
  `tasks` row per task and the `a2a` front state without `tasks`. A row: the session's
  route, the context (`ctx`, else the session itself), created when the task's first
  turn started, its latest turn (the last of `turns`, else the task's own), its
  `state` and `ts` (status time), and the rest of the task dict as `data`, as the A2A
  front wrote it. A task with no state recorded is WORKING when its turn has no end in
  the store (then `close_cut_turns`, run at open, fails it as it fails the turn) and
  FAILED when it ended: the daemon stopped before the front recorded the end.
- A turn of an A2A session that is neither a task nor a continuation turn (`cont`,
  a task's `turns`) was a task whose state was never recorded: a FAILED row, as
  schema 2's ListTasks showed it.
- The chat front's `intent` and `chat_runs` become the `chat` front state.
- Everything else stays in `meta`; a value that is not what these fronts wrote (meta
  that does not decode, an `a2a` that is not an object, a task that is not one) is
  left where it was, so nothing is lost.
- Each session's summary (`turn_count`, `last_stop`, `last_cut`) from its turns, the
  last one by first sequence number.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import msgspec

from bridge.store.base import CUT_META_KEY, CUT_TASK_STATE
from bridge.store.sqlite_rows import json_text

__all__ = ["split_meta"]

# A2A 1.0 `TaskState` (specification/a2a.proto): what a task whose turn is still open
# was, so that `close_cut_turns` finds and fails it with its turn.
_WORKING = "TASK_STATE_WORKING"
_CHAT_KEYS = ("intent", "chat_runs")
_PAGE = 256  # sessions read at a time

def _object(text: str) -> dict[str, Any] | None:
    try:
        value = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return None
    return value if isinstance(value, dict) else None


def split_meta(c: sqlite3.Connection) -> None:
    """Convert every session of a schema-2 database (in the migration's transaction)."""
    after = ""
    while True:
        rows = c.execute(
            "SELECT session_id, route, created_at, updated_at, meta FROM sessions WHERE session_id > ? "
            "ORDER BY session_id LIMIT ?",
            (after, _PAGE),
        ).fetchall()
        for row in rows:
            _split_session(c, *row)
        if len(rows) < _PAGE:
            return
        after = rows[-1][0]


def _split_session(c: sqlite3.Connection, sid: str, route: str, created_at: float, updated_at: float, meta_text: str) -> None:
    (count,) = c.execute("SELECT COUNT(*) FROM turns WHERE session_id = ?", (sid,)).fetchone()
    last = c.execute(
        "SELECT stop_reason, meta FROM turns WHERE session_id = ? ORDER BY first_seq DESC LIMIT 1", (sid,)
    ).fetchone()
    last_stop = last[0] if last is not None else None
    last_cut = bool(last is not None and (_object(last[1]) or {}).get(CUT_META_KEY))
    meta = _object(meta_text)
    if meta is not None:
        a2a = meta.get("a2a")
        if isinstance(a2a, dict):
            del meta["a2a"]
            kept = _task_rows(c, sid, route, created_at, updated_at, a2a)
            _put_state(c, sid, "a2a", {**a2a, "tasks": kept} if kept else a2a)
        chat = {key: meta.pop(key) for key in _CHAT_KEYS if key in meta}
        if chat:
            _put_state(c, sid, "chat", chat)
        meta_text = json_text(meta)
    c.execute(
        "UPDATE sessions SET meta = ?, turn_count = ?, last_stop = ?, last_cut = ? WHERE session_id = ?",
        (meta_text, count, last_stop, int(last_cut), sid),
    )


def _put_state(c: sqlite3.Connection, sid: str, key: str, data: dict[str, Any]) -> None:
    c.execute("INSERT OR REPLACE INTO front_states (session_id, key, data) VALUES (?,?,?)", (sid, key, json_text(data)))


def _task_rows(
    c: sqlite3.Connection, sid: str, route: str, created_at: float, updated_at: float, a2a: dict[str, Any]
) -> Any:
    """Write the task rows of one A2A session (its `tasks` removed from `a2a`); returns
    what of `tasks` was not a task as the A2A front writes one (kept in the state)."""
    tasks = a2a.pop("tasks", {})
    kept: Any = None
    if not isinstance(tasks, dict):
        tasks, kept = {}, tasks
    malformed = {task_id: task for task_id, task in tasks.items() if not isinstance(task, dict)}
    tasks = {task_id: task for task_id, task in tasks.items() if isinstance(task, dict)}
    # turn id -> (started_at, ended_at), in order
    turns: dict[str, tuple[float, float | None]] = {
        turn_id: (started, ended)
        for turn_id, started, ended in c.execute(
            "SELECT turn_id, started_at, ended_at FROM turns WHERE session_id = ? ORDER BY first_seq", (sid,)
        )
    }
    ctx = a2a.get("ctx")
    context = ctx if isinstance(ctx, str) and ctx else sid
    cont = a2a.get("cont")
    known = set(tasks) | (set(cont) if isinstance(cont, dict) else set())
    rows: list[tuple[Any, ...]] = []
    for task_id, task in tasks.items():
        later = task.get("turns")
        later = [t for t in later if isinstance(t, str)] if isinstance(later, list) else []
        known.update(later)
        turn_id = later[-1] if later else task_id
        first, latest = turns.get(task_id), turns.get(turn_id)
        state = task.get("state")
        if not isinstance(state, str):
            state = _WORKING if latest is not None and latest[1] is None else CUT_TASK_STATE
        ts = task.get("ts")
        if isinstance(ts, (int, float)) and not isinstance(ts, bool):
            status_ts = float(ts)
        else:
            status_ts = (latest[1] or latest[0]) if latest is not None else updated_at
        data = {key: value for key, value in task.items() if key not in ("state", "ts")}
        rows.append((task_id, sid, route, context, first[0] if first else created_at, turn_id, state, status_ts, json_text(data)))
    for turn_id, (started, ended) in turns.items():
        if turn_id not in known:
            rows.append((turn_id, sid, route, context, started, turn_id, CUT_TASK_STATE, ended or started, "{}"))
    c.executemany(
        "INSERT OR REPLACE INTO tasks (task_id, session_id, route, context_id, created_at, turn_id, state, status_ts, data)"
        " VALUES (?,?,?,?,?,?,?,?,?)",
        rows,
    )
    return malformed or kept
