"""bridge/fronts/mcp/resume.py: one MCP session's bounded event store.

A replay gives exactly the events of the stream and run the `Last-Event-ID` names, after
it, in order; an id it does not keep (any string at all) replays nothing and never
raises, except the newest of its stream; a request id used again starts a new run; an
event that does not fit is never skipped over silently; all sessions share one budget."""

from __future__ import annotations

import gc
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")
from mcp_types import jsonrpc_message_adapter  # noqa: E402

from bridge.fronts.mcp.resume import Budget, SessionEvents  # noqa: E402


class _Transport:
    def __init__(self) -> None:
        self._request_streams: dict[str, Any] = {}


def _msg(text: str) -> Any:
    return jsonrpc_message_adapter.validate_python({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": text}})


def _store(limit: int = 100, max_bytes: int = 1 << 20, budget: Budget | None = None) -> tuple[SessionEvents, _Transport]:
    transport = _Transport()
    return SessionEvents(limit, max_bytes, budget or Budget(1 << 30), transport), transport


async def _replay(store: SessionEvents, last: str) -> tuple[str | None, list[tuple[str, str]]]:
    got: list[tuple[str, str]] = []

    async def send(event: Any) -> None:
        got.append((event.event_id, event.message.params["data"]))

    return await store.replay_events_after(last, send), got


@given(last=st.text(max_size=40) | st.integers(min_value=-5, max_value=10**30).map(str))
@settings(max_examples=300, deadline=None)
def test_any_last_event_id_is_a_replay_or_nothing(last: str) -> None:
    async def run() -> None:
        store, _ = _store(limit=8)
        for i in range(12):
            await store.store_event("1" if i % 2 else "_GET_stream", None if i in (0, 1) else _msg(f"m{i}"))
        stream, got = await _replay(store, last)
        in_window = last.isascii() and last.isdigit() and 5 <= int(last) <= 12
        assert store.knows(last) is in_window
        if not in_window:
            assert stream is None and got == []
        else:
            assert stream == ("1" if int(last) % 2 == 0 else "_GET_stream")
            assert all(int(n) > int(last) for n, _ in got)

    trio.run(run)


async def test_a_replay_is_its_stream_and_run_after_the_id_in_order() -> None:
    store, _ = _store()
    ids = {}
    ids["p1"] = await store.store_event("1", None)  # request 1's priming event
    ids["a"] = await store.store_event("1", _msg("progress a"))
    await store.store_event("_GET_stream", _msg("list changed"))
    ids["b"] = await store.store_event("1", _msg("progress b"))
    ids["c"] = await store.store_event("1", _msg("answer 1"))
    await store.store_event("1", None)  # id 1 used again, once answered: a new run
    await store.store_event("1", _msg("answer of the second request 1"))
    stream, got = await _replay(store, ids["a"])
    assert stream == "1" and got == [(ids["b"], "progress b"), (ids["c"], "answer 1")]
    stream, got = await _replay(store, ids["p1"])
    assert [m for _, m in got] == ["progress a", "progress b", "answer 1"]


async def test_the_priming_event_after_a_replay_keeps_the_run_and_what_follows_waits_for_the_stream() -> None:
    store, transport = _store()
    await store.store_event("7", None)
    first = await store.store_event("7", _msg("progress 1"))
    assert (await _replay(store, first))[1] == []
    await store.store_event("7", None)  # the SDK primes the resumed stream: the same run
    async with trio.open_nursery() as nursery:
        stored: list[object] = []

        async def route() -> None:  # the SDK's router: store, then deliver if registered
            stored.append(await store.store_event("7", _msg("answer")))
            stored.append("7" in transport._request_streams)

        nursery.start_soon(route)
        await trio.testing.wait_all_tasks_blocked()  # the router stored it and waits
        assert stored == []  # waits for the resumed stream's registration
        transport._request_streams["7"] = object()
    assert stored[1] is True
    stream, got = await _replay(store, first)
    assert stream == "7" and [m for _, m in got] == ["answer"]  # one run across the resume


async def test_a_new_request_with_the_same_id_right_after_a_resume_is_a_new_run() -> None:
    store, transport = _store()
    await store.store_event("3", None)
    old = await store.store_event("3", _msg("old answer"))
    await _replay(store, old)
    await store.store_event("3", None)  # the resumed stream's priming: same run
    await store.store_event("9", None)  # another request comes between
    transport._request_streams["3"] = object()
    await store.store_event("3", None)  # a new request 3: a new run, though a resume was just made
    await store.store_event("3", _msg("new answer"))
    assert (await _replay(store, old))[1] == []


async def test_the_newest_event_of_a_stream_is_known_after_it_left_the_window() -> None:
    """A quiet notification stream cut long after its last event resumes, with nothing to replay."""
    store, _ = _store(limit=4)
    last = await store.store_event("_GET_stream", _msg("list changed"))
    for i in range(10):
        await store.store_event(str(i), None)
    assert store.knows(last) and await _replay(store, last) == ("_GET_stream", [])
    await store.store_event("_GET_stream", _msg("again"))
    assert not store.knows(last)  # no longer its newest: what came after may be lost


async def test_runs_stay_right_beyond_a_thousand_streams() -> None:
    store, _ = _store(limit=5000)
    await store.store_event("X", None)
    p1 = await store.store_event("X", _msg("p1"))
    for i in range(1500):
        await store.store_event(f"s{i}", None)
    await store.store_event("X", _msg("ANSWER"))
    assert await _replay(store, p1) == ("X", [(str(store._count), "ANSWER")])


async def test_bytes_are_bounded_per_session_and_together_and_a_dropped_event_refuses_the_replay() -> None:
    budget = Budget(3000)
    store, _ = _store(max_bytes=2000, budget=budget)
    await store.store_event("1", None)
    first = await store.store_event("1", _msg("x" * 100))
    await store.store_event("1", _msg("y" * 5000))  # over the session's bytes: not kept
    assert store._bytes <= 2000 and budget.used == store._bytes
    assert not store.knows(first)  # refused (410) before a replay is tried
    assert await _replay(store, first) == (None, [])  # a gap is refused, not replayed around
    assert len(store._events) == 3  # nothing was let go for the event that could not be kept
    await store.store_event("1", None)
    for i in range(12):  # the first session fills its share, then more: the oldest go
        await store.store_event("1", _msg(f"a{i}" * 50))
    assert 1500 < store._bytes <= 2000
    other, _ = _store(max_bytes=2000, budget=budget)
    for i in range(12):  # past the shared cap: room is made in the session holding the most
        await other.store_event("1", _msg("z" * 100))
    assert budget.used <= budget.cap and budget.used == store._bytes + other._bytes
    assert all(isinstance(data, str) for _, _, _, data in other._events)  # none of the newcomer's dropped
    assert store._bytes < 1500  # the one holding the most gave room
    used = budget.used
    del other
    gc.collect()
    assert budget.used < used  # a session's bytes are freed with it
