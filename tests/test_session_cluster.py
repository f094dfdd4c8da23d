"""Two session managers on one store and one `MemoryHub` (bridge/cluster/memory.py): a
session runs live on the instance holding its lease; the other follows its events from
the store and forwards its commands (bridge/session/remote.py, bridge/session/owners.py).
The real thing, daemons on PostgreSQL, is tests/test_e2e_cluster.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from bridge.backs import make_back
from bridge.cluster.memory import MemoryHub
from bridge.core import events as ev
from bridge.errors import BackUnavailable, Busy, InvalidParams, NotFound
from bridge.session import Session, SessionManager
from bridge.session.remote import RemoteSession
from bridge.store.memory import MemoryStore
from tests.test_session import CEILING_S, Recorder, make_config, prompt

pytestmark = pytest.mark.trio


@asynccontextmanager
async def two_instances(*, ttl: float = 10.0) -> AsyncIterator[tuple[MemoryHub, SessionManager, SessionManager]]:
    hub = MemoryHub(lease_ttl_s=ttl)
    store = hub.store(MemoryStore())
    config = make_config()
    a = SessionManager(config, store, make_back, cluster=hub.instance("a"))
    b = SessionManager(config, store, make_back, cluster=hub.instance("b"))
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        await nursery.start(b.run)
        yield hub, a, b
        nursery.cancel_scope.cancel()


async def test_a_turn_started_through_b_runs_on_a_and_b_sees_every_event_in_order() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")
            seen_a = Recorder()
            on_a.subscribe(seen_a)
            on_b = await b.get(on_a.id)
            assert isinstance(on_b, RemoteSession) and on_b.owner == "a"
            seen_b = Recorder()
            on_b.subscribe(seen_b)
            turn = await on_b.begin_turn(prompt("think: plan: tool: fork: hello"), message_id="m1")
            assert on_a.busy and on_a.turn is not None and on_a.turn.turn_id == turn.turn_id
            ended = await turn.wait()
            assert ended.stop_reason is ev.StopReason.END_TURN
            await seen_b.wait_for(lambda e: isinstance(e, ev.TurnEnded))
            # The same events, in the same order, with the same sequence numbers: no gap.
            assert [(e.seq, type(e)) for e in seen_b.events] == [(e.seq, type(e)) for e in seen_a.events]
            assert [e.seq for e in seen_b.events] == list(range(1, len(seen_b.events) + 1))
            started = seen_b.of(ev.TurnStarted)[0]
            assert started.message_id == "m1" and started.turn_id == turn.turn_id
            assert not on_b.busy
            # A second prompt through b after the first ended runs too.
            turn2 = await on_b.begin_turn(prompt("hello again"))
            assert (await turn2.wait()).stop_reason is ev.StopReason.END_TURN


async def test_questions_answers_cancel_and_errors_cross_instances() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")
            on_b = await b.get(on_a.id)
            seen = Recorder()
            on_b.subscribe(seen)
            turn = await on_b.begin_turn(prompt("ask: x"))
            asked = await seen.wait_for(lambda e: isinstance(e, ev.QuestionAsked))
            assert turn.open_question(asked.question.id) is not None
            with pytest.raises(Busy):  # a second prompt: refused as on the owner
                await on_b.begin_turn(prompt("again"))
            with pytest.raises(NotFound):  # the owner's own check, come back as its class
                await on_b.send_answer("no-such-question", selected=["x"])
            with pytest.raises(InvalidParams):
                await on_b.send_answer(asked.question.id, selected=["not-an-option"])
            allow = next(o.id for o in asked.question.options if o.kind.startswith("allow"))
            await on_b.send_answer(asked.question.id, selected=[allow])
            assert (await turn.wait()).stop_reason is ev.StopReason.END_TURN
            slow = await on_b.begin_turn(prompt("slow: x"))
            await seen.wait_for(lambda e: isinstance(e, ev.TurnStarted) and e.turn_id == slow.turn_id)
            assert await on_b.send_cancel() is True
            assert (await slow.wait()).stop_reason is ev.StopReason.CANCELLED


async def test_front_state_and_tasks_written_through_a_follower_are_the_owners() -> None:
    from bridge.fronts.chat.state import ChatSessionState
    from tests.store_support import task

    with trio.fail_after(CEILING_S):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")
            on_b = await b.get(on_a.id)
            on_b.front_state(ChatSessionState).intent = "from b"
            on_b.stage_task(task("t1", on_a.id))
            await on_b.save_record()
            assert on_a.front_state(ChatSessionState).intent == "from b"  # the owner's copy replaced
            stored = await a.store.get_session(on_a.id)
            assert stored is not None and stored.states["chat"]["intent"] == "from b"
            assert await a.store.get_task("t1") is not None


async def test_when_the_owner_lets_go_the_next_command_loads_the_session_here() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")
            first = await on_a.begin_turn(prompt("hello"))
            await first.wait()
            on_b = await b.get(on_a.id)
            seen = Recorder()
            on_b.subscribe(seen)
            await on_a.close()  # idle close on a: its lease goes
            await on_a._gone.wait()
            turn = await on_b.begin_turn(prompt("hello there"))
            home = b.live(on_a.id)
            assert isinstance(home, Session) and on_b.moved_to is home  # b holds it now
            assert (await turn.wait()).stop_reason is ev.StopReason.END_TURN
            await seen.wait_for(lambda e: isinstance(e, ev.TurnEnded) and e.turn_id == turn.turn_id)
            seqs = [e.seq for e in seen.events]
            assert seqs == sorted(set(seqs))  # no repeat, in order across the move


async def test_a_killed_owner_s_turn_ends_interrupted_and_the_session_moves() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances(ttl=0.5) as (hub, a, b):
            on_a = await a.create("demo", cwd="/w")
            on_a.subscribe(Recorder())  # watched on a: its turns stay there
            on_b = await b.get(on_a.id)
            seen = Recorder()
            on_b.subscribe(seen)
            turn = await on_b.begin_turn(prompt("slow: x"))
            await seen.wait_for(lambda e: isinstance(e, ev.TurnStarted))
            await on_a.flush()
            hub.kill("a")  # as kill -9: answers nothing more, renews nothing
            with pytest.raises(BackUnavailable):  # its lease has not expired yet
                await on_b.send_cancel()
            b._remote.clear()  # a client arriving now: the session is followed, its owner silent
            late = await b.get(on_a.id)
            assert isinstance(late, RemoteSession) and late.owner == "a" and late.commands() == []
            on_b = late
            # What survivors do once its lease is gone (PgCluster's sweep):
            while hub.leases.get(on_a.id, ("a", 0.0))[1] > trio.current_time():
                await trio.sleep(0.05)
            a.store._inner._generation += 1  # MemoryStore: the turns a wrote are of a gone owner now
            await b.store.close_cut_turns()
            ended = await turn.wait()
            assert ended.stop_reason is ev.StopReason.FAILED and ended.error is not None
            assert ended.error.kind == "interrupted"
            again = await on_b.begin_turn(prompt("hello"))
            assert isinstance(b.live(on_a.id), Session)
            assert (await again.wait()).stop_reason is ev.StopReason.END_TURN


# -- what an attacker review found: each of these failed before its fix ---------------------


async def test_a_get_that_fails_after_taking_the_lease_lets_it_go() -> None:
    from bridge.errors import Overloaded

    with trio.fail_after(CEILING_S):
        async with two_instances() as (hub, a, b):
            on_a = await a.create("demo", cwd="/w")
            await on_a.close()
            await on_a._gone.wait()
            assert on_a.id not in hub.leases  # released with its close

            async def full(route: str) -> None:
                raise Overloaded("full")

            b._make_room = full  # type: ignore[method-assign]
            with pytest.raises(Overloaded):
                await b.get(on_a.id)
            assert on_a.id not in hub.leases  # not kept (and renewed) by b for nothing
            with pytest.raises(NotFound):
                await b.get("no-such-session")
            assert "no-such-session" not in hub.leases


async def test_followers_are_one_per_session_even_when_gets_race_or_are_cancelled() -> None:
    from bridge.cluster.base import DescribeCmd

    with trio.fail_after(CEILING_S):
        async with two_instances() as (hub, a, b):
            on_a = await a.create("demo", cwd="/w")
            forward = b.cluster.forward

            async def slow(owner: str, cmd: object) -> object:
                if isinstance(cmd, DescribeCmd):
                    await trio.sleep(0.5)  # an owner slow to answer
                return await forward(owner, cmd)  # type: ignore[arg-type]

            b.cluster.forward = slow  # type: ignore[method-assign]
            for _ in range(5):
                with trio.move_on_after(0.01):  # clients that go away mid-get
                    await b.get(on_a.id)
            got: list[object] = []
            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(lambda: _append(got, b.get(on_a.id)))
            assert len({id(r) for r in got}) == 1 and got[0] is b._remote[on_a.id]
            assert len(hub.watches._by_session.get(on_a.id, ())) == 1  # one follower task
            await b._close_followed()
            await trio.testing.wait_all_tasks_blocked()  # the follower's task has ended
            assert not hub.watches._by_session.get(on_a.id)


async def _append(out: list[object], awaitable: object) -> None:
    out.append(await awaitable)  # type: ignore[misc]


async def test_a_subscriber_handed_on_sees_each_event_once_in_order() -> None:
    from bridge.session.remote import RemoteSession as Remote

    class SlowWatch:  # a follower woken late (the LISTEN hop, a slow read)
        def __init__(self, watch: object) -> None:
            self.watch = watch

        async def wait_beyond(self, seq: int, *, timeout_s: float) -> None:
            await self.watch.wait_beyond(seq, timeout_s=timeout_s)  # type: ignore[attr-defined]
            await trio.sleep(0.2)

        def close(self) -> None:
            self.watch.close()  # type: ignore[attr-defined]

    with trio.fail_after(CEILING_S):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")
            first = await b.get(on_a.id)
            seen = Recorder()
            first.subscribe(seen)
            watch = b.cluster.watch
            b.cluster.watch = lambda sid: SlowWatch(watch(sid))  # type: ignore[method-assign]
            record = await b.store.get_session(on_a.id)
            assert record is not None
            second = Remote(b, record, "a", b.config.routes[record.route])
            await second.start()
            turn = on_a.start_turn(prompt("hello"))
            await turn.wait()
            await first.hand_on(second)  # `second` is behind what `first` delivered
            await seen.wait_for(lambda e: isinstance(e, ev.TurnEnded))
            turn2 = on_a.start_turn(prompt("again"))
            await turn2.wait()
            await seen.wait_for(lambda e: isinstance(e, ev.TurnEnded) and e.turn_id == turn2.turn_id)
            seqs = [e.seq for e in seen.events]
            assert seqs == list(range(1, len(seqs) + 1)), seqs


async def test_an_owner_that_holds_a_lease_it_does_not_serve_is_refused_not_looped(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances(ttl=1.0) as (hub, a, b):
            on_a = await a.create("demo", cwd="/w")
            on_b = await b.get(on_a.id)

            async def keep(session_id: str) -> None:
                pass  # a lease a keeps without serving the session (what a failed release leaves)

            a.release_lease = keep  # type: ignore[method-assign]
            await on_a.close()
            await on_a._gone.wait()
            rehomes = 0
            rehome = b.rehome

            async def counting(remote: object, *, gone: bool = False) -> None:
                nonlocal rehomes
                rehomes += 1
                await rehome(remote, gone=gone)  # type: ignore[arg-type]

            b.rehome = counting  # type: ignore[method-assign]
            with pytest.raises(BackUnavailable):
                await on_b.begin_turn(prompt("hello"))
            assert rehomes == 1 and on_b.moved_to is None


async def test_an_idle_session_nobody_watches_on_its_owner_moves_to_where_its_prompts_come_from() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")  # made on a (POST /api/sessions), used from b
            on_b = await b.get(on_a.id)
            seen = Recorder()
            on_b.subscribe(seen)
            turn = await on_b.begin_turn(prompt("hello"))
            assert isinstance(b.live(on_a.id), Session) and a.live(on_a.id) is None  # it moved
            assert (await turn.wait()).stop_reason is ev.StopReason.END_TURN
            again = await on_b.begin_turn(prompt("again"))  # now without a hop
            assert (await again.wait()).stop_reason is ev.StopReason.END_TURN
            await seen.wait_for(lambda e: isinstance(e, ev.TurnEnded) and e.turn_id == again.turn_id)
            seqs = [e.seq for e in seen.events]
            assert seqs == list(range(1, len(seqs) + 1))
            # Watched on its owner, a session stays there: the prompt is forwarded.
            on_a2 = await a.create("demo", cwd="/w")
            on_a2.subscribe(Recorder())
            forwarded = await (await b.get(on_a2.id)).begin_turn(prompt("stay"))
            assert a.live(on_a2.id) is on_a2 and b.live(on_a2.id) is None
            assert (await forwarded.wait()).stop_reason is ev.StopReason.END_TURN


async def test_a_subscriber_handed_on_keeps_its_fronts_metric_label() -> None:
    from bridge.session.interfaces import protocol_of
    from bridge.session.remote import _Gate

    class ChatSub(Recorder):
        protocol = "chat"

    assert protocol_of(_Gate(ChatSub(), 0)) == "chat"  # was "unknown": the label was read off the gate's class
    assert protocol_of(_Gate(Recorder(), 0)) == "unknown"
