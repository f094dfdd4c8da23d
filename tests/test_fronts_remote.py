"""Every front on a session another instance runs (issue 17), in one trio process.

Two `SessionManager`s share one store through a `MemoryHub` (bridge/cluster/memory.py):
instance A holds a session's lease and runs its turns; each front on instance B gets a
`RemoteSession` for it and must reach the turn on A exactly as it reaches a local one:
A2A SendMessage in its context, the answer to a question, SubscribeToTask, CancelTask
and GetTask; /ws subscribe, chat:send, the answer to an AskUserQuestion, chat:stop and
the REST history; ACP session/load then session/prompt. The store flushes rarely
(`flush_interval_s` 60), so what B reads of a running turn is current only when the
owner was asked to store it first. Every test has a `fail_after` ceiling.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import trio
import trio.testing

from bridge.backs import make_back
from bridge.cluster.memory import MemoryHub
from bridge.codecs.a2a_dialect import Binding, Dialect
from bridge.codecs.a2a_server import EventEncoder
from bridge.config import parse_config
from bridge.fronts.a2a.config import A2AFrontConfig
from bridge.fronts.a2a.front import A2AFront
from bridge.fronts.a2a.tasks import TaskService
from bridge.fronts.chat.access import Access
from bridge.fronts.chat.config import WsFrontConfig
from bridge.fronts.chat.rest import RestApi
from bridge.fronts.chat.streams import ChatStreams
from tests.test_session import Recorder
from bridge.fronts.chat.ws import WsFront
from bridge.fronts.chat.ws_connection import WsConnection
from bridge.schema import a2a as s
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore

CONFIG = parse_config({
    "default_route": "demo",
    "routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0.0, "slow_duration_s": 30.0}}},
    "store": {"flush_interval_s": 60},
})  # fmt: skip
A2A = CONFIG.section(A2AFrontConfig)
WS = CONFIG.section(WsFrontConfig)
CEILING_S = 20
_S = s.TaskState


@asynccontextmanager
async def two_instances() -> AsyncIterator[tuple[SessionManager, SessionManager]]:
    """Instances "a" and "b" of one cluster on one store, each serving what the other forwards."""
    hub = MemoryHub()
    store = hub.store(MemoryStore())
    await store.open()
    managers = []
    async with trio.open_nursery() as nursery:
        for name in ("a", "b"):
            cluster = hub.instance(name)
            manager = SessionManager(CONFIG, store, make_back, cluster=cluster)
            await nursery.start(manager.run)
            await nursery.start(cluster.run, manager.serve_command)
            managers.append(manager)
        yield managers[0], managers[1]
        nursery.cancel_scope.cancel()


# -- A2A ----------------------------------------------------------------------------------------
_n = 0


def message(text: str, *, ctx: str | None = None, task_id: str | None = None, now: bool = False) -> s.SendMessageRequest:
    global _n
    _n += 1
    msg = s.Message(message_id=f"m-{_n}", role=s.ROLE_USER, parts=[s.Part(text=text)], context_id=ctx, task_id=task_id)
    return s.SendMessageRequest(message=msg, configuration=s.SendMessageConfiguration(return_immediately=now))


async def send(tasks: TaskService, text: str, **kw: Any) -> s.Task:
    """A blocking SendMessage: the task once it stopped."""
    live = await tasks.send("demo", message(text, **kw))
    await live.wait_stopped()
    return live.projector.snapshot()


def reply_text(task: s.Task) -> str:
    return "".join(p.text or "" for a in task.artifacts or () for p in a.parts)


class SseClient:
    """An SSE response's ASGI side: the JSON-RPC results it carried, in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.done = trio.Event()
        self._buf = b""

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] != "http.response.body":
            return
        self._buf += message["body"]
        while b"\n\n" in self._buf:
            frame, _, self._buf = self._buf.partition(b"\n\n")
            for line in frame.split(b"\n"):
                if line.startswith(b"data:"):
                    self.events.append(json.loads(line[5:])["result"])
        if not message.get("more_body"):
            self.done.set()

    async def receive(self) -> dict[str, Any]:
        await trio.sleep_forever()
        raise AssertionError


def states(events: list[dict[str, Any]]) -> list[str]:
    return [e["task"]["status"]["state"] if "task" in e else e["statusUpdate"]["status"]["state"] for e in events
            if "task" in e or "statusUpdate" in e]  # fmt: skip


async def test_a2a_through_b_reaches_the_tasks_that_run_on_a() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances() as (a, b), trio.open_nursery() as nursery:
            front_a, front_b = A2AFront(CONFIG, a), A2AFront(CONFIG, b)
            first = await send(front_a.tasks, "hello")
            ctx = first.context_id
            assert a.live(ctx) is not None  # A holds the context's lease
            a.live(ctx).subscribe(Recorder())  # a client on A watches it: it stays on A (else it would move to B)

            # (a) SendMessage through B in that context: the turn runs on A, B answers.
            again = await send(front_b.tasks, "again", ctx=ctx)
            assert again.status.state == _S.COMPLETED and "again" in reply_text(again), again
            assert again.context_id == ctx and b.live(ctx) is None

            # A task through A that waits for input inside its running turn.
            asking = await front_a.tasks.send("demo", message("ask: notes", ctx=ctx, now=True))
            await asking.wait_stopped()
            tid = asking.task_id
            assert asking.projector.state == _S.INPUT_REQUIRED and not asking.ended

            # (e) GetTask through B: what A holds is stored first, the turn read as running.
            got = await front_b.tasks.task("demo", tid)
            assert got.state == _S.INPUT_REQUIRED and got.open_question is not None, got.state
            assert got.open_question.id == asking.projector.open_question.id

            # (c) SubscribeToTask through B, open until the task ends.
            sse = SseClient()
            req = s.SubscribeToTaskRequest(id=tid)
            encoder = EventEncoder(Dialect.V1_0, Binding.JSONRPC, b"7")
            stream, _ = await front_b._open_stream("demo", CONFIG.routes["demo"], {}, "subscribe", req, encoder)
            nursery.start_soon(lambda: stream.run(sse.send, sse.receive, heartbeat_s=60))

            # (b) The answer through B reaches the question open on A.
            done = await send(front_b.tasks, "allow", ctx=ctx, task_id=tid)
            assert done.status.state == _S.COMPLETED and "Edited notes.txt" in reply_text(done), done
            await sse.done.wait()
            seen = states(sse.events)
            assert seen[0] == _S.INPUT_REQUIRED and seen[-1] == _S.COMPLETED and _S.WORKING in seen, seen
            streamed = "".join(p.get("text", "") for e in sse.events if "artifactUpdate" in e for p in e["artifactUpdate"]["artifact"]["parts"])
            assert streamed == reply_text(done), streamed  # every chunk of the reply, once, in order
            await asking.wait_ended()
            mine = asking.projector.snapshot()
            assert mine.status.state == _S.COMPLETED and reply_text(mine) == reply_text(done)

            # (d) CancelTask through B of a turn running on A.
            slow = await front_a.tasks.send("demo", message("slow: x", ctx=ctx, now=True))
            await slow.session.flush()  # its row is stored with A's next flush: from then on B finds it
            canceled = await front_b.tasks.cancel("demo", slow.task_id)
            assert canceled.state == _S.CANCELED
            await slow.wait_ended()
            assert slow.projector.state == _S.CANCELED

            # The rows B staged reached the store through A.
            await trio.testing.wait_all_tasks_blocked()
            row = await a.store.get_task(again.id)
            assert row is not None and row.state == _S.COMPLETED, row
            nursery.cancel_scope.cancel()


# -- chat ---------------------------------------------------------------------------------------
class WsClient:
    """A `/ws` client whose socket is the front's own `WsConnection`, fed ASGI messages."""

    def __init__(self) -> None:
        self._to_server, self._inbox = trio.open_memory_channel[dict[str, Any]](16)
        self._to_client, self._frames = trio.open_memory_channel[dict[str, Any]](4096)

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
        return got


@asynccontextmanager
async def ws_client(manager: SessionManager, nursery: trio.Nursery) -> AsyncIterator[tuple[WsClient, ChatStreams]]:
    streams = ChatStreams(WS, manager)
    front = WsFront(CONFIG, manager, streams, Access(WS, CONFIG.server))
    client = WsClient()
    nursery.start_soon(WsConnection(front, client.receive, client.send, authed=True).run)
    yield client, streams
    await client._to_server.send({"type": "websocket.disconnect", "code": 1000})


def run_frames(frames: list[dict[str, Any]]) -> list[tuple[str, int | None]]:
    return [(f["event"], f["data"].get("sequence")) for f in frames if f["event"] not in ("session:subscribed", "system:commands")]


async def test_chat_through_b_sees_and_drives_the_run_on_a() -> None:
    with trio.fail_after(CEILING_S):
        async with two_instances() as (a, b), trio.open_nursery() as nursery:
            session = await a.create("demo")
            sid = session.id
            async with ws_client(a, nursery) as (on_a, streams_a), ws_client(b, nursery) as (on_b, streams_b):
                for client in (on_a, on_b):
                    await client.call("session:subscribe", session_id=sid)
                    await client.until(lambda f: f["event"] == "session:subscribed")

                # chat:send through B runs on A; both clients see the same frames.
                await on_b.call("chat:send", session_id=sid, message="hi")
                seen_b = await on_b.until(lambda f: f["event"] in ("chat:end", "system:error"))
                seen_a = await on_a.until(lambda f: f["event"] == "chat:end")
                assert seen_b[-1]["event"] == "chat:end", seen_b[-1]
                assert run_frames(seen_b) == run_frames(seen_a)
                assert b.live(sid) is None

                # An AskUserQuestion of the run on A, answered through B.
                await on_a.call("chat:send", session_id=sid, message="ask: notes")
                ask = await on_b.until(lambda f: f["event"] == "turn:patch" and "awaiting_answer" in json.dumps(f))
                tool = next(p for p in _patches(ask[-1]) if p.get("status") == "awaiting_answer")
                await on_b.call("chat:send", session_id=sid, askuser_answer={"tool_call_id": tool["id"], "selections": {"0": [0]}})
                end = (await on_b.until(lambda f: f["event"] in ("chat:end", "system:error")))[-1]
                assert end["event"] == "chat:end" and end["data"].get("status") == "completed", end
                await on_a.until(lambda f: f["event"] == "chat:end")

                # chat:stop through B ends the slow run on A.
                await on_a.call("chat:send", session_id=sid, message="slow: x")
                await on_b.until(lambda f: f["event"] == "chat:start")
                api = RestApi(CONFIG, b, streams_b, Access(WS, CONFIG.server))
                assert (await api.get({}, None, {"session_id": sid}))[1]["status"] == "running"  # REST status through B
                await on_b.call("chat:stop", session_id=sid)
                end = (await on_b.until(lambda f: f["event"] in ("chat:end", "system:error")))[-1]
                assert end["event"] == "chat:end" and end["data"].get("status") == "interrupted", end

                # REST history through B: the three runs, the last one stored on A first.
                turns, sequence, _ = await streams_b.transcript(sid, limit=50)
                assert sequence == end["data"]["sequence"]
                assert msgspec.json.encode(turns) == msgspec.json.encode((await streams_a.transcript(sid, limit=50))[0])
            nursery.cancel_scope.cancel()


def _patches(frame: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool call projections a `turn:patch` frame carries, wherever it nests them."""
    found: list[dict[str, Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "tool_name" in value:
                found.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(frame["data"])
    return found


# -- ACP ----------------------------------------------------------------------------------------
async def test_acp_through_b_loads_and_prompts_a_session_a_runs() -> None:
    from bridge.fronts.acp.front import AcpConnection

    with trio.fail_after(CEILING_S):
        async with two_instances() as (a, b), trio.open_nursery() as nursery:
            session = await a.create("demo", cwd="/w")
            session.subscribe(Recorder())  # a client on A watches it: it stays on A
            first = await session.begin_turn([_text("hello")])
            await first.wait()
            to_send, to_recv = trio.testing.memory_stream_one_way_pair()
            from_send, from_recv = trio.testing.memory_stream_one_way_pair()
            nursery.start_soon(AcpConnection(to_recv, from_send, manager=b, config=CONFIG, route="demo").run)
            buf = b""

            async def request(rid: int, method: str, params: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
                nonlocal buf
                await to_send.send_all(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n")
                before = []
                while True:
                    while b"\n" not in buf:
                        buf += await from_recv.receive_some()
                    line, _, buf = buf.partition(b"\n")
                    msg = json.loads(line)
                    if msg.get("id") == rid and "method" not in msg:
                        return msg, before
                    if msg.get("method") == "session/request_permission":  # the editor allows
                        answer = {"outcome": {"outcome": "selected", "optionId": "allow"}}
                        await to_send.send_all(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": answer}).encode() + b"\n")
                    before.append(msg)

            assert "result" in (await request(1, "initialize", {"protocolVersion": 1}))[0]
            loaded, replayed = await request(2, "session/load", {"sessionId": session.id, "cwd": "/w", "mcpServers": []})
            assert "result" in loaded, loaded
            assert any(m["params"]["update"].get("content", {}).get("text") == "hello" for m in replayed if m.get("method") == "session/update")
            ended, seen = await request(3, "session/prompt", {"sessionId": session.id, "prompt": [{"type": "text", "text": "ask: notes"}]})
            assert ended["result"] == {"stopReason": "end_turn"}, ended
            assert any(m.get("method") == "session/request_permission" for m in seen)
            said = "".join(m["params"]["update"].get("content", {}).get("text", "") for m in seen
                           if m.get("method") == "session/update" and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")  # fmt: skip
            assert "Edited notes.txt" in said, said
            assert b.live(session.id) is None and a.live(session.id) is session
            await to_send.aclose()
            nursery.cancel_scope.cancel()


def _text(text: str) -> Any:
    from bridge.core.content import TextContent

    return TextContent(text=text)
