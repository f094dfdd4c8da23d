"""Chat replay from checkpoints (bridge/fronts/chat/replay.py, streams.py, rest.py), in one trio process.

- A property test over generated sessions: a stored part (as an older release or a
  session nobody watched left it: runs ended, never ended, cut by a restart; no
  checkpoints) then live runs, watched or not (text, thoughts, data, plans, progress,
  usage, tool calls, forks, questions answered, withdrawn or left open, headless runs
  with and without an output schema, every stop reason). The live frames, a replay
  after every position and every REST page must be exactly what a re-derivation from
  the first event gives, and every turn ends up with its checkpoint stored.
- A counting store: a resume reads only the last run's events and turns, the first
  reader of a session that nobody watched projects it once, and `/api/sessions` reads
  no turn.
- REST pages and cursors through the handler, and frames that are no longer stored.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.backs import make_back
from bridge.backs.base import AgentInfo, SessionContext, TurnHandle
from bridge.codecs.chat import ChatProjector
from bridge.config import Route, parse_config
from bridge.core import events as ev
from bridge.core.content import DataContent, TextContent
from bridge.errors import BackError, NotFound
from bridge.fronts.chat import replay, rest
from bridge.fronts.chat.access import Access
from bridge.fronts.chat.config import WsFrontConfig
from bridge.fronts.chat.runs import keep_run, run_of
from bridge.fronts.chat.state import ChatSessionState
from bridge.fronts.chat.streams import ChatStreams, TextFrame
from bridge.schema.chat import RunOptions
from bridge.session import Session, SessionManager
from bridge.session.state import encode_front_state
from bridge.store import SessionRecord, StoredBatch, TurnRecord
from bridge.store.base import CUT_META_KEY, CUT_TURN_ERROR
from bridge.store.memory import MemoryStore

CONFIG = parse_config(
    {
        "routes": {"fake": {"back": {"kind": "demo"}}},
        "ws": {"block_max_chars": 64},  # the smallest: long texts split into more frames
        "store": {"flush_interval_s": 0.01},
    }
)
WS = CONFIG.section(WsFrontConfig)
S = ev.StopReason


# -- a back that plays what the test scripted --------------------------------------------


class _Played:
    def __init__(self, back: ScriptedBack) -> None:
        self.back = back

    async def prompt(self, turn: TurnHandle) -> ev.StopReason:
        events, stop = self.back.next
        for event in events:
            turn.emit(event)
        if stop is S.FAILED:
            raise BackError("boom")
        return stop

    async def cancel(self) -> None:
        pass

    async def set_option(self, option_id: str, value: str) -> None:
        pass

    async def aclose(self) -> None:
        pass


class ScriptedBack:
    def __init__(self) -> None:
        self.info = AgentInfo(name="scripted")
        self.next: tuple[list[ev.Event], ev.StopReason] = ([], S.END_TURN)

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> _Played:
        return _Played(self)

    async def ready(self) -> None:
        pass

    async def probe(self, *, deep: bool) -> str:
        return "scripted"

    async def aclose(self) -> None:
        pass


@asynccontextmanager
async def running(store: MemoryStore, back: ScriptedBack) -> AsyncIterator[SessionManager]:
    def pick(name: str, route: Route) -> Any:
        return back if name == "fake" else make_back(name, route)

    manager = SessionManager(CONFIG, store, pick)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


class Watcher:
    def __init__(self) -> None:
        self.frames: list[TextFrame] = []
        self.gone: list[str] = []

    def push(self, frames: list[TextFrame]) -> None:
        self.frames += frames

    async def replay(self, frames: list[TextFrame]) -> None:
        self.frames += frames

    def session_gone(self, session_id: str, reason: str) -> None:
        self.gone.append(reason)

    def overflowed(self) -> None:
        self.gone.append("overflowed")


# -- generated sessions --------------------------------------------------------------------

PERMISSION = [ev.QuestionOption(id="y", label="Yes", kind="allow_once"), ev.QuestionOption(id="n", label="No", kind="reject_once")]

_step = st.one_of(
    st.tuples(st.just("text"), st.integers(1, 90)),
    st.sampled_from([("thought",), ("data",), ("plan",), ("progress",), ("usage",)]),
    st.tuples(st.just("tool"), st.sampled_from(["completed", "failed", "open"]), st.booleans()),
    st.tuples(st.just("ask"), st.sampled_from(["answered", "withdrawn", "open"])),
)
_run = {
    "steps": st.lists(_step, max_size=5),
    "stop": st.sampled_from([S.END_TURN, S.FAILED, S.CANCELLED, S.MAX_TOKENS, S.REFUSAL, S.INPUT_REQUIRED]),
    "headless": st.sampled_from([None, None, "headless", "schema"]),
}
_stored = st.fixed_dictionaries({**_run, "end": st.sampled_from(["ended", "ended", "unended", "cut"])})
_live = st.fixed_dictionaries({**_run, "watched": st.booleans()})
_sessions = st.tuples(st.lists(_stored, max_size=4), st.lists(_live, max_size=5))


def script(tid: str, steps: list[tuple[Any, ...]]) -> list[ev.Event]:
    out: list[ev.Event] = []
    for k, step in enumerate(steps):
        kind, ref = step[0], f"{tid}.{k}"
        if kind == "text":
            out.append(ev.MessageChunk(content=TextContent(text="word " * step[1]), message_id=f"m.{tid}"))
        elif kind == "thought":
            out.append(ev.MessageChunk(content=TextContent(text="hmm"), message_id=f"t.{ref}", thought=True))
        elif kind == "data":
            out.append(ev.MessageChunk(content=DataContent(data={"n": k, "ok": True})))
        elif kind == "plan":
            out.append(ev.PlanUpdated(entries=[ev.PlanEntry(content="a"), ev.PlanEntry(content="b", status="completed")]))
        elif kind == "progress":
            out.append(ev.ProgressReported(content=[TextContent(text="working")], message_id=f"p.{tid}"))
        elif kind == "usage":
            out.append(ev.UsageReported(input_tokens=3, output_tokens=4, size=100))
        elif kind == "tool":
            out += [
                ev.ToolCallStarted(tool_call_id=ref, title="Read", kind="read", raw_input={"path": "a"}),
                ev.ToolCallUpdated(tool_call_id=ref, status="in_progress"),
            ]
            if step[2]:  # a fork: a sub-agent's events under the tool call
                out += [
                    ev.MessageChunk(content=TextContent(text="sub"), parent_tool_call_id=ref),
                    ev.ToolCallStarted(tool_call_id=f"{ref}.sub", title="Sub", status="completed", parent_tool_call_id=ref),
                ]
            if step[1] != "open":
                out.append(ev.ToolCallUpdated(tool_call_id=ref, status=step[1], raw_output={"bytes": 3}))
        elif kind == "ask":
            out.append(ev.QuestionAsked(question=ev.Question(id=ref, kind="permission", prompt="ok?", options=PERMISSION)))
            if step[1] == "answered":
                out.append(ev.QuestionAnswered(question_id=ref, selected=["y"]))
            elif step[1] == "withdrawn":
                out.append(ev.QuestionAnswered(question_id=ref, cancelled=True))
    return out


def run_options(headless: str | None) -> RunOptions | None:
    if headless is None:
        return None
    return RunOptions(headless=True, output_schema={"type": "object"} if headless == "schema" else None)


async def store_old_part(store: MemoryStore, sid: str, runs: list[dict[str, Any]]) -> None:
    """Runs as a session nobody watched (or an older release) left them: no checkpoints;
    headless runs' options with their turns, or (every other one) in the chat state, as
    stores written before keep them."""
    events: list[ev.Event] = []
    turns: list[TurnRecord] = []
    options: dict[str, RunOptions] = {}
    t = 1_000_000.0
    for i, run in enumerate(runs):
        tid = f"old{i}"
        first = len(events) + 1
        events += [ev.TurnStarted(turn_id=tid, prompt=[TextContent(text=f"prompt {i}")]), *script(tid, run["steps"])]
        stop, error, meta = run["stop"], None, {}
        if run["end"] == "cut":
            stop, error, meta = S.FAILED, CUT_TURN_ERROR, {CUT_META_KEY: True}
        elif stop is S.FAILED:
            error = ev.TurnError(message="boom")
        if run["end"] != "unended":
            events.append(ev.TurnEnded(turn_id=tid, stop_reason=stop, error=error))
        ended = run["end"] != "unended"
        turns.append(TurnRecord(
            turn_id=tid, session_id=sid, started_at=t, first_seq=first, ended_at=t + 1.25 if ended else None,
            last_seq=len(events) if ended else None, stop_reason=stop.value if ended else None, meta=meta,
        ))  # fmt: skip
        if (o := run_options(run["headless"])) is not None:
            if i % 2:
                keep_run(turns[-1], o)
            else:
                options[tid] = o
        t += 2
    for seq, event in enumerate(events, 1):
        event.seq = seq
    last = turns[-1] if turns else None
    record = SessionRecord(
        session_id=sid, route="fake", created_at=t, updated_at=t, last_seq=len(events), turn_count=len(runs),
        last_stop=last.stop_reason if last else None, last_cut=bool(last and last.meta.get(CUT_META_KEY)),
        states={"chat": encode_front_state(ChatSessionState(chat_runs=options))[0]},
    )  # fmt: skip
    await store.put_session(record)
    for i in range(0, len(events), 3):  # batches across runs' bounds
        chunk = events[i : i + 3]
        batch = StoredBatch(first_seq=chunk[0].seq, last_seq=chunk[-1].seq, blob=ev.encode_events(chunk))
        await store.save(record, turns=turns if i == 0 else (), batch=batch)


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


class Reference:
    """The whole session re-derived from its first event, as the code before checkpoints did."""

    def __init__(self, manager: SessionManager, session: Session) -> None:
        self.manager, self.session = manager, session

    async def derive(self) -> None:
        sid = self.session.id
        state = self.session.front_state(ChatSessionState)
        self.turns = await self.manager.store.list_turns(sid)
        # Old runs' options in the state (as stores written before keep them), new ones
        # with their turns.
        runs = {**state.chat_runs, **{t.turn_id: o for t in self.turns if (o := run_of(t.meta)) is not None}}
        self.checkpoints: dict[str, int] = {}
        projector = ChatProjector(
            sid,
            run_options=runs.get,
            turn_times={t.turn_id: (t.started_at, t.ended_at) for t in self.turns},
            block_max_chars=WS.block_max_chars,
            keep_transcript=True,
            on_checkpoint=self.checkpoints.__setitem__,
        )
        events = await self.session.history(0)
        self.frames = [(seq, data.decode()) for e in events for seq, data in projector.feed(e)]
        self.sequence = projector.sequence
        self.transcript = msgspec.to_builtins(projector.transcript())


# -- the property ----------------------------------------------------------------------


async def check_session(old: list[dict[str, Any]], live_runs: list[dict[str, Any]]) -> None:
    store, back = MemoryStore(), ScriptedBack()
    sid = "s1"
    await store_old_part(store, sid, old)
    async with running(store, back) as manager:
        session = await manager.get(sid)
        streams = ChatStreams(WS, manager)
        live: list[TextFrame] = []
        for i, run in enumerate(live_runs):
            back.next = (script(f"live{i}", run["steps"]), run["stop"])
            watcher = Watcher()
            if run["watched"]:
                await streams.watch(session, watcher, None)
            turn = session.start_turn([TextContent(text=f"live {i}")])
            if (o := run_options(run["headless"])) is not None:
                keep_run(turn.record, o)  # as `chat:send` does
            await turn.wait()
            streams.unwatch(sid, watcher)
            assert not watcher.gone
            live += watcher.frames
        ref = Reference(manager, session)
        await ref.derive()
        by_seq = dict(ref.frames)
        assert [s for s, _ in ref.frames] == list(range(1, ref.sequence + 1))  # gapless, from 1

        # What watchers heard live is what a re-derivation gives (timing fields aside).
        assert [untimed(t) for _, t in live] == [untimed(by_seq[s]) for s, _ in live]

        # A replay after any position is exactly the re-derivation's frames after it.
        keeper = Watcher()  # keeps one live stream for every replay below
        await streams.watch(session, keeper, None)
        for after in range(ref.sequence + 2):
            watcher = Watcher()
            live_from = await streams.watch(session, watcher, after)
            assert watcher.frames == [f for f in ref.frames if f[0] > after], after
            assert live_from == ref.sequence
            streams.unwatch(sid, watcher)

        # Every turn has its checkpoint stored now, the one a re-derivation finds.
        stored = await store.list_turns(sid)
        assert {t.turn_id: t.stream_seq for t in stored} == ref.checkpoints

        # REST pages: in order, each run once, the last frame number of each page.
        for limit in (1, 2, 3):
            pages: list[Any] = []
            before, sequences = None, []
            while True:
                turns, sequence, before = await streams.transcript(sid, limit=limit, before=before)
                pages[:0] = msgspec.to_builtins(turns)
                sequences.append(sequence)
                if before is None:
                    break
            assert pages == ref.transcript
            runs = len(ref.turns)
            starts = [ref.checkpoints[t.turn_id] for t in ref.turns] + [ref.sequence]
            ends = [starts[min(runs, runs - k * limit)] for k in range(len(sequences))]
            assert sequences == ends
        streams.unwatch(sid, keeper)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_sessions)
def test_replay_from_checkpoints_is_the_full_rederivation(spec: tuple[list[dict[str, Any]], list[dict[str, Any]]]) -> None:
    async def main() -> None:
        with trio.fail_after(60):
            await check_session(*spec)

    page, replay.TURN_PAGE = replay.TURN_PAGE, 2  # passes that cross pages of turns
    try:
        trio.run(main)
    finally:
        replay.TURN_PAGE = page


# -- what is read ------------------------------------------------------------------------


class CountingStore(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.batch_reads: list[int] = []  # after_seq of each read_batches
        self.turn_lists: list[dict[str, Any]] = []

    async def read_batches(self, session_id: str, **kw: Any) -> list[StoredBatch]:
        self.batch_reads.append(kw.get("after_seq", 0))
        return await super().read_batches(session_id, **kw)

    async def list_turns(self, session_id: str, **kw: Any) -> list[TurnRecord]:
        self.turn_lists.append(kw)
        return await super().list_turns(session_id, **kw)

    def reset(self) -> None:
        self.batch_reads.clear()
        self.turn_lists.clear()


CHATTY = [("text", 30)] * 12 + [("tool", "completed", False)]


async def run_turns(session: Session, back: ScriptedBack, n: int, *, prefix: str = "t") -> None:
    for i in range(n):
        back.next = (script(f"{prefix}{i}", CHATTY), S.END_TURN)
        await session.start_turn([TextContent(text=str(i))]).wait()


async def test_a_resume_reads_only_the_last_runs_events_and_turns() -> None:
    store, back = CountingStore(), ScriptedBack()
    with trio.fail_after(30):
        async with running(store, back) as manager:
            session = await manager.create("fake")
            streams = ChatStreams(WS, manager)
            watcher = Watcher()
            await streams.watch(session, watcher, None)  # checkpoints noted live
            await run_turns(session, back, 40)
            streams.unwatch(session.id, watcher)
            end = watcher.frames[-1][0]
            last = (await store.list_turns(session.id, newest_first=True, limit=1))[0]
            store.reset()
            again = Watcher()
            assert await streams.watch(session, again, end - 10) == end  # the first subscribe, then the replay
            assert [s for s, _ in again.frames] == list(range(end - 9, end + 1))
            assert store.batch_reads and min(store.batch_reads) >= last.first_seq - 1, store.batch_reads
            assert all(kw.get("after_seq", 0) >= last.first_seq - 1 for kw in store.turn_lists), store.turn_lists


async def test_the_first_reader_of_unwatched_runs_projects_them_once() -> None:
    store, back = CountingStore(), ScriptedBack()
    with trio.fail_after(30):
        async with running(store, back) as manager:
            session = await manager.create("fake")
            await run_turns(session, back, 30)  # nobody watching: no checkpoints
            streams = ChatStreams(WS, manager)
            first = Watcher()
            end = await streams.watch(session, first, None)
            assert min(store.batch_reads) == 0  # once, from the first event
            streams.unwatch(session.id, first)
            last = (await store.list_turns(session.id, newest_first=True, limit=1))[0]
            assert all(t.stream_seq is not None for t in await store.list_turns(session.id))
            store.reset()
            again = Watcher()
            await streams.watch(session, again, end - 10)
            assert [s for s, _ in again.frames] == list(range(end - 9, end + 1))
            assert min(store.batch_reads) >= last.first_seq - 1, store.batch_reads


def _scope(query: bytes = b"") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/api/sessions", "headers": [], "query_string": query}


async def _call(handler: Any, query: bytes = b"", **params: str) -> tuple[int, Any, dict[str, str]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await handler(_scope(query), None, send, params)
    headers = {k.decode(): v.decode() for k, v in sent[0].get("headers", [])}
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], json.loads(body), headers


def _api(manager: SessionManager, streams: ChatStreams) -> Any:
    return rest.RestApi(CONFIG, manager, streams, Access(WS, CONFIG.server))


async def test_listing_sessions_reads_no_turn_and_keeps_the_status_words() -> None:
    store, back = CountingStore(), ScriptedBack()
    with trio.fail_after(30):
        async with running(store, back) as manager:
            api = _api(manager, ChatStreams(WS, manager))
            expected = {}
            for stop, status in [(None, "created"), (S.END_TURN, "completed"), (S.FAILED, "failed"),
                                 (S.CANCELLED, "interrupted"), (S.INPUT_REQUIRED, "waiting_for_input")]:  # fmt: skip
                session = await manager.create("fake")
                if stop is not None:
                    back.next = ([], stop)
                    await session.start_turn([TextContent(text="x")]).wait()
                expected[session.id] = status
            await store_old_part(store, "cut", [{"steps": [], "stop": S.END_TURN, "headless": None, "end": "cut"}])
            expected["cut"] = "interrupted"
            store.reset()
            status, body, _ = await _call(api.endpoint(api.index))
            assert status == 200 and {s["session_id"]: s["status"] for s in body["sessions"]} == expected
            for sid, word in expected.items():
                assert (await _call(api.endpoint(api.get), session_id=sid))[1]["status"] == word
            assert store.turn_lists == []


async def test_messages_in_pages_with_a_cursor() -> None:
    store, back = MemoryStore(), ScriptedBack()
    with trio.fail_after(30):
        async with running(store, back) as manager:
            session = await manager.create("fake")
            await run_turns(session, back, 5)
            api = _api(manager, ChatStreams(WS, manager))
            messages = api.endpoint(api.messages)
            status, everything, head = await _call(messages, b"limit=200", session_id=session.id)
            assert status == 200 and len(everything) == 10 and "x-next-cursor" not in head and "link" not in head
            pages, query, links = [], b"limit=2", []
            while True:
                status, body, head = await _call(messages, query, session_id=session.id)
                assert status == 200
                pages[:0] = body
                if "x-next-cursor" not in head:
                    break
                cursor = head["x-next-cursor"]
                links.append(head["link"])
                assert head["link"] == f'</api/sessions/{session.id}/messages?limit=2&before={cursor}>; rel="next"'
                query = f"limit=2&before={cursor}".encode()
            assert pages == everything and len(links) == 2
            newest = await _call(messages, b"", session_id=session.id)
            assert newest[1] == everything and int(newest[2]["x-chat-sequence"]) > 0
            for bad in (b"before=nope", b"before=LTE", b"before=" + b"M" * 40, b"limit=0", b"limit=201"):
                status, body, _ = await _call(messages, bad, session_id=session.id)
                assert status == 400 and "detail" in body, bad
            assert (await _call(messages, b"", session_id="nope"))[0] == 404


async def test_frames_that_are_no_longer_stored_are_refused() -> None:
    store, back = MemoryStore(), ScriptedBack()
    with trio.fail_after(30):
        async with running(store, back) as manager:
            session = await manager.create("fake")
            streams = ChatStreams(WS, manager)
            keeper = Watcher()
            await streams.watch(session, keeper, None)
            await run_turns(session, back, 3)
            first = (await store.list_turns(session.id, limit=1))[0]
            # A retention pass removed the first run (its turn and its events).
            del store._turns[first.turn_id]
            for seq in [k for k, b in store._batches[session.id].items() if b.first_seq <= first.last_seq]:  # type: ignore[operator]
                del store._batches[session.id][seq]
            second = (await store.list_turns(session.id, limit=1))[0]
            assert second.stream_seq
            with pytest.raises(NotFound, match="no longer stored"):
                await streams.watch(session, Watcher(), 0)
            later = Watcher()
            await streams.watch(session, later, second.stream_seq)  # from what is still stored
            assert later.frames[0][0] == second.stream_seq + 1
            ahead = Watcher()  # a position the session never reached: live from where it is
            assert await streams.watch(session, ahead, 10**6) == keeper.frames[-1][0] and ahead.frames == []
