"""End to end: MCP prompts as slash commands on every front, and the bridge as an MCP server.

Real processes only: `agent-bridge acp`, `agent-bridge serve` and `agent-bridge mcp`;
prompt sources are `@modelcontextprotocol/server-everything` from npm (over stdio,
and over Streamable HTTP bound to 127.0.0.1) and tests/peers/mcp_prompts_server.py, a
prompts server built with the `mcp` SDK that changes its list (and exits) on command.
Clients: a raw ACP client (tests/daemon_support.py), a WebSocket chat client, and the
`mcp` SDK's client, in this test under trio. Node and npm are required: without them
these tests fail, they do not skip. Every test has a `trio.fail_after` ceiling.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import open_websocket_url

from daemon_support import AcpClient
from mcp_support import TEAM_PROMPTS, Control, config_text, everything_http, node_and_everything, prompts_server_http

CEILING_S = 60


@pytest.fixture(scope="module")
def node() -> str:
    return node_and_everything()


@pytest.fixture
def control(tmp_path: Path) -> Control:
    return Control(tmp_path / "team.json", [dict(p) for p in TEAM_PROMPTS])


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bridge.toml"
    path.write_text(text)
    return path


# -- ACP: what an editor sees -----------------------------------------------------------------


@contextlib.asynccontextmanager
async def acp_bridge(bridge_exe: list[str], env: dict[str, str], config: Path, tmp_path: Path) -> AsyncIterator[AcpClient]:
    log = (tmp_path / "acp.log").open("wb")
    proc = await trio.lowlevel.open_process(
        [*bridge_exe, "acp", "demo", "--config", str(config), "--state-dir", str(tmp_path / "state")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env,
    )  # fmt: skip
    client = AcpClient(proc.stdout, proc.stdin)  # type: ignore[arg-type]
    try:
        async with client.running():
            yield client
    finally:
        with trio.CancelScope(shield=True):
            await proc.stdin.aclose()  # type: ignore[union-attr]
            with trio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            log.close()


def acp_commands(client: AcpClient, session_id: str) -> dict[str, dict[str, Any]] | None:
    """The last command list the editor got for the session, by name."""
    for note in reversed(client.notes):
        update = note["params"].get("update", {}) if note["method"] == "session/update" else {}
        if note["params"].get("sessionId") == session_id and update.get("sessionUpdate") == "available_commands_update":
            return {c["name"]: c for c in update["availableCommands"]}
    return None


async def acp_until_commands(client: AcpClient, sid: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    await client.until(lambda: (cmds := acp_commands(client, sid)) is not None and pred(cmds), timeout=30)
    return acp_commands(client, sid)  # type: ignore[return-value]


async def acp_turn(client: AcpClient, sid: str, text: str) -> tuple[dict[str, Any], str]:
    before = len(client.chunks(sid))
    msg = await client.response(await client.prompt(sid, text), timeout=30)
    return msg, "".join(client.chunks(sid)[before:])


async def test_acp_editor_lists_runs_and_is_refused_and_sees_changes(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path, node: str, control: Control
) -> None:
    with trio.fail_after(CEILING_S):
        config = write_config(tmp_path, config_text(stdio_everything=node, team_control=control.path, listen=False))
        async with acp_bridge(bridge_exe, clean_env, config, tmp_path) as client:
            await client.init()
            sid = await client.new()
            cmds = await acp_until_commands(client, sid, lambda c: {"args-prompt", "greet"} <= set(c))
            # The demo's own commands, the template, both sources; the clash renamed.
            assert {"plan", "review", "simple-prompt", "team:simple-prompt", "completable-prompt"} <= set(cmds)
            assert cmds["args-prompt"]["description"] == "A prompt with two arguments, one required and one optional"
            assert cmds["args-prompt"]["input"] == {"hint": "<city> [state]"}
            assert cmds["review"]["input"] == {"hint": "<focus>"}
            assert cmds["simple-prompt"].get("input") is None

            # Run one with arguments: the back receives the prompt server-everything returned.
            msg, text = await acp_turn(client, sid, "/args-prompt Paris state=France")
            assert msg["result"] == {"stopReason": "end_turn"}
            assert text == "You said: What's weather in Paris, France?"
            msg, text = await acp_turn(client, sid, '/greet "Ada Lovelace"\nand be brief')
            assert text == "You said: Say hello to Ada Lovelace.[assistant message from /greet]\nHello!and be brief"
            msg, text = await acp_turn(client, sid, "/review tests")
            assert text == "You said: Review the code for tests.[assistant message from /review]\nI will start with the riskiest part."
            # The demo's own command still reaches the demo.
            msg, text = await acp_turn(client, sid, "/plan ship it")
            assert msg["result"] == {"stopReason": "end_turn"} and "You said: ship it" in text

            # A missing argument and an unknown command: a clear error, no turn.
            msg, _ = await acp_turn(client, sid, "/args-prompt")
            assert msg["error"]["code"] == -32602
            assert msg["error"]["message"] == "/args-prompt: missing required argument city (usage: /args-prompt <city> [state])"
            msg, _ = await acp_turn(client, sid, "/nothing-like-it")
            assert msg["error"]["code"] == -32602 and msg["error"]["message"].startswith("unknown command /nothing-like-it; commands are: /all, ")
            assert "/args-prompt <city> [state]" in msg["error"]["message"]
            # The session's history (replayed by session/load) holds the turns that ran, as typed.
            seen = len(client.notes)
            await client.result("session/load", {"sessionId": sid, "cwd": "/tmp", "mcpServers": []})
            typed = [
                n["params"]["update"]["content"]["text"]
                for n in client.notes[seen:]
                if n["params"].get("update", {}).get("sessionUpdate") == "user_message_chunk"
            ]
            assert typed == ["/args-prompt Paris state=France", '/greet "Ada Lovelace"\nand be brief', "/review tests", "/plan ship it"]

            # The source changes its list while connected: the editor gets the new list.
            control.set(TEAM_PROMPTS + [{"name": "farewell", "description": "Say goodbye", "text": "Goodbye!"}])
            cmds = await acp_until_commands(client, sid, lambda c: "farewell" in c)
            assert cmds["farewell"]["description"] == "Say goodbye"
            msg, text = await acp_turn(client, sid, "/farewell")
            assert text == "You said: Goodbye!"

            # The source dies: its commands go, the route keeps working; it is restarted and they return.
            control.crash()
            await acp_until_commands(client, sid, lambda c: "greet" not in c and "args-prompt" in c)
            msg, text = await acp_turn(client, sid, "/args-prompt Oslo")
            assert text == "You said: What's weather in Oslo?"
            cmds = await acp_until_commands(client, sid, lambda c: "greet" in c and "farewell" in c)
            msg, text = await acp_turn(client, sid, "/greet Grace")
            assert text.startswith("You said: Say hello to Grace.")


# -- the daemon: chat front and MCP front ----------------------------------------------------------


class Serve:
    def __init__(self, url: str, proc: trio.Process, log: Path) -> None:
        self.url = url
        self.proc = proc
        self.log = log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.asynccontextmanager
async def serve(bridge_exe: list[str], env: dict[str, str], config: Path, tmp_path: Path) -> AsyncIterator[Serve]:
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = await trio.lowlevel.open_process(
            [*bridge_exe, "serve", "--config", str(config), "--state-dir", str(tmp_path / "state")],
            stdout=subprocess.PIPE, stderr=err, env=env,
        )  # fmt: skip
    try:
        buf = b""
        with trio.fail_after(20):
            while b"\n" not in buf:
                chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
                assert chunk, log.read_text()
                buf += chunk
        yield Serve(buf.split()[1].decode(), proc, log)
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                with trio.move_on_after(15):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


class Chat:
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.frames: list[dict[str, Any]] = []

    async def send(self, event: str, **data: Any) -> None:
        await self.conn.send_message(json.dumps({"event": event, "data": data}))

    async def until(self, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            frame = json.loads(await self.conn.get_message())
            self.frames.append(frame)
            if pred(frame):
                return frame


def commands_frame_with(*names: str) -> Callable[[dict[str, Any]], bool]:
    def pred(f: dict[str, Any]) -> bool:
        return f["event"] == "session:commands" and set(names) <= {c["name"] for c in f["data"]["commands"]}

    return pred


async def test_chat_front_gets_the_commands_runs_one_and_is_refused(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path, node: str, control: Control
) -> None:
    with trio.fail_after(CEILING_S):
        config = write_config(tmp_path, config_text(stdio_everything=node, team_control=control.path))
        async with serve(bridge_exe, clean_env, config, tmp_path) as daemon:
            async with httpx.AsyncClient(base_url=daemon.url) as h:
                sid = (await h.post("/api/sessions", json={"route": "demo"})).json()["session_id"]
            async with open_websocket_url(daemon.url.replace("http://", "ws://") + "/ws") as conn:
                chat = Chat(conn)
                await chat.send("session:subscribe", session_id=sid)
                await chat.until(lambda f: f["event"] == "session:subscribed")
                frame = await chat.until(commands_frame_with("greet", "args-prompt", "review", "plan"))
                assert "sequence" not in frame["data"] and frame["data"]["session_id"] == sid
                by_name = {c["name"]: c for c in frame["data"]["commands"]}
                assert by_name["greet"] == {"name": "greet", "description": "Greet someone", "hint": "<who>"}
                # The REST API offers the same commands, and the sources' state without detail.
                async with httpx.AsyncClient(base_url=daemon.url) as h:
                    routes = (await h.get("/api/routes")).json()
                    one = (await h.get(f"/api/sessions/{sid}")).json()
                assert routes["prompt_sources"] == [{"name": "everything", "status": "ok"}, {"name": "team", "status": "ok"}]
                shown = [{"hint": None, **c} for c in frame["data"]["commands"]]  # the frame leaves a null hint out
                assert routes["routes"][0]["commands"] == one["commands"] == shown

                await chat.send("chat:send", session_id=sid, message="/greet Alan")
                end = await chat.until(lambda f: f["event"] == "chat:end")
                assert end["data"]["status"] == "completed"
                text = "".join(
                    f["data"]["data"].get("text_delta", "")
                    for f in chat.frames
                    if f["event"] == "turn:patch" and f["data"]["patch_type"] == "add_content"
                )
                assert "You said: Say hello to Alan." in text

                await chat.send("chat:send", session_id=sid, message="/greet")
                error = await chat.until(lambda f: f["event"] == "system:error")
                assert error["data"]["code"] == "invalid_params"
                assert error["data"]["message"] == "/greet: missing required argument who (usage: /greet <who>)"

                control.set([{"name": "standup", "description": "Write the standup", "text": "standup"}])
                frame = await chat.until(commands_frame_with("standup"))
                assert "greet" not in {c["name"] for c in frame["data"]["commands"]}


@contextlib.asynccontextmanager
async def mcp_client(target: Any, notes: list[str] | None = None, elicit: Any = None) -> AsyncIterator[Any]:
    from mcp import Client

    async def handler(message: Any) -> None:
        if notes is not None:
            notes.append(type(message).__name__)

    async with Client(target, mode="legacy", cache=None, message_handler=handler, elicitation_callback=elicit) as client:
        yield client


def elicitor(answers: list[tuple[str, dict[str, Any] | None]], asked: list[Any]) -> Any:
    """An elicitation callback giving `answers` in order (action, content), keeping what it was asked."""
    import mcp_types as types

    async def elicit(context: Any, params: Any) -> Any:
        asked.append(params)
        action, content = answers[len(asked) - 1]
        return types.ElicitResult(action=action, content=content)  # type: ignore[arg-type]

    return elicit


async def all_prompts(client: Any) -> list[Any]:
    prompts, cursor = [], None
    while True:
        page = await client.list_prompts(cursor=cursor)
        prompts += page.prompts
        cursor = page.next_cursor
        if not cursor:
            return prompts


async def test_mcp_front_over_http_lists_gets_completes_announces_and_runs_tools(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path, node: str, control: Control
) -> None:
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

    with trio.fail_after(CEILING_S):
        config = write_config(tmp_path, config_text(stdio_everything=node, team_control=control.path))
        async with serve(bridge_exe, clean_env, config, tmp_path) as daemon:
            notes: list[str] = []
            async with mcp_client(daemon.url + "/mcp", notes) as client:
                assert client.protocol_version == "2025-11-25"
                caps = client.server_capabilities
                assert caps.prompts.list_changed and caps.tools.list_changed and caps.completions is not None
                names = [p.name for p in await all_prompts(client)]
                assert names[0] == "review"  # templates first
                assert {"args-prompt", "completable-prompt", "simple-prompt", "greet", "team:simple-prompt"} <= set(names)
                listed = {p.name: p for p in await all_prompts(client)}
                assert listed["args-prompt"].title == "Arguments Prompt"  # forwarded as the source lists it

                got = await client.get_prompt("review", {"focus": "style"})
                assert [(m.role, m.content.text) for m in got.messages] == [
                    ("user", "Review the code for style."),
                    ("assistant", "I will start with the riskiest part."),
                ]
                got = await client.get_prompt("args-prompt", {"city": "Lima"})
                assert got.messages[0].content.text == "What's weather in Lima?"
                got = await client.get_prompt("team:simple-prompt")
                assert got.messages[0].content.text == "team simple"
                with pytest.raises(MCPError) as err:
                    await client.get_prompt("review", {})
                assert err.value.code == -32602 and "focus" in err.value.message
                with pytest.raises(MCPError) as err:
                    await client.get_prompt("args-prompt", {})  # the source's own refusal, still invalid params
                assert err.value.code == -32602
                with pytest.raises(MCPError) as err:
                    await client.get_prompt("nope")
                assert err.value.code == -32602

                done = await client.complete(types.PromptReference(name="review"), {"name": "focus", "value": "st"})
                assert done.completion.values == ["style"]
                done = await client.complete(
                    types.PromptReference(name="completable-prompt"), {"name": "department", "value": "S"}
                )
                assert set(done.completion.values) == {"Sales", "Support"}
                done = await client.complete(
                    types.PromptReference(name="completable-prompt"), {"name": "name", "value": ""},
                    context_arguments={"department": "Engineering"},
                )  # fmt: skip
                assert done.completion.values == ["Alice", "Bob", "Charlie"]
                done = await client.complete(types.PromptReference(name="greet"), {"name": "who", "value": "A"})
                assert done.completion.values == ["Ada", "Alan"]

                notes.clear()
                control.set(TEAM_PROMPTS + [{"name": "retro", "description": "Run a retro", "text": "retro"}])
                with trio.fail_after(20):
                    while "PromptListChangedNotification" not in notes:
                        await trio.sleep(0.05)
                assert "retro" in [p.name for p in await all_prompts(client)]

                tools = (await client.list_tools()).tools
                assert [(t.name, t.description) for t in tools] == [("demo", "The demo agent")]
                assert tools[0].input_schema["required"] == ["prompt"]
                progress: list[tuple[float, str | None]] = []

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    progress.append((value, message))

                result = await client.call_tool("demo", {"prompt": "tool: the notes"}, progress_callback=on_progress)
                assert not result.is_error and result.content[0].text == "You said: the notes"
                assert result.structured_content["stop_reason"] == "end_turn"
                assert progress and progress == sorted(progress, key=lambda p: p[0])
                result = await client.call_tool("demo", {"prompt": "/greet Ada"})
                assert result.content[0].text == "You said: Say hello to Ada.[assistant message from /greet]\nHello!"
                again = await client.call_tool(
                    "demo", {"prompt": "and again", "session_id": result.structured_content["session_id"]}
                )
                assert again.content[0].text == "You said: and again"
                result = await client.call_tool("demo", {"prompt": "/greet"})
                assert result.is_error and result.content[0].text == "/greet: missing required argument who (usage: /greet <who>)"
                result = await client.call_tool("demo", {"prompt": "fail: now"})
                assert result.is_error and "failed on purpose" in result.content[0].text

                # Structured output is structuredContent (integers stay integers) and its
                # JSON text; status text is not part of the reply (issue 15, findings 3, 4).
                result = await client.call_tool("demo", {"prompt": "progress: data: the notes"}, progress_callback=on_progress)
                assert [c.text for c in result.content] == [
                    "You said: the notes",
                    '{"count":42,"key":"value","nested":{"none":null,"ok":true},"ratio":0.5}',
                ]
                sc = result.structured_content
                assert sc["count"] == 42 and type(sc["count"]) is int and sc["nested"] == {"ok": True, "none": None}
                assert sc["stop_reason"] == "end_turn" and sc["session_id"]
                # Images and links are the tool result's own content blocks (MCP 2025-11-25, Tool Result).
                result = await client.call_tool("demo", {"prompt": "image: the notes"})
                assert [c.type for c in result.content] == ["text", "image", "resource_link"]
                assert result.content[1].mime_type == "image/png" and base64.b64decode(result.content[1].data).startswith(b"\x89PNG")
                assert str(result.content[2].uri) == "file:///README.md" and result.content[2].name
                # A client that cannot elicit: the permission is rejected for it.
                result = await client.call_tool("demo", {"prompt": "ask: tidy"})
                assert result.content[0].text.startswith("Understood, I left notes.txt alone.")

            # A client that declared elicitation is asked (MCP 2025-11-25, Elicitation, form mode).
            asked: list[Any] = []
            answers = [("accept", {"choice": "Always allow"}), ("decline", None), ("accept", {"choice": ["Red", "Blue"], "other": "teal"})]
            async with mcp_client(daemon.url + "/mcp", elicit=elicitor(answers, asked)) as client:
                result = await client.call_tool("demo", {"prompt": "ask: tidy"})
                assert result.content[0].text == "Edited notes.txt. You said: tidy"
                result = await client.call_tool("demo", {"prompt": "ask: tidy"})
                assert result.content[0].text == "Understood, I left notes.txt alone. You said: tidy"
                result = await client.call_tool("demo", {"prompt": "choose: colours"})
                assert result.content[0].text.startswith("You chose: Red, Blue, teal.")
            assert asked[0].message == "Edit notes.txt?"
            assert asked[0].requested_schema["properties"]["choice"]["enum"] == ["Allow", "Always allow", "Reject", "Never allow"]
            colours = asked[2].requested_schema["properties"]
            assert colours["choice"]["items"]["enum"] == ["Red", "Green", "Blue"] and colours["other"]["type"] == "string"

            async with mcp_client(daemon.url + "/mcp") as client:
                # Cancelling the call (notifications/cancelled) cancels the turn.
                with trio.move_on_after(1.5):
                    await client.call_tool("demo", {"prompt": "/slowly"})
                with trio.fail_after(15):
                    while "turn ended: cancelled" not in daemon.log_text():
                        await trio.sleep(0.1)


async def test_mcp_front_over_stdio_and_everything_over_http_as_a_source(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path, node: str
) -> None:
    from mcp import StdioServerParameters

    with trio.fail_after(CEILING_S):
        async with everything_http(node, tmp_path / "everything.log") as url:
            config = write_config(tmp_path, config_text(http_everything=url, listen=False))
            params = StdioServerParameters(
                command=bridge_exe[0],
                args=[*bridge_exe[1:], "mcp", "--config", str(config), "--state-dir", str(tmp_path / "state")],
                env=clean_env,
            )
            async with mcp_client(params) as client:
                names = [p.name for p in await all_prompts(client)]
                assert {"review", "args-prompt", "simple-prompt", "resource-prompt"} <= set(names)
                got = await client.get_prompt("resource-prompt", {"resourceType": "Text", "resourceId": "3"})
                assert got.messages[1].content.type == "resource"
                result = await client.call_tool("demo", {"prompt": "/args-prompt Rome state=Lazio"})
                assert result.content[0].text == "You said: What's weather in Rome, Lazio?"
            asked: list[Any] = []
            async with mcp_client(params, elicit=elicitor([("accept", {"choice": "Allow"})], asked)) as client:
                result = await client.call_tool("demo", {"prompt": "ask: tidy"})
                assert result.content[0].text == "Edited notes.txt. You said: tidy" and len(asked) == 1


async def test_mcp_front_checks_origin_host_and_token_and_stops_promptly(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path
) -> None:
    with trio.fail_after(CEILING_S):
        extra = '\n[mcp]\ntoken_env = "MCP_TEST_TOKEN"\nallowed_origins = ["https://tools.example.com"]\n'
        config = write_config(tmp_path, config_text(extra=extra))
        env = {**clean_env, "MCP_TEST_TOKEN": "s3cret-token"}
        async with serve(bridge_exe, env, config, tmp_path) as daemon:
            url = daemon.url + "/mcp"
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
            accept = {"Accept": "application/json, text/event-stream"}
            auth = {**accept, "Authorization": "Bearer s3cret-token"}
            async with httpx.AsyncClient(timeout=10) as h:
                r = await h.post(url, json=init, headers=accept)
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
                r = await h.post(url, json=init, headers={**accept, "Authorization": "Bearer wrong"})
                assert r.status_code == 401
                r = await h.post(url, json=init, headers={**auth, "Origin": "http://evil.example.com"})
                assert r.status_code == 403 and "allowed_origins" in r.json()["error"]["message"]
                r = await h.post(url, json=init, headers={**auth, "Host": "evil.example.com"})
                assert r.status_code == 421  # Misdirected Request, as the MCP SDK's own check says it
                for origin in ("https://tools.example.com", "http://localhost:5173"):
                    r = await h.post(url, json=init, headers={**auth, "Origin": origin})
                    assert r.status_code == 200, r.text
                assert "s3cret-token" not in daemon.log_text()

            # An MCP client holding its notification stream open does not hold the stop.
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with create_mcp_http_client(headers={"Authorization": "Bearer s3cret-token"}) as http:
                transport = streamable_http_client(url, http_client=http, terminate_on_close=False)
                async with mcp_client(transport) as client:
                    assert (await client.list_tools()).tools[0].name == "demo"
                    await trio.sleep(0.5)  # its GET stream is open
                    started = time.monotonic()
                    daemon.proc.send_signal(signal.SIGTERM)
                    with trio.fail_after(4):  # graceful_timeout_s is 5
                        assert await daemon.proc.wait() == 0
                    assert time.monotonic() - started < 3



async def test_http_source_headers_come_from_a_file_or_the_environment_and_a_broken_source_is_harmless(
    bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path, control: Control
) -> None:
    from mcp import StdioServerParameters

    with trio.fail_after(CEILING_S):
        token = "tok-" + os.urandom(6).hex()
        (tmp_path / "token").write_text(token + "\n")
        async with prompts_server_http(control, tmp_path / "team.log", PROMPTS_TOKEN=token) as url:
            extra = f"""
[[routes.demo.prompt_sources]]
name = "team-file"
url = "{url}"
headers = {{ Authorization = {{ file = "{tmp_path / 'token'}", prefix = "Bearer " }} }}

[[routes.demo.prompt_sources]]
name = "team-env-wrong"
url = "{url}"
headers = {{ Authorization = {{ env = "WRONG_TOKEN", prefix = "Bearer " }} }}
retry_initial_s = 0.2

[[routes.demo.prompt_sources]]
name = "missing"
command = ["/nonexistent/mcp-server"]
retry_initial_s = 0.2
"""
            config = write_config(tmp_path, config_text(extra=extra, listen=False))
            env = {**clean_env, "WRONG_TOKEN": "not-" + token}
            log = (tmp_path / "mcp.log").open("wb")
            params = StdioServerParameters(
                command=bridge_exe[0],
                args=[*bridge_exe[1:], "mcp", "--config", str(config), "--state-dir", str(tmp_path / "state")],
                env=env,
            )
            from mcp import Client
            from mcp.client.stdio import stdio_client

            async with Client(stdio_client(params, errlog=log), mode="legacy", cache=None) as client:
                names = [p.name for p in await all_prompts(client)]
                assert {"review", "greet", "simple-prompt"} <= set(names), names
                assert not any(n.startswith(("team-env-wrong:", "missing:")) for n in names)
                result = await client.call_tool("demo", {"prompt": "/greet Ada"})
                assert result.content[0].text.startswith("You said: Say hello to Ada.")
            log.close()
            text = (tmp_path / "mcp.log").read_text()
            assert "prompt source team-env-wrong: Server returned an error response (HTTP 401)" in text
            assert "prompt source missing: cannot start '/nonexistent/mcp-server': No such file or directory; no commands from it" in text
            assert token not in text and f"not-{token}" not in text
