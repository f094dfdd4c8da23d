"""Headless runs' options kept with their turns (bridge/fronts/chat/runs.py), in one trio process.

Driven through the `/ws` front's own connection code (`WsConnection`, fed ASGI
messages) over the demo back, with an observing store:

- many headless runs leave the session's stored state as it was: the chat state is
  written once (its intent) and never again, and no save carries more state than the
  first; each run's options and check are in its own turn record;
- the output check's outcome is stored with the run's end record, so a replay, a REST
  page and a replay after a restart (another manager on the same store) never
  validate again (issue 13: a pattern that backtracks forever must run once at most).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio

from bridge.backs import make_back
from bridge.codecs import chat_schema
from bridge.config import parse_config
from bridge.fronts.chat.access import Access
from bridge.fronts.chat.config import WsFrontConfig
from bridge.fronts.chat.runs import RUN_META_KEY
from bridge.fronts.chat.state import ChatSessionState
from bridge.fronts.chat.streams import ChatStreams, TextFrame
from bridge.fronts.chat.ws import WsFront
from bridge.fronts.chat.ws_connection import WsConnection
from bridge.session import SessionManager
from bridge.store import SessionRecord, StoredBatch
from bridge.store.memory import MemoryStore

CONFIG = parse_config(
    {
        "routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0}}},
        "ws": {"max_messages_per_s": 10_000},
        "store": {"flush_interval_s": 0.01},
    }
)
WS = CONFIG.section(WsFrontConfig)
CEILING_S = 30


class ObservingStore(MemoryStore):
    """Each save's front states written, and the size of every state the record holds."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[tuple[list[str], dict[str, int]]] = []

    async def save(
        self, session: SessionRecord, *, turns: Any = (), batch: StoredBatch | None = None,
        tasks: Any = (), states: Any = (),
    ) -> None:  # fmt: skip
        held = {key: len(msgspec.json.encode(value)) for key, value in session.states.items()}
        self.saves.append((list(states), held))
        await super().save(session, turns=turns, batch=batch, tasks=tasks, states=states)


@asynccontextmanager
async def running(store: MemoryStore) -> AsyncIterator[SessionManager]:
    manager = SessionManager(CONFIG, store, make_back)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


class Client:
    """A `/ws` client whose socket is the front's own `WsConnection`, fed ASGI messages."""

    def __init__(self) -> None:
        self._to_server, self._inbox = trio.open_memory_channel[dict[str, Any]](16)
        self._to_client, self._frames = trio.open_memory_channel[dict[str, Any]](4096)
        self.frames: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        return await self._inbox.receive()

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "websocket.send":
            await self._to_client.send(json.loads(message["text"]))

    async def call(self, event: str, **data: Any) -> None:
        await self._to_server.send({"type": "websocket.receive", "text": json.dumps({"event": event, "data": data})})

    async def until(self, done: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        while not got or not done(got[-1]):
            got.append(await self._frames.receive())
        self.frames += got
        return got

    async def run(self, session_id: str, message: str, **options: Any) -> dict[str, Any]:
        """One `chat:send`: its `chat:end` data."""
        await self.call("chat:send", session_id=session_id, message=message, **options)
        frames = await self.until(lambda f: f["event"] in ("chat:end", "system:error"))
        assert frames[-1]["event"] == "chat:end", frames[-1]
        return frames[-1]["data"]


@asynccontextmanager
async def connected(manager: SessionManager, streams: ChatStreams) -> AsyncIterator[Client]:
    front = WsFront(CONFIG, manager, streams, Access(WS, CONFIG.server))
    client = Client()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(WsConnection(front, client.receive, client.send, authed=True).run)
        yield client
        await client._to_server.send({"type": "websocket.disconnect", "code": 1000})


class Watcher:
    def __init__(self) -> None:
        self.frames: list[TextFrame] = []

    def push(self, frames: list[TextFrame]) -> None:
        self.frames += frames

    async def replay(self, frames: list[TextFrame]) -> None:
        self.frames += frames

    def session_gone(self, session_id: str, reason: str) -> None:
        raise AssertionError(reason)

    def overflowed(self) -> None:
        raise AssertionError("overflowed")


def ends(frames: list[TextFrame]) -> list[dict[str, Any]]:
    found = [json.loads(text) for _seq, text in frames]
    return [f["data"] for f in found if f["event"] == "chat:end"]


def outcome(end: dict[str, Any]) -> dict[str, Any]:
    return {k: end[k] for k in ("status", "result", "finish_reason", "chat_run_id")}


SCHEMA = {"type": "object", "required": ["count"]}  # the demo's `data:` has it
WRONG = {"type": "object", "properties": {"count": {"type": "string"}}}  # ... as an integer
RUNS = 24


async def test_headless_runs_leave_the_sessions_stored_state_as_it_was() -> None:
    store = ObservingStore()
    with trio.fail_after(CEILING_S):
        async with running(store) as manager:
            session = await manager.create("demo")
            session.front_state(ChatSessionState).intent = "count things"  # as POST /api/sessions does
            await session.save_record()
            streams = ChatStreams(WS, manager)
            async with connected(manager, streams) as client:
                first = len(store.saves)
                expected: dict[str, Any] = {}
                for i in range(RUNS):
                    schema = (None, SCHEMA, WRONG, None)[i % 4]
                    headless = i % 4 != 3  # every fourth run is an ordinary one
                    end = await client.run(session.id, "data: go", headless=headless, output_schema=schema)
                    expected[end["chat_run_id"]] = (headless, schema)
                    assert end["status"] == ("failed" if schema is WRONG else "completed"), end
                    if headless:
                        assert end["result"]["output"]["count"] == 42
                    else:
                        assert end["result"] is None
            turns = {t.turn_id: t for t in await store.list_turns(session.id)}
    assert len(store.saves) >= first + RUNS  # each run was saved at least once (its start and end may share one)
    # The chat state was written once, with the intent, before any run; no save holds
    # more state than the first one did.
    written = [i for i, (keys, _) in enumerate(store.saves) if ChatSessionState.key in keys]
    assert written == [first - 1], written
    sizes = {json.dumps(held, sort_keys=True) for _, held in store.saves[first - 1 :]}
    assert len(sizes) == 1, sizes
    assert (await store.get_session(session.id)).states == {"chat": {"intent": "count things"}}  # type: ignore[union-attr]
    # Each run's options and its check are its own turn's.
    assert set(turns) == set(expected)
    for turn_id, (headless, schema) in expected.items():
        run = turns[turn_id].meta.get(RUN_META_KEY)
        if not headless:
            assert run is None
            continue
        assert run is not None and run["headless"] is True and run.get("output_schema") == schema
        assert run["check"]["matched"] is (schema is not WRONG), run


class TurnRecordsOnly(MemoryStore):
    """A store that refuses what issue 16 removed: a run's options in the session's state."""

    async def save(
        self, session: SessionRecord, *, turns: Any = (), batch: StoredBatch | None = None,
        tasks: Any = (), states: Any = (),
    ) -> None:  # fmt: skip
        assert "chat_runs" not in session.states.get("chat", {})
        await super().save(session, turns=turns, batch=batch, tasks=tasks, states=states)


EVIL = "^(a+)+$"


async def test_the_check_is_stored_with_the_runs_end_and_never_run_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    validator = chat_schema._validator

    def counted(schema: dict[str, Any]) -> Any:
        calls.append(schema)
        return validator(schema)

    monkeypatch.setattr(chat_schema, "_validator", counted)
    schema = {"type": "object", "properties": {"city": {"type": "string", "pattern": EVIL}}}
    store = TurnRecordsOnly()
    with trio.fail_after(CEILING_S):
        async with running(store) as manager:
            session = await manager.create("demo")
            streams = ChatStreams(WS, manager)
            async with connected(manager, streams) as client:
                live = await client.run(session.id, json.dumps({"city": "a" * 40 + "!"}), headless=True, output_schema=schema)
                assert live["status"] == "failed" and live["finish_reason"] == "output_schema"
                assert len(calls) == 1
                for _ in range(2):  # a replay of the live session, and a REST page
                    watcher = Watcher()
                    await streams.watch(session, watcher, 0)
                    streams.unwatch(session.id, watcher)
                    assert [outcome(e) for e in ends(watcher.frames)] == [outcome(live)]
                    page, _, _ = await streams.transcript(session.id, limit=10)
                    assert [t.role for t in page] == ["user", "assistant"]
            (turn,) = await store.list_turns(session.id)
        stored = turn.meta[RUN_META_KEY]["check"]  # type: ignore[index]
        assert stored["matched"] is False and "does not match" in stored["error"]
        # Neither the output (the run's events hold it) nor the schema (its options do)
        # is stored twice.
        assert "output" not in stored and "schema" not in stored

        async with running(store) as manager:  # a restart: the run is read from the store alone
            streams = ChatStreams(WS, manager)
            assert manager.live(session.id) is None
            page, _, _ = await streams.transcript(session.id, limit=10)
            assert [t.role for t in page] == ["user", "assistant"]
            watcher = Watcher()
            await streams.watch(await manager.get(session.id), watcher, 0)
            assert [outcome(e) for e in ends(watcher.frames)] == [outcome(live)]
    assert len(calls) == 1



async def test_a_chat_send_over_the_limits_changes_no_option() -> None:
    """`chat:send` with a mode, from a caller over `[limits]`: refused `rate_limited`, and
    the mode it asked for is not set (the back was told of it before the turn was refused)."""
    mode = {"id": "mode", "name": "Mode", "category": "mode", "values": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}]}
    route = {"back": {"kind": "demo", "chunk_delay_s": 0}, "options": [mode], "limits": {"requests_per_minute": 1}}
    config = parse_config({"routes": {"demo": route}, "ws": {"max_messages_per_s": 10_000}})
    manager = SessionManager(config, MemoryStore(), make_back)
    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            streams = ChatStreams(WS, manager)
            front = WsFront(config, manager, streams, Access(WS, config.server))
            client = Client()
            nursery.start_soon(WsConnection(front, client.receive, client.send, authed=True).run)
            session = await manager.create("demo", front="ws")
            assert (await client.run(session.id, "hello"))["status"] == "completed"
            await client.call("chat:send", session_id=session.id, message="again", mode="code")
            frames = await client.until(lambda f: f["event"] in ("chat:end", "system:error"))
            assert frames[-1]["event"] == "system:error" and frames[-1]["data"]["code"] == "rate_limited", frames[-1]
            assert session.record.options["mode"] == "ask"
            nursery.cancel_scope.cancel()
