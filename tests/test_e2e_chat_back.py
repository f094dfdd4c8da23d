"""End to end: chat-stream agents as a back (`back = {kind = "chat"}`), both dialects.

- "socketio": `tests/peers/socketio_server.py`, a Blade-style server on the official
  `python-socketio` (ASGI, uvicorn), in its own process on a port the OS picks.
- "ws": a second real `agent-bridge serve` with the demo route; the bridge under
  test reaches its `/ws` and `/api/sessions`.

The bridge under test is driven through its ACP front by the official ACP Python SDK
(`tests/peers/acp_driver_steps.py`, its own process), and through its A2A front and
its own `/ws` front (an `agent-bridge serve` daemon). Drops are real: the Socket.IO
server aborts the TCP connection itself; for the ws peer a loopback proxy run here
cuts the connection once a marker passed it. `python-socketio`'s own client talks
to the test server too, to show it speaks the dialect as the library does.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from daemon_support import serve_peer, start_daemon
from steps_support import Drive, error, make_drive, step, stop

PEERS = Path(__file__).resolve().parent / "peers"
SERVER = PEERS / "socketio_server.py"
TOKEN = "sk-blade-v3-test-token-never-logged"


class SioServer:
    def __init__(self, port: int) -> None:
        self.port = port
        self.http = f"http://127.0.0.1:{port}"
        self.url = f"ws://127.0.0.1:{port}/socket.io/"

    async def log(self) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(trust_env=False) as c:
            return (await c.get(f"{self.http}/_test/log")).json()  # type: ignore[no-any-return]

    async def events(self, name: str) -> list[dict[str, Any]]:
        return [r["data"] for r in await self.log() if r.get("event") == name]


@contextlib.asynccontextmanager
async def sio_server(tmp_path: Path, *args: str) -> AsyncIterator[SioServer]:
    log = tmp_path / f"sio-{len(list(tmp_path.iterdir()))}.log"
    async with serve_peer([sys.executable, str(SERVER), *args], log) as port:
        yield SioServer(port)


class CutProxy:
    """A loopback TCP proxy that cuts every connection (no close frame, no FIN from
    the server) once `marker` has passed it downstream, the first time only."""

    def __init__(self, target_port: int, marker: bytes) -> None:
        self.target_port = target_port
        self.marker = marker
        self.cut = False
        self.connections = 0
        self.port = 0
        self._streams: list[trio.SocketStream] = []

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        pair = [client, server]
        async with trio.open_nursery() as nursery:

            async def pipe(src: trio.SocketStream, dst: trio.SocketStream, downstream: bool) -> None:
                seen = b""
                try:
                    while data := await src.receive_some(65536):
                        await dst.send_all(data)
                        if downstream and not self.cut:
                            seen = (seen + data)[-4096:]
                            if self.marker in seen:
                                self.cut = True
                                for s in pair:  # an abortive close (RST), as when a network drops
                                    s.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                                    await s.aclose()
                                nursery.cancel_scope.cancel()
                                return
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(pipe, client, server, False)
            nursery.start_soon(pipe, server, client, True)
        for s in pair:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                await s.aclose()


def _toml(v: Any) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml(x)}' for k, x in v.items()) + " }"
    return json.dumps(v)


OPTIONS = """
[[routes.platform.options]]
id = "model"
name = "Model"
category = "model"
values = [{ value = "fast", name = "Fast" }, { value = "smart", name = "Smart" }]
[[routes.platform.options]]
id = "mode"
name = "Mode"
category = "mode"
values = [{ value = "executing", name = "Executing" }, { value = "planning", name = "Planning" }]
"""


def route_toml(extra: str = "", **back: Any) -> str:
    items = ", ".join(f"{k} = {_toml(v)}" for k, v in back.items())
    return f'[routes.platform]\nback = {{ kind = "chat", {items} }}\ncancel_grace_s = 3\n{extra}\n'


@pytest.fixture
def drive(bridge_exe: list[str], state_dir: str, clean_env: dict[str, str], tmp_path: Path) -> Drive:
    plain = make_drive(bridge_exe, state_dir, {**clean_env, "PLATFORM_TOKEN": TOKEN}, tmp_path, "platform")

    async def run(config: str, steps: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
        report = await plain(config, steps, **options)
        assert TOKEN not in report["bridge_log"]  # never logged (DESIGN.md complaint 4)
        return report

    return run


def updates(report: dict[str, Any], name: str, kind: str) -> list[dict[str, Any]]:
    return [u for u in step(report, name)["updates"] if u["sessionUpdate"] == kind]


def text(report: dict[str, Any], name: str, kind: str = "agent_message_chunk", parent: str | None = None) -> str:
    return "".join(
        u["content"].get("text", "")
        for u in updates(report, name, kind)
        if ((u.get("_meta") or {}).get("agentBridge") or {}).get("parentToolCallId") == parent
    )


def tools(report: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    """Each tool call of a step, its start merged with its updates (ACP replaces fields)."""
    out: dict[str, dict[str, Any]] = {}
    for u in step(report, name)["updates"]:
        if u["sessionUpdate"] in ("tool_call", "tool_call_update"):
            cur = out.setdefault(u["toolCallId"], {"statuses": []})
            cur.update({k: v for k, v in u.items() if k != "status"})
            if "status" in u:
                cur["statuses"].append(u["status"])
    return out


# == Socket.IO ================================================================================


async def test_socketio_streaming_tools_fork_questions_and_stop(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with sio_server(tmp_path, "--token", TOKEN) as server:
            config = route_toml(OPTIONS, url=server.url, dialect="socketio", token_env="PLATFORM_TOKEN")
            steps = [
                {"name": "hello", "prompt": "hello world"},
                {"name": "tools", "prompt": "tools"},
                {"name": "fork", "prompt": "fork"},
                {"name": "ask", "prompt": "ask", "permission": "1"},
                {"name": "stop", "prompt": "slow 60", "cancel_after_chunks": 3},
                {"name": "fail", "prompt": "fail"},
                {"name": "maxturns", "prompt": "maxturns"},
                {"name": "after", "prompt": "hello again"},
                {"name": "approve", "prompt": "approve", "permission": "reject"},
            ]
            r = await drive(config, steps)
            log = await server.log()

    assert stop(r, "hello") == "end_turn"
    assert text(r, "hello") == "You said: world "
    assert text(r, "hello", "agent_thought_chunk") == "Let me think. "
    (usage,) = updates(r, "hello", "usage_update")
    assert usage["used"] == 46 and usage["size"] == 200000

    # Tool calls, their kinds from the tool names (ACP `ToolKind`, `ToolCallStatus`), pending → in_progress → done.
    assert stop(r, "tools") == "end_turn"
    calls = tools(r, "tools")
    kinds = {c["title"]: c["kind"] for c in calls.values()}
    assert kinds == {
        "Run ls": "execute", "Read README.md": "read", "Edit a.py": "edit", "Write b.py": "edit", "Glob *.py": "search",
        "Grep TODO": "search", "Search trio": "search", "Fetch example.com": "fetch", "Save a note": "other",
    }  # fmt: skip
    assert calls["tc_0_Bash"]["statuses"] == ["pending", "in_progress", "failed"]
    assert calls["tc_0_Bash"]["rawInput"] == {"command": "ls"}
    assert calls["tc_1_Read"]["statuses"] == ["pending", "in_progress", "completed"]
    assert calls["tc_1_Read"]["content"] == [{"type": "content", "content": {"type": "text", "text": "# hello"}}]
    assert calls["tc_4_Glob"]["rawOutput"] == ["a.py", "b.py"]

    # A fork: the child turn's events carry the Agent tool call as their parent (Blade `api/chat-flow.md`, forks).
    assert stop(r, "fork") == "end_turn"
    assert text(r, "fork", parent="tc_fork_001") == "Child looking. "
    assert text(r, "fork") == "Fork done. "
    fork_calls = tools(r, "fork")
    assert fork_calls["tc_fork_001"]["kind"] == "think" and fork_calls["tc_fork_001"]["statuses"][-1] == "completed"
    assert fork_calls["tc_child_read"]["_meta"]["agentBridge"]["parentToolCallId"] == "tc_fork_001"

    # AskUserQuestion across the paused chat:end: one ACP turn, the answer on the same session.
    assert stop(r, "ask") == "end_turn"
    (perm,) = step(r, "ask")["permissions"]
    assert [o["name"] for o in perm["options"]] == ["PostgreSQL", "SQLite", "Redis"]
    assert perm["toolCall"]["title"] == "Which database should I use?"
    assert text(r, "ask") == "You chose: SQLite "
    sends = [e["data"] for e in log if e.get("event") == "chat:send"]
    answer = next(s for s in sends if "askuser_answer" in s)
    assert answer["askuser_answer"] == {"tool_call_id": "tc_ask_4", "selections": {"0": [1]}}
    assert "mode" not in answer  # not forced when answering (Blade `api/chat-flow.md`, AskUserQuestion)

    # Stop mid-stream: chat:stop, chat:end interrupted, the prompt answers cancelled.
    assert stop(r, "stop") == "cancelled"
    assert step(r, "stop")["cancel_to_answer_s"] < 2
    assert 3 <= len(updates(r, "stop", "agent_message_chunk")) < 60
    assert any(e.get("event") == "chat:stop" for e in log)

    e = error(r, "fail")
    assert e["code"] == -32603 and "the model provider is unavailable" in e["message"] and "route platform" in e["message"]
    assert stop(r, "maxturns") == "max_turn_requests"
    assert stop(r, "after") == "end_turn" and text(r, "after") == "You said: again "
    # Options with only labels: kinds read from the words, none claimed for "Ask me later";
    # an editor that rejects by kind rejects (issue 15, finding 1).
    (perm,) = step(r, "approve")["permissions"]
    assert [(o["name"], o["kind"]) for o in perm["options"]][:2] == [("Allow", "allow_once"), ("Deny", "reject_once")]
    assert text(r, "approve") == "You chose: Deny "

    # One remote session for the ACP session; its intent is the first prompt; the token
    # went in CONNECT's auth and the REST Authorization header.
    creates = [e for e in log if e.get("path") == "/api/sessions"]
    assert len(creates) == 1 and creates[0]["body"] == {"intent": "hello world", "model": "fast"} and creates[0]["auth"]
    # Route options pass through by category (Blade `api/chat-flow.md`, `chat:send`): model and mode on every prompt.
    prompts = [s for s in sends if "askuser_answer" not in s]
    assert len(prompts) == len(steps) and all(p["model"] == "fast" and p["mode"] == "executing" for p in prompts)
    connects = [e for e in log if e["kind"] == "connect"]
    assert connects and all(c["token_ok"] and c["auth_keys"] == ["token"] for c in connects)
    subscribes = [e["data"] for e in log if e.get("event") == "session:subscribe"]
    assert len(subscribes) == len(steps) and all("after_sequence" not in s for s in subscribes)


async def test_socketio_form_questions_and_decline(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with sio_server(tmp_path) as server:
            config = route_toml(url=server.url, dialect="socketio")
            steps = [
                {"name": "one", "prompt": "ask", "form": {"choice": "2"}},
                {"name": "free", "prompt": "ask", "form": {"other": "DuckDB"}},
                {"name": "many", "prompt": "askmany", "form": {"0": "Go", "1": "keep it small"}},
                {"name": "declined", "prompt": "ask", "form": "decline"},
                {"name": "after", "prompt": "hello there"},
            ]
            r = await drive(config, steps, elicitation=True)
            log = await server.log()
    assert stop(r, "one") == "end_turn" and text(r, "one") == "You chose: Redis "
    (form,) = step(r, "one")["elicitations"]
    assert form["message"] == "Which database should I use?"
    assert stop(r, "free") == "end_turn" and text(r, "free") == "You wrote: DuckDB "
    assert stop(r, "many") == "end_turn"
    answered = json.loads(text(r, "many").removeprefix("Answers: "))
    assert answered == {"custom": {"1": "keep it small"}, "selections": {"0": [1]}, "tool_call_id": "tc_ask_3"}
    # Declined: chat:stop, and the turn ends cancelled (Blade AskUserQuestion ↔ ACP `session/request_permission`).
    assert stop(r, "declined") == "cancelled"
    assert [e["event"] for e in log if e.get("event") in ("chat:stop",)] == ["chat:stop"]
    assert stop(r, "after") == "end_turn"


async def test_socketio_question_without_a_front_to_show_it_is_answered_by_the_next_prompt(drive: Any, tmp_path: Path) -> None:
    # Two questions make a form; an editor without forms cannot show it: the question is
    # written into the chat and the next prompt answers it (Blade AskUserQuestion ↔ ACP `session/request_permission`, last resort).
    with trio.fail_after(90):
        async with sio_server(tmp_path) as server:
            config = route_toml(url=server.url, dialect="socketio")
            r = await drive(config, [{"name": "ask", "prompt": "askmany"}, {"name": "reply", "prompt": "Python"}])
            sends = await server.events("chat:send")
    assert stop(r, "ask") == "end_turn"
    assert "Which language?" in text(r, "ask") and "(Reply to answer.)" in text(r, "ask")
    assert stop(r, "reply") == "end_turn"
    assert sends[-1]["askuser_answer"] == {"tool_call_id": "tc_ask_1", "selections": {"0": [0]}}


async def test_socketio_dropped_socket_resumes_without_loss_or_duplicates(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with sio_server(tmp_path, "--token", TOKEN) as server:
            config = route_toml(url=server.url, dialect="socketio", token_env="PLATFORM_TOKEN", reconnect_backoff_s=0.05)
            steps = [
                {"name": "drop", "prompt": "drop 12"},
                {"name": "forget", "prompt": "forget 12"},
                {"name": "after", "prompt": "hello again"},
            ]
            r = await drive(config, steps)
            log = await server.log()
    assert stop(r, "drop") == "end_turn"
    assert text(r, "drop") == "".join(f"d{i} " for i in range(1, 13))
    cuts = [i for i, e in enumerate(log) if e["kind"] == "cut"]
    assert len(cuts) == 2 and all(e["ok"] for e in log if e["kind"] == "cut")
    resumed = [e["data"] for e in log[cuts[0] :] if e.get("event") == "session:subscribe"][0]
    assert resumed["after_sequence"] > 0
    assert "reconnecting (attempt 1)" in r["bridge_log"]
    # The server forgot what it streamed meanwhile: the run cannot be resumed, and says so.
    e = error(r, "forget")
    assert "refused to follow session" in e["message"] and "cannot resume after sequence" in e["message"]
    assert stop(r, "after") == "end_turn"


async def test_python_socketio_client_speaks_with_the_test_server(tmp_path: Path) -> None:
    """The official client against the test server: the dialect the bridge speaks is the library's."""
    import socketio as sio_lib

    def session(http: str) -> str:
        r = httpx.post(f"{http}/api/sessions", json={"intent": "x"}, headers={"Authorization": f"Bearer {TOKEN}"})
        return str(r.json()["session_id"])

    def talk(http: str) -> dict[str, Any]:
        sid = session(http)
        got: list[tuple[str, dict[str, Any]]] = []
        done = __import__("threading").Event()
        client = sio_lib.Client(reconnection=False)

        def on_any(event: str, data: dict[str, Any]) -> None:
            got.append((event, data))
            if event == "chat:end":
                done.set()

        client.on("*", on_any)
        client.connect(http, auth={"token": TOKEN}, transports=["websocket"], socketio_path="socket.io", wait_timeout=10)
        ack = client.call("session:subscribe", {"session_id": sid}, timeout=10)
        client.emit("chat:send", {"session_id": sid, "message": "hello library"})
        assert done.wait(10)
        client.disconnect()
        refused: list[Any] = []
        bad = sio_lib.Client(reconnection=False)
        bad.on("connect_error", refused.append)
        with pytest.raises(sio_lib.exceptions.ConnectionError):
            bad.connect(http, auth={"token": "wrong"}, transports=["websocket"], wait_timeout=10)
        return {"ack": ack, "got": got, "refused": refused}

    with trio.fail_after(60):
        async with sio_server(tmp_path, "--token", TOKEN) as server:
            out = await trio.to_thread.run_sync(talk, server.http)
    assert out["ack"] == {"session_id": out["got"][0][1]["session_id"], "sequence": 0}
    names = [e for e, _ in out["got"]]
    assert names[0] == "chat:start" and names[-1] == "chat:end" and "turn:patch" in names
    assert [d["sequence"] for _, d in out["got"]] == list(range(1, len(names) + 1))
    assert out["refused"] == [{"message": "invalid token"}]  # CONNECT_ERROR, as the bridge reads it


# == ws: another agent-bridge ==================================================================


def peer_config(tmp_path: Path, **ws: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "routes": {"demo": {"back": {"kind": "demo", "chunk_delay_s": 0.001, "slow_duration_s": 2.0}}},
        "server": {"listen": "127.0.0.1:0", "graceful_timeout_s": 1},
        "daemon": {"acp_socket": False},
    }
    if ws:
        doc["ws"] = ws
    return doc


async def test_ws_dialect_reaches_another_agent_bridge(drive: Any, bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with start_daemon(bridge_exe, tmp_path, {**clean_env, "PEER_TOKEN": TOKEN}, peer_config(tmp_path, token_env="PEER_TOKEN"), name="peer") as peer:
            port = int(peer.url.rsplit(":", 1)[1])
            async with trio.open_nursery() as nursery:
                proxy = CutProxy(port, b"tick 5. ")
                await nursery.start(proxy.run)
                config = route_toml(
                    url=f"ws://127.0.0.1:{proxy.port}/ws",
                    rest_url=peer.url,
                    token_env="PLATFORM_TOKEN",
                    session_params={"route": "demo"},
                    reconnect_backoff_s=0.05,
                )
                steps = [
                    {"name": "all", "prompt": "think: tool: fork: hello"},
                    {"name": "ask", "prompt": "ask: tidy up", "permission": "reject"},
                    {"name": "allow", "prompt": "ask: tidy up", "permission": "allow_always"},
                    {"name": "choose", "prompt": "choose: colours", "form": {"choice": ["red", "blue"], "other": "teal"}},
                    {"name": "drop", "prompt": "slow: go"},
                    {"name": "stop", "prompt": "slow: go", "cancel_after_chunks": 3},
                    {"name": "fail", "prompt": "fail: now"},
                    {"name": "after", "prompt": "hello again"},
                ]
                r = await drive(config, steps, elicitation=True)
                nursery.cancel_scope.cancel()
            peer_log = peer.log_text()

    assert stop(r, "all") == "end_turn"
    assert text(r, "all") == "You said: hello"
    assert "Let me work out what to do." in text(r, "all", "agent_thought_chunk")
    calls = tools(r, "all")
    (read,) = [c for c in calls.values() if c["title"] == "Read README.md" and "_meta" not in c]
    assert read["kind"] == "read" and read["statuses"] == ["pending", "in_progress", "completed"]
    (agent,) = [c for c in calls.values() if c["title"] == "Sub-agent: research"]
    assert agent["kind"] == "think" and agent["statuses"][-1] == "completed"
    assert text(r, "all", parent=agent["toolCallId"]) == "The sub-agent read README.md."
    assert updates(r, "all", "usage_update")

    # The peer's permission question crossed as an AskUserQuestion and came back as the
    # same question: its option ids and kinds, about the edit tool call (issue 15, finding 1).
    assert stop(r, "ask") == "end_turn"
    (perm,) = step(r, "ask")["permissions"]
    assert [(o["optionId"], o["name"], o["kind"]) for o in perm["options"]] == [
        ("allow", "Allow", "allow_once"),
        ("allow_always", "Always allow", "allow_always"),
        ("reject", "Reject", "reject_once"),
        ("reject_always", "Never allow", "reject_always"),
    ]
    (edit,) = [c for c in tools(r, "ask").values() if c.get("title") == "Edit notes.txt"]
    assert perm["toolCall"]["toolCallId"] == edit["toolCallId"] and edit["statuses"][-1] == "failed"
    assert text(r, "ask") == "Understood, I left notes.txt alone. You said: tidy up"
    assert text(r, "allow") == "Edited notes.txt. You said: tidy up"
    assert stop(r, "choose") == "end_turn"
    assert text(r, "choose").startswith("You chose: Red, Blue, teal.")

    # The socket was cut after "tick 5.": the turn resumed after the last sequence seen.
    assert stop(r, "drop") == "end_turn"
    assert text(r, "drop") == "".join(f"tick {i}. " for i in range(1, 21)) + "You said: go"
    assert proxy.cut and "reconnecting (attempt 1)" in r["bridge_log"]

    assert stop(r, "stop") == "cancelled"
    assert step(r, "stop")["cancel_to_answer_s"] < 2
    e = error(r, "fail")
    assert "the demo agent failed on purpose" in e["message"]
    assert stop(r, "after") == "end_turn" and text(r, "after") == "You said: hello again"
    assert TOKEN not in peer_log


async def test_headless_and_output_schema_pass_through_from_our_ws_front(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with trio.fail_after(90):
        async with sio_server(tmp_path) as server:
            doc = peer_config(tmp_path)
            doc["routes"] = {"platform": {"back": {"kind": "chat", "url": server.url, "dialect": "socketio"}}}
            async with start_daemon(bridge_exe, tmp_path, clean_env, doc, name="bridge") as bridge:
                async with httpx.AsyncClient(base_url=bridge.url, trust_env=False) as h:
                    sid = (await h.post("/api/sessions", json={"route": "platform"})).json()["session_id"]
                async with open_websocket_url(bridge.url.replace("http://", "ws://") + "/ws") as ws:
                    await ws.send_message(json.dumps({"event": "chat:send", "data": {
                        "session_id": sid, "message": "headless", "headless": True, "output_schema": schema}}))  # fmt: skip
                    while True:
                        frame = json.loads(await ws.get_message())
                        if frame["event"] == "chat:end":
                            break
            sends = await server.events("chat:send")
    assert sends[0]["headless"] is True and sends[0]["output_schema"] == schema
    assert frame["data"]["status"] == "completed"
    assert frame["data"]["result"]["output"] == {"city": "Paris", "headless": True, "schema": schema}


async def test_structured_output_and_progress_cross_two_agent_bridges(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    """Our /ws front → chat back → another agent-bridge's /ws → the demo: a headless run's
    data stays a value end to end; otherwise it degrades to a JSON text item, and status
    text is a thinking item, not the answer (issue 15, findings 3 and 4)."""
    data = {"key": "value", "count": 42, "ratio": 0.5, "nested": {"ok": True, "none": None}}
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, peer_config(tmp_path), name="peer") as peer:
            doc = peer_config(tmp_path)
            doc["routes"] = {"platform": {"back": {"kind": "chat", "url": peer.url.replace("http://", "ws://") + "/ws",
                                                   "session_params": {"route": "demo"}}}}  # fmt: skip
            async with start_daemon(bridge_exe, tmp_path, clean_env, doc, name="bridge") as bridge:
                async with httpx.AsyncClient(base_url=bridge.url, trust_env=False) as h:
                    sid = (await h.post("/api/sessions", json={"route": "platform"})).json()["session_id"]
                runs: list[list[dict[str, Any]]] = []
                async with open_websocket_url(bridge.url.replace("http://", "ws://") + "/ws") as ws:
                    for message, headless in (("data: hi", True), ("progress: data: hi", False)):
                        await ws.send_message(json.dumps({"event": "chat:send", "data": {"session_id": sid, "message": message, "headless": headless}}))
                        runs.append([])
                        while not runs[-1] or runs[-1][-1]["event"] != "chat:end":
                            runs[-1].append(json.loads(await ws.get_message()))

    def items(frames: list[dict[str, Any]], kind: str) -> list[str]:
        return [f["data"]["data"]["content"] for f in frames if f["event"] == "turn:patch"
                and f["data"]["patch_type"] == "add_content" and f["data"]["data"]["type"] == kind]  # fmt: skip

    headless, plain = runs
    assert headless[-1]["data"]["status"] == "completed" and headless[-1]["data"]["result"] == {"output": data}
    assert type(headless[-1]["data"]["result"]["output"]["count"]) is int
    assert json.loads(items(plain, "text")[0]) == data and items(plain, "text")[-1] == "You said: hi"
    assert items(plain, "thinking") == ["Working on it."]


async def test_a2a_front_reaches_a_socketio_agent(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    """An A2A client (JSON-RPC 1.0, streaming) → the bridge's A2A front → the chat back."""
    with trio.fail_after(90):
        async with sio_server(tmp_path, "--token", TOKEN) as server:
            doc = peer_config(tmp_path)
            doc["routes"] = {
                "platform": {"back": {"kind": "chat", "url": server.url, "dialect": "socketio", "token_env": "PLATFORM_TOKEN"}}
            }
            async with start_daemon(bridge_exe, tmp_path, {**clean_env, "PLATFORM_TOKEN": TOKEN}, doc, name="bridge") as bridge:
                async with httpx.AsyncClient(base_url=bridge.url, trust_env=False, timeout=30) as h:
                    hello = await _a2a_stream(
                        h, {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hello a2a"}, {"data": {"k": 1}}]}
                    )
                    task_id = hello[0]["task"]["id"] if "task" in hello[0] else hello[0]["statusUpdate"]["taskId"]
                    context = _context_of(hello)
                    ask = await _a2a_stream(h, {"role": "ROLE_USER", "messageId": "m2", "contextId": context, "parts": [{"text": "ask"}]})
                    asked = [e for e in ask if e.get("statusUpdate", {}).get("status", {}).get("state") == "TASK_STATE_INPUT_REQUIRED"]
                    ask_task = _task_of(ask)
                    answer = await _a2a_stream(
                        h,
                        {"role": "ROLE_USER", "messageId": "m3", "contextId": context, "taskId": ask_task,
                         "parts": [{"data": {"selected": ["1"]}}]},
                    )  # fmt: skip
            sends = await server.events("chat:send")
    assert task_id
    assert "You said: a2a" in _texts(hello)
    # A data part stays structured: its own message item, the JSON as its text (ACP `ContentBlock` ↔ Blade `chat:send` message items).
    assert sends[0]["message"] == [{"type": "text", "text": "hello a2a"}, {"type": "text", "text": '{"k":1}'}]
    assert _state(hello) == "TASK_STATE_COMPLETED"
    assert asked, ask
    assert _state(answer) == "TASK_STATE_COMPLETED"
    assert "You chose: SQLite" in _texts(answer)
    assert sends[-1]["askuser_answer"]["selections"] == {"0": [1]}


async def test_a2a_front_stop_drop_and_fork_on_a_socketio_agent(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with sio_server(tmp_path) as server:
            doc = peer_config(tmp_path)
            doc["routes"] = {"platform": {"back": {"kind": "chat", "url": server.url, "dialect": "socketio", "reconnect_backoff_s": 0.05},
                                          "cancel_grace_s": 3}}  # fmt: skip
            async with start_daemon(bridge_exe, tmp_path, clean_env, doc, name="bridge") as bridge:
                async with httpx.AsyncClient(base_url=bridge.url, trust_env=False, timeout=30) as h:
                    fork = await _a2a_stream(h, {"role": "ROLE_USER", "messageId": "f1", "parts": [{"text": "fork"}]})
                    context = _context_of(fork)

                    def msg(mid: str, text: str) -> dict[str, Any]:
                        return {"role": "ROLE_USER", "messageId": mid, "contextId": context, "parts": [{"text": text}]}

                    stopped = await _a2a_stream(h, msg("s1", "slow 200"), cancel_after_chunks=3)
                    dropped = await _a2a_stream(h, msg("d1", "drop 12"))
            log = await server.log()
    assert _state(fork) == "TASK_STATE_COMPLETED" and "Fork done." in _artifact_text(fork)
    assert _state(stopped) == "TASK_STATE_CANCELED"
    assert 3 <= _artifact_text(stopped).count("tick") < 200
    assert any(e.get("event") == "chat:stop" for e in log)
    assert _state(dropped) == "TASK_STATE_COMPLETED"
    assert _artifact_text(dropped) == "".join(f"d{i} " for i in range(1, 13))
    assert [e["kind"] for e in log].count("cut") == 1


async def test_a2a_front_reaches_another_agent_bridge(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    """A2A client → our A2A front → the chat back ("ws") → a second agent-bridge's /ws → its demo agent."""
    with trio.fail_after(90):
        async with start_daemon(bridge_exe, tmp_path, clean_env, peer_config(tmp_path), name="peer") as peer:
            doc = peer_config(tmp_path)
            doc["routes"] = {"chained": {"back": {"kind": "chat", "url": peer.url.replace("http://", "ws://") + "/ws",
                                                  "session_params": {"route": "demo"}}}}  # fmt: skip
            async with start_daemon(bridge_exe, tmp_path, clean_env, doc, name="bridge") as bridge:
                async with httpx.AsyncClient(base_url=bridge.url, trust_env=False, timeout=30) as h:
                    first = await _a2a_stream(h, {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "fork: hello"}]}, route="chained")
                    context = _context_of(first)
                    ask = await _a2a_stream(h, {"role": "ROLE_USER", "messageId": "m2", "contextId": context,
                                                "parts": [{"text": "ask: tidy"}]}, route="chained")  # fmt: skip
                    answer = await _a2a_stream(h, {"role": "ROLE_USER", "messageId": "m3", "contextId": context, "taskId": _task_of(ask),
                                                   "parts": [{"data": {"selected": ["allow"]}}]}, route="chained")  # fmt: skip
    assert _state(first) == "TASK_STATE_COMPLETED"
    assert _artifact_text(first) == "You said: hello"
    assert "The sub-agent read README.md." in _texts(first)  # the fork, in status messages
    assert _state(ask) == "TASK_STATE_INPUT_REQUIRED"
    assert "Allow" in json.dumps(ask)
    assert _state(answer) == "TASK_STATE_COMPLETED"
    assert _artifact_text(answer) == "Edited notes.txt. You said: tidy"


async def _a2a_stream(
    h: httpx.AsyncClient, message: dict[str, Any], *, route: str = "platform", cancel_after_chunks: int = 0
) -> list[dict[str, Any]]:
    """SendStreamingMessage (A2A 1.0 JSON-RPC): every event; with `cancel_after_chunks`,
    a CancelTask once that many artifact chunks arrived (the stream is read to its end)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
    out: list[dict[str, Any]] = []
    async with h.stream("POST", f"/a2a/{route}", json=body, headers=headers) as resp:
        assert resp.status_code == 200, await resp.aread()
        async for line in resp.aiter_lines():
            if line.startswith("data:"):
                msg = json.loads(line[5:])
                assert "result" in msg, msg
                out.append(msg["result"])
                chunks = sum(1 for e in out if "artifactUpdate" in e)
                if cancel_after_chunks and chunks == cancel_after_chunks and "artifactUpdate" in msg["result"]:
                    cancel = {"jsonrpc": "2.0", "id": 2, "method": "CancelTask", "params": {"id": _task_of(out)}}
                    answer = (await h.post(f"/a2a/{route}", json=cancel, headers={"A2A-Version": "1.0"})).json()
                    assert "result" in answer, answer
    return out


def _artifact_text(events: list[dict[str, Any]]) -> str:
    return "".join(p.get("text", "") for e in events if "artifactUpdate" in e for p in e["artifactUpdate"]["artifact"]["parts"])


def _context_of(events: list[dict[str, Any]]) -> str:
    for e in events:
        for v in e.values():
            if isinstance(v, dict) and v.get("contextId"):
                return str(v["contextId"])
    raise AssertionError(events)


def _task_of(events: list[dict[str, Any]]) -> str:
    for e in events:
        if "task" in e:
            return str(e["task"]["id"])
        for v in e.values():
            if isinstance(v, dict) and v.get("taskId"):
                return str(v["taskId"])
    raise AssertionError(events)


def _state(events: list[dict[str, Any]]) -> str | None:
    state = None
    for e in events:
        st = e.get("statusUpdate", {}).get("status") or e.get("task", {}).get("status")
        if st:
            state = st.get("state")
    return state


def _texts(events: list[dict[str, Any]]) -> str:
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if isinstance(v.get("text"), str):
                found.append(v["text"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(events)
    return "".join(found)


async def test_doctor_connects_to_each_chat_back(bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with sio_server(tmp_path, "--token", TOKEN) as server:
            config = tmp_path / "doctor.toml"
            config.write_text(
                route_toml(url=server.url, dialect="socketio", token_env="PLATFORM_TOKEN")
                + '[routes.wrong]\nback = { kind = "chat", url = "%s", dialect = "socketio", token_env = "WRONG" }\n' % server.url
            )
            proc = await trio.run_process(
                [*bridge_exe, "doctor", "--config", str(config)],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**clean_env, "PLATFORM_TOKEN": TOKEN, "WRONG": "nope"},
            )
    out = proc.stdout.decode()
    assert proc.returncode == 1, out
    rows = [" ".join(line.split()) for line in out.splitlines()]  # the columns' widths are the table's
    assert f"platform chat ok Socket.IO (namespace /) connected at {server.url}" in rows, out
    assert any(r.startswith("wrong chat FAILED route wrong: the chat server at") for r in rows), out
    assert "invalid token (check the token in $WRONG)" in out
    assert TOKEN not in out + proc.stderr.decode()


async def test_a_turn_cut_off_by_its_deadline_stops_the_remote_run(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with sio_server(tmp_path) as server:
            config = route_toml("turn_timeout_s = 0.5", url=server.url, dialect="socketio")
            r = await drive(config, [{"name": "long", "prompt": "slow 200"}, {"name": "next", "prompt": "hello there"}])
            log = await server.log()
    e = error(r, "long")
    assert "turn_timeout_s" in e["message"] and step(r, "long")["elapsed_s"] < 3
    assert [x["event"] for x in log if x.get("event") in ("chat:send", "chat:stop")] == ["chat:send", "chat:stop", "chat:send"]
    assert stop(r, "next") == "end_turn"  # the server was not left busy
