"""SessionManager and Session under trio, with the MemoryStore and the demo back.

Every test runs under a `trio.fail_after` ceiling. Tests that wait on timeouts use
pytest-trio's `autojump_clock`, so "30 s" of question timeout costs no real time and
elapsed times are measured exactly on the virtual clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from bridge.backs import make_back
from bridge.backs.base import AgentInfo, SessionContext, TurnHandle
from bridge.config import Config, Route, parse_config
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.core.turn import TurnState
from bridge.errors import BackError, BackUnavailable, Busy, InvalidParams, NotFound
from bridge.session import Session, SessionManager
from bridge.store.memory import MemoryStore

CEILING_S = 20  # per test; on the virtual clock where autojump_clock is used

QUESTION_TIMEOUT_S = 30.0
CANCEL_GRACE_S = 2.0

MODE_OPTION = {
    "id": "mode",
    "name": "Mode",
    "category": "mode",
    "default": "code",
    "values": [{"value": "ask", "name": "Ask"}, {"value": "code", "name": "Code"}],
}


def make_config(*, daemon: dict[str, Any] | None = None, **route_overrides: Any) -> Config:
    policy = {"question_timeout_s": QUESTION_TIMEOUT_S, "cancel_grace_s": CANCEL_GRACE_S, **route_overrides}
    return parse_config(
        {
            "default_route": "demo",
            "routes": {
                "demo": {
                    "back": {"kind": "demo", "chunk_delay_s": 0.001, "slow_duration_s": 5.0},
                    "options": [MODE_OPTION],
                    **policy,
                },
                "fake": {"back": {"kind": "demo"}, **policy},
            },
            "store": {"flush_interval_s": 0.01},
            "daemon": daemon or {},
        }
    )


class Recorder:
    """A subscriber that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[ev.Event] = []
        self._changed = trio.Event()

    def deliver(self, event: ev.Event) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    def congested(self) -> bool:
        return False

    async def wait_uncongested(self) -> None:
        pass

    async def wait_for(self, pred: Callable[[ev.Event], bool]) -> ev.Event:
        seen = 0
        while True:
            for e in self.events[seen:]:
                if pred(e):
                    return e
            seen = len(self.events)
            await self._changed.wait()

    def of(self, cls: type[ev.Event]) -> list[Any]:
        return [e for e in self.events if isinstance(e, cls)]


# -- a fake back for the failure modes the demo cannot show -----------------------------


class FakeSession:
    def __init__(self, run: Callable[[TurnHandle], Awaitable[ev.StopReason]]) -> None:
        self._run = run
        self.cancel_calls = 0
        self.closed = False

    async def prompt(self, turn: TurnHandle) -> ev.StopReason:
        return await self._run(turn)

    async def cancel(self) -> None:
        self.cancel_calls += 1

    async def set_option(self, option_id: str, value: str) -> None:
        pass

    async def aclose(self) -> None:
        self.closed = True


class FakeBack:
    def __init__(self, run: Callable[[TurnHandle], Awaitable[ev.StopReason]]) -> None:
        self.info = AgentInfo(name="fake")
        self._run = run
        self.sessions: list[FakeSession] = []

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> FakeSession:
        session = FakeSession(self._run)
        self.sessions.append(session)
        return session

    async def ready(self) -> None:
        pass

    async def probe(self, *, deep: bool) -> str:
        return "fake"

    async def aclose(self) -> None:
        pass


def backs_with(fake: FakeBack | None) -> Callable[[str, Route], Any]:
    def pick(name: str, route: Route) -> Any:
        return fake if name == "fake" and fake is not None else make_back(name, route)

    return pick


@asynccontextmanager
async def running(config: Config | None = None, *, fake: FakeBack | None = None) -> AsyncIterator[SessionManager]:
    manager = SessionManager(config or make_config(), MemoryStore(), backs_with(fake))
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


async def new_session(manager: SessionManager, route: str = "demo") -> tuple[Session, Recorder]:
    session = await manager.create(route, cwd="/w")
    recorder = Recorder()
    session.subscribe(recorder)
    return session, recorder


def prompt(text: str) -> list[TextContent]:
    return [TextContent(text=text)]


def is_question(e: ev.Event) -> bool:
    return isinstance(e, ev.QuestionAsked)


# -- a turn from start to end --------------------------------------------------------------


async def test_turn_events_are_gapless_from_1_and_stored_as_delivered() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("think: plan: tool: fork: hello"))
            ended = await turn.wait()

            assert ended.stop_reason is ev.StopReason.END_TURN and ended.error is None
            assert [e.seq for e in rec.events] == list(range(1, len(rec.events) + 1))
            assert isinstance(rec.events[0], ev.TurnStarted) and rec.events[0].turn_id == turn.turn_id
            assert rec.events[-1] is ended
            assert sum(isinstance(e, ev.TurnEnded) for e in rec.events) == 1
            kinds = {type(e) for e in rec.events}
            assert {ev.MessageChunk, ev.PlanUpdated, ev.ToolCallStarted, ev.ToolCallUpdated, ev.UsageReported} <= kinds
            assert any(e.parent_tool_call_id for e in rec.events)  # the fork's events

            # The end is durable before wait() returns: read the store, no flush first.
            stored = await manager.read_events(session.id)
            assert stored == rec.events
            assert await session.history() == rec.events
            assert await session.history(after_seq=3) == rec.events[3:]

            (turn_record,) = await manager.store.list_turns(session.id)
            assert turn_record.turn_id == turn.turn_id
            assert turn_record.stop_reason == "end_turn"
            assert turn_record.last_seq == ended.seq
            record = await manager.store.get_session(session.id)
            assert record is not None and record.last_seq == ended.seq
            assert record.title == "think: plan: tool: fork: hello"


async def test_a_second_turn_continues_the_sequence() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            first = await session.start_turn(prompt("hello")).wait()
            second_turn = session.start_turn(prompt("again"))
            second = await second_turn.wait()
            assert second.seq > first.seq
            assert [e.seq for e in rec.events] == list(range(1, len(rec.events) + 1))
            starts = rec.of(ev.TurnStarted)
            assert [s.seq for s in starts] == [1, first.seq + 1]
            assert await session.history() == rec.events
            assert [t.turn_id for t in await manager.store.list_turns(session.id)] == [
                starts[0].turn_id,
                second_turn.turn_id,
            ]


@pytest.mark.parametrize(
    ("text", "stop"),
    [
        ("refuse: x", ev.StopReason.REFUSAL),
        ("max_tokens: x", ev.StopReason.MAX_TOKENS),
        ("max_turns: x", ev.StopReason.MAX_TURN_REQUESTS),
    ],
)
async def test_stop_reasons_from_the_back(text: str, stop: ev.StopReason) -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, _ = await new_session(manager)
            ended = await session.start_turn(prompt(text)).wait()
            assert ended.stop_reason is stop and ended.error is None


async def test_busy_on_a_second_start_turn() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("slow: x"))
            with pytest.raises(Busy):
                session.start_turn(prompt("another"))
            await rec.wait_for(lambda e: isinstance(e, ev.MessageChunk))
            with pytest.raises(Busy):
                session.start_turn(prompt("another"))
            assert len(rec.of(ev.TurnStarted)) == 1
            session.cancel()
            await turn.wait()
            # Once the turn has ended the session takes the next one.
            assert (await session.start_turn(prompt("hi")).wait()).stop_reason is ev.StopReason.END_TURN


async def test_unknown_route_and_unknown_session() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            with pytest.raises(NotFound):
                await manager.create("nope")
            with pytest.raises(NotFound):
                await manager.get("no-such-session")


# -- cancel -------------------------------------------------------------------------------


async def test_cancel_during_slow_ends_cancelled_quickly(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("slow: x"))
            await rec.wait_for(lambda e: isinstance(e, ev.MessageChunk))
            t0 = trio.current_time()
            assert session.cancel() is True
            assert turn.machine.state is TurnState.CANCELLING
            ended = await turn.wait()
            elapsed = trio.current_time() - t0
            assert ended.stop_reason is ev.StopReason.CANCELLED and ended.error is None
            # The demo stops at its next step; neither the 5 s of streaming nor the
            # cancel grace (cut-off) was needed.
            assert elapsed < 0.5
            assert rec.events[-1] is ended
            assert session.cancel() is False  # nothing left to cancel
            assert await session.history() == rec.events


async def test_cancel_without_a_turn_is_a_no_op() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            assert session.cancel() is False
            assert rec.events == []


async def test_cancel_resolves_an_open_question_as_cancelled(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("ask: x"))
            asked = await rec.wait_for(is_question)
            assert isinstance(asked, ev.QuestionAsked)
            assert turn.machine.state is TurnState.AWAITING_ANSWER
            session.cancel()
            ended = await turn.wait()
            assert ended.stop_reason is ev.StopReason.CANCELLED
            (answer,) = rec.of(ev.QuestionAnswered)
            assert answer.question_id == asked.question.id
            assert answer.cancelled is True and answer.selected == []
            assert trio.current_time() < QUESTION_TIMEOUT_S  # not the timeout path


# -- questions --------------------------------------------------------------------------


async def test_unanswered_permission_is_rejected_after_the_timeout(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(CEILING_S * 10):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("ask: x"))
            asked = await rec.wait_for(is_question)
            t0 = trio.current_time()
            answer = await rec.wait_for(lambda e: isinstance(e, ev.QuestionAnswered))
            waited = trio.current_time() - t0
            assert QUESTION_TIMEOUT_S <= waited < QUESTION_TIMEOUT_S + 0.1
            assert isinstance(answer, ev.QuestionAnswered) and isinstance(asked, ev.QuestionAsked)
            reject_ids = [o.id for o in asked.question.options if o.kind in ("reject_once", "reject_always")]
            assert answer.by == "timeout"
            assert answer.selected == reject_ids[:1]
            assert not any(o.kind and o.kind.startswith("allow") for o in asked.question.options if o.id in answer.selected)
            ended = await turn.wait()
            # A rejection is an answer, not a cancel: the turn goes on and ends normally.
            assert ended.stop_reason is ev.StopReason.END_TURN
            failed = [u for u in rec.of(ev.ToolCallUpdated) if u.status == "failed"]
            assert failed and failed[0].tool_call_id == asked.question.tool_call_id


async def test_unanswered_question_without_a_reject_option_is_cancelled_by_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    with trio.fail_after(CEILING_S * 10):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("choose: x"))
            asked = await rec.wait_for(is_question)
            assert isinstance(asked, ev.QuestionAsked) and asked.question.multi_select
            ended = await turn.wait()
            (answer,) = rec.of(ev.QuestionAnswered)
            assert answer.by == "timeout" and answer.cancelled and answer.selected == []
            assert ended.stop_reason is ev.StopReason.END_TURN


async def test_answer_validation_keeps_the_question_open(autojump_clock: trio.abc.Clock) -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("ask: hello"))
            asked = await rec.wait_for(is_question)
            assert isinstance(asked, ev.QuestionAsked)
            qid = asked.question.id
            assert not asked.question.multi_select and not asked.question.allow_text

            with pytest.raises(InvalidParams, match="unknown option"):
                session.answer(qid, selected=["nope"])
            with pytest.raises(InvalidParams, match="one option"):
                session.answer(qid, selected=["allow", "reject"])
            with pytest.raises(InvalidParams):
                session.answer(qid)  # nothing chosen
            with pytest.raises(InvalidParams, match="free text"):
                session.answer(qid, text="sure")
            with pytest.raises(NotFound):
                session.answer("no-such-question", selected=["allow"])

            assert turn.open_question(qid) == asked.question
            assert turn.machine.state is TurnState.AWAITING_ANSWER
            assert rec.of(ev.QuestionAnswered) == []

            session.answer(qid, selected=["allow"])
            with pytest.raises(NotFound):
                session.answer(qid, selected=["reject"])  # already answered
            ended = await turn.wait()
            assert ended.stop_reason is ev.StopReason.END_TURN
            (answer,) = rec.of(ev.QuestionAnswered)
            assert answer.selected == ["allow"] and answer.by == "user" and not answer.cancelled
            diffs = [u for u in rec.of(ev.ToolCallUpdated) if u.content and u.content[0].type == "diff"]
            assert diffs and diffs[0].content[0].new_text == "hello"
            assert trio.current_time() < QUESTION_TIMEOUT_S


async def test_multi_select_question_takes_several_options_and_text() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            turn = session.start_turn(prompt("choose: x"))
            asked = await rec.wait_for(is_question)
            assert isinstance(asked, ev.QuestionAsked)
            with pytest.raises(InvalidParams):
                session.answer(asked.question.id, selected=["red", "purple"])
            session.answer(asked.question.id, selected=["red", "blue"], text="teal")
            await turn.wait()
            said = "".join(c.content.text for c in rec.of(ev.MessageChunk))
            assert "You chose: Red, Blue, teal." in said


# -- options ----------------------------------------------------------------------------


async def test_set_option() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, rec = await new_session(manager)
            assert [(o.id, o.current) for o in session.config_options()] == [("mode", "code")]
            with pytest.raises(InvalidParams):
                await session.set_option("mode", "yolo")
            with pytest.raises(InvalidParams):
                await session.set_option("colour", "red")
            assert rec.events == []
            assert session.config_options()[0].current == "code"

            options = await session.set_option("mode", "ask")
            assert options[0].current == "ask"
            (changed,) = rec.of(ev.OptionsChanged)
            assert changed.options == options and changed.seq == 1
            record = await manager.store.get_session(session.id)
            assert record is not None and record.options == {"mode": "ask"}
            # The next turn sees the option.
            turn = session.start_turn(prompt("hi"))
            assert turn.options == {"mode": "ask"}
            await turn.wait()


# -- failures -----------------------------------------------------------------------------


async def test_back_error_ends_the_turn_failed_with_its_message() -> None:
    async def explode(turn: TurnHandle) -> ev.StopReason:
        turn.emit(ev.MessageChunk(content=TextContent(text="partial ")))
        await turn.flow()
        raise BackError("upstream agent exited with status 3")

    fake = FakeBack(explode)
    with trio.fail_after(CEILING_S):
        async with running(fake=fake) as manager:
            session, rec = await new_session(manager, "fake")
            ended = await session.start_turn(prompt("go")).wait()
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None
            assert ended.error.message == "upstream agent exited with status 3"
            assert ended.error.kind == "BackError"
            assert [type(e) for e in rec.events] == [ev.TurnStarted, ev.MessageChunk, ev.TurnEnded]
            (record,) = await manager.store.list_turns(session.id)
            assert record.stop_reason == "failed" and record.error == "upstream agent exited with status 3"
            # The session is still usable.
            assert not session.turn.machine.active  # type: ignore[union-attr]


async def test_demo_fail_word_fails_the_turn() -> None:
    with trio.fail_after(CEILING_S):
        async with running() as manager:
            session, _ = await new_session(manager)
            ended = await session.start_turn(prompt("fail: x")).wait()
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and "failed on purpose" in ended.error.message


async def test_back_that_ignores_cancel_is_cut_off_after_the_grace(autojump_clock: trio.abc.Clock) -> None:
    started = trio.Event()

    async def stubborn(turn: TurnHandle) -> ev.StopReason:
        started.set()
        await trio.sleep(10_000)  # never looks at turn.cancel_requested
        return ev.StopReason.END_TURN

    fake = FakeBack(stubborn)
    with trio.fail_after(CEILING_S):
        async with running(fake=fake) as manager:
            session, rec = await new_session(manager, "fake")
            turn = session.start_turn(prompt("go"))
            await started.wait()
            t0 = trio.current_time()
            assert session.cancel()
            ended = await turn.wait()
            elapsed = trio.current_time() - t0
            assert ended.stop_reason is ev.StopReason.CANCELLED and ended.error is None
            assert CANCEL_GRACE_S <= elapsed < CANCEL_GRACE_S + 0.1
            assert fake.sessions[0].cancel_calls == 1  # the back was told first
            assert rec.events[-1] is ended


async def test_back_that_returns_normally_after_cancel_still_ends_cancelled(autojump_clock: trio.abc.Clock) -> None:
    # ACP: once cancelled, the answer is `cancelled`, whatever the back says.
    async def finishes_anyway(turn: TurnHandle) -> ev.StopReason:
        await turn.wait_cancel_requested()
        return ev.StopReason.END_TURN

    with trio.fail_after(CEILING_S):
        async with running(fake=FakeBack(finishes_anyway)) as manager:
            session, _ = await new_session(manager, "fake")
            turn = session.start_turn(prompt("go"))
            await trio.sleep(0.1)
            session.cancel()
            assert (await turn.wait()).stop_reason is ev.StopReason.CANCELLED
            assert trio.current_time() < CANCEL_GRACE_S


async def test_turn_timeout_fails_the_turn(autojump_clock: trio.abc.Clock) -> None:
    async def forever(turn: TurnHandle) -> ev.StopReason:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    config = make_config(turn_timeout_s=7)
    with trio.fail_after(CEILING_S):
        async with running(config, fake=FakeBack(forever)) as manager:
            session, _ = await new_session(manager, "fake")
            ended = await session.start_turn(prompt("go")).wait()
            assert ended.stop_reason is ev.StopReason.FAILED
            assert ended.error is not None and ended.error.kind == "timeout"
            assert 7 <= trio.current_time() < 7.1


async def test_idle_sessions_are_closed_and_come_back_from_the_store(autojump_clock: trio.abc.Clock) -> None:
    config = make_config(daemon={"idle_session_close_s": 60})
    with trio.fail_after(CEILING_S + 200):  # the sleeps below are on the virtual clock
        async with running(config) as manager:
            watched, _ = await new_session(manager)  # a client stays subscribed
            kept = await manager.create("demo", cwd="/w")
            manager.keep_alive.append(lambda s: s is kept)  # a front says to keep it
            idle = await manager.create("demo", cwd="/w")
            unsubscribe = idle.subscribe(Recorder())
            assert (await idle.start_turn(prompt("hello")).wait()).stop_reason is ev.StopReason.END_TURN
            unsubscribe()
            running_turn = watched.start_turn(prompt("slow: x"))  # 5 s of turn: busy, then watched

            await trio.sleep(50)
            assert manager.live(idle.id) is idle  # not idle long enough yet
            await trio.sleep(150)
            assert manager.live(idle.id) is None  # closed: nobody used it for 60 s
            assert manager.live(watched.id) is watched and manager.live(kept.id) is kept
            assert (await running_turn.wait()).stop_reason is ev.StopReason.END_TURN

            back = await manager.get(idle.id)  # from the store, its history whole
            assert back is not idle and [type(e) for e in await back.history()][0] is ev.TurnStarted
            assert any(isinstance(e, ev.TurnEnded) for e in await back.history())
            assert (await back.start_turn(prompt("again")).wait()).stop_reason is ev.StopReason.END_TURN


async def test_close_cancels_the_running_turn_and_frees_the_back(autojump_clock: trio.abc.Clock) -> None:
    async def forever(turn: TurnHandle) -> ev.StopReason:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    fake = FakeBack(forever)
    with trio.fail_after(CEILING_S):
        async with running(fake=fake) as manager:
            session, rec = await new_session(manager, "fake")
            turn = session.start_turn(prompt("go"))
            await trio.sleep(0.1)
            await session.close()
            assert turn.ended is not None and turn.ended.stop_reason is ev.StopReason.CANCELLED
            await trio.sleep(0.1)  # let the session task finish its cleanup
            assert fake.sessions[0].closed
            assert manager.live(session.id) is None
            # Closed, not lost: it comes back from the store with its history.
            again = await manager.get(session.id)
            assert await again.history() == rec.events


# -- typed front state ------------------------------------------------------------------


def test_a_front_state_that_does_not_decode_is_kept_as_stored() -> None:
    """One bad entry must not erase the rest: the record keeps what it holds."""
    from bridge.fronts.a2a.state import A2AContext
    from bridge.session.state import load_front_state

    good = {"side": ["s2"], "held": "t1", "tasks": {"t1": {}}}  # a key of an older version is ignored
    state, writable = load_front_state({"a2a": good}, A2AContext)
    assert writable and state is not None and state.side == ["s2"] and state.held == "t1"
    bad = {"side": "not a list", "held": "t1"}
    state, writable = load_front_state({"a2a": bad}, A2AContext)
    assert state is not None and state.side == [] and state.held is None and not writable


async def test_a_session_never_writes_back_a_front_state_it_could_not_read() -> None:
    from bridge.fronts.a2a.state import A2AContext

    async with running() as manager:
        session = await manager.create("demo", cwd="/")
        bad = {"side": "not a list", "held": "t2"}
        session.record.states["a2a"] = bad
        await manager.store.put_session(session.record)  # as a record of another version stored it
        assert session.front_state(A2AContext).side == []
        session.front_state(A2AContext).held = "t9"  # a front writing into what it could read
        await session.save_record()
        stored = await manager.store.get_session(session.id)
        assert stored is not None and stored.states["a2a"] == bad


def test_records_and_push_configs_hide_secrets_in_every_repr() -> None:
    from bridge.fronts.a2a.state import A2APushConfig
    from bridge.store import SessionRecord

    push = A2APushConfig(id="p", url="https://h/x", token="SECRET-1", credentials="SECRET-2")
    record = SessionRecord(
        session_id="s", route="r", created_at=0, updated_at=0, meta={"x": "SECRET-4"}, states={"a2a": {"push": "SECRET-3"}}
    )
    for shown in (repr(push), repr(list(push.__rich_repr__())), repr(record), repr(list(record.__rich_repr__()))):
        assert "SECRET" not in shown


async def test_a_back_that_cannot_be_made_fails_its_route_only() -> None:
    """A factory that raises (a plugin's bug) is that route's BackUnavailable, logged; other routes serve."""

    def factory(name: str, route: Route) -> Any:
        if name == "fake":
            raise RuntimeError("plugin bug")
        return make_back(name, route)

    config = parse_config({"routes": {"demo": {"back": {"kind": "demo"}}, "fake": {"back": {"kind": "demo"}}}})
    manager = SessionManager(config, MemoryStore(), factory)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        with pytest.raises(BackUnavailable, match="route fake: its back could not be made"):
            await manager.create("fake", cwd="/")
        session = await manager.create("demo", cwd="/")
        assert session.record.route == "demo"
        await manager.close_all()
        nursery.cancel_scope.cancel()


async def test_sessions_closed_after_their_manager_stopped_end_in_their_caller() -> None:
    # What `open_runtime` does when its caller is cancelled (Ctrl-C in `ask`): the
    # manager's nursery is gone, then `close_all` closes what is still live. A session
    # that never ran anything has no task to end in, and none can be started now.
    with trio.fail_after(CEILING_S):
        manager = SessionManager(make_config(), MemoryStore(), backs_with(None))
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            watched, _ = await new_session(manager)
            nursery.cancel_scope.cancel()
        await watched.close()
        await manager.close_all()
        assert watched.closed and manager.live(watched.id) is None
        assert (await manager.store.get_session(watched.id)) is not None
