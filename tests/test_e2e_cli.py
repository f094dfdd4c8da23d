"""End to end through the real command: `agent-bridge ask`, durability after kill -9,
and ACP `authenticate` on a route that asks for it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import trio

DEMO_WITH_AUTH = """
default_route = "locked"

[routes.locked]
back = { kind = "demo" }
acp_auth = { token_env = "BRIDGE_TEST_TOKEN", method_id = "env-token", name = "Token" }
"""


async def run(cmd: list[str], env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(cmd, stdin=stdin, capture_stdout=True, capture_stderr=True, check=False, env=env)


# -- agent-bridge ask ------------------------------------------------------------------------


async def test_ask_renders_every_event_kind(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    done = await run([*bridge_exe, "ask", "demo", "all: hello", "--answer", "allow", "--state-dir", state_dir], clean_env)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "The user wrote 'hello'" in out  # thought
    assert "plan:" in out and "✓ Step: fork" in out  # plan, updated to completion
    assert "Read README.md (read)" in out and "✓ Read README.md" in out  # tool call and its end
    assert "? Edit notes.txt?" in out and "answer (user): allow" in out  # the question, answered by policy
    assert "[diff notes.txt]" in out
    assert "  ↳ The sub-agent read README.md." in out  # sub-agent output is marked as such
    assert "You said: hello" in out
    assert "usage: 1 in /" in out
    assert out.rstrip().endswith("[end_turn]")
    assert "session: " in done.stderr.decode()


async def test_ask_prints_data_files_and_progress_in_their_places(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    done = await run([*bridge_exe, "ask", "demo", "progress: data: image: hi", "--state-dir", state_dir], clean_env)
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 0, err
    assert '"count": 42' in out and '"nested": {' in out  # pretty JSON, the integer kept
    assert "[image image/png, " in out and "[link file:///README.md]" in out
    assert "You said: hi" in out and "Working on it." not in out  # status text is not the answer
    assert "Working on it." in err


async def test_ask_prints_an_a2a_agents_artifacts(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path) -> None:
    from test_e2e_ws import a2a_agent

    async with a2a_agent(tmp_path) as url:
        config = tmp_path / "a2a.toml"
        config.write_text(f'[routes.research]\nback = {{ kind = "a2a", url = "{url}" }}\n')
        args = ["--config", str(config), "--state-dir", state_dir]
        hello = await run([*bridge_exe, "ask", "research", "hello there", *args], clean_env)
        files = await run([*bridge_exe, "ask", "research", "files:", *args], clean_env)
    out = hello.stdout.decode()
    assert hello.returncode == 0, hello.stderr.decode()
    assert "You said: hello there" in out and out.rstrip().endswith("[end_turn]")
    out = files.stdout.decode()
    assert files.returncode == 0, files.stderr.decode()
    assert "Here are the files." in out and "[image image/png, " in out and '"rows":' in out  # a data part (pretty once the A2A back keeps it data)


async def test_ask_rejects_by_policy(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    done = await run([*bridge_exe, "ask", "demo", "ask: x", "--answer", "reject", "--state-dir", state_dir], clean_env)
    assert done.returncode == 0
    assert "left notes.txt alone" in done.stdout.decode()


async def test_ask_without_a_terminal_or_policy_fails_clearly(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str
) -> None:
    done = await run([*bridge_exe, "ask", "demo", "ask: x", "--state-dir", state_dir], clean_env)
    out = done.stdout.decode()
    assert done.returncode == 3  # a question left unanswered: the turn is cancelled
    assert "stdin is not a terminal; pass --answer" in done.stderr.decode()
    assert "Edited notes.txt" not in out and "left notes.txt alone" not in out  # neither allowed nor denied
    assert out.rstrip().endswith("[cancelled]")


async def test_ask_reports_a_failed_turn(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    done = await run([*bridge_exe, "ask", "demo", "fail: x", "--state-dir", state_dir], clean_env)
    assert done.returncode == 1
    assert "error: the demo agent failed on purpose" in done.stdout.decode()
    assert "[failed]" in done.stdout.decode()


async def test_ask_continues_a_stored_session(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    first = await run([*bridge_exe, "ask", "demo", "one", "--state-dir", state_dir], clean_env)
    session_id = first.stderr.decode().split("session: ")[1].split()[0]
    second = await run([*bridge_exe, "ask", "demo", "two", "--session", session_id, "--state-dir", state_dir], clean_env)
    assert second.returncode == 0 and "You said: two" in second.stdout.decode()
    assert f"session: {session_id}" in second.stderr.decode()
    missing = await run([*bridge_exe, "ask", "demo", "x", "--session", "nope", "--state-dir", state_dir], clean_env)
    assert missing.returncode == 2 and "unknown session 'nope'" in missing.stderr.decode()


async def test_ask_unknown_route(bridge_exe: list[str], clean_env: dict[str, str], state_dir: str) -> None:
    done = await run([*bridge_exe, "ask", "nowhere", "x", "--state-dir", state_dir], clean_env)
    assert done.returncode == 2 and "no route named 'nowhere'" in done.stderr.decode()


async def test_ctrl_c_cancels_the_turn_and_exits_130_without_a_traceback(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str
) -> None:
    cmd = [*bridge_exe, "ask", "demo", "slow: hello", "--state-dir", state_dir]
    with trio.fail_after(30):
        proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env)
        assert proc.stdout is not None and proc.stderr is not None
        out = bytearray()
        while b"tick 1." not in out:  # the first chunk is on the terminal: the turn runs
            data = await proc.stdout.receive_some(65536)
            assert data, f"ask ended before its first chunk: {bytes(out)!r}"
            out += data
        proc.send_signal(signal.SIGINT)
        while data := await proc.stdout.receive_some(65536):
            out += data
        err = bytearray()
        while data := await proc.stderr.receive_some(65536):
            err += data
        code = await proc.wait()
    # The session's cancel, as the protocol does it: the turn ends cancelled and is shown so.
    assert code == 130, (bytes(out), bytes(err))
    assert out.decode().rstrip().endswith("[cancelled]")
    assert "Traceback" not in err.decode() and "KeyboardInterrupt" not in err.decode() and "Aborted!" not in err.decode()
    assert "session: " in err.decode()


# -- raw ACP helpers ---------------------------------------------------------------------------


class Acp:
    def __init__(self, proc: trio.Process) -> None:
        self.proc = proc
        self.buf = bytearray()
        self.seen: list[dict[str, Any]] = []
        self.next_id = 0

    async def recv(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while b"\n" not in self.buf:
            data = await self.proc.stdout.receive_some(65536)
            assert data, "bridge closed stdout"
            self.buf += data
        line, _, rest = bytes(self.buf).partition(b"\n")
        self.buf = bytearray(rest)
        return json.loads(line)

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.next_id += 1
        rid = self.next_id
        await self.proc.stdin.send_all(json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}).encode() + b"\n")
        while True:
            msg = await self.recv()
            if msg.get("id") == rid and "method" not in msg:
                return msg
            self.seen.append(msg)


async def open_acp(cmd: list[str], env: dict[str, str]) -> Acp:
    proc = await trio.lowlevel.open_process(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    return Acp(proc)


INIT = {"protocolVersion": 1, "clientCapabilities": {}}


async def test_a_finished_turn_survives_kill_9(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    cmd = [*bridge_exe, "acp", "demo", "--state-dir", state_dir]
    with trio.fail_after(30):
        a = await open_acp(cmd, clean_env)
        await a.call("initialize", INIT)
        sid = (await a.call("session/new", {"cwd": str(tmp_path), "mcpServers": []}))["result"]["sessionId"]
        done = await a.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": "tool: durable"}]})
        assert done["result"]["stopReason"] == "end_turn"
        os.kill(a.proc.pid, signal.SIGKILL)  # no shutdown path runs at all
        await a.proc.wait()

        b = await open_acp(cmd, clean_env)
        await b.call("initialize", INIT)
        loaded = await b.call("session/load", {"sessionId": sid, "cwd": str(tmp_path), "mcpServers": []})
        assert "result" in loaded, loaded
        updates = [m["params"]["update"] for m in b.seen if m.get("method") == "session/update"]
        text = "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")
        assert "You said: durable" in text
        assert any(u["sessionUpdate"] == "user_message_chunk" and u["content"]["text"] == "tool: durable" for u in updates)
        assert [u["status"] for u in updates if u["sessionUpdate"] == "tool_call_update"] == ["in_progress", "completed"]
        b.proc.kill()
        await b.proc.wait()


async def test_authenticate_when_the_route_asks_for_it(
    bridge_exe: list[str], clean_env: dict[str, str], state_dir: str, tmp_path: Path
) -> None:
    config = tmp_path / "auth.toml"
    config.write_text(DEMO_WITH_AUTH)
    cmd = [*bridge_exe, "acp", "--config", str(config), "--state-dir", state_dir]
    new = {"cwd": str(tmp_path), "mcpServers": []}
    with trio.fail_after(30):
        a = await open_acp(cmd, clean_env)  # BRIDGE_TEST_TOKEN is not set
        init = (await a.call("initialize", INIT))["result"]
        assert init["authMethods"] == [{"id": "env-token", "name": "Token"}]
        refused = await a.call("session/new", new)
        assert refused["error"]["code"] == -32000 and "authenticate" in refused["error"]["message"]
        unknown = await a.call("authenticate", {"methodId": "other"})
        assert unknown["error"]["code"] == -32602
        unset = await a.call("authenticate", {"methodId": "env-token"})
        assert unset["error"]["code"] == -32000 and "BRIDGE_TEST_TOKEN is not set" in unset["error"]["message"]
        a.proc.kill()
        await a.proc.wait()

        b = await open_acp(cmd, {**clean_env, "BRIDGE_TEST_TOKEN": "s3cret"})
        await b.call("initialize", INIT)
        assert (await b.call("authenticate", {"methodId": "env-token"}))["result"] == {}
        assert "sessionId" in (await b.call("session/new", new))["result"]
        b.proc.kill()
        await b.proc.wait()
