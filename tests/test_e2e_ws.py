"""End to end: the real `agent-bridge serve` process, a WebSocket client, httpx for REST.

The daemon runs the demo back (the chat event stream on `/ws`, Blade Agent API docs api/chat-flow.md, the REST API
on `/api/sessions`); every test starts its own daemon on a port the OS chooses and has
a `trio.fail_after` ceiling.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from daemon_support import RawWs, raw_ws, ws_frame
from trio_websocket import ConnectionClosed, ConnectionRejected, WebSocketConnection, open_websocket_url

PATCH_TYPES = {"add_content", "add_tool_call", "tool_result", "set_status", "set_tool_status"}
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _toml(value: Any) -> str:
    return json.dumps(value)  # strings, numbers, booleans and string lists are the same in TOML


class Daemon:
    def __init__(self, url: str, proc: trio.Process, log: Path) -> None:
        self.url = url
        self.ws_url = url.replace("http://", "ws://") + "/ws"
        self.proc = proc
        self.log = log

    def http(self, **kw: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=10, **kw)

    async def session(self, route: str = "demo", **kw: Any) -> str:
        async with self.http(**kw) as h:
            r = await h.post("/api/sessions", json={"route": route})
            assert r.status_code == 200, r.text
            return r.json()["session_id"]

    @contextlib.asynccontextmanager
    async def ws(self, **kw: Any) -> AsyncIterator[Client]:
        async with open_websocket_url(self.ws_url, max_message_size=16 * 1024 * 1024, **kw) as conn:
            yield Client(conn)


class Client:
    def __init__(self, conn: WebSocketConnection) -> None:
        self.conn = conn
        self.frames: list[dict[str, Any]] = []
        self.commands: list[dict[str, Any]] = []  # session:commands (state, no sequence; tests/test_e2e_mcp.py)

    async def send(self, event: str | None = None, **data: Any) -> None:
        await self.conn.send_message(json.dumps({"event": event, "data": data} if event else data))

    async def recv(self) -> dict[str, Any]:
        while True:
            frame = json.loads(await self.conn.get_message())
            if frame["event"] != "session:commands":
                break
            self.commands.append(frame)
        self.frames.append(frame)
        return frame

    async def until(self, pred: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        got = []
        while True:
            frame = await self.recv()
            got.append(frame)
            if pred(frame):
                return got

    async def subscribe(self, session_id: str, after: int | None = None) -> int:
        data: dict[str, Any] = {"session_id": session_id}
        if after is not None:
            data["after_sequence"] = after
        await self.send("session:subscribe", **data)
        ack = await self.until(lambda f: f["event"] == "session:subscribed")
        return ack[-1]["data"]["sequence"]

    async def run(self, session_id: str, message: Any = "hello", **extra: Any) -> list[dict[str, Any]]:
        await self.send("chat:send", session_id=session_id, message=message, **extra)
        return await self.until(is_end)

    async def error(self) -> dict[str, Any]:
        return (await self.until(lambda f: f["event"] == "system:error"))[-1]["data"]


def is_end(frame: dict[str, Any]) -> bool:
    return frame["event"] == "chat:end"


def ask_call(frame: dict[str, Any]) -> bool:
    return (
        frame["event"] == "turn:patch"
        and frame["data"]["patch_type"] == "add_tool_call"
        and frame["data"]["data"]["tool_name"] == "AskUserQuestion"
    )


def sequences(frames: list[dict[str, Any]]) -> list[int]:
    return [
        f["data"]["sequence"]
        for f in frames
        if isinstance(f["data"].get("sequence"), int) and f["event"] != "session:subscribed"
    ]


def text_of(frames: list[dict[str, Any]], turn_suffix: str = ":root") -> str:
    return "".join(
        f["data"]["data"]["text_delta"]
        for f in frames
        if f["event"] == "turn:patch"
        and f["data"]["patch_type"] == "add_content"
        and f["data"]["data"]["type"] == "text"
        and f["data"]["turn_id"].endswith(turn_suffix)
    )


@contextlib.asynccontextmanager
async def serve(
    bridge_exe: list[str],
    tmp_path: Path,
    env: dict[str, str],
    *,
    ws: dict[str, Any] | None = None,
    demo: dict[str, Any] | None = None,
    routes: str = "",
) -> AsyncIterator[Daemon]:
    back = {"kind": "demo", "chunk_delay_s": 0.0, **(demo or {})}
    lines = [
        'default_route = "demo"',
        "[routes.demo]",
        "back = { " + ", ".join(f"{k} = {_toml(v)}" for k, v in back.items()) + " }",
        "[server]",
        'listen = "127.0.0.1:0"',
        "graceful_timeout_s = 1",
        "[daemon]",
        "acp_socket = false",  # several daemons run at once
        "shutdown_grace_s = 1",
        "[ws]",
        *(f"{k} = {_toml(v)}" for k, v in (ws or {}).items()),
        routes,
    ]
    config = tmp_path / "bridge.toml"
    config.write_text("\n".join(lines) + "\n")
    log = tmp_path / "daemon.log"
    with log.open("wb") as err:
        proc = await trio.lowlevel.open_process(
            [*bridge_exe, "serve", "--config", str(config), "--state-dir", str(tmp_path / "state")],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
        )
    try:
        buf = b""
        with trio.fail_after(15):
            while buf.count(b"\n") < 2:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, f"the daemon exited: {log.read_text()}"
                buf += chunk
        first, second = buf.decode().split("\n")[:2]
        assert first.startswith("listening http://127.0.0.1:"), first
        assert second == f"console: {first.split()[1]}/", second  # where a browser opens it
        yield Daemon(first.split()[1], proc, log)
        assert proc.returncode is None, f"the daemon died: {log.read_text()}"
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with trio.move_on_after(5):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()


@pytest.fixture
def env(clean_env: dict[str, str]) -> dict[str, str]:
    return {**clean_env, "AGENT_BRIDGE_WS_TOKEN": "s3cret-token"}


# -- a whole run --------------------------------------------------------------------------


async def test_a_run_streams_every_patch_type_questions_and_a_fork(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()
            async with d.ws() as c:
                assert await c.subscribe(sid) == 0
                await c.send("chat:send", session_id=sid, message="all: choose: hello")
                # ask: a permission question, answered single-select ("Allow")
                perm = (await c.until(ask_call))[-1]["data"]
                args = json.loads(perm["data"]["arguments"])["questions"][0]
                assert perm["data"]["status"] == "awaiting_answer"
                assert [o["label"] for o in args["options"]] == ["Allow", "Always allow", "Reject", "Never allow"]
                # Our extension: what the labels cannot say, for a chat back on another agent-bridge.
                ext = json.loads(perm["data"]["arguments"])["agentBridge"]
                assert ext["kind"] == "permission" and ext["toolCallId"].endswith("-edit")
                assert [(o["id"], o["kind"]) for o in ext["options"]][2:] == [("reject", "reject_once"), ("reject_always", "reject_always")]
                assert (await c.recv())["data"]["data"] == {"status": "paused"}
                await c.send(
                    "chat:send",
                    session_id=sid,
                    message="",
                    askuser_answer={"tool_call_id": perm["data"]["id"], "selections": {"0": [0]}},
                )
                # choose: multi-select with custom text
                choice = (await c.until(ask_call))[-1]["data"]
                assert json.loads(choice["data"]["arguments"])["questions"][0]["multiSelect"] is True
                await c.send(
                    "chat:send",
                    session_id=sid,
                    message="Red, Blue and teal",
                    askuser_answer={
                        "tool_call_id": choice["data"]["id"],
                        "selections": {"0": [0, 2]},
                        "custom": {"0": "teal"},
                    },
                )
                await c.until(is_end)
            frames = c.frames[1:]  # after the subscription's acknowledgement
            assert sequences(frames) == list(range(1, len(frames) + 1))
            patches = [f["data"] for f in frames if f["event"] == "turn:patch"]
            assert {p["patch_type"] for p in patches} == PATCH_TYPES
            kinds = {p["data"]["type"] for p in patches if p["patch_type"] == "add_content"}
            assert {"text", "thinking", "plan_status"} <= kinds
            assert all(
                "text_delta" in p["data"]
                for p in patches
                if p["patch_type"] == "add_content" and p["data"]["type"] in ("text", "thinking")
            )
            starts = [f["data"] for f in frames if f["event"] == "turn:start"]
            assert [(s["role"], s["parent_fork_tool_call_id"]) for s in starts] == [
                ("user", None),
                ("assistant", None),
                ("assistant", "m1-agent"),
            ]
            fork = [p for p in patches if p["turn_id"] == starts[2]["turn_id"]]
            assert {p["patch_type"] for p in fork} >= {"add_content", "add_tool_call", "tool_result"}
            answers = [
                p["data"]
                for p in patches
                if p["patch_type"] == "tool_result"
                and p["data"]["tool_call_id"] in (perm["data"]["id"], choice["data"]["id"])
            ]
            assert [a["result"] for a in answers] == [
                {"selections": {"0": [0]}, "custom": {}},
                {"selections": {"0": [0, 2]}, "custom": {"0": "teal"}},
            ]
            assert "Edited notes.txt. " in text_of(frames) and "You chose: Red, Blue, teal. " in text_of(frames)
            end = frames[-1]["data"]
            assert (end["status"], end["finish_reason"], end["result"]) == ("completed", "completed", None)
            root_end = [
                f["data"] for f in frames if f["event"] == "turn:end" and f["data"]["turn_id"].endswith(":root")
            ][0]
            assert root_end["usage"]["output_tokens"] > 0 and root_end["status"] == "completed"
            # REST: the same transcript, from the store
            async with d.http() as h:
                r = await h.get(f"/api/sessions/{sid}/messages")
                assert r.status_code == 200
                assert int(r.headers["x-chat-sequence"]) == end["sequence"]
                turns = r.json()
                ends = {f["data"]["turn_id"]: f["data"] for f in frames if f["event"] == "turn:end"}
                assert [t["turn_id"] for t in turns] == [s["turn_id"] for s in starts]
                for t in turns:
                    live = ends[t["turn_id"]]
                    assert (t["status"], t["blocks"], t["usage"]) == (live["status"], live["blocks"], live["usage"])
                    assert [(x["id"], x["status"], x["result"]) for x in t["tool_calls"]] == [
                        (x["id"], x["status"], x["result"]) for x in live["tool_calls"]
                    ]
                info = (await h.get(f"/api/sessions/{sid}")).json()
                assert info["status"] == "completed" and info["route"] == "demo"


async def test_bad_answers_get_an_error_and_the_question_stays_open(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()
            async with d.ws() as c:
                await c.send("chat:send", session_id=sid, message="ask: hi")  # the sender is subscribed
                ask = (await c.until(ask_call))[-1]["data"]["data"]["id"]
                for answer, code, words in [
                    ({"tool_call_id": ask, "custom": {"0": "sure"}}, "invalid_params", "not free text"),
                    ({"tool_call_id": ask, "selections": {"0": [7]}}, "invalid_params", "no option 7"),
                    ({"tool_call_id": ask, "selections": {"0": [0, 2]}}, "invalid_params", "takes one option"),
                    ({"tool_call_id": ask}, "invalid_params", "choose an option"),
                    ({"tool_call_id": "nope", "selections": {"0": [0]}}, "not_found", "no open AskUserQuestion"),
                ]:
                    await c.send("chat:send", session_id=sid, message="", askuser_answer=answer)
                    err = await c.error()
                    assert (err["code"], err["session_id"]) == (code, sid) and words in err["message"], err
                await c.send(
                    "chat:send",
                    session_id=sid,
                    message="no",
                    askuser_answer={"tool_call_id": ask, "selections": {"0": [2]}},
                )
                frames = await c.until(is_end)
                assert "Understood, I left notes.txt alone. " in text_of(frames)
                assert frames[-1]["data"]["status"] == "completed"


async def test_a_question_answered_with_custom_text_only(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()
            async with d.ws() as c:
                await c.send("chat:send", session_id=sid, message="choose: x")
                ask = (await c.until(ask_call))[-1]["data"]["data"]["id"]
                await c.send(
                    "chat:send",
                    session_id=sid,
                    message="",
                    askuser_answer={"tool_call_id": ask, "custom": {"0": "mauve"}},
                )
                assert "You chose: mauve. " in text_of(await c.until(is_end))


# -- headless -------------------------------------------------------------------------------


async def test_headless_with_and_without_a_schema(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()
            async with d.ws() as c:
                frames = await c.run(sid, "Paris", headless=True)
                assert any(f["event"] == "turn:patch" for f in frames)  # it still streams
                assert frames[-1]["data"]["result"] == {"output": "You said: Paris"}
                end = (await c.run(sid, '{"city": "Paris"}', headless=True, output_schema=SCHEMA))[-1]["data"]
                assert (end["status"], end["result"]) == ("completed", {"output": {"city": "Paris"}, "schema": SCHEMA})
                end = (await c.run(sid, '{"city": 3}', headless=True, output_schema=SCHEMA))[-1]["data"]
                assert (end["status"], end["finish_reason"]) == ("failed", "output_schema")
                assert "$.city: 3 is not of type 'string'" in end["result"]["error"]
                end = (await c.run(sid, "no json at all", output_schema=SCHEMA))[-1]["data"]
                assert end["status"] == "failed" and "not JSON" in end["result"]["error"]
                await c.send("chat:send", session_id=sid, message="x", headless=True, output_schema={"type": "banana"})
                err = await c.error()
                assert err["code"] == "invalid_params" and "not a valid JSON Schema" in err["message"]
                end = (await c.run(sid, "plain"))[-1]["data"]  # not headless: no result
                assert end["result"] is None
            # the replayed chat:end carries the same results (the options are kept with the session)
            async with d.ws() as c2:
                await c2.subscribe(sid, after=0)
                replayed = [f["data"] for f in c2.frames if f["event"] == "chat:end"]
                assert [e["result"] for e in replayed] == [
                    f["data"]["result"] for f in c.frames if f["event"] == "chat:end"
                ]


# -- stop, resume, several watchers ---------------------------------------------------------------


async def test_stop_mid_stream(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env, demo={"slow_duration_s": 20}) as d:
            sid = await d.session()
            async with d.ws() as c:
                await c.send("chat:send", session_id=sid, message="slow: go")
                await c.until(lambda f: f["event"] == "turn:patch" and "tick 2" in json.dumps(f))
                await c.send("chat:stop", session_id=sid)
                frames = await c.until(is_end)
                end = frames[-1]["data"]
                assert (end["status"], end["finish_reason"]) == ("interrupted", "interrupted")
                root = [f["data"] for f in frames if f["event"] == "turn:end"][-1]
                assert root["status"] == "interrupted"
                assert (await c.run(sid, "after the stop"))[-1]["data"]["status"] == "completed"


async def test_reconnect_mid_stream_with_after_sequence_gets_exactly_what_was_missed(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(40):
        async with serve(bridge_exe, tmp_path, env, demo={"slow_duration_s": 2}) as d:
            sid = await d.session()
            async with d.ws() as a:
                await a.subscribe(sid)
                await a.send("chat:send", session_id=sid, message="think: tool: slow: x")
                await a.until(lambda f: f["event"] == "turn:patch" and "tick 3" in json.dumps(f))
                seen = a.frames[1:]
            last = seen[-1]["data"]["sequence"]
            await trio.sleep(0.3)  # frames go on while nobody watches
            async with d.ws() as b:
                live_from = await b.subscribe(sid, after=last)
                assert live_from > last
                rest = await b.until(is_end)
            together = seen + [f for f in b.frames if f["event"] != "session:subscribed"]
            assert sequences(together) == list(range(1, len(together) + 1))  # no gap, no duplicate
            # a full replay derives the very same frames (timing fields aside)
            async with d.ws() as full:
                await full.subscribe(sid, after=0)
            replay = [f for f in full.frames if f["event"] != "session:subscribed"]

            def shape(f: dict[str, Any]) -> Any:
                data = {k: v for k, v in f["data"].items() if k not in ("duration_ms", "started_at")}
                if f["event"] == "turn:patch":
                    data["data"] = {k: v for k, v in data["data"].items() if k != "duration_ms"}
                if f["event"] == "turn:end":
                    data["tool_calls"] = [{**t, "duration_ms": None} for t in data["tool_calls"]]
                return f["event"], data

            assert [shape(f) for f in replay] == [shape(f) for f in together]
            assert rest[-1]["data"]["status"] == "completed"
            # resuming after the end: nothing to replay, live at once
            async with d.ws() as late:
                assert (
                    await late.subscribe(sid, after=together[-1]["data"]["sequence"])
                    == together[-1]["data"]["sequence"]
                )


async def test_several_sockets_watch_one_session(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()
            async with d.ws() as a, d.ws() as b, d.ws() as c:
                await a.subscribe(sid)
                await b.subscribe(sid)
                await c.subscribe(sid)
                await a.send("chat:send", session_id=sid, message="tool: fork: hi")
                got = [await x.until(is_end) for x in (a, b, c)]
                assert got[0] == got[1] == got[2]
                await c.send("session:unsubscribe", session_id=sid)
                await c.send("no:such-event")  # frames are handled in order: once this is answered,
                assert (await c.error())["code"] == "unknown_event"  # the unsubscribe is done
                await b.send("chat:send", session_id=sid, message="again")
                assert (await a.until(is_end))[-1]["data"]["sequence"] == (await b.until(is_end))[-1]["data"][
                    "sequence"
                ]
                with trio.move_on_after(0.5):
                    frame = await c.recv()
                    pytest.fail(f"an unsubscribed socket got {frame}")


# -- errors and limits ------------------------------------------------------------------------


async def test_bad_frames_and_unknown_events_get_errors_and_serving_goes_on(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env, demo={"slow_duration_s": 20}) as d:
            sid = await d.session()
            async with d.ws() as c, d.ws() as other:
                await c.conn.send_message("this is not json")
                assert (await c.error())["code"] == "parse_error"
                await c.conn.send_message('["a", "list"]')
                assert (await c.error())["code"] == "invalid_request"
                await c.send("chat:dance", session_id=sid)
                err = await c.error()
                assert err["code"] == "unknown_event" and "chat:send" in err["message"]
                await c.send("chat:send", message="no session id")
                err = await c.error()
                assert err["code"] == "invalid_params" and "session_id" in err["message"]
                await c.send("session:subscribe", session_id="no-such-session")
                err = await c.error()
                assert (err["code"], err["session_id"]) == ("not_found", "no-such-session")
                await c.send("session:subscribe", session_id=sid, after_sequence=-3)
                assert (await c.error())["code"] == "invalid_params"
                await c.send(
                    "chat:send",
                    session_id=sid,
                    message=[{"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}}],
                )
                assert "not valid base64" in (await c.error())["message"]
                await c.send("chat:send", session_id=sid, message="")
                assert (await c.error())["code"] == "invalid_params"
                await c.send("chat:send", session_id=sid, message="slow: busy")
                await c.until(lambda f: f["event"] == "turn:patch")
                await other.send("chat:send", session_id=sid, message="me too")
                assert (await other.error())["code"] == "busy"
                await c.send("chat:stop", session_id=sid)
                await c.until(is_end)
                # the same connection still works, with content items
                items = [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                    {"type": "file", "name": "notes.txt", "data": "aGVsbG8="},
                ]
                frames = await c.run(sid, items)
                user = [f["data"] for f in frames if f["event"] == "turn:start"][0]
                assert [b["type"] for b in user["blocks"]] == ["text", "image_url", "file"]
                assert frames[-1]["data"]["status"] == "completed"


async def test_an_oversized_frame_is_refused_and_closes_only_that_socket(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env, ws={"max_frame_bytes": 4096}) as d:
            sid = await d.session()
            async with d.ws() as big, d.ws() as fine:
                await big.send("chat:send", session_id=sid, message="x" * 5000)
                err = await big.error()
                assert err["code"] == "frame_too_large" and "4096" in err["message"]
                with pytest.raises(ConnectionClosed) as closed:
                    await big.recv()
                assert closed.value.reason.code == 1009
                assert (await fine.run(sid, "still here"))[-1]["data"]["status"] == "completed"


async def test_rate_limit_and_pings_on_quiet_sockets(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    ws = {"max_messages_per_s": 2, "message_burst": 3, "ping_interval_s": 0.2}
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env, ws=ws) as d:
            # A client that says nothing is pinged (RFC 6455 §5.5.2) by the front's one
            # pinger, each time it stays quiet for an interval: a keepalive with no timer
            # per connection. The pong goes back; the socket stays open and serves.
            stream, rest = await raw_ws(d.url)
            async with stream:
                quiet = RawWs(stream, rest)
                for _ in range(2):
                    got = await quiet.frame()
                    assert got is not None and got[0] == 9, got  # a ping
                    await stream.send_all(ws_frame(got[1], 10))  # its pong
                await stream.send_all(ws_frame(b'{"event": "nope"}'))
                while (got := await quiet.frame()) is not None and got[0] != 1:
                    assert got[0] == 9, got
                assert got is not None and b"unknown_event" in got[1]
            async with d.ws() as c:
                for _ in range(6):
                    await c.send("session:unsubscribe", session_id="x")
                errors = [await c.error() for _ in range(3)]
                assert {e["code"] for e in errors} == {"rate_limited"}
                await trio.sleep(0.6)  # tokens come back at the configured rate
                await c.send("nope")
                assert (await c.error())["code"] == "unknown_event"


async def test_token_and_origin(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    ws = {"token_env": "AGENT_BRIDGE_WS_TOKEN", "allowed_origins": ["http://chat.example"], "auth_timeout_s": 1}
    good = [(b"authorization", b"Bearer s3cret-token")]
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env, ws=ws) as d:
            # REST: no token, a wrong one, a bad origin; then the right token
            async with d.http() as h:
                r = await h.post("/api/sessions", json={})
                assert (r.status_code, r.headers["www-authenticate"]) == (401, "Bearer") and "detail" in r.json()
                # The console's page holds no data: it loads without the token, then asks for it.
                r = await h.get("/", headers={"origin": "http://evil.example"})
                assert r.status_code == 403
                r = await h.get("/")
                assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
                assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
                r = await h.get("/api/sessions", headers={"authorization": "Bearer wrong"})
                assert r.status_code == 401
                r = await h.get(
                    "/api/sessions", headers={"authorization": "Bearer s3cret-token", "origin": "http://evil.example"}
                )
                assert r.status_code == 403
                r = await h.get(
                    "/api/sessions", headers={"authorization": "Bearer s3cret-token", "origin": "http://chat.example"}
                )
                assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://chat.example"
                r = await h.options(
                    "/api/sessions", headers={"origin": "http://chat.example", "access-control-request-method": "POST"}
                )
                assert r.status_code == 204 and "authorization" in r.headers["access-control-allow-headers"]
            sid = await d.session(headers={"authorization": "Bearer s3cret-token"})
            # WebSocket: refused before the upgrade
            for headers, status in [
                ([(b"authorization", b"Bearer wrong")], 401),
                (good + [(b"origin", b"http://evil.example")], 403),
            ]:
                with pytest.raises(ConnectionRejected) as rejected:
                    async with d.ws(extra_headers=headers):
                        pass
                assert rejected.value.status_code == status
                assert "detail" in json.loads(rejected.value.body or b"{}")
            # the right header, from an allowed page
            async with d.ws(extra_headers=good + [(b"origin", b"http://chat.example")]) as c:
                assert (await c.run(sid, "hi"))[-1]["data"]["status"] == "completed"
            # no header: the first frame's auth.token, which may carry an event too
            async with d.ws() as c:
                await c.conn.send_message(
                    json.dumps(
                        {"event": "session:subscribe", "data": {"session_id": sid}, "auth": {"token": "s3cret-token"}}
                    )
                )
                await c.until(lambda f: f["event"] == "session:subscribed")
                assert (await c.run(sid, "hi"))[-1]["data"]["status"] == "completed"
            # a wrong first frame: system:error, then close 4401
            async with d.ws() as c:
                await c.conn.send_message(json.dumps({"auth": {"token": "nope"}}))
                assert (await c.error())["code"] == "unauthorized"
                with pytest.raises(ConnectionClosed) as closed:
                    await c.recv()
                assert closed.value.reason.code == 4401
            async with d.ws() as c:
                await c.send("session:subscribe", session_id=sid)  # no auth at all
                assert (await c.error())["code"] == "unauthorized"
                with pytest.raises(ConnectionClosed):
                    await c.recv()
            # silence: closed when auth_timeout_s runs out
            async with d.ws() as c:
                assert (await c.error())["code"] == "unauthorized"
                with pytest.raises(ConnectionClosed) as closed:
                    await c.recv()
                assert (closed.value.reason.code, closed.value.reason.reason) == (4401, "authentication timed out")
            assert "s3cret-token" not in d.log.read_text()


async def test_a_slow_client_is_disconnected_and_the_run_goes_on(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(60):
        async with serve(bridge_exe, tmp_path, env, ws={"queue_max_frames": 256, "slow_client_timeout_s": 1}) as d:
            sid = await d.session()
            async with d.ws() as slow:
                await slow.subscribe(sid)
                await slow.send("chat:send", session_id=sid, message="bench:50000")
                await trio.sleep(2)  # read nothing while the run streams
                with pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await slow.recv()
                assert closed.value.reason.code == 4008 and "slow consumer" in (closed.value.reason.reason or "")
                assert not any(is_end(f) for f in slow.frames)  # it was cut off, not served to the end
            async with d.http() as h:  # the run was never paused for it
                with trio.fail_after(20):
                    while (await h.get(f"/api/sessions/{sid}")).json()["status"] != "completed":
                        await trio.sleep(0.1)
            async with d.ws() as again:  # and it can resume from where it was cut off
                last = max(sequences(slow.frames))
                await again.send("session:subscribe", session_id=sid, after_sequence=last)
                assert (await again.recv())["data"]["sequence"] == last + 1


# -- REST -----------------------------------------------------------------------------------


async def test_rest_sessions(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env) as d:
            async with d.http() as h:
                ids = []
                for i in range(3):
                    r = await h.post("/api/sessions", json={"route": "demo", "intent": f"task {i}"})
                    assert r.status_code == 200
                    ids.append(r.json()["session_id"])
                assert (await h.post("/api/sessions", json={})).status_code == 200  # the default route
                r = await h.post("/api/sessions", json={"route": "nope"})
                assert r.status_code == 404 and "nope" in r.json()["detail"]
                r = await h.post("/api/sessions", content=b"{not json", headers={"content-type": "application/json"})
                assert r.status_code == 400 and "detail" in r.json()
                page = (await h.get("/api/sessions", params={"limit": 2, "offset": 1})).json()
                assert (page["total"], page["limit"], page["offset"], len(page["sessions"])) == (4, 2, 1, 2)
                assert (await h.get("/api/sessions", params={"limit": 0})).status_code == 400
                assert (await h.get("/api/sessions", params={"offset": "x"})).status_code == 400
                info = (await h.get(f"/api/sessions/{ids[0]}")).json()
                assert (info["session_id"], info["intent"], info["title"], info["status"]) == (
                    ids[0],
                    "task 0",
                    "task 0",
                    "created",
                )
                assert (await h.get(f"/api/sessions/{ids[0]}/messages")).json() == []
                async with d.ws() as c:
                    await c.run(ids[0], "hello")
                turns = (await h.get(f"/api/sessions/{ids[0]}/messages")).json()
                assert [t["role"] for t in turns] == ["user", "assistant"]
                assert turns[1]["blocks"][0] == {"type": "text", "content": "You said: hello"}
                async with d.ws() as c:  # three runs more: pages of two runs, newest first
                    for word in ("two", "three", "fail: four"):
                        end = await c.run(ids[0], word)
                assert (await h.get(f"/api/sessions/{ids[0]}")).json()["status"] == "failed"
                newest = await h.get(f"/api/sessions/{ids[0]}/messages", params={"limit": 2})
                assert int(newest.headers["x-chat-sequence"]) == end[-1]["data"]["sequence"]
                cursor = newest.headers["x-next-cursor"]
                assert newest.links["next"]["url"] == f"/api/sessions/{ids[0]}/messages?limit=2&before={cursor}"
                older = await h.get(newest.links["next"]["url"])
                assert "x-next-cursor" not in older.headers and "link" not in older.headers
                assert int(older.headers["x-chat-sequence"]) < int(newest.headers["x-chat-sequence"])
                full = (await h.get(f"/api/sessions/{ids[0]}/messages", params={"limit": 200})).json()
                assert older.json() + newest.json() == full and full[:2] == turns and len(full) == 8
                r = await h.get(f"/api/sessions/{ids[0]}/messages", params={"before": "not-a-cursor"})
                assert r.status_code == 400 and "cursor" in r.json()["detail"]
                r = await h.delete(f"/api/sessions/{ids[0]}")
                assert r.status_code == 200 and r.json()["deleted"] is True
                for path in (f"/api/sessions/{ids[0]}", f"/api/sessions/{ids[0]}/messages"):
                    r = await h.get(path)
                    assert r.status_code == 404 and "unknown session" in r.json()["detail"]
                assert (await h.delete(f"/api/sessions/{ids[0]}")).status_code == 404
                assert (await h.put(f"/api/sessions/{ids[1]}")).status_code == 405
                assert (await h.get("/healthz")).json() == {"status": "ok"}


async def test_deleting_a_session_tells_its_watchers_and_stops_its_run(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(30):
        async with serve(bridge_exe, tmp_path, env, demo={"slow_duration_s": 20}) as d:
            sid = await d.session()
            async with d.ws() as c:
                await c.send("chat:send", session_id=sid, message="slow: x")
                await c.until(lambda f: f["event"] == "turn:patch")
                async with d.http() as h:
                    assert (await h.get(f"/api/sessions/{sid}")).json()["status"] == "running"
                    assert (await h.delete(f"/api/sessions/{sid}")).status_code == 200
                err = await c.error()
                assert (err["code"], err["session_id"]) == ("not_found", sid)
                await c.send("session:subscribe", session_id=sid)
                assert (await c.error())["code"] == "not_found"


async def test_a_run_survives_a_daemon_restart_in_the_transcript(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    with trio.fail_after(40):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()
            async with d.ws() as c:
                frames = await c.run(sid, "tool: remember me")
                # A headless run whose output fails its schema: its options and check
                # are kept with its turn, and read back from there after the restart.
                frames += await c.run(sid, '{"city": 3}', headless=True, output_schema=SCHEMA)
                ends = [f["data"] for f in frames if f["event"] == "chat:end"]
                assert ends[-1]["finish_reason"] == "output_schema" and ends[-1]["result"]["schema"] == SCHEMA
        async with serve(bridge_exe, tmp_path, env) as d:
            async with d.http() as h:
                turns = (await h.get(f"/api/sessions/{sid}/messages")).json()
            assert "You said: remember me" in json.dumps(turns)
            async with d.ws() as c:
                await c.subscribe(sid, after=0)
                replay = [f for f in c.frames if f["event"] != "session:subscribed"]
                assert sequences(replay) == sequences(frames)
                assert [f["data"] for f in replay if f["event"] == "chat:end"] == ends
                assert (await c.run(sid, "and again"))[0]["data"]["sequence"] == sequences(frames)[-1] + 1


# -- the real backs ----------------------------------------------------------------------------

PEERS = Path(__file__).resolve().parent / "peers"


def answer_index(ask: dict[str, Any], label: str) -> int:
    options = json.loads(ask["data"]["arguments"])["questions"][0]["options"]
    return [o["label"] for o in options].index(label)


async def test_an_acp_agent_back(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    """The scriptable agent on the official ACP Python SDK (tests/peers/acp_agent_sdk.py), spawned by the ACP back."""
    agent = json.dumps([sys.executable, str(PEERS / "acp_agent_sdk.py")])
    routes = f'[routes.coder]\nback = {{ kind = "acp", command = {agent} }}\nquestion_timeout_s = 20\n'
    with trio.fail_after(60):
        async with serve(bridge_exe, tmp_path, env, routes=routes) as d:
            sid = await d.session("coder")
            async with d.ws() as c:
                frames = await c.run(sid, "think tool text:3")
                patches = [f["data"] for f in frames if f["event"] == "turn:patch"]
                assert {"add_content", "add_tool_call", "tool_result", "set_tool_status"} <= {
                    p["patch_type"] for p in patches
                }
                assert any(p["data"].get("type") == "thinking" for p in patches if p["patch_type"] == "add_content")
                assert "c0 c1 c2" in text_of(frames)
                assert frames[-1]["data"]["status"] == "completed"
                # a permission request of the agent: an AskUserQuestion, answered by label
                await c.send("chat:send", session_id=sid, message="ask")
                ask = (await c.until(ask_call))[-1]["data"]
                await c.send(
                    "chat:send",
                    session_id=sid,
                    message="",
                    askuser_answer={
                        "tool_call_id": ask["data"]["id"],
                        "selections": {"0": [answer_index(ask, "Reject")]},
                    },
                )
                assert "permission=reject" in text_of(await c.until(is_end))
                # stop mid-stream
                await c.send("chat:send", session_id=sid, message="slow")
                await c.until(lambda f: f["event"] == "turn:patch" and f["data"]["patch_type"] == "add_content")
                await c.send("chat:stop", session_id=sid)
                assert (await c.until(is_end))[-1]["data"]["status"] == "interrupted"
                frames = await c.run(sid, "text:2", headless=True)
                assert frames[-1]["data"]["result"]["output"].startswith("c0")
            assert sequences([f for f in c.frames]) == list(range(1, len(sequences(c.frames)) + 1))


@contextlib.asynccontextmanager
async def a2a_agent(tmp_path: Path) -> AsyncIterator[str]:
    """tests/peers/a2a_agent.py (the official a2a-sdk): its URL."""
    with (tmp_path / "a2a-agent.log").open("wb") as err:
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(PEERS / "a2a_agent.py")],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        buf = b""
        with trio.fail_after(30):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, (tmp_path / "a2a-agent.log").read_text()
                buf += chunk
        port = int(buf.split(b"\n")[0].split()[1])  # "PORT <n>"
        yield f"http://127.0.0.1:{port}"
    finally:
        with trio.CancelScope(shield=True):
            proc.terminate()
            with trio.move_on_after(5):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()


async def test_an_a2a_agent_back(bridge_exe: list[str], tmp_path: Path, env: dict[str, str]) -> None:
    with trio.fail_after(60):
        async with a2a_agent(tmp_path) as url:
            routes = f'[routes.research]\nback = {{ kind = "a2a", url = "{url}" }}\nquestion_timeout_s = 20\n'
            async with serve(bridge_exe, tmp_path, env, routes=routes) as d:
                sid = await d.session("research")
                async with d.ws() as c:
                    frames = await c.run(sid, "hello world")
                    assert "You said: hello world" in text_of(frames) and frames[-1]["data"]["status"] == "completed"
                    # input-required with options: an AskUserQuestion
                    await c.send("chat:send", session_id=sid, message="ask: pick one")
                    ask = (await c.until(ask_call))[-1]["data"]
                    await c.send(
                        "chat:send",
                        session_id=sid,
                        message="",
                        askuser_answer={"tool_call_id": ask["data"]["id"], "selections": {"0": [0]}},
                    )
                    assert "You chose:" in text_of(await c.until(is_end))
                    # a free-text question, answered with custom text
                    await c.send("chat:send", session_id=sid, message="askfree: your name?")
                    ask = (await c.until(ask_call))[-1]["data"]
                    await c.send(
                        "chat:send",
                        session_id=sid,
                        message="",
                        askuser_answer={"tool_call_id": ask["data"]["id"], "custom": {"0": "Ada"}},
                    )
                    assert "Hello, Ada!" in text_of(await c.until(is_end))
                    frames = await c.run(sid, "fail: now")
                    assert [f["event"] for f in frames[-2:]] == ["system:error", "chat:end"]
                    assert frames[-1]["data"]["status"] == "failed" and "boom" in frames[-1]["data"]["result"]["error"]


# -- fault isolation (issue 13) ---------------------------------------------------------------


async def _raw_ws(url: str, *, rcvbuf: int | None = None) -> tuple[trio.SocketStream, bytes]:
    """A WebSocket upgrade by hand, on a socket the test controls; returns what followed the 101."""
    return await raw_ws(url, rcvbuf=rcvbuf)


def _masked(event: str, **data: Any) -> bytes:
    """One masked client text frame (RFC 6455 §5.2)."""
    return ws_frame(json.dumps({"event": event, "data": data}).encode())


async def _reset(stream: trio.SocketStream) -> None:
    """Drop the connection without a close frame or a FIN: RST (SO_LINGER 0)."""
    import socket
    import struct

    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


async def test_watchers_dropping_their_connection_mid_stream_never_reach_the_daemon(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 13 finding 1: a watcher that vanished mid-stream made its connection start a
    writer in its closed nursery, and the error ended the daemon through the session."""
    import random

    rng = random.Random(13)  # random moments, the same ones on every run
    with trio.fail_after(120):
        async with serve(bridge_exe, tmp_path, env) as d:
            sid = await d.session()

            async def watcher(done: trio.Event) -> None:
                stream, buf = await _raw_ws(d.url)
                await stream.send_all(_masked("session:subscribe", session_id=sid))
                want = rng.randrange(1, 64 * 1024)  # drop after a random number of bytes
                async with trio.open_nursery() as nursery:
                    # ... or when the run ended, whichever comes first.
                    async def until_done() -> None:
                        await done.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(until_done)
                    while len(buf) < want:
                        chunk = await stream.receive_some(65536)
                        if not chunk:
                            break
                        buf += chunk
                    nursery.cancel_scope.cancel()
                await _reset(stream)

            async with d.ws() as streamer:
                await streamer.subscribe(sid)
                for _ in range(8):
                    done = trio.Event()
                    async with trio.open_nursery() as nursery:
                        for _ in range(20):
                            nursery.start_soon(watcher, done)
                        await streamer.send("chat:send", session_id=sid, message="bench:3000")
                        frames = await streamer.until(is_end)
                        done.set()
                    assert frames[-1]["data"]["status"] == "completed", frames[-1]
                    assert not any(f["event"] == "system:error" for f in frames)
            assert d.proc.returncode is None, d.log.read_text()
            async with d.ws() as c:  # a normal turn, as if nothing had happened
                await c.subscribe(sid)
                frames = await c.run(sid, "hello")
                assert frames[-1]["data"]["status"] == "completed" and "hello" in text_of(frames)
            assert "Traceback" not in d.log.read_text()


async def test_a_flood_of_new_sessions_stays_under_the_live_cap(
    bridge_exe: list[str], tmp_path: Path, env: dict[str, str]
) -> None:
    """Issue 13 finding 9: each POST /api/sessions stayed live for idle_session_close_s.
    With a cap, the longest-idle session makes room; with none idle, a clear refusal."""
    capped = '[routes.capped]\nback = { kind = "demo" }\nmax_live_sessions = 5'

    async def live(h: httpx.AsyncClient) -> int:
        text = (await h.get("/metrics")).text
        line = next((ln for ln in text.splitlines() if ln.startswith('agent_bridge_sessions_live{route="capped"}')), None)
        return int(float(line.split()[-1])) if line else 0

    with trio.fail_after(60):
        async with serve(bridge_exe, tmp_path, env, routes=capped) as d:
            async with d.http() as h:
                flood: list[str] = []

                async def post(n: int) -> None:
                    for _ in range(n):
                        r = await h.post("/api/sessions", json={"route": "capped"})
                        assert r.status_code == 200, r.text
                        flood.append(r.json()["session_id"])

                async with trio.open_nursery() as nursery:
                    for _ in range(10):
                        nursery.start_soon(post, 20)
                assert len(flood) == 200
                assert await live(h) <= 5
                # Every flooded session stayed in the store.
                assert (await h.get(f"/api/sessions/{flood[0]}")).status_code == 200
                # Five watched sessions: none is idle, so a sixth is refused (HTTP 503).
                async with contextlib.AsyncExitStack() as stack:
                    for _ in range(5):
                        sid = await d.session("capped")
                        c = await stack.enter_async_context(d.ws())
                        await c.subscribe(sid)
                    r = await h.post("/api/sessions", json={"route": "capped"})
                    assert r.status_code == 503 and "max_live_sessions" in r.json()["detail"], r.text
                    assert await live(h) == 5
                    # On /ws the same refusal is a system:error "overloaded", and the socket goes on.
                    await c.send("session:subscribe", session_id=flood[0])
                    err = await c.error()
                    assert err["code"] == "overloaded", err
                # Watchers gone: the first session comes back by id, with its history.
                async with d.ws() as c:
                    await c.subscribe(flood[0])
                    assert (await c.run(flood[0], "back again"))[-1]["data"]["status"] == "completed"
