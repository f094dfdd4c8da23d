"""The `Cluster` contract (bridge/cluster/base.py), for the in-process reference
(`MemoryCluster`, one `MemoryHub`) and for `PgCluster` (instances on one database of
the throwaway PostgreSQL server, each with its own `PgStore`): leases, their expiry
when an instance stops renewing, a lease taken by another instance (`on_lost`),
forwarded commands and their replies (large, failing, unanswered, to a gone instance,
many at once both ways), watches woken by stored events. Then what only PostgreSQL
has: a LISTEN connection killed under a watch, a command that does not decode, turns
of a dead instance closed, a full command queue.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

from bridge.cluster import pg_sql
from bridge.cluster.base import CancelCmd, Command, OwnerGone, PromptCmd, Reply, error_of
from bridge.cluster.memory import MemoryHub
from bridge.cluster.pg import PgCluster
from bridge.config import ClusterConfig
from bridge.core.content import TextContent
from bridge.errors import NotFound, Overloaded
from bridge.store import SessionRecord, StoredBatch, TurnRecord
from bridge.store.pg import PgStore

NOW = "extract(epoch from clock_timestamp())"


class Echo:
    """The owner's command handler: answers what it got, raises NotFound for the
    session "missing", never answers for "stuck"."""

    def __init__(self) -> None:
        self.seen: list[Command] = []

    async def __call__(self, cmd: Command) -> Reply:
        self.seen.append(cmd)
        if cmd.session_id == "missing":
            raise NotFound("no session 'missing'")
        if cmd.session_id == "stuck":
            await trio.sleep_forever()
        size = sum(len(b.text) for b in cmd.content if isinstance(b, TextContent)) if isinstance(cmd, PromptCmd) else 0
        return Reply(message=f"{type(cmd).__name__} {cmd.session_id} {cmd.origin} {size}")


class Kit:
    """Starts instances of one kind in a nursery; `kill` is `kill -9` (or a cut cable)."""

    def __init__(self, kind: str, nursery: trio.Nursery, pg_url: str | None) -> None:
        self.kind, self.nursery, self.pg_url = kind, nursery, pg_url
        self.hub: MemoryHub | None = None
        self.stores: dict[str, PgStore] = {}
        self.scopes: dict[str, trio.CancelScope] = {}
        self.handlers: dict[str, Echo] = {}

    async def start(self, n: int = 2, *, ttl: float = 10.0, forward_timeout_s: float = 15.0) -> list[Any]:
        clusters: list[Any] = []
        for i in range(n):
            if self.kind == "memory":
                self.hub = self.hub or MemoryHub(lease_ttl_s=ttl)
                cluster: Any = self.hub.instance(f"i{i}", forward_timeout_s=forward_timeout_s)
            else:
                assert self.pg_url is not None
                store = PgStore(self.pg_url, lease_ttl_s=ttl)
                await store.open()  # its schema, and its row in `instances`
                cluster = PgCluster(store, ClusterConfig(lease_ttl_s=ttl, forward_timeout_s=forward_timeout_s))
                self.stores[cluster.instance_id] = store
            self.handlers[cluster.instance_id] = handler = Echo()
            self.scopes[cluster.instance_id] = await self.nursery.start(self._run, cluster, handler)
            clusters.append(cluster)
        return clusters

    @staticmethod
    async def _run(cluster: Any, handler: Echo, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                await nursery.start(cluster.run, handler)
                task_status.started(scope)

    def kill(self, cluster: Any) -> None:
        """Nothing renews it any more: its instance row (PostgreSQL) and leases expire."""
        if self.kind == "memory":
            assert self.hub is not None
            self.hub.kill(cluster.instance_id)
        self.scopes[cluster.instance_id].cancel()

    async def notify(self, writer: Any, session_id: str, last_seq: int) -> None:
        """What a flush of the session's events up to `last_seq` wakes."""
        if self.kind == "memory":
            assert self.hub is not None
            self.hub.notify(session_id, last_seq)
        else:
            session = SessionRecord(session_id=session_id, route="r", created_at=0, updated_at=0, last_seq=last_seq)
            batch = StoredBatch(first_seq=last_seq, last_seq=last_seq, blob=b"[]")
            await self.stores[writer.instance_id].save(session, batch=batch)

    async def steal(self, session_id: str, to: Any) -> None:
        """As if the lease's holder had not renewed it in time and `to` had taken it."""
        if self.kind == "memory":
            assert self.hub is not None
            self.hub.leases[session_id] = (to.instance_id, self.hub.leases[session_id][1])
        else:
            sql = "UPDATE leases SET instance_id = %s WHERE session_id = %s"
            await self.stores[to.instance_id].call(lambda c: c.execute(sql, (to.instance_id, session_id)))

    async def close(self) -> None:
        for store in self.stores.values():
            await store.close()


@pytest.fixture(params=["memory", "pg"])
async def kit(request: pytest.FixtureRequest) -> AsyncIterator[Kit]:
    pg_url = request.getfixturevalue("pg_url") if request.param == "pg" else None
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            k = Kit(request.param, nursery, pg_url)
            try:
                yield k
            finally:
                nursery.cancel_scope.cancel()
        await k.close()


async def eventually(check: Callable[[], Any], *, within_s: float = 20.0) -> None:
    """Poll `check` (sync or async) until it holds; fail after `within_s`."""
    with trio.fail_after(within_s):
        while True:
            result = check()
            if hasattr(result, "__await__"):
                result = await result
            if result:
                return
            await trio.sleep(0.05)


async def test_acquire_release(kit: Kit) -> None:
    a, b = await kit.start()
    assert await a.acquire("s1") is None
    assert await a.acquire("s1") is None  # ours: renewed, still ours
    assert await b.acquire("s1") == a.instance_id
    assert a.stats()["leases"] == 1 and b.stats()["leases"] == 0
    await b.release("s1")  # not b's: no error, still a's
    assert await b.acquire("s1") == a.instance_id
    await a.release("s1")
    assert await b.acquire("s1") is None
    assert await a.acquire("s1") == b.instance_id
    assert a.stats()["leases"] == 0 and b.stats()["leases"] == 1


async def test_lease_of_an_instance_that_stops_renewing_expires(kit: Kit) -> None:
    a, b = await kit.start(ttl=1.0)
    assert await a.acquire("s1") is None
    kit.kill(a)

    async def free() -> bool:
        return await b.acquire("s1") is None

    await eventually(free)
    assert await b.acquire("s1") is None


async def test_lease_taken_by_another_calls_on_lost(kit: Kit) -> None:
    a, b = await kit.start(ttl=1.0)
    lost: list[str] = []
    a.on_lost = lost.append
    assert await a.acquire("s1") is None
    assert await a.acquire("s2") is None
    await kit.steal("s1", b)
    await eventually(lambda: lost)
    assert lost == ["s1"] and a.stats()["leases"] == 1
    assert await b.acquire("s1") is None and await a.acquire("s1") == b.instance_id


async def test_forward_round_trip_large_prompt_error_and_stats(kit: Kit) -> None:
    a, b = await kit.start()
    reply = await b.forward(a.instance_id, CancelCmd(session_id="s1"))
    assert error_of(reply) is None and reply.message == f"CancelCmd s1 {b.instance_id} 0"
    # Larger than a NOTIFY payload may be (8000 bytes), and not ASCII.
    text = "é" * 6000 + "x" * 9000
    reply = await b.forward(a.instance_id, PromptCmd(session_id="s2", turn_id="t1", content=[TextContent(text=text)]))
    assert reply.message == f"PromptCmd s2 {b.instance_id} {len(text)}"
    got = kit.handlers[a.instance_id].seen[-1]
    assert isinstance(got, PromptCmd) and got.content == [TextContent(text=text)] and got.turn_id == "t1"
    reply = await b.forward(a.instance_id, CancelCmd(session_id="missing"))
    err = error_of(reply)
    assert isinstance(err, NotFound) and "missing" in err.message
    assert b.stats()["forwarded"] == 3 and a.stats()["served"] == 3
    if kit.kind == "pg":  # the large body's row was taken by its reader
        store = kit.stores[a.instance_id]
        assert await store.call(lambda c: c.execute("SELECT count(*) FROM cluster_messages").fetchone()[0]) == 0


async def test_forward_to_a_gone_or_silent_instance_is_owner_gone(kit: Kit) -> None:
    a, b = await kit.start(forward_timeout_s=0.5)
    with pytest.raises(OwnerGone):
        await b.forward("nobody", CancelCmd(session_id="s1"))
    with pytest.raises(OwnerGone, match="did not answer"):
        await b.forward(a.instance_id, CancelCmd(session_id="stuck"))
    kit.kill(a)
    if kit.kind == "pg":  # its row expires with no heartbeat: then it fails at once
        store = kit.stores[b.instance_id]
        await store.call(lambda c: c.execute("UPDATE instances SET expires_at = 0 WHERE instance_id = %s", (a.instance_id,)))
    with pytest.raises(OwnerGone, match="is gone"):
        await b.forward(a.instance_id, CancelCmd(session_id="s1"))
    assert b.stats()["forward_failures"] == 3


async def test_many_forwards_both_ways(kit: Kit) -> None:
    a, b = await kit.start()
    replies: dict[str, str | None] = {}

    async def one(src: Any, dst: Any, sid: str) -> None:
        replies[sid] = (await src.forward(dst.instance_id, CancelCmd(session_id=sid))).message

    async with trio.open_nursery() as nursery:
        for i in range(150):
            nursery.start_soon(one, a, b, f"ab{i}")
            nursery.start_soon(one, b, a, f"ba{i}")
    assert len(replies) == 300
    for sid, message in replies.items():
        origin = a if sid.startswith("ab") else b
        assert message == f"CancelCmd {sid} {origin.instance_id} 0"
    assert a.stats()["served"] == b.stats()["served"] == 150


async def test_watch_woken_by_a_stored_batch(kit: Kit) -> None:
    a, b = await kit.start()
    watch = b.watch("s1")
    other = b.watch("s2")
    woke = trio.Event()

    async def follower() -> None:
        await watch.wait_beyond(5, timeout_s=3600)
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower)
        await kit.notify(a, "s1", 5)  # not beyond what the follower has
        await kit.notify(a, "s9", 40)  # nobody watches it
        await kit.notify(a, "s2", 7)
        with trio.fail_after(20):
            await other.wait_beyond(6, timeout_s=3600)
        assert not woke.is_set() and watch.notified == 5 and other.notified == 7
        await kit.notify(a, "s1", 6)
        with trio.fail_after(20):
            await woke.wait()
    with trio.fail_after(20):
        await watch.wait_beyond(0, timeout_s=3600)  # one notified before: at once
    watch.close()
    other.close()


# -- PostgreSQL only


@pytest.fixture
async def pg(pg_url: str) -> AsyncIterator[Kit]:
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            k = Kit("pg", nursery, pg_url)
            try:
                yield k
            finally:
                nursery.cancel_scope.cancel()
        await k.close()


async def test_watch_and_commands_survive_a_killed_listen_connection(pg: Kit) -> None:
    a, b = await pg.start()
    watch = b.watch("s1")
    woke = trio.Event()

    async def follower() -> None:
        await watch.wait_beyond(10, timeout_s=3600)
        woke.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower)
        listener = b._listener
        assert listener is not None
        pid = listener._conn.info.backend_pid
        await pg.stores[a.instance_id].call(lambda c: c.execute("SELECT pg_terminate_backend(%s)", (pid,)))
        with trio.fail_after(20):
            await woke.wait()  # what was notified meanwhile is lost: readers re-read
    assert listener.reconnects == 1
    with trio.fail_after(20):
        await pg.notify(a, "s1", 11)
        await watch.wait_beyond(10, timeout_s=3600)
    assert watch.notified == 11
    reply = await a.forward(b.instance_id, CancelCmd(session_id="s1"))
    assert reply.message == f"CancelCmd s1 {a.instance_id} 0"
    watch.close()


async def open_turn(store: PgStore, session_id: str, turn_id: str) -> None:
    """A running turn of the instance `store` belongs to, as its first flush stores it."""
    session = SessionRecord(session_id=session_id, route="r", created_at=1, updated_at=1, last_seq=1)
    turn = TurnRecord(turn_id=turn_id, session_id=session_id, started_at=1, first_seq=1)
    await store.save(session, turns=[turn], batch=StoredBatch(first_seq=1, last_seq=1, blob=b"[]"))


async def test_a_command_that_does_not_decode_is_answered_invalid(pg: Kit) -> None:
    (a,) = await pg.start(1)
    store = pg.stores[a.instance_id]
    await open_turn(store, "s1", "t1")
    with psycopg.connect(pg.pg_url, autocommit=True) as conn:  # a peer that speaks garbage
        conn.execute(f'LISTEN "{pg_sql.channel_of("tester")}"')
        conn.execute(f"INSERT INTO instances (instance_id, started_at, expires_at) VALUES ('tester', 0, {NOW} + 60)")
        for body in ("{not json", '{"op": "prompt"}', "@12345", "@x"):
            conn.execute("SELECT pg_notify(%s, %s)", (pg_sql.channel_of(a.instance_id), f"c tester 7 {body}"))
        conn.execute("SELECT pg_notify(%s, 'garbage')", (pg_sql.channel_of(a.instance_id),))
        replies = await trio.to_thread.run_sync(lambda: [n.payload for n in conn.notifies(timeout=20, stop_after=2)])
    assert len(replies) == 2 and all(r.startswith('r 7 {"error":"InvalidRequest"') for r in replies)
    # Still serving.
    (b,) = await pg.start(1)
    assert (await b.forward(a.instance_id, CancelCmd(session_id="s1"))).message == f"CancelCmd s1 {b.instance_id} 0"
    turn = await pg.stores[b.instance_id].get_turn("t1")
    assert turn is not None and turn.ended_at is None  # its instance is alive: nothing cut


async def test_turns_of_a_dead_instance_are_closed_by_a_survivor(pg: Kit) -> None:
    a, b = await pg.start(ttl=1.0)
    assert await a.acquire("s1") is None
    survivor = pg.stores[b.instance_id]
    await open_turn(pg.stores[a.instance_id], "s1", "t1")
    await open_turn(survivor, "s2", "t2")
    watch = b.watch("s1")
    pg.kill(a)
    with trio.fail_after(20):  # the closing event is notified like any flush
        await watch.wait_beyond(1, timeout_s=3600)
    watch.close()
    cut = await survivor.get_turn("t1")
    assert cut is not None and cut.ended_at is not None and cut.stop_reason == "failed" and cut.last_seq == 2
    alive = await survivor.get_turn("t2")
    assert alive is not None and alive.ended_at is None  # the survivor's own turn runs on
    leases = await survivor.call(lambda c: c.execute("SELECT count(*) FROM leases").fetchone()[0])
    assert leases == 0  # the sweep freed it


async def test_a_full_command_queue_answers_overloaded(pg: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.cluster import pg as pg_module

    monkeypatch.setattr(pg_module, "WORKERS", 1)
    monkeypatch.setattr(pg_module, "INBOX", 2)
    a, b = await pg.start(forward_timeout_s=30)
    seen = pg.handlers[a.instance_id].seen
    async with trio.open_nursery() as nursery:
        nursery.start_soon(b.forward, a.instance_id, CancelCmd(session_id="stuck"))  # holds the one worker
        await eventually(lambda: seen)
        for _ in range(2):  # fill the queue
            nursery.start_soon(b.forward, a.instance_id, CancelCmd(session_id="stuck"))
        await eventually(lambda: a._inbox.statistics().current_buffer_used == 2)
        reply = await b.forward(a.instance_id, CancelCmd(session_id="s1"))
        assert isinstance(error_of(reply), Overloaded) and len(seen) == 1
        nursery.cancel_scope.cancel()


async def test_only_held_leases_are_renewed_one_whose_release_failed_expires(pg: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = await pg.start(ttl=1.0)
    for sid in ("kept", "released"):
        assert await a.acquire(sid) is None

    def broken(conn: Any, **_: Any) -> None:
        raise psycopg.OperationalError("the connection broke")

    monkeypatch.setattr(pg_sql, "release", broken)
    with pytest.raises(Overloaded):
        await a.release("released")
    monkeypatch.undo()
    # A lease of a's that a does not hold (as if whoever acquired it gave up on it).
    sql = f"INSERT INTO leases VALUES ('stray', %s, {NOW} + 1)"
    await pg.stores[a.instance_id].call(lambda c: c.execute(sql, (a.instance_id,)))

    async def free() -> bool:
        return await b.acquire("released") is None and await b.acquire("stray") is None

    await eventually(free)
    assert await b.acquire("kept") == a.instance_id and a.stats()["leases"] == 1  # renewed all along


async def test_renewals_that_stop_working_give_up_every_lease_before_it_expires(pg: Kit, monkeypatch: pytest.MonkeyPatch) -> None:
    from bridge.store import pg_conn

    monkeypatch.setattr(pg_conn, "LOCK_TIMEOUT_MS", 600_000)  # a renewal stuck, not failing
    a, _ = await pg.start(ttl=1.0)
    lost: list[str] = []
    gave_up = trio.Event()

    def on_lost(sid: str) -> None:
        lost.append(sid)
        if len(lost) == 2:
            gave_up.set()

    a.on_lost = on_lost
    for sid in ("s1", "s2"):
        assert await a.acquire(sid) is None
    with psycopg.connect(pg.pg_url) as other:  # holds a's instance row: its heartbeat waits
        other.execute("SELECT 1 FROM instances WHERE instance_id = %s FOR UPDATE", (a.instance_id,))
        with trio.fail_after(20):
            await gave_up.wait()
        assert sorted(lost) == ["s1", "s2"] and a.stats()["leases"] == 0
        other.rollback()
