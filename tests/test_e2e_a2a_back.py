"""End to end: an editor (official ACP Python SDK) → `agent-bridge acp research` → a real A2A agent.

The agent is `tests/peers/a2a_agent.py`, built with the official a2a-sdk (1.3) and run
in its own process on a port the OS picks; the editor is `tests/peers/acp_driver_steps.py`,
which spawns the bridge and plays a list of prompts in one session. Both SDKs are
asyncio-only, hence their own processes. Between bridge and agent, the stream-cut
tests put a small loopback proxy run here, which drops the event stream mid-task.

What is checked comes from both ends: the editor's report (every chunk, question,
result and error, as the ACP SDK parsed them) and the agent's request log (what
reached it: methods, paths, headers, bodies).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from daemon_support import serve_peer
from steps_support import Drive, error, make_drive, step, stop

PEERS = Path(__file__).resolve().parent / "peers"
AGENT = PEERS / "a2a_agent.py"
PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
TOKEN = "s3cr3t-t0ken-do-not-log"


class Agent:
    def __init__(self, port: int, scheme: str) -> None:
        self.port = port
        self.url = f"{scheme}://127.0.0.1:{port}"

    async def log(self) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(trust_env=False, verify=False) as c:
            return (await c.get(f"{self.url}/_test/log")).json()  # type: ignore[no-any-return]

    async def calls(self) -> list[dict[str, Any]]:
        """The A2A calls (not the card fetches)."""
        return [r for r in await self.log() if not r["path"].startswith("/.well-known/")]


@contextlib.asynccontextmanager
async def run_agent(tmp_path: Path, *args: str) -> AsyncIterator[Agent]:
    log = tmp_path / f"agent-{os.getpid()}-{len(list(tmp_path.iterdir()))}.log"
    async with serve_peer([sys.executable, str(AGENT), *args], log) as port:
        yield Agent(port, "https" if "--tls-cert-out" in args else "http")


def _toml(v: Any) -> str:
    if isinstance(v, dict):
        return "{ " + ", ".join(f'"{k}" = {_toml(x)}' for k, x in v.items()) + " }"
    return json.dumps(v)


def back_toml(route: str = "", **back: Any) -> str:
    items = ", ".join(f"{k} = {_toml(v)}" for k, v in back.items())
    return f'[routes.research]\nback = {{ kind = "a2a", {items} }}\ncancel_grace_s = 3\n{route}\n'


@pytest.fixture
def drive(bridge_exe: list[str], state_dir: str, clean_env: dict[str, str], tmp_path: Path) -> Drive:
    return make_drive(bridge_exe, state_dir, clean_env, tmp_path, "research")


def texts(report: dict[str, Any], name: str, message_id: str | None = None) -> list[str]:
    return [
        c["content"]["text"]
        for c in step(report, name)["chunks"]
        if c["content"]["type"] == "text" and (message_id is None or c["messageId"] == message_id)
    ]


def sends(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The message of every send call, whatever the dialect and binding."""
    out = []
    for c in calls:
        b = c["body"]
        if not isinstance(b, dict):
            continue
        params = b.get("params") if "jsonrpc" in b else b
        if isinstance(params, dict) and isinstance(params.get("message"), dict):
            out.append(params["message"])
    return out


def op_of(call: dict[str, Any]) -> str:
    b = call["body"]
    if isinstance(b, dict) and "jsonrpc" in b:
        return str(b["method"])
    return f"{call['method']} {call['path']}"


# == every dialect × binding × streaming ====================================================

SCRIPT = [
    {"name": "hello", "prompt": "hello world"},
    {"name": "chunks", "prompt": "chunks:5"},
    {"name": "ask", "prompt": "ask:", "permission": "yes"},
    {"name": "askfree", "prompt": "askfree:", "form": {"answer": "Ada"}},
    {"name": "fail", "prompt": "fail:"},
    {"name": "reject", "prompt": "reject:"},
    {"name": "message", "prompt": "message: hi"},
    {"name": "files", "prompt": "files:"},
    {"name": "cancel", "prompt": "slow:40", "cancel_after_chunks": 3},
    {"name": "again", "prompt": "hello again"},
]

EXPECTED_OPS = {
    ("1.0", "jsonrpc", True): ("SendStreamingMessage", "CancelTask"),
    ("1.0", "jsonrpc", False): ("SendMessage", "CancelTask"),
    ("0.3", "jsonrpc", True): ("message/stream", "tasks/cancel"),
    ("0.3", "jsonrpc", False): ("message/send", "tasks/cancel"),
    ("1.0", "http+json", True): ("POST /rest/message:stream", "POST /rest/tasks/{}:cancel"),
    ("1.0", "http+json", False): ("POST /rest/message:send", "POST /rest/tasks/{}:cancel"),
    ("0.3", "http+json", True): ("POST /rest/v1/message:stream", "POST /rest/v1/tasks/{}:cancel"),
    ("0.3", "http+json", False): ("POST /rest/v1/message:send", "POST /rest/v1/tasks/{}:cancel"),
}


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "poll"])
@pytest.mark.parametrize("binding", ["jsonrpc", "http+json"])
@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
async def test_every_dialect_binding_and_mode(drive: Any, tmp_path: Path, dialect: str, binding: str, streaming: bool) -> None:
    with trio.fail_after(120):
        args = ("--mode", "both") + (() if streaming else ("--no-streaming",))
        async with run_agent(tmp_path, *args) as agent:
            config = back_toml(url=agent.url, dialect=dialect, binding=binding, poll_interval_s=0.05)
            r = await drive(config, SCRIPT, elicitation=True)
            calls = await agent.calls()

    # The card names the agent and its skills (A2A spec §8, `AgentSkill`).
    assert r["initialize"]["agentInfo"]["title"] == "Research Agent"
    assert [c["name"] for c in r["commands"]] == ["summarize", "web-search"]
    assert r["commands"][0]["input"]["hint"] == "e.g. summarize README.md"

    assert stop(r, "hello") == "end_turn"
    assert "You said: hello world" in texts(r, "hello", "answer")
    # The WORKING status message is status text (ProgressReported), never glued into the reply.
    assert "Working on hello. " not in texts(r, "hello", "answer") and texts(r, "hello", "answer") == ["You said: hello world"]

    assert stop(r, "chunks") == "end_turn"
    assert texts(r, "chunks", "stream") == ["c0 ", "c1 ", "c2 ", "c3 ", "c4 "]

    assert stop(r, "ask") == "end_turn"
    (perm,) = step(r, "ask")["permissions"]
    assert perm["toolCall"]["title"] == "Proceed with the plan?"
    assert [(o["optionId"], o["name"], o["kind"]) for o in perm["options"]] == [
        ("yes", "Yes, proceed", "allow_once"),
        ("no", "No, stop", "reject_once"),
    ]
    assert texts(r, "ask", "answer") == ["You chose: yes"]

    assert stop(r, "askfree") == "end_turn"
    (form,) = step(r, "askfree")["elicitations"]
    assert form["message"] == "What is your name?"
    assert texts(r, "askfree", "answer") == ["Hello, Ada!"]

    e = error(r, "fail")
    assert e["code"] == -32603
    assert "route research" in e["message"] and "boom: the agent failed on purpose" in e["message"]

    assert stop(r, "reject") == "refusal"
    assert stop(r, "message") == "end_turn"
    assert texts(r, "message") == ["Direct reply: hi"]

    assert stop(r, "files") == "end_turn"
    blocks = [c["content"] for c in step(r, "files")["chunks"] if c["messageId"] == "files"]
    assert [b["type"] for b in blocks] == ["text", "image", "resource_link", "resource"]
    if not (dialect == "0.3" and binding == "http+json"):
        # a2a-sdk's 0.3 REST adapter base64-encodes the base64 text once more (its bug).
        assert blocks[1] == {"type": "image", "data": PNG_1PX, "mimeType": "image/png"}
    assert blocks[2]["uri"] == "https://example.com/report.pdf" and blocks[2]["name"] == "report.pdf"
    assert blocks[2]["mimeType"] == "application/pdf"
    # a data part: structured, as an embedded JSON resource on ACP; a2a-sdk's 2.0 is the integer 2
    assert blocks[3]["resource"]["uri"] == "data:application/json" and blocks[3]["resource"]["text"] == '{"ok":true,"rows":2}'

    cancel = step(r, "cancel")
    assert cancel["result"]["stopReason"] == "cancelled", r["where"]
    streamed = texts(r, "cancel", "stream")
    assert 0 < len(streamed) < 40
    assert cancel["cancel_to_answer_s"] < 3

    assert stop(r, "again") == "end_turn"

    # -- what reached the agent ----------------------------------------------------------
    send_op, cancel_op = EXPECTED_OPS[(dialect, binding, streaming)]
    ops = [op_of(c) for c in calls]
    assert ops.count(send_op) >= len(SCRIPT) + 2, ops  # + the two answers
    assert any(op.startswith(cancel_op.split("{}")[0]) and op.endswith(cancel_op.split("{}")[-1]) for op in ops), ops
    if not streaming:
        assert any("GetTask" in op or "tasks/get" in op or (op.startswith("GET ") and "/tasks/" in op) for op in ops), ops
    for c in calls:
        assert c["headers"].get("a2a-version") == ("1.0" if dialect == "1.0" else None), c
    # A2A `docs/topics/life-of-a-task.md`: the first message carries no contextId; every later one carries the same.
    messages = sends(calls)
    assert "contextId" not in messages[0]
    context_ids = {m.get("contextId") for m in messages[1:]}
    assert len(context_ids) == 1 and None not in context_ids
    # The answers go on the task that asked, bound to the question's message.
    answers = [m for m in messages if m.get("taskId")]
    assert len(answers) == 2, answers
    for m in answers:
        assert m["metadata"]["agentBridge"]["inReplyTo"]
    parts = answers[0].get("parts") or answers[0].get("content")
    assert any("yes" in json.dumps(p) and "selected" in json.dumps(p) for p in parts), parts


# == questions the editor cannot show, auth, decline =========================================


async def test_question_as_text_when_the_editor_has_no_forms(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path) as agent:
            steps = [
                {"name": "ask", "prompt": "askfree:"},
                {"name": "answer", "prompt": "Grace"},
                {"name": "choose", "prompt": "ask:", "permission": "cancel"},
                {"name": "stop", "prompt": "ask:", "permission": "session_cancel"},
                {"name": "after", "prompt": "hello"},
            ]
            r = await drive(back_toml(url=agent.url), steps, elicitation=False)
            calls = await agent.calls()
    # No elicitation support: the question is written in the chat and the turn ends;
    # the user's next prompt answers it, on the same task (the last resort of `bridge.codecs.a2a.question_text`).
    assert stop(r, "ask") == "end_turn"
    assert "What is your name?" in "".join(texts(r, "ask"))
    assert stop(r, "answer") == "end_turn"
    assert texts(r, "answer", "answer") == ["Hello, Grace!"]
    messages = sends(calls)
    assert messages[1]["taskId"] and messages[1]["parts"][0]["text"] == "Grace"
    # A choice still reaches the editor as a permission request; dismissing it cancels the task.
    assert len(step(r, "choose")["permissions"]) == 1
    assert stop(r, "choose") == "cancelled"
    # Stop while the editor shows the question: the turn ends cancelled, the task too.
    assert stop(r, "stop") == "cancelled"
    assert step(r, "stop")["elapsed_s"] < 3
    assert [op_of(c) for c in calls].count("CancelTask") == 2
    assert stop(r, "after") == "end_turn"


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
async def test_cancel_answers_cancelled_even_when_the_task_is_not_cancelable(drive: Any, tmp_path: Path, dialect: str) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path) as agent:
            steps = [{"name": "stuck", "prompt": "nocancel:40", "cancel_after_chunks": 3}, {"name": "after", "prompt": "hello"}]
            r = await drive(back_toml(url=agent.url, dialect=dialect), steps)
            calls = await agent.calls()
    assert stop(r, "stuck") == "cancelled"  # never an error (A2A spec §3, CancelTask)
    assert step(r, "stuck")["cancel_to_answer_s"] < 3
    assert ("CancelTask" if dialect == "1.0" else "tasks/cancel") in [op_of(c) for c in calls]
    assert "did not cancel task" in r["bridge_log"] and "-32002" in r["bridge_log"]
    assert stop(r, "after") == "end_turn"


async def test_auth_required_is_an_acp_auth_error_and_the_next_prompt_continues(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path) as agent:
            r = await drive(back_toml(url=agent.url), [{"name": "auth", "prompt": "auth:"}, {"name": "go", "prompt": "signed in"}])
            calls = await agent.calls()
    e = error(r, "auth")
    assert e["code"] == -32000  # ACP auth_required (ACP schema `ErrorCode`)
    assert "route research" in e["message"] and "https://auth.example.com/login" in e["message"]
    assert stop(r, "go") == "end_turn"
    assert texts(r, "go", "answer") == ["Signed in; continuing with: signed in"]
    first, second = sends(calls)
    assert second["taskId"] and "taskId" not in first


# == choosing the dialect and binding from the card =========================================


@pytest.mark.parametrize(
    ("mode", "extra", "expect"),
    [
        ("0.3", (), "message/stream"),
        ("1.0", (), "SendStreamingMessage"),
        ("both", (), "SendStreamingMessage"),
        ("both", ("--rest-first",), "POST /rest/message:stream"),
        ("0.3", ("--rest-first",), "POST /rest/v1/message:stream"),
    ],
)
async def test_auto_picks_what_the_card_offers(drive: Any, tmp_path: Path, mode: str, extra: tuple[str, ...], expect: str) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path, "--mode", mode, *extra) as agent:
            r = await drive(back_toml(url=agent.url), [{"name": "a", "prompt": "chunks:3"}])
            calls = await agent.calls()
    assert texts(r, "a", "stream") == ["c0 ", "c1 ", "c2 "]
    assert [op_of(c) for c in calls] == [expect]


async def test_card_is_cached_and_revalidated(drive: Any, tmp_path: Path) -> None:
    steps = [{"name": f"p{i}", "prompt": "hello"} for i in range(3)]
    with trio.fail_after(60):
        async with run_agent(tmp_path) as agent:
            await drive(back_toml(url=agent.url), steps)
            cards = [r for r in await agent.log() if r["path"].startswith("/.well-known/")]
        assert len(cards) == 1  # no Cache-Control: kept for card_ttl_s
        async with run_agent(tmp_path, "--cache-control", "no-cache") as agent:
            await drive(back_toml(url=agent.url), steps)
            cards = [r for r in await agent.log() if r["path"].startswith("/.well-known/")]
        # no-cache: revalidated before each use, with the ETag it came with.
        assert len(cards) == 4
        assert "if-none-match" not in cards[0]["headers"]
        assert all(c["headers"]["if-none-match"].startswith('W/"') for c in cards[1:])


# == deadlines and the blocking send ==========================================================


async def test_whole_turn_deadline_cancels_the_remote_task(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path) as agent:
            config = back_toml(url=agent.url, route="turn_timeout_s = 0.5")
            r = await drive(config, [{"name": "long", "prompt": "slow:40"}, {"name": "next", "prompt": "hello"}])
            calls = await agent.calls()
    e = error(r, "long")
    assert "turn_timeout_s" in e["message"] and step(r, "long")["elapsed_s"] < 3
    assert "CancelTask" in [op_of(c) for c in calls]  # the task is not left running
    assert stop(r, "next") == "end_turn"


async def test_a_silent_stream_is_resumed_then_reported(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path) as agent:
            config = back_toml(url=agent.url, idle_timeout_s=0.3, resume_attempts=1)
            r = await drive(config, [{"name": "quiet", "prompt": "slow:3@3000"}])
            calls = await agent.calls()
    e = error(r, "quiet")
    assert e["message"].startswith("route research: the event stream of task ")
    assert "could not be resumed after 1 attempts" in e["message"] and "idle_timeout_s (0.3 s)" in e["message"]
    assert step(r, "quiet")["elapsed_s"] < 5
    assert [op_of(c) for c in calls][:2] == ["SendStreamingMessage", "SubscribeToTask"]


async def test_blocking_send_without_streaming(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path, "--no-streaming") as agent:
            config = back_toml(url=agent.url, return_immediately=False)
            r = await drive(config, [{"name": "a", "prompt": "chunks:3"}, {"name": "b", "prompt": "ask:"}])
            calls = await agent.calls()
    assert texts(r, "a", "stream") == ["c0 ", "c1 ", "c2 "]
    assert texts(r, "b", "answer") == ["You chose: yes"]
    assert [op_of(c) for c in calls] == ["SendMessage"] * 3  # one call per message: no polling
    assert all("configuration" not in c["body"]["params"] for c in calls)


# == auth and TLS ===========================================================================


async def test_bearer_token_from_the_environment(drive: Any, tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with run_agent(tmp_path, "--token", TOKEN) as agent:
            r = await drive(back_toml(url=agent.url, token_env="RESEARCH_TOKEN"), [{"name": "a", "prompt": "hello"}], env={"RESEARCH_TOKEN": TOKEN})
            calls = await agent.calls()
    assert stop(r, "a") == "end_turn"
    assert all(c["headers"]["authorization"] == f"Bearer {TOKEN}" for c in calls)
    assert TOKEN not in r["bridge_log"]


async def test_api_key_header_from_a_credentials_file(drive: Any, tmp_path: Path) -> None:
    creds = tmp_path / "credentials"
    creds.mkdir()
    (creds / "research.token").write_text(TOKEN + "\n")
    with trio.fail_after(60):
        async with run_agent(tmp_path, "--token", TOKEN, "--api-key-header", "X-API-Key") as agent:
            config = back_toml(url=agent.url, token_file="research.token", headers={"X-Team": "docs"})
            r = await drive(config, [{"name": "a", "prompt": "hello"}], env={"CREDENTIALS_DIRECTORY": str(creds)})
            calls = await agent.calls()
    assert stop(r, "a") == "end_turn"
    # The card's apiKey scheme names the header; the systemd credential holds the key.
    assert all(c["headers"]["x-api-key"] == TOKEN and "authorization" not in c["headers"] for c in calls)
    assert all(c["headers"]["x-team"] == "docs" for c in calls)
    assert TOKEN not in r["bridge_log"]


async def test_tls_with_a_private_ca(drive: Any, tmp_path: Path) -> None:
    cert = tmp_path / "agent-cert.pem"
    with trio.fail_after(60):
        async with run_agent(tmp_path, "--tls-cert-out", str(cert)) as agent:
            r = await drive(back_toml(url=agent.url, ca_file=str(cert)), [{"name": "a", "prompt": "chunks:2"}])
    assert texts(r, "a", "stream") == ["c0 ", "c1 "]


# == failures: each provoked once, each message checked =====================================


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


FAILURES: dict[str, tuple[tuple[str, ...], dict[str, Any], list[str]]] = {
    # name: (agent args, back options, substrings the error must hold)
    "unreachable": ((), {"url": "CLOSED"}, ["cannot reach the A2A agent at http://127.0.0.1:", "reading the agent card"]),
    "tls": (("--tls-cert-out", "CERT"), {}, ["TLS with the A2A agent at https://127.0.0.1:", "certificate verify failed", "set ca_file"]),
    "401": (("--token", TOKEN), {}, ["answered 401 Unauthorized", "no token is configured"]),
    "403": (("--token", TOKEN), {"token_env": "RESEARCH_TOKEN"}, ["answered 403 Forbidden", "check the token in $RESEARCH_TOKEN"]),
    "404": (("--fail-status", "404"), {}, ["answered 404 Not Found to POST", "is the url right?"]),
    "429": (("--fail-status", "429"), {}, ["answered 429 Too Many Requests, retry after 7 s; not retried"]),
    "5xx": (("--fail-status", "503"), {}, ["answered 503 Service Unavailable"]),
    "invalid-json": (("--garbage",), {}, ["is not valid JSON"]),
    "card-404": (("--card-status", "404"), {}, ["cannot read the agent card at http://127.0.0.1:", "/.well-known/agent-card.json: it answered 404 Not Found"]),
    "card-invalid": (("--card-garbage",), {}, ["cannot use the agent card at", "it is not valid JSON"]),
    "unknown-dialect": (("--card-version", "2.0"), {}, ["offers no interface agent-bridge can use (A2A 1.0 or 0.3)", "JSONRPC 2.0 at"]),
}


@pytest.mark.parametrize("kind", list(FAILURES))
async def test_failures_are_clear_and_never_hang(drive: Any, tmp_path: Path, kind: str) -> None:
    agent_args, back, wanted = FAILURES[kind]
    cert = tmp_path / "cert.pem"
    agent_args = tuple(str(cert) if a == "CERT" else a for a in agent_args)
    with trio.fail_after(60):
        async with run_agent(tmp_path, *agent_args) as agent:
            url = f"http://127.0.0.1:{_closed_port()}" if back.get("url") == "CLOSED" else agent.url
            opts = {**back, "url": url, "connect_timeout_s": 5, "first_event_timeout_s": 10}
            r = await drive(back_toml(**opts), [{"name": "a", "prompt": "hello"}], env={"RESEARCH_TOKEN": "wrong-" + TOKEN})
            calls = await agent.calls()
    e = error(r, "a")
    assert e["message"].startswith("route research: "), e
    for w in wanted:
        assert w in e["message"], f"{w!r} not in {e['message']!r}"
    assert TOKEN not in e["message"] and TOKEN not in r["bridge_log"]
    assert step(r, "a")["elapsed_s"] < 20
    if kind == "429":
        assert len(calls) == 1  # reported, not retried


# == a stream cut mid-task ==================================================================


class CuttingProxy:
    """A loopback TCP proxy that drops the first connection carrying agent events once
    `cut_after` artifact events went through, without forwarding the bytes that crossed
    the line (so those events are lost on that connection and must come back on resume)."""

    def __init__(self, cut_after: int) -> None:
        self.cut_after = cut_after
        self.target: int | None = None
        self.seen = 0
        self.cuts = 0
        self.connections = 0

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        assert self.target is not None
        self.connections += 1
        async with client, await trio.open_tcp_stream("127.0.0.1", self.target) as server:
            async with trio.open_nursery() as nursery:

                async def up() -> None:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        async for data in client:
                            await server.send_all(data)
                    nursery.cancel_scope.cancel()

                async def down() -> None:
                    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                        async for data in server:
                            events = data.count(b"artifactUpdate") + data.count(b"artifact-update")
                            if events and not self.cuts and self.seen + events > self.cut_after:
                                self.cuts += 1
                                break  # drop these bytes and the connection with them
                            self.seen += events
                            await client.send_all(data)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(up)
                nursery.start_soon(down)


@pytest.mark.parametrize(("dialect", "binding"), [("1.0", "jsonrpc"), ("1.0", "http+json"), ("0.3", "jsonrpc"), ("0.3", "http+json")])
async def test_stream_cut_mid_task_resumes_and_every_chunk_arrives_once(
    drive: Any, tmp_path: Path, dialect: str, binding: str
) -> None:
    proxy = CuttingProxy(cut_after=4)
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(proxy.serve)
            front = f"http://127.0.0.1:{port}"
            async with run_agent(tmp_path, "--public-url", front) as agent:
                proxy.target = agent.port
                config = back_toml(url=front, dialect=dialect, binding=binding)
                r = await drive(config, [{"name": "cut", "prompt": "slow:20"}, {"name": "after", "prompt": "chunks:2"}])
                calls = await agent.calls()
            nursery.cancel_scope.cancel()
    assert proxy.cuts == 1
    assert stop(r, "cut") == "end_turn", r["where"]
    # Every chunk, in order, none lost. At most one repeat, and only where the stream was
    # re-attached: the a2a-sdk server taps its live queue before it reads the snapshot it
    # sends first (ActiveTask.subscribe), so a chunk made in between is in both, and A2A
    # gives a client nothing to tell them apart by (README, Backs).
    got = texts(r, "cut", "stream")
    repeats = [i for i in range(1, len(got)) if got[i] == got[i - 1]]
    assert [c for i, c in enumerate(got) if i not in repeats] == [f"c{i} " for i in range(20)], got
    assert len(repeats) <= 1 and all(i > proxy.cut_after for i in repeats), got
    assert texts(r, "cut").count("Done.") == 1
    assert texts(r, "after", "stream") == ["c0 ", "c1 "]
    ops = [op_of(c) for c in calls]
    resub = {"1.0": {"jsonrpc": "SubscribeToTask"}, "0.3": {"jsonrpc": "tasks/resubscribe"}}.get(dialect, {}).get(binding)
    if resub:
        assert resub in ops, ops
    else:
        assert any(op.startswith("POST /rest/") and op.endswith(":subscribe") for op in ops), ops
    assert "re-attaching to task" in r["bridge_log"]
