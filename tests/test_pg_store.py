"""What only the PostgreSQL store promises (the Store contract runs against it in
tests/test_store*.py): NOTIFY at commit, instances sharing one database (cut turns
closed only once their owner expired, each exactly once), the schema made once by
daemons starting together and a newer one refused, every read served by an index,
faults that fail a call loudly and leave the store usable, and no password shown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
import threading
from typing import Any

import psycopg
import pytest
import trio

from bridge import logs
from bridge.config import Config, StoreConfig
from bridge.core.events import StopReason, TurnEnded, decode_events
from bridge.errors import ConfigError, InternalError, Overloaded
from bridge.store import open_store, store_url
from bridge.store import pg_conn, pg_schema, schema_ddl
from bridge.store.pg import PgStore
from bridge.store.pg_rows import EVENTS_CHANNEL, save_params
from bridge.store.listing import Visible
from bridge.store.schema_ddl import SCHEMA_VERSION
from tests.store_support import batch, session, task, turn
from tests.test_store_index import stored_tasks




@pytest.fixture
async def store(pg_url: str) -> AsyncIterator[PgStore]:
    s = PgStore(pg_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


def sql(url: str, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as c:
        cur = c.execute(statement, params)
        return cur.fetchall() if cur.description else []


# -- NOTIFY ------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_saved_batch_is_notified_at_commit_and_a_failed_save_notifies_nothing(store: PgStore, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {EVENTS_CHANNEL}")

        def heard(n: int) -> list[str]:
            return [m.payload for m in listener.notifies(timeout=10, stop_after=n)]

        await store.save(session("s1", last_seq=3), batch=batch(1, 3))
        await store.save(session("s1", last_seq=3, title="no batch, no notification"))
        with pytest.raises(InternalError):
            await store.save(session("s1", last_seq=5), batch=batch(1, 5))  # rolled back: nothing told
        await store.save(session("s1", last_seq=5), batch=batch(4, 5))
        assert heard(2) == ["s1 3", "s1 5"]

        # Inside the writing transaction nothing is delivered yet; at its commit it is.
        statement, params = save_params(session("s2", last_seq=2), [], [], [], (1, 2, b"x"), store.owner)
        before_commit: list[str] = []

        def write_then_look(c: Any) -> None:
            c.execute(statement, params)
            c.execute("SELECT pg_sleep(0)")  # a round trip within the transaction, after the NOTIFY
            before_commit.extend(m.payload for m in listener.notifies(timeout=0))

        await store.call(write_then_look)
        assert before_commit == []
        assert heard(1) == ["s2 2"]

        # A cut turn closed by another instance is notified as a batch too.
        await store.save(session("s3", last_seq=1), turns=[turn("t3", "s3")], batch=batch(1, 1))
        assert heard(1) == ["s3 1"]
        sql(pg_url, "DELETE FROM instances WHERE instance_id = %s", (store.owner,))  # as if it died
        other = PgStore(pg_url)
        await other.open()
        try:
            (closed,) = await other.close_cut_turns()
            assert closed.turn_id == "t3" and heard(1) == ["s3 2"]
        finally:
            await other.close()


# -- instances ------------------------------------------------------------------------------


@pytest.mark.trio
async def test_an_instances_turns_are_closed_only_once_it_expired_each_exactly_once(store: PgStore, pg_url: str) -> None:
    (host, pid, alive), = sql(pg_url, "SELECT host, pid, expires_at > extract(epoch from clock_timestamp()) FROM instances WHERE instance_id = %s", (store.owner,))  # fmt: skip
    assert host and pid and alive
    for n in range(12):
        await store.save(session(f"s{n}", last_seq=2, updated_at=7.0), turns=[turn(f"t{n}", f"s{n}")], batch=batch(1, 2),
                         tasks=[task(f"t{n}", f"s{n}", state="TASK_STATE_WORKING")])  # fmt: skip
    b, c = PgStore(pg_url), PgStore(pg_url)
    await b.open()
    await c.open()
    try:
        assert await b.close_cut_turns() == []  # its heartbeat is fresh: it runs them
        await store.heartbeat()
        sql(pg_url, "UPDATE instances SET expires_at = 0 WHERE instance_id = %s", (store.owner,))  # missed heartbeats
        found: dict[str, list[str]] = {"b": [], "c": []}

        async def sweep(name: str, s: PgStore) -> None:
            found[name] = [t.turn_id for t in await s.close_cut_turns()]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sweep, "b", b)
            nursery.start_soon(sweep, "c", c)
        assert sorted(found["b"] + found["c"]) == sorted(f"t{n}" for n in range(12))  # each once, by one of them
        for n in range(12):
            ends = [e for bt in await b.read_batches(f"s{n}", after_seq=2) for e in decode_events(bt.blob) if isinstance(e, TurnEnded)]
            assert [(e.seq, e.stop_reason) for e in ends] == [(3, StopReason.FAILED)]
            got = await b.get_task(f"t{n}")
            assert got is not None and (got.state, got.status_ts) == ("TASK_STATE_FAILED", 7.0)
        # The expired row is forgotten once its lease is long past; a live instance's heartbeat renews its own.
        await store.heartbeat()
        (alive,), = sql(pg_url, "SELECT expires_at > extract(epoch from clock_timestamp()) FROM instances WHERE instance_id = %s", (store.owner,))  # fmt: skip
        assert alive
    finally:
        await b.close()
        await c.close()
    await store.close()
    assert sql(pg_url, "SELECT instance_id FROM instances") == []  # each close removes its row


# -- schema ---------------------------------------------------------------------------------


@pytest.mark.trio
async def test_daemons_starting_together_make_the_schema_once_and_a_newer_one_is_refused(pg_url: str) -> None:
    stores = [PgStore(pg_url, pool_size=1) for _ in range(5)]
    async with trio.open_nursery() as nursery:
        for s in stores:
            nursery.start_soon(s.open)
    try:
        await stores[0].save(session("s1", last_seq=1), batch=batch(1, 1))
        assert [b.last_seq for b in await stores[4].read_batches("s1")] == [1]
        assert sql(pg_url, "SELECT key, value FROM bridge_meta") == [("schema_version", str(SCHEMA_VERSION))]
        assert (await stores[1].stats()).schema_version == SCHEMA_VERSION
        assert len(sql(pg_url, "SELECT 1 FROM instances")) == 5
    finally:
        for s in stores:
            await s.close()
    # The same tables, columns and indexes as SQLite's, in PostgreSQL's types.
    columns = dict(sql(pg_url, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'events'"))
    assert columns == {"session_id": "text", "first_seq": "bigint", "last_seq": "bigint", "blob": "bytea"}
    indexes = {name for (name,) in sql(pg_url, "SELECT indexname FROM pg_indexes WHERE schemaname = 'public'")}
    assert {"turns_by_session", "turns_by_stream", "turns_open", "tasks_by_route_state", "sessions_by_route"} <= indexes

    sql(pg_url, "UPDATE bridge_meta SET value = %s", (str(SCHEMA_VERSION + 1),))
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1} is newer than this agent-bridge"):
        await PgStore(pg_url).open()
    assert sql(pg_url, "SELECT session_id FROM sessions") == [("s1",)]  # left alone


# -- plans ------------------------------------------------------------------------------------


class Recording:
    """A connection that notes each statement it runs, with its parameters."""

    def __init__(self, conn: Any, seen: list[tuple[str, Any]]) -> None:
        self._conn, self._seen = conn, seen

    def execute(self, statement: str, params: Any = None) -> Any:
        self._seen.append((statement, params))
        return self._conn.execute(statement, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for child in plan.get("Plans", []) for n in _nodes(child))]


@pytest.mark.trio
async def test_a_schema_3_database_gets_the_front_column_and_keeps_its_rows(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 3 → 4 on PostgreSQL: a database made by the release before (its tables as
    schema 3 declared them) keeps its sessions, their `front` NULL, and gets the index."""
    with monkeypatch.context() as m:  # a daemon of the release before makes the database
        m.setattr(pg_schema, "current", lambda: schema_ddl.current(schema_ddl.MIGRATIONS[:3]))
        m.setattr(pg_schema, "SCHEMA_VERSION", 3)
        old = PgStore(pg_url)
        await old.open()
        await old.close()
    assert sql(pg_url, "SELECT value FROM bridge_meta") == [("3",)]
    sql(pg_url, "INSERT INTO sessions (session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta, last_seq,"
                " closed, turn_count, last_stop, last_cut) VALUES ('old', 'demo', '/w', 'Old', 0.5, 2.0, NULL, '{}', '{}', 0, 0, 0, NULL, 0)")  # fmt: skip
    store = PgStore(pg_url)
    await store.open()
    try:
        assert sql(pg_url, "SELECT value FROM bridge_meta") == [(str(SCHEMA_VERSION),)] == [("5",)]
        got = await store.get_session("old")
        assert got is not None and (got.front, got.title, got.updated_at) == (None, "Old", 2.0)
        await store.put_session(session("new", front="mcp", updated_at=3.0))
        assert [r.session_id for r in (await store.list_sessions(front="mcp"))[0]] == ["new"]
        assert [r.session_id for r in (await store.list_sessions(front="unknown"))[0]] == ["old"]
        assert sql(pg_url, "SELECT 1 FROM pg_indexes WHERE indexname = 'sessions_by_front'") == [(1,)]
    finally:
        await store.close()


@pytest.mark.trio
async def test_a_schema_4_database_gets_the_owner_column_filled_from_meta(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Schema 4 → 5 on PostgreSQL: each session's `owner` is what its `meta` names (''
    otherwise), and a listing filtered by owner shows the caller's and the unowned."""
    from bridge.store.listing import Visible
    from tests.test_store_migration import OWNED_V4

    with monkeypatch.context() as m:  # a daemon of the release before makes the database
        m.setattr(pg_schema, "current", lambda: schema_ddl.current(schema_ddl.MIGRATIONS[:4]))
        m.setattr(pg_schema, "SCHEMA_VERSION", 4)
        old = PgStore(pg_url)
        await old.open()
        await old.close()
    for n, (sid, meta, _) in enumerate(OWNED_V4):
        sql(pg_url, "INSERT INTO sessions (session_id, route, cwd, title, created_at, updated_at, back_ref, options, meta,"
                    " last_seq, closed, turn_count, last_stop, last_cut, front) VALUES (%s, 'r', '/w', %s, 0.5, %s, NULL, '{}', %s,"
                    " 0, 0, 0, NULL, 0, 'chat')", (sid, sid, 10.0 - n, meta))  # fmt: skip
    store = PgStore(pg_url)
    await store.open()
    try:
        assert sql(pg_url, "SELECT value FROM bridge_meta") == [("5",)]
        assert dict(sql(pg_url, "SELECT session_id, owner FROM sessions")) == {sid: owner for sid, _, owner in OWNED_V4}
        assert sql(pg_url, "SELECT 1 FROM pg_indexes WHERE indexname = 'sessions_by_owner'") == [(1,)]
        assert await store.delete_session("broken")
        page, total = await store.list_sessions(visible=Visible(owner="jwt:https://idp:alice"))
        assert ([r.session_id for r in page], total) == (["mine", "legacy", "odd", "quoted"], 4)
    finally:
        await store.close()


async def test_every_read_is_served_by_an_index(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each statement of these reads, explained with sequential scans and sorts turned
    off (PostgreSQL then falls back to them only where no index can serve): no scan of
    tasks, turns or events, and listings in an index's order (no sort of the matches)."""
    seen: list[tuple[str, Any]] = []
    connect = pg_conn.connect
    monkeypatch.setattr(pg_conn, "connect", lambda url: Recording(connect(url), seen))
    store = PgStore(pg_url)
    await store.open()
    try:
        await stored_tasks(store)
        await store.save(session("s1", last_seq=3), turns=[turn("t1", stream_seq=0)], batch=batch(1, 3))
        reads: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("list_tasks by route", lambda: store.list_tasks(route="r", limit=2)),
            ("list_tasks by route, next page", lambda: store.list_tasks(route="r", limit=2, cursor=(5.0, "a"))),
            ("list_tasks by route and state", lambda: store.list_tasks(route="r", state="TASK_STATE_COMPLETED", after_ts=2.0)),
            ("list_tasks by context", lambda: store.list_tasks(route="r", context_id="c1", limit=2, cursor=(5.0, "a"))),
            ("get_task", lambda: store.get_task("a")),
            ("get_session", lambda: store.get_session("s1")),
            ("list_sessions", lambda: store.list_sessions(route="r", limit=2)),
            ("list_sessions by front", lambda: store.list_sessions(front="acp", status="running", q="fix", limit=2)),
            ("list_sessions of one caller", lambda: store.list_sessions(visible=Visible(owner="me", hidden=("x",)), limit=2)),
            ("count_sessions of one caller", lambda: store.count_sessions(visible=Visible(owner="me"))),
            ("list_tasks of one caller", lambda: store.list_tasks(route="r", visible=Visible(owner="me"), limit=2)),
            ("read_batches", lambda: store.read_batches("s1", after_seq=2, through_seq=9, limit=4)),
            ("list_turns", lambda: store.list_turns("s1", after_seq=0, before_seq=9, limit=2, newest_first=True)),
            ("turn_at_stream_seq", lambda: store.turn_at_stream_seq("s1", 5)),
            ("prunable", lambda: store.prunable(10.0, limit=5, after=(0.5, "s9"))),
            ("prune", lambda: store.prune(["s3"], before_ts=10.0)),
        ]
        plans: dict[str, list[dict[str, Any]]] = {}
        with psycopg.connect(pg_url, autocommit=True) as plain:
            plain.execute("SET enable_seqscan = off; SET enable_sort = off")
            for name, read in reads:
                seen.clear()
                await read()
                assert seen, name
                plans[name] = [
                    n for statement, params in seen
                    for n in _nodes(plain.execute(f"EXPLAIN (FORMAT JSON) {statement}", params).fetchone()[0][0]["Plan"])
                ]  # fmt: skip
        for name, nodes in plans.items():
            scans = [n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan" and n["Relation Name"] in ("tasks", "turns", "events")]
            assert not scans, (name, nodes)
            assert any("Index" in n["Node Type"] for n in nodes), (name, nodes)
            if name.startswith("list_tasks") or name in ("list_turns", "read_batches", "turn_at_stream_seq", "prunable"):
                assert not [n for n in nodes if n["Node Type"] == "Sort"], (name, nodes)
        by_index = {name: " ".join(str(n.get("Index Name")) for n in nodes) for name, nodes in plans.items()}
        assert "tasks_by_route" in by_index["list_tasks by route, next page"]
        assert "tasks_by_context" in by_index["list_tasks by context"]
        assert "turns_by_session" in by_index["list_turns"] and "turns_by_stream" in by_index["turn_at_stream_seq"]
        assert "sessions_by_update" in by_index["prunable"] and "turns_open" in by_index["prunable"]
        assert "sessions_by_route" in by_index["list_sessions"] and "sessions_by_front" in by_index["list_sessions by front"]
        # A caller's own sessions by the owner index, whatever the store holds of others'.
        assert "sessions_by_owner" in by_index["list_sessions of one caller"]
        assert "sessions_by_owner" in by_index["count_sessions of one caller"]
    finally:
        await store.close()


# -- faults -----------------------------------------------------------------------------------


@pytest.mark.trio
async def test_a_lock_held_too_long_or_a_lost_connection_fails_the_call_loudly_then_the_store_goes_on(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_conn, "LOCK_TIMEOUT_MS", 50)
    store = PgStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.save(session("s1"))
        with psycopg.connect(pg_url) as other:  # another instance holds the session row
            other.execute("SELECT 1 FROM sessions WHERE session_id = 's1' FOR UPDATE")
            with pytest.raises(Overloaded, match="busy.*try again"):
                await store.save(session("s1", title="changed"), batch=batch(1, 1))
            other.rollback()
        got = await store.get_session("s1")
        assert got is not None and got.title is None and await store.read_batches("s1") == []  # nothing written

        pid = await store.call(lambda c: c.info.backend_pid)
        sql(pg_url, "SELECT pg_terminate_backend(%s)", (pid,))  # the server drops the pooled connection
        with pytest.raises(Overloaded, match="cannot be reached.*try again"):
            await store.get_session("s1")
        await store.save(session("s1", title="again"))  # on a new connection
        got = await store.get_session("s1")
        assert got is not None and got.title == "again"
        assert await store.call(lambda c: c.info.backend_pid) != pid
        assert await store.ping() > 0
    finally:
        await store.close()


@pytest.mark.trio
async def test_no_password_in_a_repr_or_an_error(tmp_path: Any) -> None:
    url = f"postgresql://bridge:s3cret-pw@/nowhere?host={tmp_path}&connect_timeout=2"
    store = PgStore(url)
    assert "s3cret-pw" not in repr(store) and "***" in repr(store)
    with pytest.raises(Overloaded) as failed:
        await store.open()
    assert "cannot be reached" in failed.value.message and "s3cret-pw" not in failed.value.message
    assert pg_conn.redact("postgresql://u@h/db?password=pw&sslmode=require") == "postgresql://u@h/db?password=***&sslmode=require"
    assert pg_conn.redact("host=h password='p w' dbname=d") == "host=h password=*** dbname=d"
    assert "s3cret-pw" not in logs.redact(f"connecting to {url}")  # what opening registered
    config = StoreConfig(url=url)
    assert "s3cret-pw" not in repr(config) and "s3cret-pw" not in repr(Config(routes={}, store=config))


@pytest.mark.trio
async def test_a_probe_gives_up_on_a_stuck_connection_and_a_write_never_does(pg_url: str) -> None:
    store = PgStore(pg_url, pool_size=1)
    await store.open()
    running, release = threading.Event(), threading.Event()
    order: list[str] = []

    def stuck(c: Any) -> None:
        running.set()
        release.wait()
        order.append("stuck")

    async def cancel_once_running(scope: trio.CancelScope) -> None:
        await trio.to_thread.run_sync(running.wait)
        scope.cancel()

    async def unstick_at_last() -> None:  # only if the store never gives up: the test fails, not hangs
        await trio.sleep(20)
        release.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(unstick_at_last)
            with trio.CancelScope() as renewal:  # as the cluster's bound gives up on a renewal
                nursery.start_soon(cancel_once_running, renewal)
                await store.call(stuck, abandon=True)
            with trio.move_on_after(0.05):  # /readyz's bound, while the one connection is busy
                await store.ping()
            assert not release.is_set() and order == []  # both gave up while it was stuck
            with trio.CancelScope() as saving:
                saving.cancel()
                nursery.start_soon(trio.to_thread.run_sync, release.set)
                await store.save(session("s1"))  # cancelled, yet written: a write is never abandoned
            await store.call(lambda c: order.append("next"))
            nursery.cancel_scope.cancel()
        assert order == ["stuck", "next"]  # the connection took no call before the abandoned one ended
        assert await store.get_session("s1") is not None
    finally:
        await store.close()


# -- [store] url ---------------------------------------------------------------------------------


def test_store_url_selects_postgresql_from_one_of_three(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    url = "postgresql://bridge:pw@db.internal/bridge"
    assert store_url(StoreConfig()) is None
    assert isinstance(open_store(StoreConfig(url=url), str(tmp_path)), PgStore)
    monkeypatch.setenv("BRIDGE_DB", url)
    assert store_url(StoreConfig(url_env="BRIDGE_DB")) == url
    secret = tmp_path / "db-url"
    secret.write_text(f"  {url}\n")
    assert store_url(StoreConfig(url_file=str(secret))) == url  # read at open, stripped
    monkeypatch.setenv("EMPTY_DB", "")
    for config, needle in [
        (StoreConfig(url=url, url_env="BRIDGE_DB"), "give one of url, url_env and url_file"),
        (StoreConfig(url_env="EMPTY_DB"), "EMPTY_DB is not set or is empty"),
        (StoreConfig(url_env="NO_SUCH_VARIABLE_X"), "NO_SUCH_VARIABLE_X is not set"),
        (StoreConfig(url_file=str(tmp_path / "missing")), "cannot be read or is empty"),
        (StoreConfig(url="mysql://root:pw@h/db"), "not a PostgreSQL URL"),
    ]:
        with pytest.raises(ConfigError, match=needle) as failed:
            store_url(config)
        assert "pw" not in failed.value.message


@pytest.mark.trio
async def test_flushes_waiting_together_share_a_round_trip_and_one_that_fails_fails_alone(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups: list[int] = []
    together = pg_conn._Worker._together

    def counting(self: Any, jobs: list[Any]) -> bool:
        groups.append(len(jobs))
        return together(self, jobs)

    monkeypatch.setattr(pg_conn._Worker, "_together", counting)
    store = PgStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.save(session("s1", last_seq=2), batch=batch(1, 2))
        failures: list[BaseException] = []

        async def save(n: int) -> None:
            try:
                if n == 20:
                    await store.save(session("s1", last_seq=9), batch=batch(1, 9))  # its first_seq is taken
                else:
                    await store.save(session(f"g{n}", last_seq=1), turns=[turn(f"t{n}", f"g{n}")], batch=batch(1, 1))
            except InternalError as exc:
                failures.append(exc)

        async with trio.open_nursery() as nursery:
            for n in range(40):
                nursery.start_soon(save, n)
        assert max(groups) > 1 and sum(groups) <= 40  # shared round trips, not one each
        assert len(failures) == 1 and "duplicate key" in str(failures[0])
        assert (await store.list_sessions(limit=0))[1] == 40  # every other one written
        got = await store.get_session("s1")
        assert got is not None and got.last_seq == 2  # the failed one moved nothing
    finally:
        await store.close()
