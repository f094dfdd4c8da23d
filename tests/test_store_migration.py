"""Schema 2 → 3: a store written by the release before (tests/fixtures/store_v2.sqlite3,
see make_store_v2.py) is converted in place when opened, and a conversion that fails
leaves the file as it was."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bridge.core.events import StopReason, TurnEnded, decode_events
from bridge.errors import InternalError
from bridge.store.base import CUT_TURN_ERROR, StoredBatch, TaskRecord
from bridge.store.sqlite import DB_FILENAME, SCHEMA_VERSION, SqliteStore
from bridge.store.schema_ddl import MIGRATIONS, current, render
from bridge.store.sqlite_schema import _MIGRATIONS

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "store_v2.sqlite3"
A2A_SID = "28221df546944a828c4e872670908841"  # an A2A context of 4 tasks, one with a push config
CHAT_SID = "40f2254f6821404882d6e2dadbeabe38"  # intent, two headless runs, a cut turn
CUT_TURN = "5413edf8b7824dda9bfc3b77880d5212"

pytestmark = pytest.mark.trio


def fixture_copy(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    shutil.copyfile(FIXTURE, state / DB_FILENAME)
    return state


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def test_a_store_of_the_release_before_is_converted_in_place(tmp_path: Path) -> None:
    state = fixture_copy(tmp_path)
    db = state / DB_FILENAME
    sessions_before = {r[0]: r for r in rows(db, "SELECT * FROM sessions")}
    turns_before = rows(db, "SELECT turn_id, session_id, started_at, first_seq, ended_at, last_seq, stop_reason, error, meta FROM turns")
    events_before = rows(db, "SELECT session_id, first_seq, last_seq, blob FROM events")
    meta = {sid: json.loads(r[8]) for sid, r in sessions_before.items()}
    tasks_before: dict[str, dict[str, Any]] = meta[A2A_SID]["a2a"]["tasks"]
    started = {r[0]: r[2] for r in turns_before}

    store = SqliteStore(str(state))
    await store.open()
    try:
        assert rows(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)] == [(5,)]

        # Each task of the context is a row: what the A2A front recorded, its data as written.
        assert sorted(tasks_before) == sorted(r[0] for r in rows(db, "SELECT task_id FROM tasks"))
        for task_id, task in tasks_before.items():
            assert await store.get_task(task_id) == TaskRecord(
                task_id=task_id, session_id=A2A_SID, route="demo", context_id=A2A_SID, created_at=started[task_id],
                turn_id=task_id, state="TASK_STATE_COMPLETED", status_ts=task["ts"],
                data={k: v for k, v in task.items() if k not in ("state", "ts")},
            )  # fmt: skip
        pushed = [t for t in tasks_before.values() if "push" in t]
        assert len(pushed) == 1 and pushed[0]["push"][0]["token"] == "fixture-secret"  # kept (export redacts it)
        newest_first = sorted(tasks_before, key=lambda t: -tasks_before[t]["ts"])
        for kw in ({}, {"context_id": A2A_SID}, {"state": "TASK_STATE_COMPLETED"}):
            page = await store.list_tasks(route="demo", **kw)
            assert ([t.task_id for t in page.tasks], page.total, page.next) == (newest_first, 4, None)
        page = await store.list_tasks(route="demo", limit=3)
        assert [t.task_id for t in page.tasks] == newest_first[:3] and page.next is not None
        rest = await store.list_tasks(route="demo", limit=3, cursor=page.next)
        assert [t.task_id for t in rest.tasks] == newest_first[3:] and rest.next is None
        assert (await store.list_tasks(route="demo", context_id=CHAT_SID)).total == 0

        # Front states under their keys; nothing else was in meta, so it is empty now.
        a2a = await store.get_session(A2A_SID)
        chat = await store.get_session(CHAT_SID)
        assert a2a is not None and chat is not None
        assert (a2a.meta, a2a.states) == ({}, {"a2a": {}})  # still marked as the A2A front's
        assert (chat.meta, chat.states) == ({}, {"chat": {"intent": "fixture intent", "chat_runs": meta[CHAT_SID]["chat_runs"]}})
        assert len(meta[CHAT_SID]["chat_runs"]) == 2

        # Summaries from the turns: the chat session's last turn was cut and is still open.
        assert (a2a.turn_count, a2a.last_stop, a2a.last_cut) == (4, "end_turn", False)
        assert (chat.turn_count, chat.last_stop, chat.last_cut) == (4, None, False)

        # Every other column, every turn and every event as they were.
        for record in (a2a, chat):
            sid, route, cwd, title, created_at, updated_at, back_ref, options, _, last_seq, closed = sessions_before[record.session_id]
            assert (record.route, record.cwd, record.title, record.created_at, record.updated_at, record.back_ref,
                    record.options, record.last_seq, record.closed) == (
                route, cwd, title, created_at, updated_at, back_ref, json.loads(options), last_seq, bool(closed))  # fmt: skip
        turns_after = [t for sid in (A2A_SID, CHAT_SID) for t in await store.list_turns(sid)]
        assert sorted(
            (t.turn_id, t.session_id, t.started_at, t.first_seq, t.ended_at, t.last_seq, t.stop_reason, t.error,
             msgspec.json.encode(t.meta).decode()) for t in turns_after
        ) == sorted(turns_before)  # fmt: skip
        assert all(t.stream_seq is None for t in turns_after)
        batches = [(sid, b) for sid in (A2A_SID, CHAT_SID) for b in await store.read_batches(sid)]
        assert sorted((sid, b.first_seq, b.last_seq, b.blob) for sid, b in batches) == sorted(events_before)

        # The cut turn is closed at start-up like any other, and the summary says so.
        (closed,) = await store.close_cut_turns()
        assert (closed.turn_id, closed.stop_reason, closed.meta) == (CUT_TURN, "failed", {"cut": True})
        chat = await store.get_session(CHAT_SID)
        assert chat is not None and (chat.turn_count, chat.last_stop, chat.last_cut, chat.last_seq) == (4, "failed", True, 31)
        (end,) = [b for b in await store.read_batches(CHAT_SID, after_seq=30)]
        assert end.first_seq == 31 and decode_events(end.blob) == [
            TurnEnded(seq=31, turn_id=CUT_TURN, stop_reason=StopReason.FAILED, error=CUT_TURN_ERROR)
        ]
        stats = await store.stats()
        assert (stats.sessions, stats.turns, stats.open_turns, stats.tasks, stats.events, stats.schema_version) == (2, 8, 0, 4, 65, 5)
    finally:
        await store.close()

    # Opened again: nothing left to convert, nothing changed.
    store = SqliteStore(str(state))
    await store.open()
    try:
        assert (await store.list_tasks(route="demo")).total == 4
        again = await store.get_session(A2A_SID)
        assert again is not None and again.states == {"a2a": {}}
    finally:
        await store.close()


def v2_store(state: Path, sessions: list[tuple[str, str, dict[str, Any] | str]], turns: list[tuple[Any, ...]]) -> None:
    """A schema-2 file: sessions (id, route, meta as JSON or raw text) and turns
    (id, session, started_at, first_seq, ended_at, stop_reason, meta)."""
    state.mkdir(mode=0o700)
    conn = sqlite3.connect(state / DB_FILENAME, isolation_level=None)
    for statement in (*_MIGRATIONS[0], *_MIGRATIONS[1]):
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    for sid, route, meta in sessions:
        text = meta if isinstance(meta, str) else json.dumps(meta)
        conn.execute("INSERT INTO sessions VALUES (?,?,'',NULL,0.5,99.0,NULL,'{}',?,0,0)", (sid, route, text))
    for turn_id, sid, started, first, ended, stop, meta in turns:
        conn.execute(
            "INSERT INTO turns VALUES (?,?,?,?,?,?,?,NULL,?,NULL)",
            (turn_id, sid, started, first, ended, None if ended is None else first, stop, json.dumps(meta)),
        )
    conn.close()


async def test_every_shape_schema_2_kept_is_converted(tmp_path: Path) -> None:
    a2a = {
        "side": ["S"], "held": "t4", "cont": {"t2b": "t2"},
        "tasks": {
            "t1": {"state": "TASK_STATE_COMPLETED", "ts": 10.5, "mids": {"t1": "m1"}},
            "t2": {"state": "TASK_STATE_COMPLETED", "ts": 20.5, "turns": ["t2b"], "refs": ["t1"], "quoted": 1},
            "t3": {"mids": {"t3": "m3"}},  # no state: its turn is still open (cut)
            "t4": {"push": [{"id": "h", "url": "http://127.0.0.1:9/h", "token": "secret"}]},  # no state, turn ended
            "bad": "not a task",
        },
    }  # fmt: skip
    v2_store(
        tmp_path / "state",
        [
            ("P", "r1", {"a2a": a2a, "mcpServers": [{"name": "fs", "command": "x"}], "other": [1, 2]}),
            ("S", "r1", {"a2a": {"ctx": "P", "tasks": {"s1": {"state": "TASK_STATE_INPUT_REQUIRED", "ts": 30.5}}}}),
            ("C", "r2", {"intent": "only an intent", "a2a": "not a state", "x": True}),
            ("E", "r2", {}),
            ("J", "r2", "not JSON"),
        ],
        [
            ("t1", "P", 10.0, 1, 10.4, "end_turn", {}),
            ("t2", "P", 11.0, 5, 11.4, "input_required", {}),
            ("t2b", "P", 12.0, 9, 12.4, "end_turn", {}),
            ("t4", "P", 13.0, 13, 13.4, "end_turn", {}),
            ("t5", "P", 14.0, 17, 14.4, "end_turn", {}),  # a turn the front never recorded
            ("t3", "P", 15.0, 21, None, None, {}),
            ("s1", "S", 16.0, 1, 16.4, "input_required", {}),
            ("c1", "C", 17.0, 1, 17.4, "end_turn", {}),
            ("c2", "C", 18.0, 5, 18.4, "failed", {"cut": True}),
        ],
    )
    store = SqliteStore(str(tmp_path / "state"))
    await store.open()
    try:

        async def task(task_id: str) -> tuple[Any, ...]:
            t = await store.get_task(task_id)
            assert t is not None, task_id
            return (t.session_id, t.route, t.context_id, t.created_at, t.turn_id, t.state, t.status_ts, t.data)

        assert await task("t1") == ("P", "r1", "P", 10.0, "t1", "TASK_STATE_COMPLETED", 10.5, {"mids": {"t1": "m1"}})
        # A continued task: its latest turn is the continuation's.
        assert await task("t2") == ("P", "r1", "P", 11.0, "t2b", "TASK_STATE_COMPLETED", 20.5, {"turns": ["t2b"], "refs": ["t1"], "quoted": 1})
        assert await store.get_task("t2b") is None  # a continuation turn is no task
        assert await task("t3") == ("P", "r1", "P", 15.0, "t3", "TASK_STATE_WORKING", 15.0, {"mids": {"t3": "m3"}})
        assert await task("t4") == ("P", "r1", "P", 13.0, "t4", "TASK_STATE_FAILED", 13.4, {"push": a2a["tasks"]["t4"]["push"]})  # type: ignore[index]
        assert await task("t5") == ("P", "r1", "P", 14.0, "t5", "TASK_STATE_FAILED", 14.4, {})
        assert await task("s1") == ("S", "r1", "P", 16.0, "s1", "TASK_STATE_INPUT_REQUIRED", 30.5, {})  # a side session's context
        assert await store.get_task("bad") is None and await store.get_task("c1") is None
        assert (await store.list_tasks(route="r1", context_id="P")).total == 6

        p, s, c, e = [await store.get_session(sid) for sid in "PSCE"]
        assert p is not None and s is not None and c is not None and e is not None
        assert p.states == {"a2a": {"side": ["S"], "held": "t4", "cont": {"t2b": "t2"}, "tasks": {"bad": "not a task"}}}
        assert p.meta == {"mcpServers": [{"name": "fs", "command": "x"}], "other": [1, 2]}
        assert (s.states, s.meta) == ({"a2a": {"ctx": "P"}}, {})
        assert (c.states, c.meta) == ({"chat": {"intent": "only an intent"}}, {"a2a": "not a state", "x": True})
        assert (e.states, e.meta, e.turn_count, e.last_stop, e.last_cut) == ({}, {}, 0, None, False)
        assert rows(tmp_path / "state" / DB_FILENAME, "SELECT meta FROM sessions WHERE session_id = 'J'") == [("not JSON",)]
        assert (p.turn_count, p.last_stop, p.last_cut) == (6, None, False)  # its last turn (t3) is open
        assert (c.turn_count, c.last_stop, c.last_cut) == (2, "failed", True)
        assert (s.turn_count, s.last_stop) == (1, "input_required")

        # The open turn is closed at start-up, its task with it.
        (closed,) = await store.close_cut_turns()
        assert closed.turn_id == "t3"
        assert (await task("t3"))[5:7] == ("TASK_STATE_FAILED", closed.ended_at)
    finally:
        await store.close()


async def test_a_conversion_that_fails_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge.store.sqlite_schema as schema

    state = fixture_copy(tmp_path)
    db = state / DB_FILENAME
    before = db.read_bytes()

    def fails_after_the_rest(conn: sqlite3.Connection) -> None:
        assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone() == (4,)  # the steps before it ran
        raise KeyError("a bug in a conversion")

    monkeypatch.setattr(schema, "_MIGRATIONS", (*_MIGRATIONS[:2], (*_MIGRATIONS[2], fails_after_the_rest)))
    with pytest.raises(InternalError) as failed:
        await SqliteStore(str(state)).open()
    assert f"cannot open the store in {state}" in failed.value.message
    assert "from schema 2 to 3 failed: KeyError('a bug in a conversion')" in failed.value.message
    assert db.read_bytes() == before
    assert rows(db, "PRAGMA user_version") == [(2,)]
    assert rows(db, "SELECT name FROM sqlite_master WHERE name IN ('tasks', 'front_states')") == []

    monkeypatch.undo()  # the real migration then converts the same file
    store = SqliteStore(str(state))
    await store.open()
    try:
        assert (await store.list_tasks(route="demo")).total == 4
        assert await store.read_batches(A2A_SID, after_seq=33) == [
            StoredBatch(first_seq=28, last_seq=34, blob=rows(db, f"SELECT blob FROM events WHERE session_id = '{A2A_SID}' AND first_seq = 28")[0][0])
        ]
    finally:
        await store.close()


async def test_a_schema_3_file_gets_the_front_column_and_keeps_its_rows(tmp_path: Path) -> None:
    """Schema 3 → 4: a file made by the release before keeps every row; its sessions'
    `front` is NULL (unknown), listed under "unknown", and new ones are listed by front
    through the new index."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / DB_FILENAME
    conn = sqlite3.connect(db)
    with conn:
        for step in current(MIGRATIONS[:3]):
            conn.execute(str(render(step, "sqlite")))
        conn.execute(
            "INSERT INTO sessions (session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq,"
            " closed, turn_count, last_stop, last_cut) VALUES ('old', 'demo', '/w', 'An old one', 0.5, 2.0, 'ref',"
            " '{\"mode\":\"fast\"}', '{}', 3, 0, 1, 'end_turn', 0)"
        )
        conn.execute("INSERT INTO front_states VALUES ('old', 'chat', '{\"intent\":\"x\"}')")
        conn.execute("INSERT INTO turns (turn_id, session_id, started_at, first_seq, ended_at, last_seq, stop_reason, meta)"
                     " VALUES ('t1', 'old', 1.0, 1, 2.0, 3, 'end_turn', '{}')")  # fmt: skip
        conn.execute("INSERT INTO events VALUES ('old', 1, 3, x'00ff')")
        conn.execute("PRAGMA user_version = 3")
    conn.close()

    store = SqliteStore(str(state))
    await store.open()
    try:
        assert rows(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)] == [(5,)]
        assert ("sessions_by_front",) in rows(db, "SELECT name FROM sqlite_master WHERE type = 'index'")
        old = await store.get_session("old")
        assert old is not None and (
            old.front, old.route, old.cwd, old.title, old.updated_at, old.back_ref, old.options, old.last_seq,
            old.turn_count, old.last_stop, old.states,
        ) == (None, "demo", "/w", "An old one", 2.0, "ref", {"mode": "fast"}, 3, 1, "end_turn", {"chat": {"intent": "x"}})  # fmt: skip
        assert [t.turn_id for t in await store.list_turns("old")] == ["t1"]
        assert await store.read_batches("old") == [StoredBatch(first_seq=1, last_seq=3, blob=b"\x00\xff")]

        new = msgspec.structs.replace(old, session_id="new", front="acp", updated_at=3.0, states={})
        await store.put_session(new)
        assert await store.get_session("new") == new
        assert [r.session_id for r in (await store.list_sessions(front="unknown"))[0]] == ["old"]
        assert [r.session_id for r in (await store.list_sessions(front="acp"))[0]] == ["new"]
        assert (await store.count_sessions())["front"] == {"acp": 1, "a2a": 0, "chat": 0, "mcp": 0, "cli": 0, "unknown": 1}
    finally:
        await store.close()


# Sessions of a schema 4 file: (id, meta as stored, the owner column it must get).
OWNED_V4 = [
    ("mine", '{"owner":"jwt:https://idp:alice","mcpServers":[]}', "jwt:https://idp:alice"),
    ("theirs", '{"owner":"unix::bob"}', "unix::bob"),
    ("legacy", "{}", ""),  # made before owners were recorded: shared
    ("odd", '{"owner":7}', ""),  # not text: nobody
    ("broken", '{"owner":"x"', ""),  # does not decode: left unowned, not lost
    ("quoted", '{"note":"an \\"owner\\" here"}', ""),  # the word in a value, not a key
]


async def test_a_schema_4_file_gets_the_owner_column_filled_from_meta(tmp_path: Path) -> None:
    """Schema 4 → 5: each session's `owner` column is what its `meta` names (''
    otherwise), every row kept as it was; listings filtered by owner use the new index."""
    from bridge.store.listing import Visible

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    db = state / DB_FILENAME
    conn = sqlite3.connect(db)
    with conn:
        for step in current(MIGRATIONS[:4]):
            conn.execute(str(render(step, "sqlite")))
        for n, (sid, meta, _) in enumerate(OWNED_V4):
            conn.execute(
                "INSERT INTO sessions (session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq,"
                " closed, turn_count, last_stop, last_cut, front) VALUES (?, 'r', '/w', ?, 0.5, ?, NULL, '{}', ?, 0, 0, 0, NULL, 0, 'chat')",
                (sid, sid, 10.0 - n, meta),
            )
        conn.execute("PRAGMA user_version = 4")
    conn.close()
    before = rows(db, "SELECT * FROM sessions ORDER BY session_id")

    store = SqliteStore(str(state))
    await store.open()
    try:
        assert rows(db, "PRAGMA user_version") == [(5,)]
        assert ("sessions_by_owner",) in rows(db, "SELECT name FROM sqlite_master WHERE type = 'index'")
        assert dict(rows(db, "SELECT session_id, owner FROM sessions")) == {sid: owner for sid, _, owner in OWNED_V4}
        assert [r[:-1] for r in rows(db, "SELECT * FROM sessions ORDER BY session_id")] == before  # the rest as it was
        assert await store.delete_session("broken")  # its meta does not decode as a record's
        page, total = await store.list_sessions(visible=Visible(owner="jwt:https://idp:alice"))
        assert ([r.session_id for r in page], total) == (["mine", "legacy", "odd", "quoted"], 4)
    finally:
        await store.close()
