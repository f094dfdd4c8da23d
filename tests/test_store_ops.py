"""Operators' store work: stats, prune (and the daemon's retention), VACUUM, export,
and the `agent-bridge store` commands that run them (in process, with click's runner;
tests/test_e2e_restart.py runs them beside a real daemon)."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from click.testing import CliRunner

from bridge.cli import main
from bridge.core.content import TextContent
from bridge.core.events import MessageChunk, StopReason, TurnEnded, TurnStarted, encode_events
from bridge.errors import InternalError
from bridge.store import Store, StoredBatch
from bridge.store.export import REDACTED, export_session
from bridge.store.memory import MemoryStore
from bridge.store.retention import prune_older, prune_on_schedule
from bridge.store.sqlite import DB_FILENAME, SqliteStore
from bridge.store_cli import parse_duration
from tests.store_support import STORE_KINDS, batch, opened, session, task, turn

DAY = 86400.0


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with opened(request.param, tmp_path, request) as s:
        yield s


async def sessions_aged(store: Store, ages: dict[str, float], *, now: float = 1000 * DAY) -> None:
    """Sessions last updated `ages[sid]` days before `now`, each with a finished turn,
    an event batch, a task and a front state."""
    for sid, age in ages.items():
        record = session(sid, route="r", updated_at=now - age * DAY, last_seq=2, states={"a2a": {}})
        events = encode_events([TurnStarted(seq=1, turn_id=f"{sid}-t", prompt=[TextContent(text="q")]),
                                TurnEnded(seq=2, turn_id=f"{sid}-t", stop_reason=StopReason.END_TURN)])  # fmt: skip
        await store.save(
            record, turns=[turn(f"{sid}-t", sid, ended_at=1.0, last_seq=2, stop_reason="end_turn")],
            batch=StoredBatch(first_seq=1, last_seq=2, blob=events),
            tasks=[task(f"{sid}-t", sid)], states=["a2a"],
        )  # fmt: skip


# -- stats, prunable, prune, vacuum: the contract -------------------------------------------


@pytest.mark.trio
async def test_stats_count_without_reading_events(store: Store) -> None:
    await sessions_aged(store, {"a": 1, "b": 2})
    await store.save(session("c", last_seq=10), turns=[turn("c1", "c"), turn("c2", "c", first_seq=5)], batch=batch(1, 10))
    st = await store.stats()
    assert (st.sessions, st.turns, st.open_turns, st.events, st.batches, st.tasks) == (3, 4, 2, 14, 3, 2)


@pytest.mark.trio
async def test_prunable_pages_oldest_first_and_skips_open_turns(store: Store) -> None:
    await sessions_aged(store, {"d40": 40, "d50a": 50, "d50b": 50, "d60": 60, "d10": 10, "busy": 90})
    await store.save(session("busy", route="r", updated_at=1000 * DAY - 90 * DAY), turns=[turn("open", "busy", first_seq=3)])
    before = 1000 * DAY - 30 * DAY
    everything = await store.prunable(before, limit=100)
    assert [sid for _, sid in everything] == ["d60", "d50b", "d50a", "d40"]  # ties: id descending
    pages: list[str] = []
    after = None
    while page := await store.prunable(before, limit=1, after=after):
        pages.append(page[0][1])
        after = page[-1]
    assert pages == ["d60", "d50b", "d50a", "d40"]

    # prune checks each again: one that was updated since, one with a turn open now, one gone.
    await store.save(session("d40", route="r", updated_at=1000 * DAY), turns=[])
    await store.save(session("d50a", route="r", updated_at=1000 * DAY - 50 * DAY), turns=[turn("now", "d50a", first_seq=9)])
    gone = await store.prune(["d60", "d50b", "d50a", "d40", "busy", "never", "d60"], before_ts=before)
    assert gone == ["d60", "d50b"]
    for sid in gone:
        assert await store.get_session(sid) is None
        assert await store.get_turn(f"{sid}-t") is None and await store.get_task(f"{sid}-t") is None
        assert await store.read_batches(sid) == [] and await store.list_turns(sid) == []
    assert {s.session_id for s in (await store.list_sessions())[0]} == {"d40", "d50a", "d10", "busy"}
    assert await store.prune([], before_ts=before) == []


@pytest.mark.trio
async def test_vacuum_gives_the_space_back(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "state"))
    await store.open()
    try:
        big = StoredBatch(first_seq=1, last_seq=1, blob=b"x" * 200_000)
        for i in range(20):
            await store.save(session(f"s{i}", last_seq=1, updated_at=1.0), batch=big)
        assert len(await store.prune([f"s{i}" for i in range(20)], before_ts=2.0)) == 20
        assert await store.vacuum() is True  # checkpointed: the file holds the free pages now
        assert (await store.stats()).free_bytes == 0
        for i in range(20):
            await store.save(session(f"t{i}", last_seq=1, updated_at=1.0), batch=big)
        await store.prune([f"t{i}" for i in range(20)], before_ts=2.0)
        await store.vacuum()
        st = await store.stats()
        assert st.wal_bytes == 0 and st.free_bytes == 0 and st.file_bytes < 1_000_000
    finally:
        await store.close()
    assert await MemoryStore().vacuum() is True


# -- retention --------------------------------------------------------------------------------


class Recording(MemoryStore):
    """A MemoryStore that notes each `prune` call's size and wakes a waiter after each."""

    def __init__(self) -> None:
        super().__init__()
        self.prunes: list[int] = []
        self.pruned = trio.Event()
        self.fail_next = False

    async def prunable(self, before_ts: float, *, limit: int, after: tuple[float, str] | None = None) -> list[tuple[float, str]]:
        if self.fail_next:
            self.fail_next = False
            self.pruned.set()
            raise InternalError("sqlite: disk I/O error")
        return await super().prunable(before_ts, limit=limit, after=after)

    async def prune(self, session_ids: Sequence[str], *, before_ts: float) -> list[str]:
        self.prunes.append(len(session_ids))
        gone = await super().prune(session_ids, before_ts=before_ts)
        self.pruned.set()
        return gone


@pytest.mark.trio
async def test_prune_older_deletes_in_chunks_and_spares_what_is_kept() -> None:
    store = Recording()
    await sessions_aged(store, {f"s{i:02}": 40 + i for i in range(25)} | {"new": 1, "live": 99})
    chunks: list[list[str]] = []
    before = 1000 * DAY - 30 * DAY
    n = await prune_older(store, before, dry_run=True, chunk=10, on_chunk=lambda c: chunks.append([sid for _, sid in c]))
    assert n == 26 and store.prunes == [] and (await store.stats()).sessions == 27  # a dry run deletes nothing
    assert chunks[0][:2] == ["live", "s24"] and [len(c) for c in chunks] == [10, 10, 6]

    n = await prune_older(store, before, keep=lambda sid: sid == "live", chunk=10, limit=15)
    assert n == 15 and store.prunes == [9, 6]  # at most `chunk` per transaction, `limit` in all
    n = await prune_older(store, before, keep=lambda sid: sid == "live", chunk=10)
    assert n == 10
    assert sorted(s.session_id for s in (await store.list_sessions())[0]) == ["live", "new"]


@pytest.mark.trio
async def test_the_daemons_retention_prunes_at_start_then_on_schedule(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000 * DAY]
    store = Recording()
    await sessions_aged(store, {"old": 40, "live": 40, "young": 10})
    caplog.set_level(logging.INFO, "bridge.store")
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: prune_on_schedule(
                store, 30 * DAY, keep=lambda sid: sid == "live", now=lambda: now[0], task_status=task_status
            )
        )
        await store.pruned.wait()  # the pass at start
        assert sorted(s.session_id for s in (await store.list_sessions())[0]) == ["live", "young"]
        assert "retention: pruned 1 sessions not updated for 30 days" in caplog.text

        store.pruned = trio.Event()
        store.fail_next = True  # the next pass fails: logged, and the one after goes on
        now[0] += 25 * DAY
        await store.pruned.wait()
        assert "retention: pruning sessions failed: sqlite: disk I/O error" in caplog.text
        store.pruned = trio.Event()
        await store.pruned.wait()
        assert sorted(s.session_id for s in (await store.list_sessions())[0]) == ["live"]
        nursery.cancel_scope.cancel()


# -- export -----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_export_streams_every_record_in_order_and_redacts_secrets(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge.store.export as export

    monkeypatch.setattr(export, "_TURNS_PER_READ", 2)  # several pages of each
    monkeypatch.setattr(export, "_BATCHES_PER_READ", 2)
    monkeypatch.setattr(export, "_TASKS_PER_READ", 1)
    events: list[Any] = []
    for n in range(3):
        tid = f"t{n}"
        events += [TurnStarted(seq=3 * n + 1, turn_id=tid, prompt=[TextContent(text=f"q{n}")]),
                   MessageChunk(seq=3 * n + 2, message_id="m", content=TextContent(text=f"a{n}")),
                   TurnEnded(seq=3 * n + 3, turn_id=tid, stop_reason=StopReason.END_TURN)]  # fmt: skip
    meta = {"mcpServers": [{"name": "gh", "command": "gh-mcp", "env": [{"name": "GH_TOKEN", "value": "ghp-secret"}],
                            "headers": [{"name": "Authorization", "value": "Bearer hdr-secret"}]}]}  # fmt: skip
    states = {"a2a": {"side": ["side"]}}
    push = [{"id": "h", "url": "http://127.0.0.1:9/h", "token": "push-secret", "credentials": "cred-secret", "scheme": "Bearer"}]
    record = session("s1", route="r", last_seq=9, meta=meta, states=states)
    for n in range(3):
        await store.save(
            record, turns=[turn(f"t{n}", first_seq=3 * n + 1, ended_at=2.0, last_seq=3 * n + 3)],
            batch=StoredBatch(first_seq=3 * n + 1, last_seq=3 * n + 3, blob=encode_events(events[3 * n : 3 * n + 3])),
            tasks=[task(f"t{n}", "s1", status_ts=float(n), data={"push": push} if n == 1 else {})], states=["a2a"],
        )  # fmt: skip
    # A side session's task is in the same context, but not this session's.
    await store.save(session("side", route="r", states={"a2a": {"ctx": "s1"}}), tasks=[task("x", "side", context_id="s1")], states=["a2a"])

    pages: list[bytes] = []
    assert await export_session(store, "s1", pages.append) is True
    lines = [json.loads(line) for line in b"".join(pages).splitlines()]
    assert len(pages) > 4  # written a page at a time
    assert [line["type"] for line in lines] == ["session"] + ["turn"] * 3 + ["event"] * 9 + ["task"] * 3
    assert lines[0]["data"]["session_id"] == "s1" and lines[0]["data"]["states"] == states
    assert [e["data"]["seq"] for e in lines[4:13]] == list(range(1, 10))
    assert lines[5]["data"] == {"event": "message_chunk", "seq": 2, "message_id": "m", "content": {"type": "text", "text": "a0"}}
    assert [t["data"]["task_id"] for t in lines[13:]] == ["t2", "t1", "t0"]
    text = b"".join(pages).decode()
    for secret in ("ghp-secret", "hdr-secret", "push-secret", "cred-secret"):
        assert secret not in text
    server = lines[0]["data"]["meta"]["mcpServers"][0]
    assert server["env"] == [{"name": "GH_TOKEN", "value": REDACTED}] and server["command"] == "gh-mcp"
    assert lines[14]["data"]["data"]["push"][0] == {**push[0], "token": REDACTED, "credentials": REDACTED}

    side: list[bytes] = []
    assert await export_session(store, "side", side.append) is True
    assert [json.loads(line)["data"].get("task_id") for line in b"".join(side).splitlines()] == [None, "x"]
    assert await export_session(store, "nope", side.append) is False


# -- the commands -----------------------------------------------------------------------------


def test_durations() -> None:
    assert [parse_duration(d) for d in ("30d", "12h", "90m", "45s", "2w", "1.5d")] == [30 * DAY, 43200, 5400, 45, 14 * DAY, 1.5 * DAY]
    for bad in ("30", "d", "-1d", "0d", "3 days", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)


def made_store(state: Path, ages: dict[str, float]) -> None:
    import time

    async def fill() -> None:
        async with opened("sqlite", state.parent) as s:
            await sessions_aged(s, ages, now=time.time())

    assert state.name == "state"
    trio.run(fill)


def run(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, ["store", *args], env={"AGENT_BRIDGE_CONFIG": "", **(env or {})})


def test_store_commands(tmp_path: Path) -> None:
    state = tmp_path / "state"
    made_store(state, {"old": 40, "older": 50, "young": 1})
    where = ["--state-dir", str(state)]

    done = run("stats", *where)
    assert done.exit_code == 0, done.output
    assert "sessions  3" in done.output and "tasks     3" in done.output and "(schema 5)" in done.output
    done = run("stats", "--format", "json", *where)
    stats = json.loads(done.output)
    assert (stats["sessions"], stats["events"], stats["schema_version"], stats["state_dir"]) == (3, 6, 5, str(state))

    done = run("export", "old", *where)
    assert done.exit_code == 0, done.output
    assert [json.loads(line)["type"] for line in done.output.splitlines()] == ["session", "turn", "event", "event", "task"]
    done = run("export", "nope", *where)
    assert done.exit_code == 1 and f"no session 'nope' in {state}" in done.output

    done = run("prune", "--older-than", "30d", "--dry-run", *where)
    assert done.exit_code == 0, done.output
    assert done.output.splitlines()[0].startswith("would prune older (last updated ")
    assert done.output.splitlines()[-1].startswith("2 sessions would prune: not updated since ")
    assert json.loads(run("stats", "--format", "json", *where).output)["sessions"] == 3
    done = run("prune", "--older-than", "30d", *where)
    assert done.exit_code == 0 and "2 sessions pruned" in done.output
    assert json.loads(run("stats", "--format", "json", *where).output)["sessions"] == 1

    done = run("vacuum", *where)
    assert done.exit_code == 0 and done.output.startswith("vacuum: "), done.output

    for args, needle in [(("prune", *where), "give --older-than"), (("prune", "--older-than", "soon", *where), "not a duration")]:
        done = run(*args)
        assert done.exit_code == 64 and needle in done.output, done.output
    done = run("stats", "--state-dir", str(tmp_path / "nowhere"))
    assert done.exit_code == 1 and "no store in" in done.output
    assert not (tmp_path / "nowhere").exists()  # a mistyped directory is not made


def test_prune_takes_the_configs_retention(tmp_path: Path) -> None:
    state = tmp_path / "state"
    made_store(state, {"old": 40, "young": 1})
    config = tmp_path / "bridge.toml"
    config.write_text(f'[store]\nstate_dir = "{state}"\nretention_days = 30\n[routes.r]\nback = {{ kind = "demo" }}\n')
    done = run("prune", "--config", str(config))
    assert done.exit_code == 0 and "pruned old" in done.output and "1 sessions pruned" in done.output, done.output


def test_vacuum_while_another_process_writes_says_busy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge.store.sqlite_conn as conn_module

    state = tmp_path / "state"
    made_store(state, {"a": 1})
    monkeypatch.setattr(conn_module, "BUSY_TIMEOUT_MS", 50)
    other = sqlite3.connect(state / DB_FILENAME, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        done = run("stats", "--state-dir", str(state))
        assert done.exit_code == 0, done.output  # a reader opens and counts beside it
        done = run("vacuum", "--state-dir", str(state))
        assert done.exit_code == 75, done.output
        assert "error: the store is busy" in done.output and "try again" in done.output
        other.execute("ROLLBACK")
    finally:
        other.close()
    assert run("vacuum", "--state-dir", str(state)).exit_code == 0


def test_store_commands_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    import time

    from bridge.store.pg import PgStore

    async def fill() -> None:
        store = PgStore(pg_url)
        await store.open()
        try:
            await sessions_aged(store, {"old": 40, "older": 50, "young": 1}, now=time.time())
        finally:
            await store.close()

    trio.run(fill)
    config = tmp_path / "bridge.toml"
    config.write_text('[store]\nurl_env = "BRIDGE_TEST_DB"\n[routes.r]\nback = { kind = "demo" }\n')
    where = ["--config", str(config)]
    url_with_password = pg_url.replace("postgresql://postgres@", "postgresql://postgres:not-needed-pw@")
    env = {"BRIDGE_TEST_DB": url_with_password}  # trust authentication ignores the password

    done = run("stats", *where, env=env)
    assert done.exit_code == 0, done.output
    assert "sessions  3" in done.output and "(schema 5)" in done.output and "(the database)" in done.output
    assert "not-needed-pw" not in done.output and "postgres:***@" in done.output
    stats = json.loads(run("stats", "--format", "json", *where, env=env).output)
    assert (stats["sessions"], stats["events"], stats["batches"], stats["file_bytes"] > 0) == (3, 6, 3, True)
    done = run("export", "old", *where, env=env)
    assert [json.loads(line)["type"] for line in done.output.splitlines()] == ["session", "turn", "event", "event", "task"]
    done = run("prune", "--older-than", "30d", *where, env=env)
    assert done.exit_code == 0 and "2 sessions pruned" in done.output, done.output
    done = run("vacuum", *where, env=env)
    assert done.exit_code == 0 and done.output.startswith("vacuum: "), done.output
    assert json.loads(run("stats", "--format", "json", *where, env=env).output)["sessions"] == 1

    done = run("stats", *where, env={"BRIDGE_TEST_DB": ""})
    assert done.exit_code == 78 and "BRIDGE_TEST_DB is not set or is empty" in done.output
