"""SubscribeToTask streams waiting on an interrupted task between its turns
(bridge/fronts/a2a/waiting.py): bounded per task and in all, and ended cleanly, in
both dialects, when the task's session closes or the daemon stops."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from bridge.codecs.a2a_dialect import Binding, Dialect
from bridge.codecs.a2a_server import EventEncoder
from bridge.codecs.a2a_task import TaskProjector
from bridge.core.content import TextContent
from bridge.core.events import StopReason, TurnEnded, TurnStarted
from bridge.errors import Overloaded
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.fronts.a2a.stream import SseStream
from bridge.fronts.a2a.waiting import WaitingStreams
from bridge.schema import a2a as s

V10 = EventEncoder(Dialect.V1_0, Binding.JSONRPC, b"1")
V03 = EventEncoder(Dialect.V0_3, Binding.JSONRPC, b"2")


class FakeManager:
    def __init__(self) -> None:
        self.before_close: list[Any] = []


class FakeSession:
    """What the waiting streams use of a live session: its close, and a nursery."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._closed = trio.Event()
        self.shared_nursery = nursery

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()


def interrupted(task_id: str) -> TaskProjector:
    p = TaskProjector(task_id, "ctx")
    p.feed(TurnStarted(turn_id=task_id, prompt=[TextContent(text="ask: note")]), 1.0)
    p.feed(TurnEnded(turn_id=task_id, stop_reason=StopReason.INPUT_REQUIRED), 2.0)
    return p


def events(stream: SseStream) -> list[dict[str, Any]]:
    frames = b"".join(stream._frames).decode().split("\n\n")
    return [json.loads(f.removeprefix("data: "))["result"] for f in frames if f.startswith("data: ")]


def waiting(per_task: int = 16, total: int = 1024) -> tuple[WaitingStreams, FakeManager]:
    manager = FakeManager()
    cfg = A2AFrontConfig(max_subscribers_per_task=per_task, max_waiting_subscribers=total)
    return WaitingStreams(cfg, manager), manager


async def test_waiting_subscribers_are_bounded_per_task_and_in_all() -> None:
    w, _ = waiting(per_task=2, total=3)
    a, b = interrupted("a"), interrupted("b")
    streams = [SseStream(V10, 64, to_end=True) for _ in range(5)]
    w.add(a, streams[0], None)
    w.add(a, streams[1], None)
    with pytest.raises(Overloaded, match="max_subscribers_per_task"):
        w.check("a")
    with pytest.raises(Overloaded, match="max_subscribers_per_task"):
        w.check("b", running=2)  # a live turn's subscribers count for its task
    w.check("b")
    w.add(b, streams[2], None)
    with pytest.raises(Overloaded, match="max_waiting_subscribers"):
        w.check("c")
    # A stream handed over past a bound (its task's turn just ended) ends at once, cleanly.
    w.add(b, streams[3], None)
    assert streams[3].closed and not streams[3].dropped
    assert [e["statusUpdate"]["status"]["state"] for e in events(streams[3])] == ["TASK_STATE_INPUT_REQUIRED"]
    assert w.count == 3
    streams[0].close()  # its client left: room again
    assert w.count == 2
    w.check("a")
    # The next turn of the task takes its streams; they are no longer counted here.
    assert w.take("a") == [streams[1]] and w.count == 1 and not streams[1].closed


async def test_waiting_subscribers_end_when_the_session_closes_and_at_shutdown() -> None:
    w, manager = waiting()
    async with trio.open_nursery() as nursery:
        session = FakeSession(nursery)
        new, old = SseStream(V10, 64, to_end=True), SseStream(V03, 64, to_end=True)
        w.add(interrupted("t1"), new, session)
        w.add(interrupted("t1"), old, session)
        other = SseStream(V10, 64, to_end=True)
        w.add(interrupted("t2"), other, None)  # its session is not live (read from the store)
        await trio.testing.wait_all_tasks_blocked()
        assert not new.closed and w.count == 3
        session._closed.set()
        await trio.testing.wait_all_tasks_blocked()
        assert new.closed and old.closed and not other.closed and w.count == 1
        # 1.0: the task's status as it is, then the stream's end; 0.3: that status is final.
        assert [e["statusUpdate"]["status"]["state"] for e in events(new)] == ["TASK_STATE_INPUT_REQUIRED"]
        (last,) = events(old)
        assert last["kind"] == "status-update" and last["status"]["state"] == "input-required" and last["final"] is True
        # A stream handed over once its session closed ends at once.
        late = SseStream(V10, 64, to_end=True)
        w.add(interrupted("t3"), late, session)
        assert late.closed and w.count == 1
        # The daemon stops: every waiting stream ends (the manager's before-close hook).
        assert manager.before_close == [w.finish]
        await manager.before_close[0]()
        assert other.closed and w.count == 0
        assert [e["statusUpdate"]["status"]["state"] for e in events(other)] == ["TASK_STATE_INPUT_REQUIRED"]


async def test_cancel_ends_waiting_subscribers_after_its_event_and_stops_the_watch() -> None:
    w, _ = waiting()
    async with trio.open_nursery() as nursery:
        session = FakeSession(nursery)
        p = interrupted("t1")
        stream = SseStream(V10, 64, to_end=True)
        w.add(p, stream, session)
        await trio.testing.wait_all_tasks_blocked()
        w.end("t1", p.feed_canceled(3.0))
        assert stream.closed and w.count == 0
        assert [e["statusUpdate"]["status"]["state"] for e in events(stream)] == [s.TaskState.CANCELED]
        # the watch on the session ended with them: the nursery closes without the session
