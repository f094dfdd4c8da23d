"""The chat streams (bridge/fronts/chat/streams.py) in one trio process, over the demo back.

What the end-to-end tests cannot pin down reliably: a watcher that drops itself while
the session is delivering an event, a join racing a running stream, a projection that
fails. Every test has a `fail_after` ceiling.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
import trio.testing

from bridge.backs import make_back
from bridge.config import parse_config
from bridge.core.content import TextContent
from bridge.fronts.chat.streams import ChatStreams, TextFrame
from bridge.session import Session, SessionManager
from bridge.store.memory import MemoryStore
from bridge.fronts.chat.config import WsFrontConfig

CONFIG = parse_config(
    {"routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0}}}, "ws": {"queue_max_frames": 16}}
)


class Watcher:
    def __init__(self, streams: ChatStreams, session_id: str, *, leave_after: int | None = None) -> None:
        self.streams = streams
        self.session_id = session_id
        self.leave_after = leave_after
        self.frames: list[TextFrame] = []
        self.gone: list[str] = []

    def push(self, frames: list[TextFrame]) -> None:
        self.frames += frames
        if self.leave_after is not None and len(self.frames) > self.leave_after:
            self.streams.unwatch(self.session_id, self)  # e.g. a slow client, dropped mid-delivery

    async def replay(self, frames: list[TextFrame]) -> None:
        await trio.sleep(0)  # a replay waits for its client: let the run go on meanwhile
        self.frames += frames

    def session_gone(self, session_id: str, reason: str) -> None:
        self.gone.append(reason)

    def overflowed(self) -> None:
        self.gone.append("overflowed")


class Seqs:
    """A plain session subscriber that records the sequence numbers it is given."""

    def __init__(self) -> None:
        self.seqs: list[int] = []

    def deliver(self, event: Any) -> None:
        self.seqs.append(event.seq)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


@pytest.fixture
async def session() -> AsyncIterator[Session]:
    manager = SessionManager(CONFIG, MemoryStore(), make_back)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield await manager.create("demo")
        nursery.cancel_scope.cancel()


def untimed(text: str) -> Any:
    frame = json.loads(text)
    data = frame["data"]
    for key in ("started_at", "duration_ms"):
        data.pop(key, None)
    if isinstance(data.get("data"), dict):
        data["data"].pop("duration_ms", None)
    for tool in data.get("tool_calls", []):
        tool.pop("duration_ms", None)
    return frame


def seqs(frames: list[TextFrame]) -> list[int]:
    assert all(json.loads(text)["data"]["sequence"] == seq for seq, text in frames)
    return [seq for seq, _ in frames]


async def test_a_watcher_leaving_during_delivery_costs_no_other_subscriber_an_event(session: Session) -> None:
    with trio.fail_after(10):
        streams = ChatStreams(CONFIG.section(WsFrontConfig), session.manager)
        await streams.watch(session, Watcher(streams, session.id, leave_after=20), None)
        later = Seqs()
        session.subscribe(later)  # after the stream in the session's list of subscribers
        await session.start_turn([TextContent(text="bench:500")]).wait()
        assert later.seqs == list(range(1, len(later.seqs) + 1))


async def test_joining_a_running_stream_with_a_replay_has_no_gap_and_no_duplicate(session: Session) -> None:
    with trio.fail_after(10):
        streams = ChatStreams(CONFIG.section(WsFrontConfig), session.manager)
        first = Watcher(streams, session.id)
        await streams.watch(session, first, None)
        turn = session.start_turn([TextContent(text="tool: fork: hello")])
        while len(first.frames) < 12:
            await trio.sleep(0.001)
        late = Watcher(streams, session.id)
        live_from = await streams.watch(session, late, 3)
        await turn.wait()
        assert seqs(first.frames) == list(range(1, len(first.frames) + 1))
        assert seqs(late.frames) == list(range(4, len(first.frames) + 1)) and live_from >= 12
        # the same frames, live or derived from the log (timing fields aside, codecs/chat.py)
        assert [untimed(t) for _, t in late.frames] == [untimed(t) for s, t in first.frames if s > 3]


async def test_a_failing_projection_is_contained(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    with trio.fail_after(10):
        streams = ChatStreams(CONFIG.section(WsFrontConfig), session.manager)
        watcher = Watcher(streams, session.id)
        await streams.watch(session, watcher, None)
        projector = streams.live_projector(session.id)
        assert projector is not None

        def boom(event: Any) -> Any:
            raise RuntimeError("a bug in the codec")

        monkeypatch.setattr(type(projector), "feed", lambda self, event: boom(event))
        ended = await session.start_turn([TextContent(text="hello")]).wait()
        assert ended.stop_reason.value == "end_turn"  # the run itself went on
        assert watcher.gone == ["internal error in the chat stream: subscribe again"]
        monkeypatch.undo()
        again = Watcher(streams, session.id)
        await streams.watch(session, again, 0)  # a fresh stream, derived from the log
        assert seqs(again.frames)[-1] == json.loads(again.frames[-1][1])["data"]["sequence"]
        assert json.loads(again.frames[-1][1])["event"] == "chat:end"


class SlowEndStore(MemoryStore):
    """Holds every save that stores a turn's end until the test lets it go."""

    def __init__(self) -> None:
        super().__init__()
        self.release = trio.Event()
        self.holding = trio.Event()

    async def save(self, session: Any, *, turns: Any = (), **kw: Any) -> None:
        if any(t.ended_at is not None for t in turns):
            self.holding.set()
            await self.release.wait()
        await super().save(session, turns=turns, **kw)


async def test_a_runs_end_reaches_watchers_only_once_it_is_stored() -> None:
    """A client that heard chat:end can always replay it after a reconnect, even across a crash."""
    store = SlowEndStore()
    manager = SessionManager(CONFIG, store, make_back)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            session = await manager.create("demo")
            streams = ChatStreams(CONFIG.section(WsFrontConfig), manager)
            watcher = Watcher(streams, session.id)
            await streams.watch(session, watcher, None)
            turn = session.start_turn([TextContent(text="hello")])
            await store.holding.wait()
            await trio.testing.wait_all_tasks_blocked()
            events = [json.loads(t)["event"] for _, t in watcher.frames]
            store.release.set()  # (before asserting: the store's wait is shielded)
            assert "turn:patch" in events and "chat:end" not in events and events.count("turn:end") == 1, events  # the user's turn only
            await turn.wait()
            events = [json.loads(t)["event"] for _, t in watcher.frames]
            assert events[-1] == "chat:end" and events.count("turn:end") == 2, events
            assert seqs(watcher.frames) == list(range(1, len(watcher.frames) + 1))
            nursery.cancel_scope.cancel()
