"""Several real `agent-bridge serve` daemons on one real PostgreSQL (issue 17): any
instance answers for any session, live events cross instances in order and without a
gap, commands reach the instance running the turn, and a killed or restarted instance
loses nothing a client cannot get back by reconnecting to another.

PostgreSQL is Debian's package in a throwaway cluster (tests/pg_support.py). Each daemon
has its own state directory: they share only the database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import trio
from trio_websocket import open_websocket_url

from tests.daemon_support import Daemon, base_config, demo_route, start_daemon
from tests.test_e2e_a2a_front import V10, call, message, rpc, state_of
from tests.test_e2e_ws import Client, ask_call, is_end, sequences, text_of

TTL_S = 2.0


def cluster_config(tmp_path: Path, pg_url: str, name: str, **routes: Any) -> dict[str, Any]:
    doc = base_config(
        tmp_path / name,
        {"demo": demo_route(chunk_delay_s=0.005, slow_duration_s=4.0), **routes},
        store={"url": pg_url, "flush_interval_s": 0.02},
        cluster={"lease_ttl_s": TTL_S, "forward_timeout_s": 10},
    )
    (tmp_path / name / "run").mkdir(parents=True, exist_ok=True)
    return doc


@contextlib.asynccontextmanager
async def instance(bridge_exe: list[str], tmp_path: Path, env: dict[str, str], pg_url: str, name: str, **routes: Any) -> AsyncIterator[Daemon]:
    (tmp_path / name).mkdir(exist_ok=True)
    async with start_daemon(bridge_exe, tmp_path / name, env, cluster_config(tmp_path, pg_url, name, **routes), name=name) as d:
        yield d


@contextlib.asynccontextmanager
async def ws(d: Daemon) -> AsyncIterator[Client]:
    async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", max_message_size=16 * 1024 * 1024) as conn:
        yield Client(conn)


async def metric(d: Daemon, name: str) -> float:
    status, body = await d.get("/metrics")
    assert status == 200
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.decode().splitlines() if line.startswith(name))


async def sse_results(h: httpx.AsyncClient, route: str, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every JSON-RPC result of an A2A stream, until it ends."""
    out: list[dict[str, Any]] = []
    lines: list[str] = []
    async with h.stream("POST", f"/a2a/{route}", json=rpc(method, params), headers=V10) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            lines.append(line)
            if line.startswith("data:"):
                frame = json.loads(line[5:])
                assert "result" in frame, frame
                out.append(frame["result"])
    assert out, lines
    return out


def final_state(results: list[dict[str, Any]]) -> str:
    for r in reversed(results):
        if "statusUpdate" in r:
            return r["statusUpdate"]["status"]["state"]
        if "task" in r:
            return r["task"]["status"]["state"]
    raise AssertionError(results)


async def test_two_daemons_serve_every_session_from_either(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], pg_url: str
) -> None:
    with trio.fail_after(120):
        async with instance(bridge_exe, tmp_path, clean_env, pg_url, "a") as a, instance(bridge_exe, tmp_path, clean_env, pg_url, "b") as b:
            async with httpx.AsyncClient(base_url=a.url, timeout=30) as ha, httpx.AsyncClient(base_url=b.url, timeout=30) as hb:
                # -- chat: a session made on a (a runs it), watched and driven through b.
                sid = (await ha.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
                async with ws(a) as on_a, ws(b) as on_b:
                    assert await on_a.subscribe(sid) == 0
                    assert await on_b.subscribe(sid) == 0
                    await on_b.send("chat:send", session_id=sid, message="all: hello")
                    perm = (await on_b.until(ask_call))[-1]["data"]
                    await on_b.send("chat:send", session_id=sid, message="",
                                    askuser_answer={"tool_call_id": perm["data"]["id"], "selections": {"0": [0]}})  # fmt: skip
                    b_frames = await on_b.until(is_end)
                    a_frames = await on_a.until(is_end)
                    assert b_frames[-1]["data"]["status"] == "completed", b_frames[-1]
                    # The same stream on both instances: every frame, in order, no gap.
                    assert sequences(on_b.frames) == sequences(on_a.frames)
                    assert sequences(on_b.frames) == list(range(1, len(sequences(on_b.frames)) + 1))
                    assert "You said: hello" in text_of(on_b.frames) == text_of(on_a.frames)
                    del a_frames
                    # A cancel through b stops the turn running on a.
                    await on_b.send("chat:send", session_id=sid, message="slow: x")
                    await on_a.until(lambda f: f["event"] == "chat:start")
                    await on_b.send("chat:stop", session_id=sid)
                    assert (await on_b.until(is_end))[-1]["data"]["status"] == "interrupted"  # chat says so for a stop
                assert await metric(a, "agent_bridge_cluster_served_total") >= 3  # prompt, answer, cancel
                assert await metric(b, "agent_bridge_cluster_forwarded_total") >= 3
                # REST history from either instance.
                hist = await hb.get(f"/api/sessions/{sid}/messages")
                assert hist.status_code == 200 and "You said: hello" in hist.text, hist.text

                # -- A2A: a task started on a, followed, read and answered through b.
                running = (await call(ha, "demo", "SendMessage", {**message("slow: y"), "configuration": {"returnImmediately": True}}))["result"]["task"]
                followed = await sse_results(hb, "demo", "SubscribeToTask", {"id": running["id"]})
                assert final_state(followed) == "TASK_STATE_COMPLETED", followed
                got = (await call(hb, "demo", "GetTask", {"id": running["id"]}))["result"]
                assert state_of(got) == "TASK_STATE_COMPLETED" and "You said: y" in json.dumps(got["artifacts"])
                listed = (await call(hb, "demo", "ListTasks", {"contextId": running["contextId"]}))["result"]
                assert [t["id"] for t in listed["tasks"]] == [running["id"]]
                waiting = (await call(ha, "demo", "SendMessage", message("ask: z")))["result"]["task"]
                assert state_of(waiting) == "TASK_STATE_INPUT_REQUIRED"
                answered = (await call(hb, "demo", "SendMessage", message("allow", taskId=waiting["id"], contextId=waiting["contextId"])))
                assert state_of(answered["result"]["task"]) == "TASK_STATE_COMPLETED", answered
                nxt = (await call(hb, "demo", "SendMessage", message("and then", contextId=waiting["contextId"])))["result"]["task"]
                assert state_of(nxt) == "TASK_STATE_COMPLETED" and nxt["contextId"] == waiting["contextId"]

                # -- ACP: b lists and loads a session a runs, and prompts it.
                async with b.acp("demo") as acp:
                    await acp.init()
                    listed_acp = await acp.result("session/list", {})
                    assert sid in [s["sessionId"] for s in listed_acp["sessions"]], listed_acp
                    await acp.result("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
                    assert "You said: hello" in "".join(acp.chunks(sid))  # the history, replayed
                    done = await acp.response(await acp.prompt(sid, "from the editor"))
                    assert done["result"]["stopReason"] == "end_turn", done
                    assert "You said: from the editor" in "".join(acp.chunks(sid))
    for d in (a, b):
        assert "Traceback" not in d.log_text(), d.log_text()[-4000:]


async def test_kill_9_of_the_owner_mid_turn_and_a_rolling_restart(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], pg_url: str
) -> None:
    """The owner is killed mid-turn: within the lease TTL the turn ends interrupted for
    the client watching on b, and the next prompt runs on b, its ACP agent restarted there
    with session/load. Then b is stopped (SIGTERM) while a third instance serves: the
    turn b was running finishes, and a client reconnecting to c finds all of it."""
    inner_state = tmp_path / "inner"
    agent = {"back": {"kind": "acp", "command": [*bridge_exe, "acp", "demo", "--state-dir", str(inner_state)]}}
    with trio.fail_after(150):
        async with instance(bridge_exe, tmp_path, clean_env, pg_url, "b", agent=agent) as b:
            async with instance(bridge_exe, tmp_path, clean_env, pg_url, "a", agent=agent) as a:
                async with httpx.AsyncClient(base_url=a.url, timeout=30) as ha:
                    sid = (await ha.post("/api/sessions", json={"route": "agent"})).json()["session_id"]
                async with ws(a) as on_a:
                    await on_a.subscribe(sid)
                    first = await on_a.run(sid, "remember me")
                    assert first[-1]["data"]["status"] == "completed"
                async with ws(b) as on_b:
                    await on_b.subscribe(sid)
                    async with ws(a) as on_a:
                        await on_a.send("chat:send", session_id=sid, message="slow: cut")
                        await on_b.until(lambda f: f["event"] == "chat:start")
                        a.proc.kill()  # kill -9: no drain, no release
                        await a.proc.wait()
                    cut = (await on_b.until(is_end))[-1]["data"]
                    assert cut["status"] in ("failed", "interrupted"), cut
                    # The next prompt runs on b: its own ACP agent, which loads the session.
                    again = await on_b.run(sid, "who am I")
                    assert again[-1]["data"]["status"] == "completed", again[-1]
                    assert "You said: who am I" in text_of(again)
            # b's ACP agent took the conversation over with session/load: one agent session, not two.
            assert re.search(r"agent session \S+ loaded", b.log_text()), b.log_text()[-3000:]
            with contextlib.closing(sqlite3.connect(f"file:{inner_state / 'bridge.sqlite3'}?mode=ro", uri=True)) as db:
                assert db.execute("SELECT count(*) FROM sessions").fetchone() == (1,)
            # A rolling restart: c comes up, b is stopped while a turn runs on it.
            async with instance(bridge_exe, tmp_path, clean_env, pg_url, "c", agent=agent) as c:
                async with ws(b) as on_b:
                    await on_b.subscribe(sid)
                    await on_b.send("chat:send", session_id=sid, message="slow: finish me")
                    await on_b.until(lambda f: f["event"] == "chat:start")
                    b.signal(signal.SIGTERM)  # drains: the running turn finishes first
                    with contextlib.suppress(Exception):
                        await on_b.until(is_end)
                assert await b.wait(30) == 0
                async with ws(c) as on_c:
                    await on_c.subscribe(sid, after=0)  # from the start: the whole history
                    ends = [f for f in on_c.frames if f["event"] == "chat:end"]
                    assert len(ends) == 4, [e["data"] for e in ends]
                    assert ends[-1]["data"]["status"] == "completed", ends[-1]
                    after = await on_c.run(sid, "still here")
                    assert after[-1]["data"]["status"] == "completed"
    assert "Traceback" not in c.log_text(), c.log_text()[-4000:]


async def test_serve_workers_2_shares_one_listener_and_one_service(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], pg_url: str
) -> None:
    """`serve --workers 2`: two processes on one port and one PostgreSQL; whichever takes
    a connection, every session is served, and SIGTERM stops them all."""
    from tests.daemon_support import alive, descendants

    (tmp_path / "w").mkdir()
    config = cluster_config(tmp_path, pg_url, "w")
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path / "w", clean_env, config, name="w", args=("--workers", "2")) as d:
            workers = {json.loads((await d.get("/healthz"))[1])["worker"] for _ in range(60)}
            assert workers == {1, 2}, workers  # both answer on the one port
            # Its stdout says where the console is, in the same write as the `listening` line.
            assert d.stdout_tail.startswith(f"console: {d.url}/\n".encode()), d.stdout_tail
            children = descendants(d.proc.pid)
            assert len(children) >= 2
            # The thread that started the workers ends once idle (trio's worker threads do):
            # the workers must outlive it (they once got PR_SET_PDEATHSIG from it), and serve
            # every turn below (a stopping worker refuses them: "the bridge is shutting down").
            with trio.fail_after(30):
                while len(os.listdir(f"/proc/{d.proc.pid}/task")) > 1:
                    await trio.sleep(0.2)
            async with httpx.AsyncClient(base_url=d.url, timeout=30) as h:
                sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
                for i in range(4):  # a new connection each time: either worker, one session
                    async with ws(d) as c:
                        frames = await c.run(sid, f"turn {i}")
                        assert frames[-1]["data"]["status"] == "completed", frames[-1]
                        assert f"You said: turn {i}" in text_of(frames)
                context = None
                for i in range(4):
                    async with httpx.AsyncClient(base_url=d.url, timeout=30) as fresh:
                        more = {"contextId": context} if context else {}
                        task = (await call(fresh, "demo", "SendMessage", message(f"a2a {i}", **more)))["result"]["task"]
                    assert state_of(task) == "TASK_STATE_COMPLETED", task
                    context = task["contextId"]
                listed = (await call(h, "demo", "ListTasks", {"contextId": context}))["result"]
                assert listed["totalSize"] == 4
            assert all(alive(pid) for pid in children)
            # Both still serve: the kernel hands each connection to either worker, not in
            # turn, so ask until both have answered (a few hundred asks at most).
            answered: set[int] = set()
            for _ in range(300):
                answered.add(json.loads((await d.get("/healthz"))[1])["worker"])
                if answered == {1, 2}:
                    break
            assert answered == {1, 2}, answered
            assert "stopping" not in d.log_text(), d.log_text()[-3000:]
            d.signal(signal.SIGTERM)
            assert await d.wait(30) == 0
            assert not [pid for pid in children if alive(pid)]  # the workers went with it
        # A supervisor killed outright: its workers notice and stop on their own.
        async with start_daemon(bridge_exe, tmp_path / "w", clean_env, config, name="w2", args=("--workers", "2")) as d2:
            orphans = descendants(d2.proc.pid)
            assert len(orphans) >= 2
            d2.proc.kill()
            await d2.proc.wait()
            with trio.fail_after(20):
                while any(alive(pid) for pid in orphans):
                    await trio.sleep(0.1)
    assert "Traceback" not in d.log_text(), d.log_text()[-4000:]
