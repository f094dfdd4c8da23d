"""A turn cut by `kill -9` of the daemon reads as interrupted on every front after a restart.

The real `agent-bridge serve`: a slow demo turn streams over /ws, the daemon is
killed once its first chunk is stored, a second daemon starts on the same state
directory and every front shows the turn ended, the way a live end would: REST
status and `/messages`, a /ws replay (`turn:end` and `chat:end` interrupted), ACP
`session/load` (a closing notice), A2A `GetTask` (FAILED).

An upgrade: a daemon started on a store the release before wrote (schema 2,
tests/fixtures/store_v2.sqlite3) serves its sessions and tasks, prunes by its
retention at start, and the `agent-bridge store` commands work beside it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from tests.daemon_support import base_config, demo_route, start_daemon, until_log

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


# -- an upgrade from schema 2 -------------------------------------------------------------------

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "store_v2.sqlite3"  # see make_store_v2.py
A2A_CONTEXT = "28221df546944a828c4e872670908841"  # 4 tasks; the third has a push config with a token
A2A_TASKS = ["eb79d09fb7954ae5a594d1e72e507c85", "0d3d99e1adee4fb1b546de9a68aa0eb2", "e7f10a728318476eac2d845888ab43d5",
             "63045a25b8e544219c0b8e09d7693a79"]  # fmt: skip
CHAT_SESSION = "40f2254f6821404882d6e2dadbeabe38"  # intent "fixture intent", its last turn cut by SIGKILL
V10 = {"A2A-Version": "1.0"}


def schema_2_state(tmp_path: Path, *, ancient: bool = False) -> None:
    """The fixture as the state directory's store; with a session nobody updated since
    1970 when `ancient`."""
    db = tmp_path / "state" / "bridge.sqlite3"
    shutil.copyfile(FIXTURE, db)
    if ancient:
        conn = sqlite3.connect(db)
        with conn:
            conn.execute("INSERT INTO sessions VALUES ('ancient', 'demo', '', NULL, 1.0, 1.0, NULL, '{}', '{}', 0, 0)")
        conn.close()


async def a2a(h: httpx.AsyncClient, method: str, params: dict[str, Any]) -> Any:
    r = await h.post("/a2a/demo", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, headers=V10)
    assert r.status_code == 200 and "result" in r.json(), r.text
    return r.json()["result"]


async def store_command(bridge_exe: list[str], env: dict[str, str], tmp_path: Path, *args: str) -> str:
    with trio.fail_after(30):
        done = await trio.run_process(
            [*bridge_exe, "store", *args, "--state-dir", str(tmp_path / "state")], capture_stdout=True, capture_stderr=True,
            check=False, env=env,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_a_schema_2_store_is_served_after_the_upgrade_and_looked_after_beside_the_daemon(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    schema_2_state(tmp_path, ancient=True)
    config = base_config(tmp_path, {"demo": demo_route()}, store={"retention_days": 20000})  # 54 years: 1970 is older
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            await until_log(d, "retention: pruned 1 sessions not updated for 20000 days")  # at start
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                # The chat session: its intent (now the chat front's state) and its cut turn.
                r = await h.get(f"/api/sessions/{CHAT_SESSION}")
                assert r.status_code == 200, r.text
                assert (r.json()["intent"], r.json()["status"]) == ("fixture intent", "interrupted"), r.text
                r = await h.get(f"/api/sessions/{CHAT_SESSION}/messages")
                assert [t["status"] for t in r.json()][-1] == "interrupted", r.text
                assert (await h.get("/api/sessions/ancient")).status_code == 404

                # The A2A tasks, each from its row and its turn's events, listed newest first.
                for task_id in A2A_TASKS:
                    task = await a2a(h, "GetTask", {"id": task_id})
                    assert (task["contextId"], task["status"]["state"]) == (A2A_CONTEXT, "TASK_STATE_COMPLETED"), task
                task = await a2a(h, "GetTask", {"id": A2A_TASKS[2]})
                assert [m["messageId"] for m in task["history"] if m["role"] == "ROLE_USER"][:1] == ["fixture-3"], task
                listed = await a2a(h, "ListTasks", {"contextId": A2A_CONTEXT})
                assert [t["id"] for t in listed["tasks"]] == A2A_TASKS[::-1] and listed["totalSize"] == 4, listed
                assert {t["status"]["state"] for t in listed["tasks"]} == {"TASK_STATE_COMPLETED"}, listed
                page = await a2a(h, "ListTasks", {"pageSize": 2})
                assert [t["id"] for t in page["tasks"]] == A2A_TASKS[:1:-1] and page["totalSize"] == 4, page

                # The operator's commands beside the running daemon.
                stats = json.loads(await store_command(bridge_exe, clean_env, tmp_path, "stats", "--format", "json"))
                assert (stats["sessions"], stats["turns"], stats["open_turns"], stats["tasks"], stats["schema_version"]) == (2, 8, 0, 4, 5)
                exported = await store_command(bridge_exe, clean_env, tmp_path, "export", A2A_CONTEXT)
                lines = [json.loads(line) for line in exported.splitlines()]
                assert [line["type"] for line in lines] == ["session"] + ["turn"] * 4 + ["event"] * 34 + ["task"] * 4
                assert "fixture-secret" not in exported
                assert [c["token"] for t in lines[-4:] for c in t["data"]["data"].get("push", [])] == ["<redacted>"]
                assert (await store_command(bridge_exe, clean_env, tmp_path, "vacuum")).startswith("vacuum: ")
                dry = await store_command(bridge_exe, clean_env, tmp_path, "prune", "--older-than", "20000d", "--dry-run")
                assert dry.startswith("0 sessions would prune"), dry

                # And the context goes on after all that.
                reply = await a2a(h, "SendMessage", {"message": {"messageId": "after-upgrade", "role": "ROLE_USER",
                                                                 "parts": [{"text": "hello again"}], "contextId": A2A_CONTEXT}})  # fmt: skip
                assert reply["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply
            assert "Traceback" not in d.log_text(), d.log_text()[-4000:]


async def test_a_schema_2_stores_tasks_keep_their_states_and_push_configs(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    schema_2_state(tmp_path)
    config = base_config(tmp_path, {"demo": demo_route()}, a2a={"push_allowed_hosts": ["127.0.0.1"]})
    with trio.fail_after(60):
        async with start_daemon(bridge_exe, tmp_path, clean_env, config) as d:
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                done = await a2a(h, "ListTasks", {"status": "TASK_STATE_COMPLETED"})
                assert [t["id"] for t in done["tasks"]] == A2A_TASKS[::-1] and done["totalSize"] == 4, done
                # The push config, its token never shown.
                configs = await a2a(h, "ListTaskPushNotificationConfigs", {"taskId": A2A_TASKS[2]})
                assert [(c["id"], c["url"]) for c in configs["configs"]] == [("hook-1", "http://127.0.0.1:9/hook")], configs
                assert "fixture-secret" not in json.dumps(configs)


async def test_a_store_that_cannot_be_opened_stops_the_start_with_a_clear_line(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Not a database: 71; a newer schema (a downgrade): 78, the file untouched; never a traceback."""
    config = tmp_path / "daemon.toml"
    config.write_text('[server]\nlisten = "127.0.0.1:0"\n[daemon]\nacp_socket = false\n[routes.demo]\nback = { kind = "demo" }\n')
    db = tmp_path / "state" / "bridge.sqlite3"
    newer = sqlite3.connect(tmp_path / "newer.sqlite3")
    newer.execute("PRAGMA user_version = 99")
    newer.close()
    for content, status, why in [
        (b"not a database" * 512, 71, "cannot start: cannot open the store in"),
        ((tmp_path / "newer.sqlite3").read_bytes(), 78, "schema version 99 is newer than this agent-bridge"),
    ]:
        db.write_bytes(content)
        with trio.fail_after(30):
            proc = await trio.run_process(
                [*bridge_exe, "serve", "--config", str(config), "--state-dir", str(tmp_path / "state")],
                env=clean_env, capture_stderr=True, capture_stdout=True, check=False,
            )  # fmt: skip
        err = proc.stderr.decode()
        assert proc.returncode == status and why in err, err
        assert "Traceback" not in err and db.read_bytes() == content
