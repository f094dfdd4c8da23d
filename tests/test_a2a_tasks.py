"""A2A tasks as rows of their own (bridge/fronts/a2a/tasks.py, read.py, state.py), in process.

The TaskService over a SessionManager with a MemoryStore, the demo back and a small back
whose turns end `input_required` (so a task spans turns): ListTasks pages through the
store's rows by (status time, id) with its filters; no write grows with the number of
tasks a context had; GetTask after a restart reads only the task's own events; push
configs and a continuation read the task's row after a restart.
"""

from __future__ import annotations

import base64
import datetime as dt
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio

from bridge.backs import make_back
from bridge.backs.base import AgentInfo, SessionContext, TurnHandle
from bridge.codecs.a2a_task import TaskProjector
from bridge.config import Route, parse_config
from bridge.core.content import TextContent, text_of
from bridge.core.events import MessageChunk, StopReason
from bridge.errors import InvalidParams, NotFound
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.fronts.a2a.push import PushService
from bridge.fronts.a2a.state import A2ATask, Kept, decode_task
from bridge.fronts.a2a.tasks import TaskService
from bridge.schema import a2a as s
from bridge.session import SessionManager
from bridge.store import SessionRecord, StoredBatch, TaskRecord, TurnRecord
from bridge.store.memory import MemoryStore

CONFIG = parse_config({
    "default_route": "demo",
    "routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0.0}}, "asking": {"back": {"kind": "demo"}}},
    "a2a": {"push_allowed_hosts": ["127.0.0.1"]},
})  # fmt: skip
_S = s.TaskState
_ids = itertools.count()
_enc = msgspec.json.Encoder()


class AskingBack:
    """Answers "done"; a prompt ending in "?" ends its turn `input_required` (the task waits)."""

    info = AgentInfo(name="asking")

    async def open_session(self, ctx: SessionContext, *, nursery: trio.Nursery) -> AskingBack:
        return self

    async def prompt(self, turn: TurnHandle) -> StopReason:
        asks = text_of(turn.prompt).endswith("?")
        turn.emit(MessageChunk(content=TextContent(text="which one?" if asks else "done")))
        return StopReason.INPUT_REQUIRED if asks else StopReason.END_TURN

    async def cancel(self) -> None:
        pass

    async def set_option(self, option_id: str, value: str) -> None:
        pass

    async def ready(self) -> None:
        pass

    async def probe(self, *, deep: bool) -> str:
        return "asking"

    async def aclose(self) -> None:
        pass


def backs(name: str, route: Route) -> Any:
    return AskingBack() if name == "asking" else make_back(name, route)


@asynccontextmanager
async def service(store: MemoryStore, config: Any = CONFIG) -> AsyncIterator[TaskService]:
    """A daemon's A2A tasks over `store`; leaving it stops them all (a restart, with the next one)."""
    await store.open()
    manager = SessionManager(config, store, backs)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        tasks = TaskService(config.section(A2AFrontConfig), manager)
        PushService(config.section(A2AFrontConfig), tasks)
        yield tasks
        nursery.cancel_scope.cancel()


async def send(tasks: TaskService, text: str, *, ctx: str | None = None, task_id: str | None = None, route: str = "demo") -> TaskProjector:
    """A blocking SendMessage: the task once it stopped (terminal or waiting)."""
    msg = s.Message(message_id=f"m-{next(_ids)}", role=s.ROLE_USER, parts=[s.Part(text=text)], context_id=ctx, task_id=task_id)
    live = await tasks.send(route, s.SendMessageRequest(message=msg))
    await live.wait_stopped()
    return live.projector


async def list_all(tasks: TaskService, route: str = "demo", **filters: Any) -> tuple[list[str], list[int]]:
    """Every page of a listing, following its tokens: the ids in order, and each page's totalSize."""
    ids: list[str] = []
    totals: list[int] = []
    token = None
    while True:
        page = await tasks.list(route, s.ListTasksRequest(page_token=token, **filters))
        ids += [t.id for t in page.tasks]
        totals.append(page.total_size)
        assert page.page_size == (filters.get("page_size") or 50)
        if not page.next_page_token:
            return ids, totals
        assert len(page.tasks) == page.page_size
        token = page.next_page_token


class CountingStore(MemoryStore):
    """Records what each read asks of the store."""

    def __init__(self) -> None:
        super().__init__()
        self.event_reads: list[tuple[str, int, int | None]] = []
        self.turn_lists = 0
        self.session_lists = 0

    async def read_batches(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None, limit: int | None = None
    ) -> list[StoredBatch]:
        self.event_reads.append((session_id, after_seq, through_seq))
        return await super().read_batches(session_id, after_seq=after_seq, through_seq=through_seq, limit=limit)

    async def list_turns(self, session_id: str, **kw: Any) -> list[TurnRecord]:
        self.turn_lists += 1
        return await super().list_turns(session_id, **kw)

    async def list_sessions(self, **kw: Any) -> tuple[list[SessionRecord], int]:
        self.session_lists += 1
        return await super().list_sessions(**kw)


async def test_list_tasks_pages_through_the_rows_by_status_time_with_the_filters() -> None:
    store = CountingStore()
    with trio.fail_after(30):
        async with service(store) as tasks:
            a = [await send(tasks, "a0")]
            a += [await send(tasks, f"a{i}", ctx=a[0].context_id) for i in range(1, 7)]
            b = [await send(tasks, "b0")]
            b.append(await send(tasks, "b1", ctx=b[0].context_id))
            b.append(await send(tasks, "ask: b2", ctx=b[0].context_id))  # waits on its question: its turn runs on
            b.append(await send(tasks, "b3", ctx=b[0].context_id))  # ... so this one runs in a side session
            other = await send(tasks, "elsewhere?", route="asking")
            assert b[2].state == _S.INPUT_REQUIRED and other.state == _S.INPUT_REQUIRED
            newest_first = [p.task_id for p in [*reversed(b), *reversed(a)]]
            everything = [*a, *b]
            assert newest_first == [p.task_id for p in sorted(everything, key=lambda p: (-p.timestamp, p.task_id))]

            # The route's tasks, in pages of 3: newest status first, the same total on every page.
            ids, totals = await list_all(tasks, page_size=3)
            assert ids == newest_first and totals == [11] * 4
            # One context (its side session's task too), and the other one.
            ids, totals = await list_all(tasks, page_size=4, context_id=a[0].context_id)
            assert ids == newest_first[4:] and totals == [7, 7]
            ids, totals = await list_all(tasks, context_id=b[0].context_id)
            assert ids == newest_first[:4] and totals == [4]
            # Filters in the store: a running task's state as it is now; status times after one.
            ids, totals = await list_all(tasks, status=_S.INPUT_REQUIRED)
            assert ids == [b[2].task_id] and totals == [1]
            ids, totals = await list_all(tasks, page_size=5, status=_S.COMPLETED)
            assert ids == [i for i in newest_first if i != b[2].task_id] and totals == [10, 10]
            between = dt.datetime.fromtimestamp((a[4].timestamp + a[5].timestamp) / 2, dt.timezone.utc).isoformat()
            ids, totals = await list_all(tasks, page_size=2, status_timestamp_after=between)
            assert ids == newest_first[:6] and totals == [6] * 3
            ids, _ = await list_all(tasks, context_id="no-such-context")
            assert ids == []
            ids, totals = await list_all(tasks, route="asking")  # never another route's
            assert ids == [other.task_id] and totals == [1]

            # The snapshots: artifacts only when asked for; the history as long as asked.
            page = await tasks.list("demo", s.ListTasksRequest(page_size=2, history_length=0))
            assert all(t.artifacts is None and t.history is None for t in page.tasks)
            page = await tasks.list("demo", s.ListTasksRequest(context_id=a[0].context_id, page_size=1, include_artifacts=True))
            assert page.tasks[0].artifacts and page.tasks[0].artifacts[0].parts[0].text == "You said: a6"

            # A page token is ours or refused; a canceled task moves to the front.
            for token in ("nope", base64.urlsafe_b64encode(b'{"a": 1}').decode(), "@@@", base64.urlsafe_b64encode(b"[1]").decode()):
                with pytest.raises(InvalidParams, match="pageToken"):
                    await tasks.list("demo", s.ListTasksRequest(page_token=token))
            await tasks.cancel("demo", b[2].task_id)
            ids, _ = await list_all(tasks, status=_S.CANCELED)
            assert ids == [b[2].task_id]
            ids, _ = await list_all(tasks)
            assert ids == [b[2].task_id, *[i for i in newest_first if i != b[2].task_id]]
            # By the store's task rows: no session listed, no session's turns read.
            assert store.session_lists == store.turn_lists == 0


class SizedStore(MemoryStore):
    """Records the encoded size of everything each `save` writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[int] = []

    async def save(
        self, session: SessionRecord, *, turns: Sequence[TurnRecord] = (), batch: StoredBatch | None = None,
        tasks: Sequence[TaskRecord] = (), states: Sequence[str] = (),
    ) -> None:  # fmt: skip
        record = msgspec.structs.replace(session, states={k: v for k, v in session.states.items() if k in states})
        size = len(_enc.encode(record)) + sum(len(_enc.encode(r)) for r in (*turns, *tasks)) + (len(batch.blob) if batch else 0)
        self.writes.append(size)
        await super().save(session, turns=turns, batch=batch, tasks=tasks, states=states)


async def test_no_write_grows_with_the_tasks_a_context_had() -> None:
    """Task 300 of a context costs the store what task 10 did: its session's row, its turn,
    its task's row and its events; never the context's earlier tasks."""
    store = SizedStore()
    largest: list[int] = []
    with trio.fail_after(60):
        async with service(store) as tasks:
            ctx = None
            for i in range(300):
                before = len(store.writes)
                p = await send(tasks, f"task {i:04d}", ctx=ctx)
                assert p.state == _S.COMPLETED
                ctx = p.context_id
                largest.append(max(store.writes[before:]))
    # Only numbers change: sequence numbers gain a digit (each event has one), times vary
    # in length; some 30 bytes of ~1.6 KB here, where one blob of the context's tasks grew
    # by 45 KB over these 300 tasks.
    assert max(largest[290:]) <= max(largest[5:15]) + 64, (largest[5:15], largest[290:])


async def test_after_a_restart_a_task_is_read_from_its_row_and_its_own_events() -> None:
    store = CountingStore()
    with trio.fail_after(30):
        async with service(store) as tasks:
            first = await send(tasks, "task 0")
            context = [first, *[await send(tasks, f"task {i}", ctx=first.context_id) for i in range(1, 40)]]
            target = context[20]
            before = target.snapshot()
            hook = s.TaskPushNotificationConfig(task_id=target.task_id, url="http://127.0.0.1:9/hook", id="h1", token="tok")
            await tasks.push.create("demo", hook, dialect="1.0")
            waiting = await send(tasks, "which?", route="asking")
            assert waiting.state == _S.INPUT_REQUIRED

        async with service(store) as tasks:
            store.event_reads.clear()
            got = (await tasks.task("demo", target.task_id)).snapshot()
            turn = await store.get_turn(target.task_id)
            assert turn is not None and turn.last_seq is not None
            # Its own events only: from its turn's start through its end; no turn listed.
            assert store.event_reads == [(turn.session_id, turn.first_seq - 1, turn.last_seq)]
            assert store.turn_lists == 0
            assert got.status.state == _S.COMPLETED and got.artifacts == before.artifacts and got.history == before.history
            with pytest.raises(NotFound):
                await tasks.task("asking", target.task_id)  # another route's task is unknown
            # Its push configs come from its row.
            listed = await tasks.push.list("demo", s.ListTaskPushNotificationConfigsRequest(task_id=target.task_id))
            assert [c.id for c in listed.configs] == ["h1"] and listed.configs[0].token is None

            # The interrupted task goes on after the restart, in a new turn of the same task.
            done = await send(tasks, "the red one", task_id=waiting.task_id, route="asking")
            assert done.task_id == waiting.task_id and done.state == _S.COMPLETED
            continuation = done.turns[-1]
            assert continuation != waiting.task_id
            with pytest.raises(NotFound):  # a continuation turn is no task of its own
                await tasks.task("asking", continuation)
            row = await store.get_task(waiting.task_id)
            assert row is not None and row.turn_id == continuation and row.state == _S.COMPLETED
            assert row.data["turns"] == [continuation]
            ids, totals = await list_all(tasks, route="asking")
            assert ids == [waiting.task_id] and totals == [1]
            history = [m.parts[0].text for m in done.snapshot().history or ()]
            assert history == ["which?", "The agent needs more input.", "the red one"]

        async with service(store) as tasks:  # and once more, read back whole from the store
            again = (await tasks.task("asking", waiting.task_id)).snapshot()
            assert again.status.state == _S.COMPLETED
            assert [m.parts[0].text for m in again.history or ()] == ["which?", "The agent needs more input.", "the red one"]
            assert [p.text for a in again.artifacts or () for p in a.parts] == ["which one?", "done"]


def test_a_task_row_that_does_not_decode_reads_as_empty_and_is_written_back_as_stored() -> None:
    """One bad row (another version's, edited by hand) must not lose what it holds."""
    task, writable = decode_task({"mids": {"t": "m"}, "push": [{"id": "p", "url": "https://h/x"}]})
    assert writable and task.push[0].dialect == "1.0"  # written before the dialect was kept
    bad = {"turns": "not a list", "push": [{"id": "p", "url": "https://h/x", "token": "tok"}]}
    task, writable = decode_task(bad)
    assert task == A2ATask() and not writable
    record = TaskRecord(task_id="t", session_id="s", route="demo", context_id="s", created_at=1.0, turn_id="t",
                        state=_S.WORKING, status_ts=1.0, data=bad)  # fmt: skip
    projector = TaskProjector("t", "s")
    projector.feed_canceled(2.0)
    row = Kept(record, task, projector, writable=False).row()
    assert row.data == bad and (row.state, row.status_ts) == (_S.CANCELED, 2.0)


def _ruled(*, ops: bool) -> Any:
    rules = {"watch": [{"claim": "groups", "contains": "ops"}], "use": [{"claim": "groups", "contains": "ops"}]} if ops else {}
    return parse_config({
        "default_route": "asking", "a2a": {"push_allowed_hosts": ["127.0.0.1"]},
        "routes": {"asking": {"back": {"kind": "demo"}, "access": rules}},
    })  # fmt: skip


async def test_a_webhook_is_not_notified_once_the_rules_refuse_who_set_it() -> None:
    """A push config keeps who set it; after a reload whose rules refuse that caller the
    task, its webhook hears no more (the task goes on)."""
    from bridge.core.identity import Identity
    from bridge.fronts import owners

    alice = Identity(subject="alice", via="jwt", issuer="i", claims={})
    bob = Identity(subject="bob", via="jwt", issuer="i", claims={"groups": ["ops"]}, expires_at=2e9)
    with trio.fail_after(30):
        async with service(MemoryStore(), _ruled(ops=True)) as tasks:
            posted: list[bytes] = []

            async def post(hook: Any, body: bytes) -> str | None:
                posted.append(body)
                return None

            tasks.push._post = post  # type: ignore[method-assign]

            async def say(text: str, task_id: str | None = None) -> TaskProjector:
                msg = s.Message(message_id=f"m-{next(_ids)}", role=s.ROLE_USER, parts=[s.Part(text=text)], task_id=task_id)
                live = await tasks.send("asking", s.SendMessageRequest(message=msg), owner=owners.owned_by(alice), identity=alice)
                await live.wait_stopped()
                return live.projector

            task = await say("which?")
            hook = s.TaskPushNotificationConfig(task_id=task.task_id, url="http://127.0.0.1:9/hook", id="bobs")
            await tasks.push.create("asking", hook, dialect="1.0", creator=bob)
            kept = (await tasks.kept("asking", task.task_id)).task.push[0]
            assert kept.creator is not None and kept.creator.subject == "bob" and kept.creator.expires_at is None
            assert (await say("and now?", task.task_id)).state == _S.INPUT_REQUIRED
            await tasks.push.finish()
            heard = len(posted)
            assert heard >= 1  # bob may follow alice's task: his webhook hears it

            tasks.manager.reconfigure(_ruled(ops=False))  # SIGHUP: ops may no longer
            assert (await say("done", task.task_id)).state == _S.COMPLETED
            await tasks.push.finish()
            assert len(posted) == heard  # the task went on; bob's webhook heard nothing of it
