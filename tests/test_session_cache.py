"""The live sessions as a cache of the store: what an idle one costs, which ones close.

Under trio with the MemoryStore and the demo back (bridge/session/manager.py,
bridge/session/live.py): a session only read or watched holds no task; its task
starts with its first turn and ends when it closes. Idle sessions past `[daemon]
max_idle_sessions` close least recently used first, never one a client uses, and
come back from the store. A closed session leaves no reference cycle behind (its
memory is free at once, not at the next full collection). Every test has a
`trio.fail_after` ceiling; waits are on events (a session gone), on the virtual clock
where the manager's sweep is waited for.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from bridge.backs import make_back
from bridge.config import Config, parse_config
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.session import Session, SessionManager
from bridge.store.memory import MemoryStore
from test_session import Recorder

CEILING_S = 30

MODE = {"id": "mode", "name": "Mode", "values": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}]}


def make_config(*, daemon: dict[str, Any] | None = None, flush_interval_s: float = 0.01) -> Config:
    route = {"back": {"kind": "demo", "chunk_delay_s": 0.001, "slow_duration_s": 5.0}, "options": [MODE]}
    return parse_config(
        {"routes": {"demo": route}, "store": {"flush_interval_s": flush_interval_s}, "daemon": daemon or {}}
    )


@asynccontextmanager
async def running(config: Config, store: MemoryStore | None = None) -> AsyncIterator[SessionManager]:
    manager = SessionManager(config, store or MemoryStore(), lambda name, route: make_back(name, route))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


def session_tasks(manager: SessionManager) -> int:
    assert manager._nursery is not None
    return sum(1 for t in manager._nursery.child_tasks if t.name.endswith("Session.run"))


def prompt(text: str) -> list[TextContent]:
    return [TextContent(text=text)]


# -- a session costs no task until something runs in it ------------------------------------


async def test_a_session_only_read_or_watched_holds_no_task_until_its_first_turn() -> None:
    with trio.fail_after(CEILING_S):
        async with running(make_config()) as manager:
            session = await manager.create("demo", cwd="/w")
            assert await manager.get(session.id) is session
            unsubscribe = session.subscribe(Recorder())
            await session.set_option("mode", "ask")
            assert [type(e) for e in await session.history()] == [ev.OptionsChanged]
            unsubscribe()
            assert session_tasks(manager) == 0  # watched, read, changed: still no task
            ended = await session.start_turn(prompt("hello")).wait()
            assert ended.stop_reason is ev.StopReason.END_TURN
            assert session_tasks(manager) == 1  # its turns and its back session run there
            await session.close()
            await session._gone.wait()
            assert session_tasks(manager) == 0 and manager.live(session.id) is None


async def test_a_session_that_never_ran_closes_through_its_task_with_its_events_stored() -> None:
    # A long flush interval: the event is still pending when the session closes.
    with trio.fail_after(CEILING_S):
        async with running(make_config(flush_interval_s=60)) as manager:
            session = await manager.create("demo", cwd="/w")
            await session.set_option("mode", "ask")  # OptionsChanged, pending
            await session.close()
            await session._gone.wait()
            assert manager.live(session.id) is None
            again = await manager.get(session.id)
            assert again is not session and again.record.options["mode"] == "ask"
            assert [type(e) for e in await again.history()] == [ev.OptionsChanged]


async def test_a_cancel_right_after_the_first_turn_starts_reaches_it() -> None:
    with trio.fail_after(CEILING_S):
        async with running(make_config()) as manager:
            session = await manager.create("demo", cwd="/w")
            turn = session.start_turn(prompt("slow: x"))  # its task is not running yet
            assert session.cancel()
            assert (await turn.wait()).stop_reason is ev.StopReason.CANCELLED


async def test_a_session_the_store_refuses_closes_even_without_a_task() -> None:
    class Refusing(MemoryStore):
        async def save(self, record: Any, **kw: Any) -> None:
            raise OSError("disk full")

    with trio.fail_after(CEILING_S):
        async with running(make_config(), Refusing()) as manager:
            session = await manager.create("demo", cwd="/w")
            with pytest.raises(OSError):  # the record is saved at once: its caller hears the failure
                await session.set_option("mode", "ask")
            await session._gone.wait()  # and the flusher's retry of what it carried closes the session
            assert manager.live(session.id) is None


async def test_an_abort_stores_the_events_of_sessions_without_a_task() -> None:
    store = MemoryStore()
    manager = SessionManager(make_config(flush_interval_s=60), store, lambda name, route: make_back(name, route))
    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("demo", cwd="/w")
            await session.set_option("mode", "ask")  # pending for a minute
            manager.abort()  # a second SIGTERM: every session stops now
    batches = await store.read_batches(session.id)
    assert batches and batches[-1].last_seq == session.last_seq


async def test_a_closed_session_is_freed_without_the_cycle_collector(autojump_clock: trio.abc.Clock) -> None:
    """The last turn, the back session (its host) and the prompts' listener pointed back
    at the session: each closed session stayed in memory until a full collection."""
    gc.disable()
    try:
        with trio.fail_after(CEILING_S):
            async with running(make_config()) as manager:
                session = await manager.create("demo", cwd="/w")
                unsubscribe = session.subscribe(Recorder())
                assert (await session.start_turn(prompt("hello")).wait()).stop_reason is ev.StopReason.END_TURN
                unsubscribe()
                await session.close()
                await session._gone.wait()
                await trio.sleep(1)  # virtual: the flusher and the watchdogs take their next look
                ref = weakref.ref(session)
                del session, unsubscribe
                assert ref() is None, "a closed session is still referenced (a reference cycle)"
    finally:
        gc.enable()


# -- max_idle_sessions: the least recently used idle sessions close --------------------------


async def test_idle_sessions_past_the_bound_close_least_recently_used_first_never_one_in_use(
    autojump_clock: trio.abc.Clock,
) -> None:
    config = make_config(daemon={"max_idle_sessions": 2})
    with trio.fail_after(CEILING_S):
        async with running(config) as manager:
            watched = await manager.create("demo", cwd="/w")
            watched.subscribe(Recorder())  # a client watching
            busy = await manager.create("demo", cwd="/w")
            running_turn = busy.start_turn(prompt("slow: x"))  # 5 s of turn
            kept = await manager.create("demo", cwd="/w")
            manager.keep_alive.append(lambda s: s is kept)  # a front keeps it (an A2A task waiting)
            attached = await manager.create("demo", cwd="/w")
            attached.client_services = object()  # type: ignore[assignment]  # an editor attached
            idle: list[Session] = []
            for _ in range(4):  # at once: the sweep (a second after the first one past the bound) finds them all
                idle.append(await manager.create("demo", cwd="/w"))
            assert (await idle[0].start_turn(prompt("hi")).wait()).stop_reason is ev.StopReason.END_TURN
            assert await manager.get(idle[1].id) is idle[1]  # asked for: used
            # Least recently used first: idle[2], then idle[3]; idle[0] and idle[1] stay.
            await idle[2]._gone.wait()
            await idle[3]._gone.wait()
            assert [manager.live(s.id) for s in idle] == [idle[0], idle[1], None, None]
            for s in (watched, busy, kept, attached):
                assert manager.live(s.id) is s
            assert (await running_turn.wait()).stop_reason is ev.StopReason.END_TURN
            back = await manager.get(idle[2].id)  # from the store
            assert back is not idle[2] and (await back.start_turn(prompt("x")).wait()).stop_reason is ev.StopReason.END_TURN


async def test_a_session_asked_for_while_it_closes_comes_back_fresh_from_the_store() -> None:
    with trio.fail_after(CEILING_S):
        async with running(make_config()) as manager:
            session = await manager.create("demo", cwd="/w")
            assert (await session.start_turn(prompt("hello")).wait()).stop_reason is ev.StopReason.END_TURN
            await session.close()  # closing: its task stores its events and lets it go
            again = await manager.get(session.id)
            assert again is not session and not again.closed and session._gone.is_set()
            assert [type(e) for e in await again.history()][-1] is ev.TurnEnded
            assert (await again.start_turn(prompt("more")).wait()).stop_reason is ev.StopReason.END_TURN
