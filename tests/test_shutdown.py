"""SIGTERM on the real daemon with a turn running on each front (bridge/service.py).

Each client hears the cancellation its own protocol's way (ACP `cancelled` on the unix
socket, through the `--connect` shim and over an ACP back's agent; chat `chat:end`
`interrupted` on the WebSocket), nothing the daemon started is left in the process
table, and the finished turns are in the store. A turn that ends within the grace
period is not cancelled; a second signal stops at once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from bridge.store import open_store
from daemon_support import AcpClient, Notifications, alive, base_config, demo_route, descendants, start_daemon, toml

HAS_WS = (Path(__file__).resolve().parent.parent / "bridge" / "fronts" / "ws.py").exists()


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
