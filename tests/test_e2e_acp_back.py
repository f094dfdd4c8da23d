"""End to end: real ACP agents as the back, each its own process spawned by the bridge.

The front is an ACP editor built on the official Python SDK, in its own process
(tests/peers/acp_driver_back.py), driving the real `agent-bridge acp ROUTE`. The
agents are the scriptable agent on the official ACP Python SDK
(tests/peers/acp_agent_sdk.py) and the official TypeScript SDK's own example agent
(npm `@agentclientprotocol/sdk`, `dist/examples/agent.js`, run with node; node
missing fails these tests, it does not skip them).

Every test ends by reading the process table: no agent, and nothing an agent
started, outlives its session, a crash or the bridge's exit.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from acp_back_support import PEERS, PY_AGENT, ensure_ts_agent, live_pids, marker, open_driver, pid_alive, wait_gone
from daemon_support import base_config, start_daemon
from steps_support import DRIVER

CEILING_S = 90


@pytest.fixture(scope="session")
def ts_agent() -> list[str]:
    return ensure_ts_agent()


def py_route(tag: str, *flags: str, **back: Any) -> dict[str, Any]:
    return {"back": {"kind": "acp", "command": [*PY_AGENT, *flags, "--tag", tag], **back}, "question_timeout_s": 20}


def is_update(sid: str, kind: str, pred: Any = None) -> Any:
    return lambda e: (
        e.get("event") == "update" and e["sessionId"] == sid and e["update"]["sessionUpdate"] == kind and (pred is None or pred(e["update"]))
    )


def text_has(sid: str, needle: str) -> Any:
    return is_update(sid, "agent_message_chunk", lambda u: needle in u["content"].get("text", ""))


async def test_python_sdk_agent_streams_text_tools_commands_and_options(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    routes = {"coder": py_route(tag, "--modes", "--config", "--commands")}
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, routes, "coder") as d:
            sid = await d.new(str(tmp_path))
            r = await d.request("prompt", session=sid, text="think text:5 tool usage")
            assert r["result"]["stopReason"] == "end_turn", r
            assert d.text(sid) == "c0 c1 c2 c3 c4 "
            assert [u["content"]["text"] for u in d.updates(sid, "agent_thought_chunk")] == ["thinking"]
            (start,) = d.updates(sid, "tool_call")
            assert start["toolCallId"] == "t1" and start["kind"] == "read" and start["title"] == "Read README.md"
            statuses = [u.get("status") for u in d.updates(sid, "tool_call_update")]
            assert statuses == ["in_progress", "completed"]
            assert d.updates(sid, "tool_call_update")[-1]["content"][0]["content"]["text"] == "# readme"
            assert d.updates(sid, "usage_update")[-1]["used"] == 1234
            # The agent's slash commands, config options and modes reach the editor.
            await d.wait(is_update(sid, "available_commands_update"), "the agent's commands")
            commands = d.updates(sid, "available_commands_update")[-1]["availableCommands"]
            assert commands == [{"name": "review", "description": "Review the diff", "input": {"hint": "what to review"}}]
            options = d.updates(sid, "config_option_update")[-1]["configOptions"]
            assert {o["id"]: o["currentValue"] for o in options} == {"model": "small", "mode": "code"}
            # ...and setting them goes back to the agent.
            r = await d.request("set_config", session=sid, config="model", value="large")
            assert {o["id"]: o["currentValue"] for o in r["result"]["configOptions"]}["model"] == "large", r
            r = await d.request("set_mode", session=sid, mode="ask")
            assert "result" in r, r
            r = await d.request("prompt", session=sid, text="setmode:code text:1")
            assert r["result"]["stopReason"] == "end_turn"
            last = d.updates(sid, "config_option_update")[-1]["configOptions"]
            assert {o["id"]: o["currentValue"] for o in last} == {"model": "large", "mode": "code"}
            assert live_pids(tag), "the agent runs while its session is open"
        await wait_gone(tag)


@pytest.mark.parametrize("answer", ["allow", "reject"])
async def test_python_sdk_agent_permission_both_ways(tmp_path: Path, bridge_exe: list[str], answer: str) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder") as d:
            sid = await d.new(str(tmp_path))
            await d.send(cmd="policy", session=None, value=answer)
            r = await d.request("prompt", session=sid, text="ask askfresh progress data text:1")
            assert r["result"]["stopReason"] == "end_turn", r
            perm, fresh = [e for e in d.events if e.get("event") == "permission"]
            # The agent's own options reach the editor, bound to its tool call...
            assert [(o["optionId"], o["name"], o["kind"]) for o in perm["options"]] == [
                ("allow", "Allow", "allow_once"),
                ("always", "Always allow", "allow_always"),
                ("reject", "Reject", "reject_once"),
            ]
            assert perm["sessionId"] == sid
            # ...with every field the agent gave it (finding 2), announced or not.
            assert perm["toolCall"] == {
                "toolCallId": "t2",
                "title": "edit notes.txt",
                "kind": "edit",
                "status": "pending",
                "content": [{"type": "diff", "path": "notes.txt", "oldText": "old", "newText": "new"}],
                "locations": [{"path": "notes.txt", "line": 1}],
                "rawInput": {"path": "notes.txt", "text": "new"},
            }
            assert fresh["toolCall"] == {
                "toolCallId": "t3",
                "title": "Run make test",
                "kind": "execute",
                "status": "pending",
                "locations": [{"path": "Makefile", "line": 3}],
                "rawInput": {"command": "make test"},
            }
            (shown,) = [u for u in d.updates(sid, "tool_call") if u["toolCallId"] == "t3"]
            assert {k: v for k, v in shown.items() if k != "sessionUpdate"} == fresh["toolCall"]
            assert d.text(sid).count(f"permission={answer}") == 2
            # Progress and data come back out as they went in (bridge -> bridge keeps them).
            (progress,) = d.updates(sid, "agent_thought_chunk")
            assert progress["_meta"] == {"agentBridge": {"progress": True}} and progress["content"]["text"] == "Working on it."
            (data,) = [u["content"] for u in d.updates(sid, "agent_message_chunk") if u["content"]["type"] == "resource"]
            assert data["resource"]["uri"] == "data:application/json" and data["resource"]["mimeType"] == "application/json"
            assert json.loads(data["resource"]["text"]) == {"count": 42, "key": "value", "nested": {"none": None, "ok": True}, "ratio": 0.5}
        await wait_gone(tag)


async def test_python_sdk_agent_cancel_mid_turn(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder") as d:
            sid = await d.new(str(tmp_path))
            rid = await d.start("prompt", session=sid, text="slow")
            await d.wait(text_has(sid, "tick2"), "the agent to stream")
            await d.send(cmd="cancel", session=sid)
            r = await d.result(rid, timeout=10)
            assert r["result"]["stopReason"] == "cancelled", r
            assert "stopping" in d.text(sid)  # the agent heard session/cancel and stopped itself
            r = await d.request("prompt", session=sid, text="text:2")
            assert r["result"]["stopReason"] == "end_turn"
        await wait_gone(tag)


async def test_python_sdk_agent_killed_mid_turn(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder") as d:
            sid = await d.new(str(tmp_path))
            rid = await d.start("prompt", session=sid, text="pid child slow")
            first = await d.wait(text_has(sid, "pid="), "the agent's pid")
            pid = int(first["update"]["content"]["text"].split("=")[1])
            child = await d.wait(text_has(sid, "child="), "the agent's child")
            child_pid = int(child["update"]["content"]["text"].split("=")[1])
            await d.wait(text_has(sid, "tick1"), "the agent to stream")
            os.kill(pid, signal.SIGKILL)
            r = await d.result(rid, timeout=15)
            # The turn fails cleanly with a clear error, never a hang.
            assert "error" in r, r
            assert "killed by SIGKILL" in r["error"]["message"] and "coder" in r["error"]["message"], r
            # What the agent started is gone with it (its process group was ended).
            await wait_gone(pids=[pid, child_pid])
            # The next prompt starts a new agent.
            r = await d.request("prompt", session=sid, text="pid text:1")
            assert r["result"]["stopReason"] == "end_turn", r
            pids = [int(u["content"]["text"].split("=")[1]) for u in d.updates(sid, "agent_message_chunk") if "pid=" in u["content"]["text"]]
            assert len(pids) == 2 and pids[1] != pid and pid_alive(pids[1])
            assert "route coder session" in d.bridge_log() and "was killed by SIGKILL" in d.bridge_log()
        await wait_gone(tag)


async def test_bridge_exit_leaves_no_process(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder") as d:
            sids = [await d.new(str(tmp_path)) for _ in range(2)]
            children = []
            for sid in sids:
                r = await d.request("prompt", session=sid, text="child")
                assert r["result"]["stopReason"] == "end_turn"
                children.append(int(d.text(sid).split("=")[1]))
            await d.start("prompt", session=sids[0], text="slow")
            await d.wait(text_has(sids[0], "tick1"), "a turn in progress")
            assert len(live_pids(tag)) == 2  # one agent per session (multiplex is off)
            assert all(pid_alive(c) for c in children)
        # The editor closed the bridge mid-turn: agents and their children are gone.
        await wait_gone(tag, children)


async def test_sigterm_to_the_bridge_mid_turn_leaves_no_process(tmp_path: Path, bridge_exe: list[str]) -> None:
    """Editors end the agent they spawned (here: the bridge) with SIGTERM."""
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder") as d:
            bridge_pid = next(e["pid"] for e in d.events if e.get("event") == "started")
            sid = await d.new(str(tmp_path))
            await d.start("prompt", session=sid, text="child slow")
            child = int((await d.wait(text_has(sid, "child="), "the agent's child"))["update"]["content"]["text"].split("=")[1])
            await d.wait(text_has(sid, "tick1"), "a turn in progress")
            os.kill(bridge_pid, signal.SIGTERM)
            await wait_gone(tag, [child, bridge_pid])
        assert "SIGTERM: closing the sessions" in d.bridge_log()


async def test_agent_stderr_is_logged_with_the_session_id_and_env_secrets_are_not(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    secret = "s3cr3t-" + tag
    route = py_route(tag, env={"VISIBLE": "plain", "TOKEN": {"env": "ACPBACK_TEST_TOKEN"}})
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": route}, "coder", env={"ACPBACK_TEST_TOKEN": secret, "ACPBACK_NOT_PASSED": "x"}) as d:
            sid = await d.new(str(tmp_path))
            r = await d.request("prompt", session=sid, text="env:VISIBLE env:TOKEN env:ACPBACK_NOT_PASSED crash")
            assert "error" in r
            assert "env:VISIBLE=plain" in d.text(sid)
            assert f"env:TOKEN={secret}" in d.text(sid)
            assert "env:ACPBACK_NOT_PASSED=-unset-" in d.text(sid)  # not inherited
        log = d.bridge_log()
        assert f"route coder session {sid}" in log and "exited with code 3" in log
        assert secret not in log
        await wait_gone(tag)


async def test_editor_files_and_terminals_are_forwarded_unchanged(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    files = {"/proj/a.txt": "hello from the editor"}
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder", fs=True, terminal=True, files=files) as d:
            sid = await d.new(str(tmp_path))
            r = await d.request("prompt", session=sid, text="caps read:/proj/a.txt read:/proj/none.txt write:/proj/b.txt term:make,test")
            assert r["result"]["stopReason"] == "end_turn", r
            text = d.text(sid)
            assert '"readTextFile": true' in text and '"writeTextFile": true' in text and '"terminal": true' in text
            assert "read=hello from the editor" in text
            assert "read-error=-32002" in text  # the editor's own error, mapped by meaning
            assert "wrote" in text
            assert "term=0|False|output from the editor" in text
            fs = [e for e in d.events if e.get("event") == "fs"]
            assert [(e["method"], e["path"]) for e in fs] == [("read", "/proj/a.txt"), ("read", "/proj/none.txt"), ("write", "/proj/b.txt")]
            assert all(e["sessionId"] == sid for e in fs)  # the editor's session id, not the agent's
            terms = [e for e in d.events if e.get("event") == "terminal"]
            assert [e["method"] for e in terms] == ["create", "wait", "output", "release"]
            assert terms[0]["command"] == "make" and terms[0]["args"] == ["test"]
        await wait_gone(tag)


async def test_without_editor_services_files_are_off_by_default(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag)}, "coder") as d:
            sid = await d.new(str(tmp_path))
            r = await d.request("prompt", session=sid, text="caps read:/etc/hostname term:ls")
            assert r["result"]["stopReason"] == "end_turn", r
            text = d.text(sid)
            assert '"terminal": false' in text and '"readTextFile": false' in text
            assert "read-error=-32601" in text and "term-error=-32601" in text
            assert not [e for e in d.events if e.get("event") in ("fs", "terminal")]
        await wait_gone(tag)


async def test_agent_with_a_bad_protocol_version_is_refused_clearly(tmp_path: Path, bridge_exe: list[str]) -> None:
    tag = marker()
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, {"coder": py_route(tag, "--protocol-version", "2")}, "coder") as d:
            sid = await d.new(str(tmp_path))
            r = await d.request("prompt", session=sid, text="text:1")
            assert "error" in r
            msg = r["error"]["message"]
            assert "protocolVersion 2" in msg and "ACP protocol version 1" in msg and "coder" in msg, msg
            await wait_gone(tag)  # the refused agent was ended at once
        await wait_gone(tag)


async def test_an_agents_form_question_reaches_an_a2a_client_and_an_acp_editor(
    tmp_path: Path, bridge_exe: list[str], clean_env: dict[str, str]
) -> None:
    """The matrix agent's `elicitation/create` (a multi-select and free text) through one
    daemon: an A2A client (a2a-sdk) answers the INPUT_REQUIRED, an editor on the ACP SDK
    that declares forms (through `agent-bridge acp --connect`) answers the form it is sent,
    and declines it once; the agent hears each answer in its own field names."""
    tag = marker()
    routes = {"matrix": {"back": {"kind": "acp", "command": [sys.executable, str(PEERS / "acp_agent_matrix.py"), "--tag", tag]}}}
    with trio.fail_after(CEILING_S):
        async with start_daemon(bridge_exe, tmp_path, clean_env, base_config(tmp_path, routes)) as d:
            a2a_opts = {"url": d.url, "route": "matrix", "binding": "JSONRPC", "dialect": "1.0", "timeout_s": 30, "scenarios": [
                ["ask", {"text": "choose: hello", "answer": None, "answer_data": {"selected": ["Red", "Blue"], "text": "teal"}}]]}  # fmt: skip
            proc = await trio.run_process([sys.executable, str(PEERS / "a2a_client.py"), json.dumps(a2a_opts)],
                                          capture_stdout=True, capture_stderr=True, check=False, env=clean_env)  # fmt: skip
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
            ask = json.loads(proc.stdout)["results"]["ask"]
            assert "traceback" not in ask, f"{ask}\n{d.log_text()[-3000:]}"
            assert ask["first"]["state"] == "TASK_STATE_INPUT_REQUIRED", ask
            question = ask["first"]["status_message"]["parts"][1]["data"]
            assert question["multiSelect"] is True and question["allowText"] is True
            assert [o["label"] for o in question["options"]] == ["Red", "Green", "Blue"]
            assert ask["second"]["state"] == "TASK_STATE_COMPLETED", ask
            assert ask["second"]["text"] == "You chose: Red, Blue, teal. You said: hello"

            assert d.acp_socket is not None
            steps = [
                {"name": "choose", "prompt": "choose: hello", "form": {"choice": ["red", "blue"], "other": "teal"}},
                {"name": "decline", "prompt": "choose: again", "form": "decline"},
            ]
            opts = {"steps": steps, "elicitation": True, "stderr": str(tmp_path / "shim.log"), "cwd": str(tmp_path), "timeout_s": 60}
            shim = [*bridge_exe, "acp", "matrix", "--connect", d.acp_socket]
            proc = await trio.run_process([sys.executable, str(DRIVER), json.dumps(opts), *shim],
                                          capture_stdout=True, capture_stderr=True, check=False, env=clean_env)  # fmt: skip
            assert proc.returncode == 0, proc.stderr.decode(errors="replace")
            r = json.loads(proc.stdout)
            assert "crash" not in r and r["sdk_log"] == [], f"{r}\n{d.log_text()[-3000:]}"
            choose, decline = r["steps"]
            (form,) = choose["elicitations"]
            assert form["message"] == "Which colours do you like?"
            props = form["mode"]["requestedSchema"]["properties"]
            assert props["choice"]["type"] == "array" and props["choice"]["title"] == "Colours"
            assert [(c["const"], c["title"]) for c in props["choice"]["items"]["anyOf"]] == [("red", "Red"), ("green", "Green"), ("blue", "Blue")]
            assert props["other"]["type"] == "string"
            said = lambda step: "".join(c["content"].get("text", "") for c in step["chunks"])  # noqa: E731
            assert choose["result"] == {"stopReason": "end_turn"} and said(choose) == "You chose: Red, Blue, teal. You said: hello"
            assert len(decline["elicitations"]) == 1
            assert decline["result"] == {"stopReason": "end_turn"} and said(decline) == "You said: again"
            assert "Traceback" not in d.log_text()
    await wait_gone(tag)


# -- the TypeScript SDK's example agent --------------------------------------------------------


async def test_typescript_sdk_example_agent(tmp_path: Path, bridge_exe: list[str], ts_agent: list[str]) -> None:
    tag = marker()
    routes = {"ts": {"back": {"kind": "acp", "command": [*ts_agent, tag]}, "question_timeout_s": 30}}
    with trio.fail_after(CEILING_S):
        async with open_driver(tmp_path, bridge_exe, routes, "ts") as d:
            allow, reject = await d.new(str(tmp_path)), await d.new(str(tmp_path))
            await d.send(cmd="policy", session=allow, value="allow")
            await d.send(cmd="policy", session=reject, value="reject")
            # Two sessions at once, one agent process each; a permission answered both ways.
            r1, r2 = await d.start("prompt", session=allow, text="hi"), await d.start("prompt", session=reject, text="hi")
            for sid in (allow, reject):
                await d.wait(is_update(sid, "agent_message_chunk"), "the turns to start")
            assert len(live_pids(tag)) == 2
            res1, res2 = await d.result(r1), await d.result(r2)
            assert res1["result"]["stopReason"] == "end_turn" and res2["result"]["stopReason"] == "end_turn", (res1, res2)
            for sid in (allow, reject):
                assert d.text(sid).startswith("I'll help you with that.")
                starts = d.updates(sid, "tool_call")
                assert [(u["toolCallId"], u["kind"]) for u in starts] == [("call_1", "read"), ("call_2", "edit")]
                assert d.updates(sid, "tool_call_update")[0]["status"] == "completed"
            perms = {e["sessionId"]: e for e in d.events if e.get("event") == "permission"}
            assert [(o["optionId"], o["name"]) for o in perms[allow]["options"]] == [("allow", "Allow this change"), ("reject", "Skip this change")]
            assert "Perfect! I've successfully updated the configuration." in d.text(allow)
            assert "I understand you prefer not to make that change." in d.text(reject)
            assert d.updates(allow, "tool_call_update")[-1]["status"] == "completed"

            # Cancel mid-turn: the example agent aborts and answers "cancelled".
            rid = await d.start("prompt", session=allow, text="again")
            n = len(d.updates(allow, "agent_message_chunk"))
            await d.wait(lambda e: len(d.updates(allow, "agent_message_chunk")) > n, "the turn to start")
            await d.send(cmd="cancel", session=allow)
            r = await d.result(rid, timeout=15)
            assert r["result"]["stopReason"] == "cancelled", r

            # Killed mid-turn: the turn fails cleanly, the next prompt gets a new agent.
            rid = await d.start("prompt", session=reject, text="again")
            n = len(d.updates(reject, "agent_message_chunk"))
            await d.wait(lambda e: len(d.updates(reject, "agent_message_chunk")) > n, "the turn to start")
            (victim,) = [p for p in live_pids(tag) if _session_of(d, p) == reject]
            os.kill(victim, signal.SIGKILL)
            r = await d.result(rid, timeout=15)
            assert "error" in r and "killed by SIGKILL" in r["error"]["message"], r
            await wait_gone(pids=[victim])
            r = await d.request("prompt", session=reject, text="once more", timeout=30)
            assert r["result"]["stopReason"] == "end_turn", r
            assert len(live_pids(tag)) == 2
        await wait_gone(tag)


def _session_of(d: Any, pid: int) -> str | None:
    """Which bridge session an agent serves, from the bridge's log ("agent ... started (pid N) for session S")."""
    for line in d.bridge_log().splitlines():
        if f"(pid {pid}) for session " in line:
            return line.rsplit(" ", 1)[1]
    return None
