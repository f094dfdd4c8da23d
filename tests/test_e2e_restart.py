"""A turn cut by `kill -9` of the daemon reads as interrupted on every front after a restart.

The real `agent-bridge serve`: a slow demo turn streams over /ws, the daemon is
killed once its first chunk is stored, a second daemon starts on the same state
directory and every front shows the turn ended, the way a live end would: REST
status and `/messages`, a /ws replay (`turn:end` and `chat:end` interrupted), ACP
`session/load` (a closing notice), A2A `GetTask` (FAILED).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from tests.daemon_support import base_config, demo_route, start_daemon

pytestmark = pytest.mark.trio


async def _until(ws: WebSocketConnection, event: str, frames: list[dict[str, Any]]) -> dict[str, Any]:
    while True:
        frame = json.loads(await ws.get_message())
        frames.append(frame)
        if frame["event"] == event:
            return frame


async def test_a_turn_cut_by_kill_9_is_interrupted_on_every_front(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    # The slow turn outlives the test: only the kill ends it.
    config = base_config(tmp_path, {"demo": demo_route(chunk_delay_s=0.05, slow_duration_s=600)})
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config, name="first") as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                r = await h.post("/api/sessions", json={"route": "demo"})
                assert r.status_code == 200, r.text
                sid = r.json()["session_id"]
                # An A2A task cut the same way (its context is a bridge session).
                body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                    "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "slow: a2a"}]},
                    "configuration": {"returnImmediately": True}}}  # fmt: skip
                r = await h.post("/a2a/demo", json=body, headers={"A2A-Version": "1.0"})
                a2a_task = r.json()["result"]["task"]
                async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                    await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "slow: cut me"}}))
                    frames: list[dict[str, Any]] = []
                    start = await _until(ws, "chat:start", frames)
                    turn_id = start["data"]["chat_run_id"]
                    while not any(f["event"] == "turn:patch" and f["data"]["patch_type"] == "add_content" for f in frames):
                        await _until(ws, "turn:patch", frames)
                    # A live /messages read stores what is pending: the chunk is on disk now.
                    r = await h.get(f"/api/sessions/{sid}/messages")
                    assert r.status_code == 200 and r.json()[-1]["status"] == "streaming", r.text
                    while "tick 1." not in (await h.get(f"/api/sessions/{a2a_task['contextId']}/messages")).text:
                        await trio.sleep(0.05)  # each read stores the A2A session's pending events
                    d.proc.kill()
                    assert await d.wait() == -9

        async with start_daemon(bridge_exe, tmp_path, clean_env, config, name="second") as d:
            assert "closed as interrupted" in d.log_text()
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                # REST: the session and its assistant turn both say interrupted.
                r = await h.get(f"/api/sessions/{sid}")
                assert r.json()["status"] == "interrupted", r.text
                r = await h.get(f"/api/sessions/{sid}/messages")
                assert [t["status"] for t in r.json()] == ["completed", "interrupted"], r.text
                assert "tick 1." in r.text, r.text  # what streamed before the kill

                # A2A: the task (the turn) failed, saying why.
                body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": a2a_task["id"]}}
                r = await h.post("/a2a/demo", json=body, headers={"A2A-Version": "1.0"})
                task = r.json()["result"]
                assert task["status"]["state"] == "TASK_STATE_FAILED", task
                assert "the daemon stopped during this turn" in json.dumps(task["status"]), task

            # /ws: a replay from the start ends the run like a live end.
            async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                await ws.send_message(json.dumps({"event": "session:subscribe", "data": {"session_id": sid, "after_sequence": 0}}))
                frames = []
                end = await _until(ws, "chat:end", frames)
                assert (end["data"]["status"], end["data"]["chat_run_id"]) == ("interrupted", turn_id), end
                root_end = [f for f in frames if f["event"] == "turn:end" and f["data"]["turn_id"].endswith(":root")]
                assert [f["data"]["status"] for f in root_end] == ["interrupted"], frames

            # ACP: session/load replays the partial reply, then a notice that it was cut.
            async with d.acp("demo") as acp:
                await acp.init()
                await acp.result("session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
                chunks = acp.chunks(sid)
                assert chunks and chunks[-1] == "\n\n[interrupted: the daemon stopped during this turn]", chunks
                assert len(chunks) > 1  # what streamed before the kill is still there

            # And the daemon serves a normal turn in that session again.
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                    await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": "again"}}))
                    frames = []
                    end = await _until(ws, "chat:end", frames)
                    assert end["data"]["status"] == "completed", frames
