"""The Store contract, run against MemoryStore and SqliteStore alike, plus what only
SQLite promises: durability across kill -9, and several processes on one state dir."""

from __future__ import annotations

import os
import signal
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from bridge.core.events import StopReason, TurnEnded, decode_events
from bridge.errors import ConfigError, InternalError
from bridge.store import SessionRecord, Store, StoredBatch, TurnRecord, open_store
from bridge.store.base import CUT_META_KEY, CUT_TURN_ERROR
from bridge.store.memory import MemoryStore
from bridge.store.owners import OWNERS_DIRNAME
from bridge.store.sqlite import DB_FILENAME, SCHEMA_VERSION, SqliteStore
from bridge.store.sqlite_schema import _MIGRATIONS
from tests.store_support import STORE_KINDS, batch, opened, session, turn

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened(request.param, tmp_path, request) as s:
        yield s


# -- sessions ------------------------------------------------------------------------


@pytest.mark.trio
async def test_session_round_trip(store: Store) -> None:
    record = session(
        "s1", title="Fix the bug", back_ref="ctx-9", options={"model": "opus"},
        meta={"n": 1, "nested": {"a": [1, "x", None]}, "ok": True}, last_seq=7, closed=True,
    )  # fmt: skip
    await store.put_session(record)
    assert await store.get_session("s1") == record
    assert await store.get_session("nope") is None


@pytest.mark.trio
async def test_session_defaults_round_trip(store: Store) -> None:
    record = session("s1")
    await store.put_session(record)
    got = await store.get_session("s1")
    assert got == record
    assert got is not None and got.title is None and got.back_ref is None and got.closed is False


@pytest.mark.trio
async def test_put_session_replaces(store: Store) -> None:
    await store.put_session(session("s1", title="a"))
    await store.put_session(session("s1", title="b", updated_at=2.0))
    got = await store.get_session("s1")
    assert got is not None and got.title == "b" and got.updated_at == 2.0
    assert (await store.list_sessions())[1] == 1


@pytest.mark.trio
async def test_stored_record_is_not_the_callers(store: Store) -> None:
    record = session("s1", meta={"k": "v"})
    await store.put_session(record)
    record.meta["k"] = "changed"
    got = await store.get_session("s1")
    assert got is not None and got.meta == {"k": "v"}
    got.meta["k"] = "changed again"
    again = await store.get_session("s1")
    assert again is not None and again.meta == {"k": "v"}


@pytest.mark.trio
async def test_list_sessions_orders_newest_first_ties_by_id(store: Store) -> None:
    for sid, t in [("b", 2.0), ("a", 2.0), ("c", 3.0), ("d", 1.0)]:
        await store.put_session(session(sid, updated_at=t))
    page, total = await store.list_sessions()
    assert [s.session_id for s in page] == ["c", "a", "b", "d"]
    assert total == 4


@pytest.mark.trio
async def test_list_sessions_pages(store: Store) -> None:
    for i in range(7):
        await store.put_session(session(f"s{i}", updated_at=float(i)))
    page, total = await store.list_sessions(limit=3)
    assert [s.session_id for s in page] == ["s6", "s5", "s4"] and total == 7
    page, total = await store.list_sessions(limit=3, offset=3)
    assert [s.session_id for s in page] == ["s3", "s2", "s1"] and total == 7
    page, total = await store.list_sessions(limit=3, offset=6)
    assert [s.session_id for s in page] == ["s0"] and total == 7
    page, total = await store.list_sessions(limit=3, offset=10)
    assert page == [] and total == 7
    page, total = await store.list_sessions(limit=0)
    assert page == [] and total == 7


@pytest.mark.trio
async def test_list_sessions_filters(store: Store) -> None:
    await store.put_session(session("a", route="claude", cwd="/x", updated_at=1.0))
    await store.put_session(session("b", route="claude", cwd="/y", updated_at=2.0))
    await store.put_session(session("c", route="codex", cwd="/x", updated_at=3.0))
    await store.put_session(session("d", route="codex", cwd="/y", updated_at=4.0))

    async def ids(**kw: Any) -> tuple[list[str], int]:
        page, total = await store.list_sessions(**kw)
        return [s.session_id for s in page], total

    assert await ids(route="claude") == (["b", "a"], 2)
    assert await ids(cwd="/x") == (["c", "a"], 2)
    assert await ids(route="codex", cwd="/y") == (["d"], 1)
    assert await ids(route="codex", cwd="/nowhere") == ([], 0)
    assert await ids(route="claude", limit=1, offset=1) == (["a"], 2)


# -- turns ---------------------------------------------------------------------------


@pytest.mark.trio
async def test_turn_round_trip_and_replace(store: Store) -> None:
    running = turn("t1", meta={"prompt_chars": 12})
    await store.save(session("s1"), turns=[running])
    assert await store.get_turn("t1") == running
    finished = turn("t1", ended_at=2.5, last_seq=9, stop_reason="failed", error="back died", meta={"x": [1]})
    await store.save(session("s1"), turns=[finished])
    assert await store.get_turn("t1") == finished
    assert await store.get_turn("nope") is None


@pytest.mark.trio
async def test_list_turns_oldest_first_per_session(store: Store) -> None:
    await store.save(session("s1"), turns=[turn("t3", started_at=3.0, first_seq=20), turn("t1", started_at=1.0, first_seq=1)])
    await store.save(session("s2"), turns=[turn("other", "s2", started_at=0.0)])
    await store.save(session("s1"), turns=[turn("t2", started_at=2.0, first_seq=10)])
    assert [t.turn_id for t in await store.list_turns("s1")] == ["t1", "t2", "t3"]
    assert [t.turn_id for t in await store.list_turns("s2")] == ["other"]
    assert await store.list_turns("none") == []


# -- event batches -------------------------------------------------------------------


@pytest.mark.trio
async def test_read_batches_after_seq(store: Store) -> None:
    # Saved out of order on purpose: reads come back ordered by first_seq.
    for b in [batch(1, 3), batch(8, 10), batch(4, 7)]:
        await store.save(session("s1", last_seq=10), batch=b)
    await store.save(session("s2", last_seq=100), batch=batch(1, 100))

    async def spans(after: int) -> list[tuple[int, int]]:
        return [(b.first_seq, b.last_seq) for b in await store.read_batches("s1", after_seq=after)]

    assert [b.blob for b in await store.read_batches("s1")] == [batch(1, 3).blob, batch(4, 7).blob, batch(8, 10).blob]
    assert await spans(0) == [(1, 3), (4, 7), (8, 10)]
    assert await spans(2) == [(1, 3), (4, 7), (8, 10)]  # the first batch is filtered by the reader
    assert await spans(3) == [(4, 7), (8, 10)]
    assert await spans(9) == [(8, 10)]
    assert await spans(10) == []
    assert await store.read_batches("none") == []


@pytest.mark.trio
async def test_duplicate_batch_is_our_bug(store: Store) -> None:
    await store.save(session("s1", last_seq=3, updated_at=2.0), batch=batch(1, 3))
    with pytest.raises(InternalError):
        await store.save(session("s1", last_seq=5, updated_at=3.0), batch=batch(1, 5))
    # The failed save moved nothing.
    got = await store.get_session("s1")
    assert got is not None and (got.last_seq, got.updated_at) == (3, 2.0)
    assert [b.last_seq for b in await store.read_batches("s1")] == [3]


@pytest.mark.trio
async def test_save_writes_session_turns_and_batch_together(store: Store) -> None:
    record = session("s1", title="first", last_seq=3, updated_at=2.0)  # not stored before: save inserts it
    await store.save(record, turns=[turn("t1"), turn("t2", first_seq=3)], batch=batch(1, 3))
    assert await store.get_session("s1") == record
    assert [t.turn_id for t in await store.list_turns("s1")] == ["t1", "t2"]
    assert await store.read_batches("s1") == [batch(1, 3)]

    ended = turn("t2", first_seq=3, ended_at=4.0, last_seq=5, stop_reason="end_turn")
    await store.save(session("s1", title="first", last_seq=5, updated_at=4.0), turns=[ended], batch=batch(4, 5))
    assert await store.get_turn("t2") == ended
    got = await store.get_session("s1")
    assert got is not None and got.last_seq == 5
    assert [b.first_seq for b in await store.read_batches("s1")] == [1, 4]

    # All or nothing: a batch already stored fails the save, and the turn and session stay as they were.
    with pytest.raises(InternalError):
        await store.save(session("s1", title="changed", last_seq=9), turns=[turn("t3")], batch=batch(4, 9))
    got = await store.get_session("s1")
    assert got is not None and (got.title, got.last_seq) == ("first", 5)
    assert await store.get_turn("t3") is None


# -- delete --------------------------------------------------------------------------


@pytest.mark.trio
async def test_delete_session_cascades(store: Store) -> None:
    for sid in ("s1", "s2"):
        await store.put_session(session(sid))
        await store.save(session(sid, last_seq=2), turns=[turn(f"{sid}-t", sid)], batch=batch(1, 2))

    assert await store.delete_session("s1") is True
    assert await store.get_session("s1") is None
    assert await store.get_turn("s1-t") is None
    assert await store.list_turns("s1") == []
    assert await store.read_batches("s1") == []
    assert await store.list_sessions() == ([await store.get_session("s2")], 1)
    assert [t.turn_id for t in await store.list_turns("s2")] == ["s2-t"]
    assert len(await store.read_batches("s2")) == 1

    assert await store.delete_session("s1") is False
    assert await store.delete_session("never") is False


# -- SQLite only ---------------------------------------------------------------------


def test_open_store_picks_the_implementation(tmp_path: Path) -> None:
    assert isinstance(open_store(None), MemoryStore)
    assert isinstance(open_store(str(tmp_path)), SqliteStore)


@pytest.mark.trio
async def test_sqlite_creates_private_state_dir_with_schema_version(tmp_path: Path) -> None:
    state = tmp_path / "a" / "b" / "state"
    store = SqliteStore(str(state))
    await store.open()
    await store.close()
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    with sqlite3.connect(state / DB_FILENAME) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    conn.close()
    # Reopening an up-to-date database migrates nothing and keeps working.
    store = SqliteStore(str(state))
    await store.open()
    assert await store.list_sessions() == ([], 0)
    await store.close()


@pytest.mark.trio
async def test_sqlite_refuses_a_newer_schema(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(ConfigError):
        await SqliteStore(str(tmp_path)).open()


@pytest.mark.trio
async def test_sqlite_not_open_is_our_bug(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path))
    with pytest.raises(InternalError):
        await store.get_session("s1")
    await store.open()
    await store.close()
    await store.close()  # twice is harmless
    with pytest.raises(InternalError):
        await store.get_session("s1")


_KILLED_WRITER = """
import os, signal, sys, trio
from bridge.store import SessionRecord, StoredBatch, TurnRecord
from bridge.store.sqlite import SqliteStore

async def main():
    store = SqliteStore(sys.argv[1])
    await store.open()
    await store.save(
        SessionRecord(session_id="s1", route="claude", created_at=1.0, updated_at=2.0, last_seq=3),
        turns=[TurnRecord(turn_id="t1", session_id="s1", started_at=1.0, first_seq=1, ended_at=2.0, last_seq=3, stop_reason="end_turn")],
        batch=StoredBatch(first_seq=1, last_seq=3, blob=b"events"),
    )
    print("ok", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

trio.run(main)
"""


@pytest.mark.trio
async def test_sqlite_finished_turn_survives_kill_9(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-c", _KILLED_WRITER, str(state)], capture_stdout=True, capture_stderr=True,
            check=False, env=env,
        )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert proc.stdout == b"ok\n"
    # Never checkpointed into the main file: what follows is read back from the WAL.
    assert (state / f"{DB_FILENAME}-wal").stat().st_size > 0

    store = SqliteStore(str(state))
    await store.open()
    try:
        got = await store.get_session("s1")
        assert got is not None and (got.last_seq, got.updated_at) == (3, 2.0)
        t = await store.get_turn("t1")
        assert t is not None and (t.stop_reason, t.last_seq, t.ended_at) == ("end_turn", 3, 2.0)
        assert await store.read_batches("s1") == [StoredBatch(first_seq=1, last_seq=3, blob=b"events")]
    finally:
        await store.close()


@pytest.mark.trio
async def test_sqlite_group_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls made while a batch runs share the next transaction and thread hop; one that
    fails is rolled back alone; a cancelled caller's call still completes."""
    import bridge.store.sqlite as sqlite_module

    batches: list[int] = []
    run_batch = sqlite_module.run_batch

    def counting(conn: sqlite3.Connection, ops: list[Any]) -> None:
        batches.append(len(ops))
        run_batch(conn, ops)

    monkeypatch.setattr(sqlite_module, "run_batch", counting)
    store = SqliteStore(str(tmp_path / "state"))
    await store.open()
    try:
        with trio.fail_after(30):
            await store.save(session("s1", last_seq=2), batch=batch(1, 2))
            batches.clear()
            failures: list[BaseException] = []

            async def dup() -> None:
                try:
                    await store.save(session("s1", last_seq=9), batch=batch(1, 9))  # its first_seq is taken
                except InternalError as exc:
                    failures.append(exc)

            async with trio.open_nursery() as nursery:
                for i in range(40):
                    nursery.start_soon(store.put_session, session(f"g{i}"))
                    if i == 20:
                        nursery.start_soon(dup)
            grouped = list(batches)
            assert (await store.list_sessions(limit=0))[1] == 41
            assert len(failures) == 1 and "UNIQUE" in str(failures[0])
            got = await store.get_session("s1")
            assert got is not None and got.last_seq == 2  # the failed call moved nothing
            assert sum(grouped) == 41 and len(grouped) < 41  # shared transactions, not one each

            # Cancelled while queued behind a running batch: the call still runs to the end.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.put_session, session("first"))
                await trio.testing.wait_all_tasks_blocked()
                with trio.CancelScope() as scope:
                    scope.cancel()
                    await store.put_session(session("cancelled"))
                    await trio.lowlevel.checkpoint()  # where the cancellation lands
            assert scope.cancelled_caught
            assert await store.get_session("cancelled") == session("cancelled")
    finally:
        await store.close()


@pytest.mark.trio
async def test_two_sqlite_stores_share_a_state_dir(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    a, b = SqliteStore(state), SqliteStore(state)
    with trio.fail_after(30):
        # Opened at once: both race to create the schema on their own connections.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.open)
            nursery.start_soon(b.open)
        try:
            await a.save(session("s1", last_seq=2), batch=batch(1, 2))
            got = await b.get_session("s1")
            assert got is not None and got.last_seq == 2
            assert await b.read_batches("s1") == [batch(1, 2)]

            await b.save(session("s1", last_seq=2), turns=[turn("t1")])
            assert await a.get_turn("t1") == turn("t1")

            # Writers from both at once wait on each other (busy_timeout), none fails.
            async def write(store: Store, prefix: str) -> None:
                for i in range(20):
                    await store.put_session(session(f"{prefix}{i}"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write, a, "a")
                nursery.start_soon(write, b, "b")
            assert (await a.list_sessions(limit=0))[1] == 41
            assert await b.delete_session("s1") is True
            assert await a.read_batches("s1") == []
        finally:
            await a.close()
            await b.close()


# -- cut turns (a process killed mid-turn) ------------------------------------------------


def cut_session(store_turn: TurnRecord) -> tuple[SessionRecord, StoredBatch]:
    return session(store_turn.session_id, updated_at=7.0, last_seq=3), batch(1, 3)


@pytest.mark.trio
async def test_cut_turn_is_closed_when_the_store_opens_again(store: Store) -> None:
    open_turn = turn("t1", started_at=5.0)
    record, events = cut_session(open_turn)
    await store.save(record, turns=[open_turn], batch=events)
    assert await store.close_cut_turns() == []  # its owner (this open store) still runs it

    await store.close()  # the process is gone; the next one opens the store
    await store.open()
    (closed,) = await store.close_cut_turns()
    assert (closed.turn_id, closed.stop_reason, closed.last_seq) == ("t1", "failed", 4)
    assert closed.error == CUT_TURN_ERROR.message and closed.meta == {CUT_META_KEY: True}
    assert closed.ended_at == 7.0  # its session's last write, not the restart's time
    assert await store.get_turn("t1") == closed
    got = await store.get_session("s1")
    assert got is not None and got.last_seq == 4
    (appended,) = await store.read_batches("s1", after_seq=3)
    assert (appended.first_seq, appended.last_seq) == (4, 4)
    assert decode_events(appended.blob) == [
        TurnEnded(seq=4, turn_id="t1", stop_reason=StopReason.FAILED, error=CUT_TURN_ERROR)
    ]
    assert await store.close_cut_turns() == []  # once


@pytest.mark.trio
async def test_sqlite_leaves_a_live_owners_turn_alone(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    a, b = SqliteStore(state), SqliteStore(state)
    await a.open()
    await b.open()
    try:
        record, events = cut_session(turn("t1"))
        await a.save(record, turns=[turn("t1")], batch=events)
        # Two editors on one state dir: b starting must not end what a is running.
        assert await b.close_cut_turns() == []
        got = await b.get_turn("t1")
        assert got is not None and got.ended_at is None
        await a.close()
        (closed,) = await b.close_cut_turns()
        assert closed.turn_id == "t1"
    finally:
        await a.close()
        await b.close()
    assert os.listdir(Path(state) / OWNERS_DIRNAME) == []


_CUT_WRITER = """
import os, signal, sys, trio
from bridge.store import SessionRecord, StoredBatch, TurnRecord
from bridge.store.sqlite import SqliteStore

async def main():
    store = SqliteStore(sys.argv[1])
    await store.open()
    await store.save(
        SessionRecord(session_id="s1", route="claude", created_at=1.0, updated_at=2.0, last_seq=3),
        turns=[TurnRecord(turn_id="t1", session_id="s1", started_at=1.0, first_seq=1)],
        batch=StoredBatch(first_seq=1, last_seq=3, blob=b"events"),
    )
    print("ok", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

trio.run(main)
"""


@pytest.mark.trio
async def test_sqlite_closes_the_turn_of_a_killed_process(tmp_path: Path) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    with trio.fail_after(30):
        proc = await trio.run_process(
            [sys.executable, "-c", _CUT_WRITER, str(state)], capture_stdout=True, capture_stderr=True,
            check=False, env=env,
        )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    assert len(os.listdir(state / OWNERS_DIRNAME)) == 1  # its owner file, left behind

    store = SqliteStore(str(state))
    await store.open()
    try:
        (closed,) = await store.close_cut_turns()
        assert (closed.turn_id, closed.stop_reason, closed.last_seq) == ("t1", "failed", 4)
        assert os.listdir(state / OWNERS_DIRNAME) == [store._owner]  # the dead one's file swept
    finally:
        await store.close()


@pytest.mark.trio
async def test_sqlite_closes_an_open_turn_written_before_owners(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    conn = sqlite3.connect(tmp_path / DB_FILENAME, isolation_level=None)
    for statement in _MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO sessions VALUES ('s1','claude','/w',NULL,0.5,2.0,NULL,'{}','{}',0,0)")
    conn.execute("INSERT INTO turns VALUES ('t1','s1',1.0,1,NULL,NULL,NULL,NULL,'{}')")
    conn.close()
    store = SqliteStore(str(tmp_path))
    await store.open()
    try:
        (closed,) = await store.close_cut_turns()
        assert (closed.turn_id, closed.last_seq) == ("t1", 1)
    finally:
        await store.close()
