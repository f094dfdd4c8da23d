"""SIGTERM on the real daemon with a turn running on each front (bridge/service.py).

Each client hears the cancellation its own protocol's way (ACP `cancelled` on the unix
socket, through the `--connect` shim and over an ACP back's agent; chat `chat:end`
`interrupted` on the WebSocket, then close 1001; A2A `TASK_STATE_CANCELED` at the end of
the official SDK client's stream), nothing the daemon started is left in the process
table, and the finished turns are in the store (an A2A task reads back CANCELED after a
restart). Open WebSockets do not hold the stop until `[server] graceful_timeout_s`. A
turn that ends within the grace period is not cancelled; a second signal stops at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.store import open_store
from bridge.fronts.chat.config import WsFrontConfig
from daemon_support import AcpClient, Notifications, alive, base_config, demo_route, descendants, raw_ws, start_daemon, toml, ws_frame

HAS_WS = (Path(__file__).resolve().parent.parent / "bridge" / "fronts" / "ws.py").exists()
A2A_CLIENT = Path(__file__).resolve().parent / "peers" / "a2a_client.py"
V10 = {"A2A-Version": "1.0"}


def _child_agent_route(bridge_exe: list[str], tmp_path: Path) -> dict[str, Any]:
    """An ACP back whose agent is another agent-bridge (`acp demo`): a real child process."""
    child = tmp_path / "child.toml"
    child.write_text(toml({"routes": {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=30.0)}}))
    command = [*bridge_exe, "acp", "demo", "--config", str(child), "--state-dir", str(tmp_path / "child-state")]
    return {"back": {"kind": "acp", "command": command, "kill_grace_s": 2}}


async def _turns(state_dir: Path) -> dict[str, list[str | None]]:
    """session id → the stop reasons of its turns, read back from the store on disk."""
    store = open_store(str(state_dir))
    await store.open()
    try:
        sessions, _ = await store.list_sessions(limit=100, offset=0)
        return {s.session_id: [t.stop_reason for t in await store.list_turns(s.session_id)] for s in sessions}
    finally:
        await store.close()


async def test_sigterm_cancels_running_turns_on_every_front(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    import httpx
    from trio_websocket import open_websocket_url

    notify = Notifications(tmp_path / "notify.sock")
    routes = {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=30.0), "coder": _child_agent_route(bridge_exe, tmp_path)}
    config = base_config(tmp_path, routes, daemon={"shutdown_grace_s": 1})
    shim: trio.Process | None = None
    try:
        with trio.fail_after(60):
            async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"NOTIFY_SOCKET": notify.path}) as d:
                async with trio.open_nursery() as nursery:
                    # A finished turn, before anything else.
                    async with d.acp("demo") as first:
                        await first.init()
                        finished = await first.new()
                        assert (await first.result("session/prompt", {"sessionId": finished, "prompt": [{"type": "text", "text": "hello"}]})) == {
                            "stopReason": "end_turn"
                        }

                    # 1. An editor through the `--connect` shim.
                    shim = await trio.lowlevel.open_process(
                        [*bridge_exe, "acp", "demo", "--connect", d.acp_socket],  # type: ignore[list-item]
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env,
                    )  # fmt: skip
                    editor = AcpClient(shim.stdout, shim.stdin)  # type: ignore[arg-type]
                    await nursery.start(_run, editor)
                    await editor.init()
                    s1 = await editor.new()
                    p1 = await editor.prompt(s1, "slow: x")

                    # 2. An editor on the socket, on a route whose back is an agent process.
                    coder_stream = await trio.open_unix_socket(d.acp_socket)  # type: ignore[arg-type]
                    coder = AcpClient(coder_stream, coder_stream)
                    assert (await coder.preamble("coder"))["ok"]
                    await nursery.start(_run, coder)
                    await coder.init()
                    s2 = await coder.new()
                    p2 = await coder.prompt(s2, "slow: x")

                    # 3. A chat client on the WebSocket.
                    frames: list[dict[str, Any]] = []
                    if HAS_WS:
                        async with httpx.AsyncClient(base_url=d.url) as h:
                            chat_sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
                        ws = await nursery.start(_ws_client, d.url, chat_sid, frames, open_websocket_url)

                    await editor.until(lambda: len(editor.chunks(s1)) >= 2)
                    await coder.until(lambda: len(coder.chunks(s2)) >= 2)
                    if HAS_WS:
                        with trio.fail_after(10):
                            while not any(f["event"] == "turn:patch" for f in frames):
                                await trio.sleep(0.02)
                    family = descendants(d.proc.pid)
                    assert len(family) >= 1  # the coder's agent (and what it runs)

                    t0 = time.monotonic()
                    d.signal(signal.SIGTERM)
                    r1 = await editor.response(p1, timeout=15)
                    r2 = await coder.response(p2, timeout=15)
                    assert r1["result"] == {"stopReason": "cancelled"}, r1
                    assert r2["result"] == {"stopReason": "cancelled"}, r2
                    if HAS_WS:
                        with trio.fail_after(15):
                            while not any(f["event"] == "chat:end" for f in frames):
                                await trio.sleep(0.02)
                        end = next(f for f in frames if f["event"] == "chat:end")["data"]
                        assert end["status"] == "interrupted", end
                    status = await d.wait(timeout=20)
                    elapsed = time.monotonic() - t0
                    assert status == 0, d.log_text()
                    nursery.cancel_scope.cancel()
                    if HAS_WS:
                        await ws.aclose()
                with trio.fail_after(10):
                    await shim.wait()  # the daemon closed the socket: the shim ends too
                assert shim.returncode == 69
                await coder_stream.aclose()
        # The grace period (1 s), the cancel, the connections closed: well under the stop timeout.
        assert elapsed < 12, elapsed
        with trio.fail_after(10):
            while any(alive(pid) for pid in family):
                await trio.sleep(0.05)
        assert notify.states() == ["READY", "STOPPING"]
        turns = await _turns(tmp_path / "state")
        assert turns[finished] == ["end_turn"]
        assert turns[s1] == ["cancelled"] and turns[s2] == ["cancelled"]
        log = d.log_text()
        assert "turn(s) still running after 1 s were cancelled" in log and "stopped" in log
    finally:
        notify.close()
        if shim is not None and shim.returncode is None:
            shim.kill()


async def _run(client: AcpClient, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    async with client.running():
        task_status.started()
        await trio.sleep_forever()


async def _ws_client(url: str, session_id: str, frames: list[dict[str, Any]], open_ws: Any,
                     task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
    async with open_ws(url.replace("http://", "ws://") + "/ws") as conn:
        await conn.send_message(json.dumps({"event": "chat:send", "data": {"session_id": session_id, "message": "slow: x"}}))
        task_status.started(conn)
        try:
            while True:
                frames.append(json.loads(await conn.get_message()))
        except Exception:  # noqa: BLE001 - the daemon closed the connection: what we wait for
            return


async def test_sigterm_ends_a2a_streams_and_closes_chat_sockets(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    import httpx

    notify = Notifications(tmp_path / "notify.sock")
    routes = {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=30.0)}
    # A long HTTP graceful timeout: a WebSocket left open would hold the stop that long.
    config = base_config(tmp_path, routes, daemon={"shutdown_grace_s": 1}, server={"graceful_timeout_s": 30})
    a2a: dict[str, Any] = {}
    chat: dict[str, Any] = {"frames": []}
    idle: dict[str, Any] = {"frames": []}
    try:
        with trio.fail_after(90):
            async with start_daemon(bridge_exe, tmp_path, clean_env, config, extra_env={"NOTIFY_SOCKET": notify.path}) as d:
                async with trio.open_nursery() as nursery, httpx.AsyncClient(base_url=d.url, timeout=10) as h:
                    # 1. The official A2A SDK client (its own process): SendStreamingMessage, a long turn.
                    nursery.start_soon(_a2a_stream, d.url, a2a)
                    # 2. A chat client with a run going, and one connected with nothing to watch.
                    chat_sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
                    await nursery.start(_chat_client, d.url, chat_sid, chat)
                    await nursery.start(_chat_client, d.url, None, idle)

                    with trio.fail_after(30):
                        while not (await _working_tasks(h)):
                            await trio.sleep(0.05)
                        while not any(f["event"] == "turn:patch" for f in chat["frames"]):
                            await trio.sleep(0.02)
                    task_id = (await _working_tasks(h))[0]["id"]
                    assert await _upgrade(d.url) == "HTTP/1.1 101 "  # the probe used below, while serving

                    t0 = time.monotonic()
                    d.signal(signal.SIGTERM)
                    await notify.wait_for(lambda states: "STOPPING" in states)
                    # Stopping: a new WebSocket is refused, never upgraded nor left hanging.
                    assert await _upgrade(d.url) in ("refused", "reset", "closed", "HTTP/1.1 503 "), d.log_text()
                    with trio.move_on_after(20):  # well under graceful_timeout_s (30 s)
                        await d.proc.wait()
                    elapsed = time.monotonic() - t0
                    assert d.proc.returncode is not None, f"still running {elapsed:.1f} s after SIGTERM:\n{d.log_text()}"
                    assert d.proc.returncode == 0, d.log_text()
                    with trio.fail_after(30):
                        while "returncode" not in a2a or "close" not in chat or "close" not in idle:
                            await trio.sleep(0.05)
    finally:
        notify.close()
    assert notify.states() == ["READY", "STOPPING"]

    # A2A: the SDK's stream ran, then ended with the final status CANCELED.
    assert a2a["returncode"] == 0, a2a["stderr"]
    sent = json.loads(a2a["stdout"])["results"]["send"]
    assert "traceback" not in sent, sent
    assert sent["task_id"] == task_id and sent["kinds"][0] == "task" and "artifactUpdate" in sent["kinds"], sent["kinds"]
    assert sent["kinds"][-1] == "statusUpdate" and sent["state"] == "TASK_STATE_CANCELED", sent
    assert sent["events"][-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"

    # Chat: the run's end (interrupted), then close 1001 "going away"; the idle client too.
    events = [f["event"] for f in chat["frames"]]
    assert events[-1] == "chat:end" and chat["frames"][-1]["data"]["status"] == "interrupted", events[-5:]
    ends = [f["data"] for f in chat["frames"] if f["event"] == "turn:end"]
    assert ends and ends[-1]["role"] == "assistant" and ends[-1]["status"] == "interrupted", ends[-1:]
    for client in (chat, idle):
        code, reason = client["close"]
        assert code == 1001 and "shutting down" in reason, client["close"]

    # The store: both turns ended cancelled; after a restart, GetTask reads CANCELED.
    turns = await _turns(tmp_path / "state")
    assert turns[chat_sid] == ["cancelled"]
    assert sorted(r for rs in turns.values() for r in rs) == ["cancelled", "cancelled"], turns
    with trio.fail_after(40):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, name="second") as d2:
            async with httpx.AsyncClient(base_url=d2.url, timeout=10) as h:
                r = await h.post("/a2a/demo", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}, headers=V10)
            assert r.status_code == 200, r.text
            assert r.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED", r.json()
            d2.signal(signal.SIGTERM)
            assert await d2.wait() == 0


async def test_a_websocket_arriving_while_stopping_is_refused_before_the_upgrade() -> None:
    """The listener closes when the stop begins; a handshake already read by then is
    refused by the chat front itself (503, no upgrade), not accepted and left open."""
    from types import SimpleNamespace

    from bridge.config import parse_config
    from bridge.fronts.chat.access import Access
    from bridge.fronts.chat.streams import ChatStreams
    from bridge.fronts.chat.ws import WsFront

    config = parse_config({"routes": {"demo": demo_route()}})
    manager: Any = SimpleNamespace(accepting=False, refusal="the bridge is shutting down")
    front = WsFront(config, manager, ChatStreams(config.section(WsFrontConfig), manager), Access(config.section(WsFrontConfig)))
    sent: list[dict[str, Any]] = []
    connected = False

    async def receive() -> dict[str, Any]:
        nonlocal connected
        if connected:
            await trio.sleep_forever()  # the client says nothing more
        connected = True
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "websocket", "path": "/ws", "headers": [], "extensions": {"websocket.http.response": {}}}
    with trio.fail_after(5):
        await front(scope, receive, send, {})
    assert [m["type"] for m in sent] == ["websocket.http.response.start", "websocket.http.response.body"]
    assert sent[0]["status"] == 503 and b"shutting down" in sent[1]["body"]


async def _upgrade(url: str) -> str:
    """A WebSocket upgrade on a new connection: how it was answered ("refused" at connect,
    "reset" or "closed" without an answer, else the status line up to its reason)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    request = f"GET /ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" \
              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"  # fmt: skip
    with trio.fail_after(10):
        try:
            stream = await trio.open_tcp_stream(host, int(port))
        except OSError:
            return "refused"
        async with stream:
            data = b""
            try:
                await stream.send_all(request.encode())
                while b"\r\n" not in data and (chunk := await stream.receive_some(4096)):
                    data += chunk
            except trio.BrokenResourceError:
                return "reset"
    return data.decode("latin-1")[:13] if data else "closed"


async def _working_tasks(h: Any) -> list[dict[str, Any]]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": "TASK_STATE_WORKING"}}
    r = await h.post("/a2a/demo", json=body, headers=V10)
    assert r.status_code == 200, r.text
    return r.json()["result"].get("tasks", [])  # type: ignore[no-any-return]


async def _a2a_stream(url: str, out: dict[str, Any]) -> None:
    """tests/peers/a2a_client.py: one streaming SendMessage of a long turn, reported when its stream ends."""
    opts = {"url": url, "route": "demo", "binding": "JSONRPC", "dialect": "1.0", "timeout_s": 60,
            "scenarios": [["send", {"streaming": True, "text": "slow: x"}]]}  # fmt: skip
    proc = await trio.run_process([sys.executable, str(A2A_CLIENT), json.dumps(opts)], capture_stdout=True, capture_stderr=True, check=False)
    out.update(stdout=proc.stdout, stderr=proc.stderr.decode(errors="replace"), returncode=proc.returncode)


async def _chat_client(url: str, session_id: str | None, out: dict[str, Any],
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:  # fmt: skip
    """A chat client (a run in `session_id`, or none): its frames, then the close it saw."""
    from trio_websocket import ConnectionClosed, open_websocket_url

    async with open_websocket_url(url.replace("http://", "ws://") + "/ws") as conn:
        if session_id is not None:
            await conn.send_message(json.dumps({"event": "chat:send", "data": {"session_id": session_id, "message": "slow: x"}}))
        task_status.started()
        try:
            while True:
                out["frames"].append(json.loads(await conn.get_message()))
        except ConnectionClosed as exc:
            out["close"] = (exc.reason.code, exc.reason.reason or "")


async def test_a_turn_that_ends_within_the_grace_period_is_not_cancelled(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    config = base_config(tmp_path, {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=1.5)}, daemon={"shutdown_grace_s": 10})
    with trio.fail_after(40):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            async with d.acp("demo") as c:
                await c.init()
                sid = await c.new()
                rid = await c.prompt(sid, "slow: x")
                await c.until(lambda: len(c.chunks(sid)) >= 2)
                d.signal(signal.SIGTERM)
                await trio.sleep(0.2)
                # Stopping: no new session (the connection is still served until its turn ends).
                refused = await c.call("session/new", {"cwd": "/tmp", "mcpServers": []})
                assert "shutting down" in refused["error"]["message"], refused
                assert (await c.response(rid, timeout=10))["result"] == {"stopReason": "end_turn"}
                assert await d.wait() == 0
    turns = await _turns(tmp_path / "state")
    assert turns[sid] == ["end_turn"]


async def test_a_second_signal_stops_at_once(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    routes = {"coder": _child_agent_route(bridge_exe, tmp_path)}
    config = base_config(tmp_path, routes, daemon={"shutdown_grace_s": 60})
    with trio.fail_after(40):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            async with d.acp("coder") as c:
                await c.init()
                sid = await c.new()
                await c.prompt(sid, "slow: x")
                await c.until(lambda: len(c.chunks(sid)) >= 2)
                family = descendants(d.proc.pid)
                d.signal(signal.SIGTERM)
                await trio.sleep(0.3)
                t0 = time.monotonic()
                d.signal(signal.SIGINT)
                status = await d.wait(timeout=15)
                elapsed = time.monotonic() - t0
    assert status == 128 + signal.SIGINT
    assert elapsed < 8, elapsed  # the agent's kill grace (2 s) at most, not the 60 s grace period
    with trio.fail_after(10):
        while any(alive(pid) for pid in family):
            await trio.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_an_idle_daemon_stops_at_once_and_cleanly(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str], sig: int) -> None:
    config = base_config(tmp_path, {"demo": demo_route()})
    with trio.fail_after(30):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            t0 = time.monotonic()
            d.signal(sig)
            assert await d.wait() == 0
            assert time.monotonic() - t0 < 5
            assert not Path(d.acp_socket).exists()  # type: ignore[arg-type]


async def test_a_finished_a2a_stream_on_a_kept_alive_connection_does_not_hold_the_stop(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """The client's disconnect can land inside hypercorn's end-of-response work; unshielded,
    that left the connection half-closed and the stop waited out graceful_timeout_s."""
    import httpx

    config = base_config(tmp_path, {"demo": demo_route()}, server={"graceful_timeout_s": 30})
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}}}  # fmt: skip
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=10) as h:  # kept open across the stop
                async with h.stream("POST", "/a2a/demo", json=body, headers=V10) as r:
                    text = "".join([chunk async for chunk in r.aiter_text()])
                assert "TASK_STATE_COMPLETED" in text, text
                t0 = time.monotonic()
                d.signal(signal.SIGTERM)
                with trio.move_on_after(15):  # well under graceful_timeout_s (30 s)
                    await d.proc.wait()
                assert d.proc.returncode == 0, f"still running {time.monotonic() - t0:.1f} s after SIGTERM:\n{d.log_text()}"


async def _never_reading_ws(url: str, session_id: str) -> trio.SocketStream:
    """A /ws client with a tiny receive window that subscribes, then never reads again."""
    stream, data = await raw_ws(url, rcvbuf=4096)
    await stream.send_all(ws_frame(json.dumps({"event": "session:subscribe", "data": {"session_id": session_id}}).encode()))
    while b"session:subscribed" not in data:  # subscribed: from here on it reads nothing
        chunk = await stream.receive_some(4096)
        assert chunk, data
        data += chunk
    return stream


async def test_clients_that_never_read_do_not_hold_the_stop(bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]) -> None:
    """Issue 13 finding 5: a /ws client that stopped reading held a graceful stop for
    90-120 s: hypercorn shields its socket writes, so a write to a full TCP window never
    returns. Now the stop ends within shutdown_grace_s + graceful_timeout_s + a little,
    whatever the clients do."""
    import httpx
    from trio_websocket import open_websocket_url

    # A queue big enough that the daemon keeps writing to the lazy sockets (no 4008 drop).
    config = base_config(tmp_path, {"demo": demo_route()}, daemon={"shutdown_grace_s": 1},
                         ws={"queue_max_frames": 1_000_000, "slow_client_timeout_s": 600})  # fmt: skip
    lazy: list[trio.SocketStream] = []
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
            for _ in range(3):
                lazy.append(await _never_reading_ws(d.url, sid))
            async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws", max_message_size=1 << 24) as ws:
                # Megabytes of frames: far past what the lazy sockets' buffers hold.
                await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "bench:60000"}}))
                while (frame := json.loads(await ws.get_message()))["event"] != "chat:end":
                    pass
                assert frame["data"]["status"] == "completed", frame
            d.signal(signal.SIGTERM)
            # shutdown_grace_s 1 + graceful_timeout_s 1 + closing: the ceiling is generous.
            assert await d.wait(timeout=30) == 0, d.log_text()[-4000:]
            assert "still open at the stop's deadline: cut off" in d.log_text()
    for stream in lazy:
        await stream.aclose()
