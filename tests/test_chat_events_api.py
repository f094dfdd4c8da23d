"""The canonical API of the chat front: a session's events over SSE, its commands, the change feed.

End to end against the real `agent-bridge serve` (tests/daemon_support.py), with httpx as
the client and the SSE parsed by bridge/codecs/sse.py: replay then live with no gap or
repeat across a disconnect (Last-Event-ID) and across a drop for slowness, `tail_turns`,
`through`, 404/401/400, a session deleted (`gone`), a reader that never reads (dropped,
the daemon serves the others), prompt/answer/cancel on the demo agent's questions, and the
change feed. In process: the feed's bound (`reset`) and coalescing.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from types import SimpleNamespace
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from daemon_support import base_config, demo_route, start_daemon

from bridge.codecs.sse import SSEDecoder, SSEEvent
from bridge.core.identity import ANONYMOUS
from bridge.fronts.chat.feed import ChangeFeed, _Pending
from test_session import prompt, running

TOKEN = "ev3nts-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


class Sse:
    """One SSE response, parsed as it arrives."""

    def __init__(self, resp: httpx.Response) -> None:
        self.resp = resp
        self.decoder = SSEDecoder()
        self.ready: deque[SSEEvent] = deque()
        self.raw = resp.aiter_raw()
        self.text = b""  # the first and the last bytes received (comments too)

    async def next(self) -> SSEEvent | None:
        """The next event; None once the stream ended."""
        while not self.ready:
            try:
                chunk = await self.raw.__anext__()
            except StopAsyncIteration:
                return None
            self.text = self.text + chunk if len(self.text) < 8192 else self.text[:64] + self.text[-4096:] + chunk
            self.ready.extend(self.decoder.feed(chunk))
        return self.ready.popleft()

    async def until(self, pred: Callable[[SSEEvent], bool]) -> list[SSEEvent]:
        got = []
        while (ev := await self.next()) is not None:
            got.append(ev)
            if pred(ev):
                return got
        raise AssertionError(f"the stream ended first: {[e.event for e in got][-5:]}")


class Api:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.AsyncClient(base_url=url, timeout=20, headers=AUTH)

    async def session(self) -> str:
        r = await self.http.post("/api/sessions", json={"route": "demo"})
        assert r.status_code == 200, r.text
        return r.json()["session_id"]

    async def post(self, sid: str, verb: str, body: Any = None) -> httpx.Response:
        return await self.http.post(f"/api/sessions/{sid}/{verb}", json=body if body is not None else {})

    @contextlib.asynccontextmanager
    async def sse(self, path: str, **headers: str) -> AsyncIterator[Sse]:
        async with self.http.stream("GET", path, headers=headers) as resp:
            assert resp.status_code == 200, (await resp.aread()).decode()
            assert resp.headers["content-type"].startswith("text/event-stream")
            yield Sse(resp)

    async def stored(self, sid: str) -> list[dict[str, Any]]:
        """The whole stored log, as a finite stream (`through`) gives it."""
        async with self.sse(f"/api/sessions/{sid}/events?through={2**40}") as s:
            events = []
            while (ev := await s.next()) is not None:
                events.append(ev)
        assert events[-1].event == "caught_up"
        return [json.loads(e.data) for e in events[:-1]]


def data(ev: SSEEvent) -> dict[str, Any]:
    return json.loads(ev.data)


def config(tmp_path: Path) -> dict[str, Any]:
    return base_config(
        tmp_path,
        {"demo": demo_route(slow_duration_s=30.0)},
        ws={"token_env": "EV_TOKEN", "events_queue_max": 1000, "slow_client_timeout_s": 1},
    )


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return {**clean_env, "EV_TOKEN": TOKEN}


async def _follow(
    api: Api, sid: str, after: int, seqs: list[int], *, stop: Callable[[dict[str, Any]], bool], subscribed: trio.Event
) -> int:
    """Read the session's events, reconnecting with Last-Event-ID whenever the stream
    ends, until `stop`; returns how many times the daemon ended the stream."""
    drops = 0
    last = str(after)
    while True:
        async with api.sse(f"/api/sessions/{sid}/events", **{"last-event-id": last}) as s:
            while (ev := await s.next()) is not None:
                if ev.event == "caught_up":
                    subscribed.set()
                    continue
                seqs.append(int(ev.id))
                last = ev.id
                if stop(data(ev)):
                    return drops
            assert b": dropped" in s.text, s.text[-300:]
            drops += 1


_FLOOD = 60_000  # a fast turn's chunks: see where it is sent


async def test_events_replay_then_live_without_gap_or_repeat(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d:
            api = Api(d.url)
            sid = await api.session()
            # Refusals come as JSON before any stream.
            async with httpx.AsyncClient(base_url=d.url) as anon:
                r = await anon.get(f"/api/sessions/{sid}/events")
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
            r = await api.http.get("/api/sessions/no-such/events")
            assert r.status_code == 404 and "no-such" in r.json()["detail"]
            r = await api.http.get(f"/api/sessions/{sid}/events?since=3")
            assert r.status_code == 400 and "since" in r.json()["detail"]

            # A slow: turn, its stream left mid-turn and resumed with Last-Event-ID.
            async with api.sse(f"/api/sessions/{sid}/events") as s:
                ev = await s.next()
                assert ev.event == "caught_up" and data(ev) == {"last_seq": 0, "first_seq": 1, "earlier": False}
                r = await api.post(sid, "prompt", {"text": "slow: go"})
                assert r.status_code == 202, r.text
                turn_id = r.json()["turn_id"]
                got = await s.until(lambda e: e.event == "message_chunk" and "tick 3." in e.data.decode())
            assert s.text.startswith(b"retry: 1000\n\n")
            assert data(got[0])["event"] == "turn_started" and data(got[0])["turn_id"] == turn_id
            seqs = [int(e.id) for e in got]
            async with api.sse(f"/api/sessions/{sid}/events", **{"last-event-id": got[-1].id}) as s:
                more = await s.until(lambda e: e.event == "caught_up")
                live = await s.until(lambda e: e.event == "message_chunk")
                assert (await api.post(sid, "prompt", {"text": "again"})).status_code == 409
                r = await api.post(sid, "cancel")
                assert r.status_code == 200 and r.json() == {"cancelled": True}
                live += await s.until(lambda e: e.event == "turn_ended")
            assert data(live[-1])["stop_reason"] == "cancelled"
            caught = data(more[-1])
            assert caught["earlier"] is True and caught["first_seq"] == (int(more[0].id) if len(more) > 1 else seqs[-1] + 1)
            seqs += [int(e.id) for e in more[:-1] + live]
            assert (await api.post(sid, "cancel")).json() == {"cancelled": False}
            stored = await api.stored(sid)
            assert seqs == [e["seq"] for e in stored] == list(range(1, len(stored) + 1))

            # A fast turn: the reader falls behind, its stream ends, it resumes: still each
            # event once. Meanwhile a reader that never reads is dropped, not the daemon.
            slow = socket.socket()
            slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            host, port = d.url.removeprefix("http://").rsplit(":", 1)
            await trio.to_thread.run_sync(slow.connect, (host, int(port)))
            request = f"GET /api/sessions/{sid}/events?after={len(stored)} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
            slow.sendall(request.encode())

            def until_caught_up() -> bytes:
                # The reader is a live subscriber only once its replay is done: the flood
                # must come after, or it is replayed at the reader's pace and never dropped.
                slow.settimeout(30)
                got = b""
                while b"event: caught_up" not in got:
                    chunk = slow.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                return got

            head = await trio.to_thread.run_sync(until_caught_up)
            assert b"event: caught_up" in head, head
            fast: list[int] = []
            drops: list[int] = []
            async with trio.open_nursery() as nursery:
                subscribed = trio.Event()

                async def read_all() -> None:
                    stop = lambda e: e["event"] == "turn_ended"  # noqa: E731
                    drops.append(await _follow(api, sid, len(stored), fast, stop=stop, subscribed=subscribed))

                nursery.start_soon(read_all)
                await subscribed.wait()
                # More than the kernel's buffers can hold between the daemon and a reader that
                # never reads (net.ipv4.tcp_wmem's 4 MiB ceiling and its 4 KiB receive buffer):
                # 20000 chunks (~4 MiB of SSE) sometimes fit, and the reader was never dropped.
                assert (await api.post(sid, "prompt", {"text": f"bench:{_FLOOD}"})).status_code == 202
            stored2 = await api.stored(sid)
            assert fast == [e["seq"] for e in stored2[len(stored):]]
            assert stored2[-1]["event"] == "turn_ended"
            assert sum(e["event"] == "message_chunk" for e in stored2[len(stored):]) == _FLOOD

            def drain() -> bytes:
                # A thread is not cancelled by fail_after: bounded here, in all (a stream
                # that stayed open would otherwise be read for as long as it sends keepalives).
                slow.settimeout(5)
                got, deadline = b"", time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        chunk = slow.recv(65536)
                    except TimeoutError:
                        break
                    if not chunk:
                        break
                    got += chunk
                return got

            raw = head + await trio.to_thread.run_sync(drain)
            slow.close()
            assert raw.startswith(b"HTTP/1.1 200") and b": dropped" in raw
            assert raw.count(b"\nid: ") < _FLOOD + 2

            # tail_turns: the first view of a long session starts at its newest turns.
            r = await api.post(sid, "prompt", {"text": "hello there"})
            last_turn = r.json()["turn_id"]
            async with api.sse(f"/api/sessions/{sid}/events") as s:
                await s.until(lambda e: e.event == "turn_ended" and last_turn in e.data.decode())
            async with api.sse(f"/api/sessions/{sid}/events?tail_turns=1") as s:
                tail = await s.until(lambda e: e.event == "caught_up")
            assert data(tail[0])["event"] == "turn_started" and data(tail[0])["turn_id"] == last_turn
            assert data(tail[-1]) == {"last_seq": int(tail[-2].id), "first_seq": int(tail[0].id), "earlier": True}
            async with api.sse(f"/api/sessions/{sid}/events?tail_turns=9") as s:
                whole = await s.until(lambda e: e.event == "caught_up")
            assert int(whole[0].id) == 1 and data(whole[-1])["earlier"] is False
            # through: a finite page of older events ("load earlier").
            start = int(tail[0].id)
            async with api.sse(f"/api/sessions/{sid}/events?after={start - 11}&through={start - 1}") as s:
                page = [e async for e in _events(s)]
            assert [int(e.id) for e in page[:-1]] == list(range(start - 10, start))
            assert data(page[-1]) == {"last_seq": start - 1, "first_seq": start - 10, "earlier": True}
            # tail_turns with through: the turn before the newest, whole (older turns a page at a time).
            async with api.sse(f"/api/sessions/{sid}/events?tail_turns=1&through={start - 1}") as s:
                older = [e async for e in _events(s)]
            assert data(older[0])["event"] == "turn_started" and data(older[0])["turn_id"] != last_turn
            assert data(older[-2])["event"] == "turn_ended" and int(older[-2].id) == start - 1
            assert data(older[-1]) == {"last_seq": start - 1, "first_seq": int(older[0].id), "earlier": True}


async def _events(s: Sse) -> AsyncIterator[SSEEvent]:
    while (ev := await s.next()) is not None:
        yield ev


class Feed:
    """The change feed read in the background: every event kept, waiters woken."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._changed = trio.Event()

    async def run(self, api: Api, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with api.sse("/api/changes") as s:
            task_status.started()
            async for ev in _events(s):
                self.events.append((ev.event, data(ev)))
                self._changed.set()
                self._changed = trio.Event()

    async def until(self, pred: Callable[[str, dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            for kind, body in self.events:
                if pred(kind, body):
                    return body
            await self._changed.wait()

    def status(self, sid: str, status: str) -> Callable[[str, dict[str, Any]], bool]:
        return lambda kind, body: kind == "session" and body["session_id"] == sid and body["status"] == status


async def test_commands_questions_and_the_change_feed(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, env, config(tmp_path)) as d, trio.open_nursery() as nursery:
            api = Api(d.url)
            r = await api.http.get("/api/changes?x=1")
            assert r.status_code == 400 and "'x'" in r.json()["detail"]
            feed = Feed()
            await nursery.start(feed.run, api)
            sid = await api.session()
            await feed.until(feed.status(sid, "created"))
            async with api.sse(f"/api/sessions/{sid}/events") as s:
                await s.until(lambda e: e.event == "caught_up")
                # Bad bodies and unknown questions are refused; nothing starts.
                r = await api.post(sid, "prompt", {"text": "hi", "mood": "happy"})
                assert r.status_code == 400 and "mood" in r.json()["detail"], r.text
                r = await api.post(sid, "prompt", {})
                assert r.status_code == 400 and "text or content" in r.json()["detail"]
                r = await api.post(sid, "answer", {"question_id": "nope", "selected": ["allow"]})
                assert r.status_code == 404, r.text
                # A permission question answered by option id, then a multi-select with text.
                r = await api.post(sid, "prompt", {"content": [{"type": "text", "text": "ask: choose: notes"}]})
                assert r.status_code == 202, r.text
                asked = data((await s.until(lambda e: e.event == "question_asked"))[-1])["question"]
                assert asked["kind"] == "permission" and [o["kind"] for o in asked["options"]][0] == "allow_once"
                await feed.until(feed.status(sid, "waiting_for_input"))
                r = await api.post(sid, "answer", {"question_id": asked["id"], "selected": ["allow", "reject"]})
                assert r.status_code == 400 and "one option" in r.json()["detail"]
                r = await api.post(sid, "answer", {"question_id": asked["id"], "selected": ["allow"], "extra": 1})
                assert r.status_code == 400 and "extra" in r.json()["detail"]
                r = await api.post(sid, "answer", {"question_id": asked["id"], "selected": ["allow"]})
                assert r.status_code == 200 and r.json() == {"answered": True}
                got = await s.until(lambda e: e.event == "question_asked")
                assert any(e.event == "tool_call_updated" and data(e).get("content", [{}])[0].get("type") == "diff" for e in got)
                choice = data(got[-1])["question"]
                assert choice["multi_select"] is True
                r = await api.post(sid, "answer", {"question_id": choice["id"], "selected": ["red", "blue"], "text": "teal"})
                assert r.status_code == 200, r.text
                got = await s.until(lambda e: e.event == "turn_ended")
                said = "".join(data(e)["content"]["text"] for e in got if e.event == "message_chunk")
                assert "You chose: Red, Blue, teal." in said and data(got[-1])["stop_reason"] == "end_turn"
                await feed.until(feed.status(sid, "completed"))
                # Deleted while watched: `gone`, then the end; the feed says `deleted`.
                assert (await api.http.delete(f"/api/sessions/{sid}")).status_code == 200
                rest = [e async for e in _events(s)]
                assert [e.event for e in rest] == ["gone"]
            await feed.until(lambda kind, body: kind == "deleted" and body == {"session_id": sid})
            r = await api.post(sid, "cancel")
            assert r.status_code == 404
            nursery.cancel_scope.cancel()


# -- in process ---------------------------------------------------------------------------


class Count:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def changed(self, session_id: str) -> None:
        self.calls.append(("changed", session_id))

    def deleted(self, session_id: str, record: Any = None) -> None:
        self.calls.append(("deleted", session_id))


async def test_sessions_tell_of_status_changes_only_never_per_event(autojump_clock: Any) -> None:
    async with running() as manager:
        count = Count()
        unlisten = manager.changes.listen(count)
        session = await manager.create("demo")
        turn = session.start_turn(prompt("bench:2000"))
        await turn.wait()
        assert session.last_seq > 2000
        # Created, the turn started, the turn ended: three calls for 2002 events.
        assert count.calls == [("changed", session.id)] * 3
        unlisten()
        await session.close()
        assert len(count.calls) == 3 and len(manager.changes) == 0


async def test_the_feed_coalesces_and_resets_past_its_bound(autojump_clock: Any) -> None:
    async with running() as manager:
        feed = ChangeFeed(SimpleNamespace(manager=manager))  # type: ignore[arg-type]
        frames: list[bytes] = []
        out = SimpleNamespace(closed=False, put=frames.append)
        pending = _Pending(2, lambda record: False)  # no rules: every session is listed
        manager.changes.listen(pending)
        decoder = SSEDecoder()

        def seen() -> list[tuple[str, Any]]:
            return [(e.event, json.loads(e.data)) for e in decoder.feed(b"".join(frames))]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed._run, pending, out)
            a = await manager.create("demo")
            await trio.sleep(0.01)  # the feed sent `a` and waits COALESCE_S before the next batch
            got = seen()
            assert [(k, v["session_id"], v["status"]) for k, v in got] == [("session", a.id, "created")]
            frames.clear()
            b = await manager.create("demo")
            b.start_turn(prompt("bench:10"))  # b twice, within one batch: sent once
            await trio.sleep(0.3)
            got = seen()
            assert [(k, v["session_id"]) for k, v in got] == [("session", b.id)]
            frames.clear()
            for _ in range(3):  # three sessions at once for a bound of two: `reset`
                await manager.create("demo")
            manager.changes.deleted(a.id)  # heard after the reset: the refetch covers it
            await trio.sleep(0.3)
            assert seen() == [("reset", {})]
            frames.clear()
            manager.changes.deleted(a.id)
            await trio.sleep(0.3)
            assert seen() == [("deleted", {"session_id": a.id})]
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("used_on_owner", [True, False], ids=["followed", "moved-here"])
async def test_a_session_run_by_another_instance_streams_here_and_tells_the_feed_here(used_on_owner: bool) -> None:
    """Followed: its turn runs on its owner, this instance follows the store. Moved: the
    prompt from here moves the idle session here (bridge/session/owners.py) and the
    stream goes on from its new home without ending."""
    from bridge.fronts.chat.events_api import CanonicalApi
    from bridge.session.remote import RemoteSession
    from test_session import Recorder, make_config
    from test_session_cluster import two_instances

    with trio.fail_after(20):
        async with two_instances() as (_, a, b):
            on_a = await a.create("demo", cwd="/w")
            if used_on_owner:
                on_a.subscribe(Recorder())  # a client there: the session stays on a
            heard = Count()
            b.changes.listen(heard)
            on_b = await b.get(on_a.id)
            canonical = CanonicalApi(make_config(), b, api=None)  # type: ignore[arg-type]
            decoder = SSEDecoder()
            got: list[SSEEvent] = []
            arrived = trio.Event()

            async def send(message: dict[str, Any]) -> None:
                nonlocal arrived
                got.extend(decoder.feed(message.get("body", b"")))
                arrived.set()
                arrived = trio.Event()

            async def until(pred: Callable[[SSEEvent], bool]) -> None:
                while not any(pred(e) for e in got):
                    await arrived.wait()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(canonical.serve_events, (on_b, 0, None, ANONYMOUS), send, trio.sleep_forever, [])
                await until(lambda e: e.event == "caught_up")
                turn = await on_b.begin_turn(prompt("ask: x"))
                await until(lambda e: e.event == "question_asked")
                question = json.loads(next(e for e in got if e.event == "question_asked").data)["question"]
                await on_b.send_answer(question["id"], selected=["allow"])
                await until(lambda e: e.event == "turn_ended")
                nursery.cancel_scope.cancel()
            assert (await turn.wait()).stop_reason.value == "end_turn"
            assert isinstance(on_b, RemoteSession) and (on_b.moved_to is None) == used_on_owner
            stored = await b.read_events(on_a.id)
            assert [int(e.id) for e in got if e.id and e.event != "caught_up"] == [e.seq for e in stored]
            # Told here as it followed: started, asked, answered, ended.
            assert heard.calls.count(("changed", on_a.id)) >= 4
