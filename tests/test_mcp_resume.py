"""bridge/fronts/mcp/resume.py: one MCP session's bounded event store.

A replay gives exactly the events of the stream and run the `Last-Event-ID` names, after
it, in order; an id it does not keep (any string at all) replays nothing and never
raises; a request id used again starts a new run."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")
from bridge.fronts.mcp.resume import SessionEvents  # noqa: E402


class _Transport:
    def __init__(self) -> None:
        self._request_streams: dict[str, Any] = {}


async def _replay(store: SessionEvents, last: str) -> tuple[str | None, list[tuple[str, Any]]]:
    got: list[tuple[str, Any]] = []

    async def send(event: Any) -> None:
        got.append((event.event_id, event.message))

    return await store.replay_events_after(last, send), got


@given(last=st.text(max_size=40) | st.integers(min_value=-5, max_value=10**30).map(str))
@settings(max_examples=300, deadline=None)
def test_any_last_event_id_is_a_replay_or_nothing(last: str) -> None:
    async def run() -> None:
        store = SessionEvents(8, _Transport())
        for i in range(12):
            await store.store_event("1" if i % 2 else "_GET_stream", None if i in (0, 1) else {"n": i})
        stream, got = await _replay(store, last)
        known = last.isascii() and last.isdigit() and 5 <= int(last) <= 12
        assert store.knows(last) is known
        if not known:
            assert stream is None and got == []
        else:
            assert stream == ("1" if int(last) % 2 == 0 else "_GET_stream")
            assert all(int(n) > int(last) for n, _ in got)

    trio.run(run)


async def test_a_replay_is_its_stream_and_run_after_the_id_in_order() -> None:
    store = SessionEvents(100, _Transport())
    ids = {}
    ids["p1"] = await store.store_event("1", None)  # request 1's priming event
    ids["a"] = await store.store_event("1", "progress a")
    await store.store_event("_GET_stream", "list changed")
    ids["b"] = await store.store_event("1", "progress b")
    ids["c"] = await store.store_event("1", "answer 1")
    await store.store_event("1", None)  # id 1 used again, once answered: a new run
    await store.store_event("1", "answer of the second request 1")
    stream, got = await _replay(store, ids["a"])
    assert stream == "1" and got == [(ids["b"], "progress b"), (ids["c"], "answer 1")]
    stream, got = await _replay(store, ids["p1"])
    assert [m for _, m in got] == ["progress a", "progress b", "answer 1"]


async def test_the_priming_event_after_a_replay_keeps_the_run_and_what_follows_waits_for_the_stream() -> None:
    transport = _Transport()
    store = SessionEvents(100, transport)
    await store.store_event("7", None)
    first = await store.store_event("7", "progress 1")
    assert (await _replay(store, first))[1] == []
    await store.store_event("7", None)  # the SDK primes the resumed stream: the same run
    async with trio.open_nursery() as nursery:
        stored: list[str] = []

        async def route() -> None:  # the SDK's router: store, then deliver if registered
            stored.append(await store.store_event("7", "answer"))
            stored.append("7" in transport._request_streams)

        nursery.start_soon(route)
        await trio.sleep(0.01)
        assert stored == []  # waits for the resumed stream's registration
        transport._request_streams["7"] = object()
    assert stored[1] is True
    stream, got = await _replay(store, first)
    assert stream == "7" and [m for _, m in got] == ["answer"]  # one run across the resume


async def test_only_the_newest_events_are_kept_and_an_older_id_is_refused() -> None:
    store = SessionEvents(3, _Transport())
    ids = [await store.store_event("1", f"m{i}") for i in range(5)]
    assert not store.knows(ids[0]) and not store.knows(ids[1])
    assert store.knows(ids[2]) and (await _replay(store, ids[2]))[1] == [(ids[3], "m3"), (ids[4], "m4")]
