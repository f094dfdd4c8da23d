"""End to end: the official TypeScript ACP SDK drives a real `agent-bridge acp demo`.

`tests/peers/ts/client.mjs` (node, `@agentclientprotocol/sdk` pinned in its
package.json) spawns the bridge command it is given, plays one scenario with the
SDK's client app, and prints a JSON report: every JSON-RPC message in wire order,
the updates as the SDK delivered them after its own zod validation, the permission
requests it answered, the results, anything the SDK logged as invalid, and the
bridge's exit status and stderr.

Node and npm are required (CI installs them): without them these tests fail, they do
not skip. The node dependencies come from the committed lockfile (`npm ci`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
from npm_support import node_exe, npm_ci

PEER = Path(__file__).resolve().parent / "peers" / "ts"
CLIENT = PEER / "client.mjs"
CEILING_S = 60  # per test; a scenario takes about a second

REQUIRED_KINDS = {
    "agent_thought_chunk",
    "plan",
    "tool_call",
    "tool_call_update",
    "agent_message_chunk",
    "usage_update",
    "available_commands_update",
}


# -- node side -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def node() -> str:
    """node, with the peer's dependencies installed from the lockfile (once per session)."""
    node = node_exe()
    npm_ci(PEER)
    return node


async def run_client(
    node: str,
    bridge_exe: list[str],
    env: dict[str, str],
    cwd: Path,
    state_dir: Path,
    scenario: str,
    *options: str,
) -> dict[str, Any]:
    """Run one scenario against a fresh bridge process; the client's JSON report."""
    state_dir.mkdir(parents=True, exist_ok=True)
    cmd = [node, str(CLIENT), scenario, *options, "--", *bridge_exe, "acp", "demo", "--state-dir", str(state_dir)]
    done = await trio.run_process(cmd, cwd=cwd, env=env, capture_stdout=True, capture_stderr=True, check=False)
    out, err = done.stdout.decode(), done.stderr.decode()
    try:
        report = json.loads(out)
    except ValueError:
        pytest.fail(f"client.mjs {scenario} exited {done.returncode} without a report\nstdout:\n{out}\nstderr:\n{err}")
    report["_exit"] = done.returncode
    report["_stderr"] = err
    return report


def assert_clean(report: dict[str, Any]) -> None:
    """What every scenario must show, whatever it exercised."""
    ctx = f"scenario {report['scenario']}: client stderr:\n{report['_stderr']}\nbridge stderr:\n{report['bridge']['stderr']}"
    assert report["error"] is None, f"{report['error']}\n{ctx}"
    assert report["_exit"] == 0, ctx
    # Nothing the SDK found invalid (it logs and drops notifications that fail its schema).
    assert report["sdkErrors"] == [], ctx
    assert report["schemaErrors"] == [], ctx
    # Every frame from the bridge is a JSON-RPC 2.0 message.
    for w in report["wire"]:
        if w["dir"] == "in":
            assert w["msg"].get("jsonrpc") == "2.0", w["msg"]
    # The SDK's parse lost or changed nothing in any update.
    raw = [w["msg"]["params"] for w in report["wire"] if w["dir"] == "in" and w["msg"].get("method") == "session/update"]
    parsed = [{k: v for k, v in u.items() if k != "t"} for u in report["updates"]]
    assert parsed == raw
    # The bridge exits by itself, cleanly, once the client closes its stdin.
    assert not report["bridge"].get("leftRunning"), ctx
    assert report["bridge"]["exitCode"] == 0, ctx
    for word in ("Traceback", "ERROR", "WARNING"):
        assert word not in report["bridge"]["stderr"], ctx


def wire_index(report: dict[str, Any], *, method: str) -> tuple[int, int]:
    """Positions in the wire log of our request `method` and of the bridge's answer to it."""
    sent = [i for i, w in enumerate(report["wire"]) if w["dir"] == "out" and w["msg"].get("method") == method]
    assert len(sent) == 1, f"expected one {method} request, saw {len(sent)}"
    rid = report["wire"][sent[0]]["msg"]["id"]
    answered = [
        i
        for i, w in enumerate(report["wire"])
        if w["dir"] == "in" and "method" not in w["msg"] and w["msg"].get("id") == rid
    ]
    assert len(answered) == 1, f"expected one answer to {method} (id {rid})"
    return sent[0], answered[0]


def updates_between(report: dict[str, Any], start: int, end: int) -> list[dict[str, Any]]:
    return [
        w["msg"]["params"]["update"]
        for w in report["wire"][start + 1 : end]
        if w["dir"] == "in" and w["msg"].get("method") == "session/update"
    ]


def text_of(updates: list[dict[str, Any]], kind: str) -> str:
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == kind and u["content"]["type"] == "text")


def final_tool_status(updates: list[dict[str, Any]], tool_call_id: str) -> str | None:
    status = None
    for u in updates:
        if u["sessionUpdate"] in ("tool_call", "tool_call_update") and u["toolCallId"] == tool_call_id:
            status = u.get("status", status)
    return status


@pytest.fixture
def run(node: str, bridge_exe: list[str], clean_env: dict[str, str], tmp_path: Path):
    async def go(scenario: str, *options: str, state: str = "state") -> dict[str, Any]:
        return await run_client(node, bridge_exe, clean_env, tmp_path, tmp_path / state, scenario, *options)

    return go


# -- scenarios -------------------------------------------------------------------------------


async def test_all_words_with_permission_allowed(run, tmp_path: Path) -> None:
    with trio.fail_after(CEILING_S):
        r = await run("allow")
    assert_clean(r)

    init = r["results"]["initialize"]
    assert init["protocolVersion"] == 1
    assert init["agentCapabilities"]["loadSession"] is True
    assert "list" in init["agentCapabilities"]["sessionCapabilities"]
    sid = r["results"]["new"]["sessionId"]
    assert r["results"]["prompt"] == {"stopReason": "end_turn"}

    updates = [u["update"] for u in r["updates"]]
    assert {u["sessionId"] for u in r["updates"]} == {sid}
    kinds = {u["sessionUpdate"] for u in updates}
    assert REQUIRED_KINDS <= kinds, f"missing {REQUIRED_KINDS - kinds}"

    # The turn's updates all come before the prompt's answer, none after it.
    sent, answered = wire_index(r, method="session/prompt")
    after = [w for w in r["wire"][answered + 1 :] if w["dir"] == "in"]
    assert after == []
    turn = updates_between(r, sent, answered)
    assert {u["sessionUpdate"] for u in turn} >= REQUIRED_KINDS - {"available_commands_update"}

    # Every tool call update refers to a tool call announced before it.
    started: set[str] = set()
    for u in turn:
        if u["sessionUpdate"] == "tool_call":
            started.add(u["toolCallId"])
        elif u["sessionUpdate"] == "tool_call_update":
            assert u["toolCallId"] in started, u

    # One permission question, about the edit announced before it, answered "allow".
    [perm] = r["permissions"]
    assert perm["params"]["sessionId"] == sid
    edit_id = perm["params"]["toolCall"]["toolCallId"]
    assert edit_id in started
    assert {o["kind"] for o in perm["params"]["options"]} >= {"allow_once", "reject_once"}
    assert perm["outcome"]["outcome"] == "selected"
    assert final_tool_status(turn, edit_id) == "completed"
    diffs = [c for u in turn if u.get("toolCallId") == edit_id for c in u.get("content") or [] if c["type"] == "diff"]
    assert diffs and diffs[0]["newText"] == "hi"

    # Every tool call ends completed; the plan ends with every step completed.
    assert all(final_tool_status(turn, t) == "completed" for t in started)
    last_plan = [u for u in turn if u["sessionUpdate"] == "plan"][-1]
    assert {e["status"] for e in last_plan["entries"]} == {"completed"}
    assert text_of(turn, "agent_message_chunk").endswith("You said: hi")


async def test_permission_rejected_fails_the_tool_not_the_turn(run) -> None:
    with trio.fail_after(CEILING_S):
        r = await run("reject")
    assert_clean(r)

    assert r["results"]["prompt"] == {"stopReason": "end_turn"}
    [perm] = r["permissions"]
    chosen = next(o for o in perm["params"]["options"] if o["optionId"] == perm["outcome"]["optionId"])
    assert chosen["kind"] == "reject_once"
    sent, answered = wire_index(r, method="session/prompt")
    turn = updates_between(r, sent, answered)
    edit_id = perm["params"]["toolCall"]["toolCallId"]
    assert final_tool_status(turn, edit_id) == "failed"
    tool_content = [c for u in turn if u["sessionUpdate"].startswith("tool_call") for c in u.get("content") or []]
    assert not any(c["type"] == "diff" for c in tool_content)
    assert "left notes.txt alone" in text_of(turn, "agent_message_chunk")


async def test_cancel_mid_stream_answers_cancelled(run) -> None:
    with trio.fail_after(CEILING_S):
        r = await run("cancel")
    assert_clean(r)

    assert r["results"]["prompt"] == {"stopReason": "cancelled"}  # a stop reason, not an error
    marks = r["marks"]
    # The cancel went out after streaming had begun, and the answer came promptly
    # (the slow turn would otherwise stream for 5 s).
    sent, answered = wire_index(r, method="session/prompt")
    cancel_at = next(
        i for i, w in enumerate(r["wire"]) if w["dir"] == "out" and w["msg"].get("method") == "session/cancel"
    )
    assert sent < cancel_at < answered
    before_cancel = updates_between(r, sent, cancel_at)
    assert any(u["sessionUpdate"] == "agent_message_chunk" for u in before_cancel)
    assert marks["prompt:answered"] - marks["cancel"] < 2000, marks
    assert r["permissions"] == []


async def test_history_survives_a_process_restart(run, tmp_path: Path) -> None:
    with trio.fail_after(CEILING_S):
        first = await run("seed", state="shared")
        assert_clean(first)
        sid = first["results"]["new"]["sessionId"]
        assert first["results"]["one"] == {"stopReason": "end_turn"}
        assert first["results"]["two"] == {"stopReason": "end_turn"}

        # A second client and a second bridge process on the same state directory.
        second = await run("reload", "--session", sid, state="shared")
    assert_clean(second)

    [listed] = second["results"]["list"]["sessions"]
    assert listed["sessionId"] == sid
    assert listed["cwd"] == str(tmp_path)

    # The history is replayed as updates before the session/load answer.
    sent, answered = wire_index(second, method="session/load")
    replay = updates_between(second, sent, answered)
    users = [u["content"]["text"] for u in replay if u["sessionUpdate"] == "user_message_chunk"]
    assert users == ["think: one", "tool: two"]
    assert "one" in text_of(replay, "agent_thought_chunk")
    assert text_of(replay, "agent_message_chunk") == "You said: oneYou said: two"
    # The agent's side of the replay is what the first client saw live, in order.
    replayed_kinds = {"agent_message_chunk", "agent_thought_chunk", "tool_call", "tool_call_update", "plan"}
    live = [u["update"] for u in first["updates"] if u["update"]["sessionUpdate"] in replayed_kinds]
    assert [u for u in replay if u["sessionUpdate"] in replayed_kinds] == live
    between = second["wire"][sent + 1 : answered]
    assert {w["msg"]["params"]["sessionId"] for w in between if w["msg"].get("method") == "session/update"} == {sid}

    # The reloaded session takes a new turn.
    assert second["results"]["again"] == {"stopReason": "end_turn"}
    p_sent, p_answered = wire_index(second, method="session/prompt")
    assert text_of(updates_between(second, p_sent, p_answered), "agent_message_chunk") == "You said: again"
