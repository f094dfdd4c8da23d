"""Fault isolation (STYLE.md rule 17): one subscriber's or one back's fault stays its own.

Under trio with the MemoryStore: a subscriber whose `deliver` raises mid-stream is
unsubscribed and the others and the turn go on; a back whose turn, cancel or close
raises fails that turn (or is logged), never the session manager; a task of a back
that raises ends only its session. Also the bounds that keep a shared daemon's
memory and turns finite: the turn idle deadline (`turn_idle_timeout_s`, on the
virtual clock) and the live-session caps (`max_live_sessions`). And the /ws
connection that once started its writer in its closed nursery.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from bridge.backs import make_back
from bridge.backs.base import AgentInfo, SessionContext, TurnHandle
from bridge.config import Config, Route, parse_config
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.errors import CODES, Overloaded, codes_for
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore
from bridge.fronts.chat.config import WsFrontConfig

CEILING_S = 30  # per test; on the virtual clock where autojump_clock is used


def make_config(*, daemon: dict[str, Any] | None = None, **policy: Any) -> Config:
    routes: dict[str, Any] = {
        "demo": {"back": {"kind": "demo", "chunk_delay_s": 0.001}, "cancel_grace_s": 2.0, **policy},
        "fake": {"back": {"kind": "demo"}, "cancel_grace_s": 2.0, "question_timeout_s": 30.0, **policy},
    }
    return parse_config({"default_route": "demo", "routes": routes, "store": {"flush_interval_s": 0.01}, "daemon": daemon or {}})


class Recorder:
    def __init__(self) -> None:
        self.events: list[ev.Event] = []

    def deliver(self, event: ev.Event) -> None:
        self.events.append(event)

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass


class Faulty(Recorder):
    """Raises on its `fail_at`-th event, as a front with a bug would."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.broken_calls = 0

    def deliver(self, event: ev.Event) -> None:
        super().deliver(event)
        if len(self.events) == self.fail_at:
            raise RuntimeError("Nursery is closed to new arrivals")

    def broken(self) -> None:
        self.broken_calls += 1


class FaultyCongestion(Recorder):
    def congested(self) -> bool:
        raise ValueError("a bug in a front's flow control")


Run = Callable[[TurnHandle], Awaitable[ev.StopReason]]


class FakeSession:
    def __init__(self, back: FakeBack) -> None:
        self.back = back

    async def prompt(self, turn: TurnHandle) -> ev.StopReason:
        return await self.back.run(turn)

    async def cancel(self) -> None:
        if self.back.cancel_raises:
            raise KeyError("a bug in the back's cancel")

    async def set_option(self, option_id: str, value: str) -> None:
        pass

    async def aclose(self) -> None:
        self.back.closes += 1
        if self.back.close_raises:
            raise OSError("a bug in the back's close")


class FakeBack:
    def __init__(self, run: Run) -> None:
        self.info = AgentInfo(name="fake")
        self.run = run
        self.cancel_raises = False
        self.close_raises = False
        self.task: Callable[[], Awaitable[None]] | None = None  # started in the session's nursery
        self.closes = 0

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> FakeSession:
        if self.task is not None:
            nursery.start_soon(self.task)
        return FakeSession(self)

    async def ready(self) -> None:
        pass

    async def probe(self, *, deep: bool) -> str:
        return "fake"

    async def aclose(self) -> None:
        pass


@asynccontextmanager
async def running(config: Config | None = None, *, fake: FakeBack | None = None) -> AsyncIterator[SessionManager]:
    def pick(name: str, route: Route) -> Any:
        return fake if name == "fake" and fake is not None else make_back(name, route)

    manager = SessionManager(config or make_config(), MemoryStore(), pick)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


def prompt(text: str) -> list[TextContent]:
    return [TextContent(text=text)]


async def chat(turn: TurnHandle, text: str) -> None:
    turn.emit(ev.MessageChunk(content=TextContent(text=text), message_id="m"))
    await turn.flow()


async def still_serves(manager: SessionManager) -> None:
    """The manager is alive: a new session on the demo route runs a normal turn."""
    session = await manager.create("demo")
    ended = await session.start_turn(prompt("hello")).wait()
    assert ended.stop_reason is ev.StopReason.END_TURN, ended


# -- subscribers ------------------------------------------------------------------------------


async def test_a_subscriber_that_raises_mid_stream_is_dropped_and_the_others_go_on(caplog: pytest.LogCaptureFixture) -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session = await manager.create("demo")
            before, faulty, after = Recorder(), Faulty(fail_at=5), Recorder()
            for sub in (before, faulty, after):
                session.subscribe(sub)
            ended = await session.start_turn(prompt("think: plan: tool: hello")).wait()

            assert ended.stop_reason is ev.StopReason.END_TURN and ended.error is None
            assert len(before.events) > 5 and before.events == after.events  # nobody else missed one
            assert [e.seq for e in after.events] == list(range(1, len(after.events) + 1))
            assert faulty.events == before.events[:5] and faulty.broken_calls == 1
            errors = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert any("subscriber failed at event 5; unsubscribed" in r.getMessage() for r in errors)
            # Later turns reach the others only.
            second = await session.start_turn(prompt("hello")).wait()
            assert after.events[-1] == second and len(faulty.events) == 5
            await still_serves(manager)


async def test_a_subscriber_whose_flow_control_raises_is_dropped() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session = await manager.create("demo")
            faulty, other = FaultyCongestion(), Recorder()
            session.subscribe(faulty)
            session.subscribe(other)
            ended = await session.start_turn(prompt("bench:600")).wait()
            assert ended.stop_reason is ev.StopReason.END_TURN
            assert other.events[-1] == ended and faulty.events[-1] != ended


# -- backs ------------------------------------------------------------------------------------


async def test_a_back_whose_turn_raises_fails_that_turn_only(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def run(turn: TurnHandle) -> ev.StopReason:
        nonlocal calls
        calls += 1
        await chat(turn, "partial")
        if calls == 1:
            raise ZeroDivisionError("a bug in the back")
        return ev.StopReason.END_TURN

    with trio.fail_after(CEILING_S):
        async with running(fake=FakeBack(run)) as manager:
            session = await manager.create("fake")
            rec = Recorder()
            session.subscribe(rec)
            ended = await session.start_turn(prompt("go")).wait()
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and ended.error.kind == "InternalError"
            assert "ZeroDivisionError" in ended.error.message and "internal error" in ended.error.message
            assert rec.events[-1] == ended
            (record,) = await manager.store.list_turns(session.id)
            assert record.stop_reason == "failed"
            assert any(r.levelno == logging.ERROR and "the back raised" in r.getMessage() for r in caplog.records)
            # The same session runs its next turn; the manager serves others.
            assert (await session.start_turn(prompt("again")).wait()).stop_reason is ev.StopReason.END_TURN
            await still_serves(manager)


async def test_a_back_whose_cancel_raises_still_ends_the_turn_cancelled(autojump_clock: trio.abc.Clock) -> None:
    started = trio.Event()

    async def run(turn: TurnHandle) -> ev.StopReason:
        await chat(turn, "working")
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    fake = FakeBack(run)
    fake.cancel_raises = True
    with trio.fail_after(CEILING_S):
        async with running(fake=fake) as manager:
            session = await manager.create("fake")
            turn = session.start_turn(prompt("go"))
            await started.wait()
            assert session.cancel()
            ended = await turn.wait()  # cut off after cancel_grace_s, though the back's cancel raised
            assert ended.stop_reason is ev.StopReason.CANCELLED and ended.error is None
            await still_serves(manager)


async def test_a_back_whose_close_raises_is_logged_and_the_session_goes(caplog: pytest.LogCaptureFixture) -> None:
    async def run(turn: TurnHandle) -> ev.StopReason:
        return ev.StopReason.END_TURN

    fake = FakeBack(run)
    fake.close_raises = True
    with trio.fail_after(CEILING_S):
        async with running(fake=fake) as manager:
            session = await manager.create("fake")
            await session.start_turn(prompt("go")).wait()
            await session.close()
            await session._gone.wait()
            assert fake.closes == 1 and manager.live(session.id) is None
            assert any(r.levelno == logging.ERROR and "raised while closing" in r.getMessage() for r in caplog.records)
            back_again = await manager.get(session.id)  # comes back from the store
            assert (await back_again.start_turn(prompt("again")).wait()).stop_reason is ev.StopReason.END_TURN
            await still_serves(manager)


async def test_a_back_task_that_raises_ends_only_its_session(caplog: pytest.LogCaptureFixture) -> None:
    crash = trio.Event()
    started = trio.Event()

    async def run(turn: TurnHandle) -> ev.StopReason:
        await chat(turn, "working")
        started.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def task() -> None:
        await crash.wait()
        raise LookupError("a bug in a task the back started")

    fake = FakeBack(run)
    fake.task = task
    with trio.fail_after(CEILING_S):
        async with running(fake=fake) as manager:
            other = await manager.create("demo")
            session = await manager.create("fake")
            rec = Recorder()
            session.subscribe(rec)
            turn = session.start_turn(prompt("go"))
            await started.wait()
            crash.set()
            ended = await turn.wait()  # its clients hear the end, and the store has it
            assert ended.stop_reason is ev.StopReason.FAILED and rec.events[-1] == ended
            await session._gone.wait()
            assert manager.live(session.id) is None and manager.live(other.id) is other
            (record,) = await manager.store.list_turns(session.id)
            assert record.stop_reason == "failed"
            assert any(r.levelno == logging.ERROR and "failed; closed" in r.getMessage() for r in caplog.records)
            assert (await other.start_turn(prompt("hello")).wait()).stop_reason is ev.StopReason.END_TURN


async def test_a_task_in_the_shared_nursery_that_raises_ends_alone(caplog: pytest.LogCaptureFixture) -> None:
    """What backs and fronts start in the daemon-wide nursery (a multiplexed agent, A2A
    webhook deliveries) cannot take the manager, and every session, down with it."""

    async def bug() -> None:
        raise LookupError("a bug in a shared task")

    async def fails_before_started(*, task_status: trio.TaskStatus[None]) -> None:
        raise KeyError("cannot start")

    async def starts_then_fails(*, task_status: trio.TaskStatus[str]) -> None:
        task_status.started("up")
        await trio.lowlevel.checkpoint()
        raise ValueError("failed later")

    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session = await manager.create("demo")
            shared = session.shared_nursery
            shared.start_soon(bug)
            with pytest.raises(KeyError):  # before `started`: the caller hears of it
                await shared.start(fails_before_started)
            assert await shared.start(starts_then_fails) == "up"
            # The manager and its sessions go on.
            assert (await session.start_turn(prompt("hello")).wait()).stop_reason is ev.StopReason.END_TURN
            assert (await (await manager.create("demo")).start_turn(prompt("hi")).wait()).stop_reason is ev.StopReason.END_TURN
    failed = [r for r in caplog.records if r.levelno == logging.ERROR and "ends alone" in r.getMessage()]
    assert len(failed) == 2


# -- the turn idle deadline --------------------------------------------------------------------


async def test_a_back_that_goes_quiet_fails_the_turn_after_turn_idle_timeout_s(autojump_clock: trio.abc.Clock) -> None:
    async def run(turn: TurnHandle) -> ev.StopReason:
        await chat(turn, "one chunk, then nothing")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(CEILING_S):
        async with running(make_config(turn_idle_timeout_s=10), fake=FakeBack(run)) as manager:
            session = await manager.create("fake")
            ended = await session.start_turn(prompt("go")).wait()
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and ended.error.kind == "timeout"
            assert ended.error.message == "the agent sent nothing for 10 s (turn_idle_timeout_s)"


async def test_a_back_that_keeps_talking_outlives_the_idle_deadline(autojump_clock: trio.abc.Clock) -> None:
    async def run(turn: TurnHandle) -> ev.StopReason:
        for i in range(20):  # 100 s in all, never 10 s quiet
            await chat(turn, f"chunk {i}")
            await trio.sleep(5)
        return ev.StopReason.END_TURN

    with trio.fail_after(CEILING_S * 10):
        async with running(make_config(turn_idle_timeout_s=10), fake=FakeBack(run)) as manager:
            session = await manager.create("fake")
            assert (await session.start_turn(prompt("go")).wait()).stop_reason is ev.StopReason.END_TURN


async def test_time_waiting_for_the_users_answer_is_not_idle(autojump_clock: trio.abc.Clock) -> None:
    asked = trio.Event()

    async def run(turn: TurnHandle) -> ev.StopReason:
        question = ev.Question(id="q1", kind="permission", prompt="may I?",
                               options=[ev.QuestionOption(id="ok", label="OK", kind="allow_once")])  # fmt: skip
        asked.set()
        answer = await turn.ask(question)
        assert answer.selected == ["ok"]
        return ev.StopReason.END_TURN

    with trio.fail_after(CEILING_S * 10):
        async with running(make_config(turn_idle_timeout_s=10), fake=FakeBack(run)) as manager:
            session = await manager.create("fake")
            turn = session.start_turn(prompt("go"))
            await asked.wait()
            await trio.sleep(25)  # the user thinks for longer than the idle deadline
            session.answer("q1", selected=["ok"])
            assert (await turn.wait()).stop_reason is ev.StopReason.END_TURN


async def test_turn_idle_timeout_s_0_turns_the_deadline_off(autojump_clock: trio.abc.Clock) -> None:
    async def run(turn: TurnHandle) -> ev.StopReason:
        await trio.sleep(5000)  # far past the default 600 s
        return ev.StopReason.END_TURN

    with trio.fail_after(CEILING_S * 1000):
        async with running(make_config(turn_idle_timeout_s=0), fake=FakeBack(run)) as manager:
            session = await manager.create("fake")
            assert (await session.start_turn(prompt("go")).wait()).stop_reason is ev.StopReason.END_TURN


# -- live-session caps -------------------------------------------------------------------------


async def test_the_daemon_cap_closes_the_longest_idle_session_which_comes_back_by_id() -> None:
    with trio.fail_after(CEILING_S):
        async with running(make_config(daemon={"max_live_sessions": 3})) as manager:
            first = await manager.create("demo")
            await first.start_turn(prompt("hello")).wait()
            made = [first] + [await manager.create("demo") for _ in range(6)]
            assert len(manager._live) <= 3
            assert manager.live(first.id) is None and manager.live(made[-1].id) is made[-1]
            again = await manager.get(first.id)  # from the store, with its history
            assert len(manager._live) <= 3
            assert any(isinstance(e, ev.TurnEnded) for e in await again.history())
            assert (await again.start_turn(prompt("more")).wait()).stop_reason is ev.StopReason.END_TURN


async def test_a_full_cap_with_nothing_idle_refuses_a_new_session() -> None:
    with trio.fail_after(CEILING_S):
        async with running(make_config(daemon={"max_live_sessions": 2})) as manager:
            busy = [await manager.create("demo") for _ in range(2)]
            for session in busy:
                session.subscribe(Recorder())  # a client watching: not idle
            with pytest.raises(Overloaded, match="max_live_sessions"):
                await manager.create("demo")
            assert len(manager._live) == 2
            stored, _ = await manager.store.list_sessions(limit=10, offset=0)
            assert len(stored) == 2  # a refused session leaves no record behind


async def test_a_route_cap_evicts_within_its_route_only() -> None:
    config = parse_config(
        {
            "routes": {
                "demo": {"back": {"kind": "demo"}, "max_live_sessions": 2},
                "other": {"back": {"kind": "demo"}},
            },
            "default_route": "demo",
        }
    )
    with trio.fail_after(CEILING_S):
        async with running(config) as manager:
            others = [await manager.create("other") for _ in range(3)]
            demos = [await manager.create("demo") for _ in range(5)]
            assert all(manager.live(s.id) is s for s in others)
            assert sum(1 for s in manager._live.values() if s.record.route == "demo") == 2
            assert manager.live(demos[-1].id) is demos[-1]


def test_overloaded_maps_to_a_clear_code_on_every_protocol() -> None:
    codes = codes_for(Overloaded("full"))
    assert codes == CODES[Overloaded]
    assert codes.http == 503 and codes.ws_close == 1013
    assert codes.jsonrpc == -32005 and codes.jsonrpc != -32000  # -32000 is ACP's auth_required


# -- the /ws connection (finding 1) -------------------------------------------------------------


async def test_a_ws_connection_that_has_ended_never_starts_a_task_in_its_closed_nursery() -> None:
    from bridge.fronts.chat.access import Access
    from bridge.fronts.chat.streams import ChatStreams
    from bridge.fronts.chat.ws import WsFront
    from bridge.fronts.chat.ws_connection import WsConnection as _Connection

    config = make_config()
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.disconnect", "code": 1006}  # the TCP connection dropped

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(CEILING_S):
        async with running(config) as manager:
            front = WsFront(config, manager, ChatStreams(config.section(WsFrontConfig), manager), Access(config.section(WsFrontConfig)))
            conn = _Connection(front, receive, send, authed=True)
            await conn.run()
            # A session delivering to it now (as one could in the window between its
            # nursery closing and its subscriptions being let go) starts nothing.
            conn.push([(1, '{"event":"turn:patch","data":{}}')])
            conn.close(1001, "late")
            assert sent == [{"type": "websocket.accept"}]


# -- one boundary per front: an HTTP request --------------------------------------------------


async def test_an_http_handler_that_raises_is_that_clients_500_and_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    from bridge.fronts.http import HttpApp, send_json

    app = HttpApp()

    async def buggy(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
        raise KeyError("a bug in a front")

    async def fine(scope: Any, receive: Any, send: Any, params: dict[str, str]) -> None:
        await send_json(send, 200, {"ok": True})

    app.add("GET", "/buggy", buggy)
    app.add("GET", "/fine", fine)

    async def call(path: str) -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "headers": [(b"host", b"127.0.0.1:8765")]}
        await app(scope, receive, send)
        return sent

    with trio.fail_after(CEILING_S):
        sent = await call("/buggy")
        assert sent[0]["status"] == 500 and sent[1]["body"] == b'{"detail":"internal error"}'
        assert any(r.levelno == logging.ERROR and "GET /buggy failed" in r.getMessage() for r in caplog.records)
        assert (await call("/fine"))[0]["status"] == 200


async def test_an_acp_request_whose_handler_raises_is_a_32603_and_the_connection_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    import json

    from bridge.fronts.acp.front import AcpConnection

    config = make_config()
    to_bridge_send, to_bridge_recv = trio.testing.memory_stream_one_way_pair()
    from_bridge_send, from_bridge_recv = trio.testing.memory_stream_one_way_pair()

    async def request(id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await to_bridge_send.send_all(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n")
        nonlocal buf
        while b"\n" not in buf:
            buf += await from_bridge_recv.receive_some()
        line, _, buf = buf.partition(b"\n")
        return json.loads(line)  # type: ignore[no-any-return]

    buf = b""
    with trio.fail_after(CEILING_S):
        async with running(config) as manager, trio.open_nursery() as nursery:
            conn = AcpConnection(to_bridge_recv, from_bridge_send, manager=manager, config=config, route="demo")

            async def buggy(call: Any, params: Any) -> Any:
                raise AttributeError("a bug in a handler")

            conn._handlers["session/list"] = (conn._handlers["session/list"][0], buggy)
            nursery.start_soon(conn.run)
            assert "result" in await request(1, "initialize", {"protocolVersion": 1})
            failed = await request(2, "session/list", {})
            assert failed["id"] == 2 and failed["error"]["code"] == -32603, failed
            assert any(r.levelno == logging.ERROR and "ACP session/list failed" in r.getMessage() for r in caplog.records)
            assert "sessionId" in (await request(3, "session/new", {"cwd": "/w", "mcpServers": []}))["result"]
            await to_bridge_send.aclose()


async def test_a_bug_asking_the_editor_a_question_cancels_that_question_only(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`EditorQuestions.ask` runs in the ACP connection's nursery: a bug there is that
    question's (answered cancelled, logged ERROR), never the connection's."""
    import json

    from bridge.fronts.acp import questions
    from bridge.fronts.acp.front import AcpConnection

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug building the permission request")

    monkeypatch.setattr(questions.codec, "permission_request", broken)
    config = make_config()
    to_bridge_send, to_bridge_recv = trio.testing.memory_stream_one_way_pair()
    from_bridge_send, from_bridge_recv = trio.testing.memory_stream_one_way_pair()
    buf = b""

    async def request(id: int, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        nonlocal buf
        await to_bridge_send.send_all(json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode() + b"\n")
        before = []
        while True:
            while b"\n" not in buf:
                buf += await from_bridge_recv.receive_some()
            line, _, buf = buf.partition(b"\n")
            msg = json.loads(line)
            if msg.get("id") == id and "method" not in msg:
                return msg, before
            before.append(msg)

    with trio.fail_after(CEILING_S):
        async with running(config) as manager, trio.open_nursery() as nursery:
            conn = AcpConnection(to_bridge_recv, from_bridge_send, manager=manager, config=config, route="demo")
            nursery.start_soon(conn.run)
            assert "result" in (await request(1, "initialize", {"protocolVersion": 1}))[0]
            sid = (await request(2, "session/new", {"cwd": "/w", "mcpServers": []}))[0]["result"]["sessionId"]
            ended, seen = await request(3, "session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "ask: x"}]})
            assert ended["result"] == {"stopReason": "end_turn"}, ended
            assert not any(m.get("method") == "session/request_permission" for m in seen)
            said = "".join(m["params"]["update"].get("content", {}).get("text", "") for m in seen
                           if m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")  # fmt: skip
            assert "left notes.txt alone" in said  # a cancelled question is never an allow
            assert any(r.levelno == logging.ERROR and "asking the editor question" in r.getMessage() for r in caplog.records)
            assert "result" in (await request(4, "session/list", {}))[0]  # the connection goes on
            await to_bridge_send.aclose()


async def test_a_store_that_refuses_one_sessions_events_closes_that_session_only(caplog: pytest.LogCaptureFixture) -> None:
    """An error storing a session's events (the store's, or ours encoding them) once
    rose through the shared flusher and ended the manager with every session."""

    class Refusing(MemoryStore):
        refuse: set[str] = set()

        async def save(self, record: Any, **kw: Any) -> None:
            if record.session_id in self.refuse:
                raise OverflowError("can't serialize ints < -2**63 or > 2**64 - 1")
            await super().save(record, **kw)

    store = Refusing()
    manager = SessionManager(make_config(), store, lambda name, route: make_back(name, route))
    with trio.fail_after(CEILING_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            doomed = await manager.create("demo")
            fine = await manager.create("demo")
            store.refuse.add(doomed.id)
            ended = await doomed.start_turn(prompt("hello")).wait()  # its waiters still hear the end
            assert ended.stop_reason is ev.StopReason.END_TURN
            await doomed._gone.wait()
            assert manager.live(doomed.id) is None and manager.live(fine.id) is fine
            assert (await fine.start_turn(prompt("hi")).wait()).stop_reason is ev.StopReason.END_TURN
            nursery.cancel_scope.cancel()
    assert any(r.levelno == logging.ERROR and "could not be stored" in r.getMessage() for r in caplog.records)
