"""End to end: the real `agent-bridge acp demo` process, driven by the official ACP Python SDK.

The SDK (`agent-client-protocol`, asyncio-only) runs in its own process,
`tests/peers/acp_sdk_client.py`, which spawns the bridge with `spawn_agent_process`,
plays one named scenario and prints a JSON report: every message in wire order,
every update as the SDK parsed it, permission requests, results and errors. These
tests assert on that report.

Two views of the same updates are checked on purpose: the wire (exact bytes, exact
order) and the SDK's parsed models (the SDK silently drops list items that do not
validate, so "the SDK saw the same thing" is a schema check of its own).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acp_sdk_support import (
    assert_sdk_saw_everything,
    err,
    incoming,
    kinds,
    ok,
    parent_of,
    request_index,
    response_index,
    run_sdk_client,
    text,
    turn_span,
    wire_updates,
)

from bridge.backs.demo.back import WORDS

EVERY_KIND = {"agent_thought_chunk", "plan", "tool_call", "tool_call_update", "agent_message_chunk", "usage_update"}


@pytest.fixture
def workdir(tmp_path: Path) -> str:
    d = tmp_path / "project"
    d.mkdir()
    return str(d)


@pytest.fixture
def run_sdk(bridge_exe: list[str], state_dir: str, clean_env: dict[str, str], workdir: str, tmp_path: Path) -> Any:
    """run_sdk(scenario, **options) -> report; one SDK client process, one bridge."""

    async def run(scenario: str, *, bridge_args: tuple[str, ...] = (), **options: Any) -> dict[str, Any]:
        command = [*bridge_exe, "acp", "demo", "--state-dir", state_dir, *bridge_args]
        log = tmp_path / f"bridge-{scenario}.log"
        return await run_sdk_client(scenario, bridge=command, env=clean_env, cwd=workdir, log=log, **options)

    return run


# -- 1. the whole show ---------------------------------------------------------------------


async def test_initialize_new_session_and_every_update_kind(run_sdk: Any) -> None:
    r = await run_sdk("full")
    assert_sdk_saw_everything(r)

    init = ok(r, "initialize")
    assert init["protocolVersion"] == 1
    assert init["agentInfo"]["name"] == "agent-bridge" and init["agentInfo"]["version"]
    assert init["agentInfo"]["title"] == "agent-bridge demo"
    caps = init["agentCapabilities"]
    assert caps["loadSession"] is True
    assert {"list", "close", "resume"} <= set(caps["sessionCapabilities"])
    assert caps["promptCapabilities"]["image"] is True

    new = ok(r, "new")
    sid = new["sessionId"]
    assert isinstance(sid, str) and sid
    assert new["modes"]["currentModeId"] == "code"
    assert {m["id"] for m in new["modes"]["availableModes"]} == {"ask", "code"}
    (mode,) = new["configOptions"]
    assert mode["id"] == "mode" and mode["type"] == "select" and mode["category"] == "mode"
    assert mode["currentValue"] == "code"
    assert [o["value"] for o in mode["options"]] == ["ask", "code"]

    # The commands follow the session/new answer (the editor knows the session id by then).
    _, new_id = request_index(r, "session/new")
    after_new = wire_updates(r, sid, response_index(r, new_id))
    assert after_new[0]["sessionUpdate"] == "available_commands_update"
    commands = {c["name"]: c for c in after_new[0]["availableCommands"]}
    assert set(commands) == set(WORDS)
    assert commands["all"]["description"] and commands["all"]["input"]["hint"]

    assert ok(r, "prompt") == {"stopReason": "end_turn"}
    start, end = turn_span(r)
    turn = wire_updates(r, sid, start, end)
    assert wire_updates(r, sid, end) == [], "updates after the prompt's answer"
    ks = kinds(turn)
    assert EVERY_KIND <= set(ks)
    assert ks[0] == "agent_thought_chunk"  # think: comes first
    assert ks.index("plan") < ks.index("tool_call")
    assert ks[-1] == "usage_update"
    assert text(turn, "agent_thought_chunk").startswith("The user wrote 'hello'.")

    # The plan: always complete, every entry with its required priority and status.
    plans = [u["entries"] for u in turn if u["sessionUpdate"] == "plan"]
    assert [e["content"] for e in plans[0]] == ["Step: tool", "Step: ask", "Step: fork"]
    assert all(e["status"] == "pending" and e["priority"] == "medium" for e in plans[0])
    assert [e["status"] for e in plans[-1]] == ["completed"] * 3
    sdk_plans = [u["update"]["entries"] for u in r["updates"] if u["update"]["sessionUpdate"] == "plan"]
    assert sdk_plans[-1] == plans[-1]

    top = [u for u in turn if parent_of(u) is None]
    calls = {u["toolCallId"]: u for u in top if u["sessionUpdate"] == "tool_call"}
    read = next(c for c in calls.values() if c["kind"] == "read")
    edit = next(c for c in calls.values() if c["kind"] == "edit")
    agent = next(c for c in calls.values() if c["title"].startswith("Sub-agent"))

    # tool: pending → in_progress → completed, with content at the end.
    read_updates = [u for u in top if u.get("toolCallId") == read["toolCallId"]]
    assert [u.get("status") for u in read_updates] == ["pending", "in_progress", "completed"]
    assert read["title"] == "Read README.md" and read["locations"] == [{"path": "README.md", "line": 1}]
    done = read_updates[-1]["content"]
    assert done[0]["type"] == "content" and "agent-bridge" in done[0]["content"]["text"]

    # ask: the permission request names the edit's tool call; allowed, the edit completes with a diff.
    # It carries what the editor was shown of that tool call (ACP: toolCall is a ToolCallUpdate).
    (perm,) = r["permissions"]
    assert perm["sessionId"] == sid
    assert perm["toolCall"] == {
        "toolCallId": edit["toolCallId"],
        "title": "Edit notes.txt",
        "kind": "edit",
        "status": "pending",
        "locations": [{"path": "notes.txt"}],
        "rawInput": {"path": "notes.txt", "text": "hello"},
    }
    assert [o["kind"] for o in perm["options"]] == ["allow_once", "allow_always", "reject_once", "reject_always"]
    assert perm["answer"]["outcome"] == {"outcome": "selected", "optionId": "allow"}
    ((asked, _),) = incoming(r, "session/request_permission")
    edit_updates = [u for u in top if u.get("toolCallId") == edit["toolCallId"]]
    assert [u.get("status") for u in edit_updates] == ["pending", "completed"]
    completed_at = next(
        i
        for i, m in incoming(r, "session/update")
        if m["params"]["update"].get("toolCallId") == edit["toolCallId"] and m["params"]["update"].get("status") == "completed"
    )
    assert asked < completed_at
    (diff,) = edit_updates[-1]["content"]
    assert diff == {"type": "diff", "path": "notes.txt", "oldText": None, "newText": "hello"}

    # fork: the sub-agent's updates carry the parent tool call id, and end before the parent does.
    children = [u for u in turn if parent_of(u) == agent["toolCallId"]]
    assert {"agent_thought_chunk", "tool_call", "tool_call_update", "agent_message_chunk"} <= set(kinds(children))
    assert text(children) == "The sub-agent read README.md."
    child_calls = [u.get("status") for u in children if u["sessionUpdate"].startswith("tool_call")]
    assert child_calls == ["pending", "in_progress", "completed"]
    parent_done = next(
        i for i, u in enumerate(turn) if u.get("toolCallId") == agent["toolCallId"] and u.get("status") == "completed"
    )
    assert max(i for i, u in enumerate(turn) if parent_of(u) == agent["toolCallId"]) < parent_done
    assert agent["kind"] == "think" and agent["status"] == "in_progress"

    assert text(top) == "Edited notes.txt. You said: hello"
    usage = turn[-1]
    assert usage["used"] > 0 and usage["size"] == 200_000


# -- 2. rejecting is an answer, not a cancel -------------------------------------------------


async def test_rejected_permission_fails_the_tool_call_not_the_turn(run_sdk: Any) -> None:
    r = await run_sdk("reject")
    assert_sdk_saw_everything(r)
    sid = ok(r, "new")["sessionId"]
    assert ok(r, "prompt") == {"stopReason": "end_turn"}
    (perm,) = r["permissions"]
    assert perm["answer"]["outcome"] == {"outcome": "selected", "optionId": "reject"}
    start, end = turn_span(r)
    turn = wire_updates(r, sid, start, end)
    edit_id = perm["toolCall"]["toolCallId"]
    statuses = [u.get("status") for u in turn if u.get("toolCallId") == edit_id]
    assert statuses == ["pending", "failed"]
    assert not any(c.get("type") == "diff" for u in turn for c in u.get("content") or [] if isinstance(c, dict))
    assert "left notes.txt alone" in text(turn)
    assert ok(r, "after") == {"stopReason": "end_turn"}


# -- 3, 4. cancelling ---------------------------------------------------------------------


async def test_cancel_mid_stream_answers_cancelled_quickly(run_sdk: Any) -> None:
    r = await run_sdk("cancel_stream")
    assert_sdk_saw_everything(r)
    sid = ok(r, "new")["sessionId"]
    assert ok(r, "prompt") == {"stopReason": "cancelled"}
    assert r["chunks_before_cancel"] >= 3
    assert r["cancel_to_answer_s"] < 3.0
    start, end = turn_span(r)
    ticks = [u for u in wire_updates(r, sid, start, end) if u["sessionUpdate"] == "agent_message_chunk"]
    assert 3 <= len(ticks) < 50  # slow: streams 50 ticks over 5 s when left alone
    # The session takes the next prompt as if nothing happened.
    assert ok(r, "after") == {"stopReason": "end_turn"}
    start, end = turn_span(r, 1)
    assert text(wire_updates(r, sid, start, end)) == "You said: hello again"


async def test_cancel_while_permission_pending(run_sdk: Any) -> None:
    r = await run_sdk("cancel_permission")
    # The bridge withdraws its permission request with `$/cancel_request` (stable in
    # ACP v1 since 2026-06); SDK 0.12.1 predates it and logs "Method not found".
    assert_sdk_saw_everything(r, tolerate=("$/cancel_request",))
    sid = ok(r, "new")["sessionId"]
    assert ok(r, "prompt") == {"stopReason": "cancelled"}
    assert r["elapsed_s"] < 5.0
    (perm,) = r["permissions"]
    assert perm["answer"]["outcome"] == {"outcome": "cancelled"}
    start, end = turn_span(r)
    turn = wire_updates(r, sid, start, end)
    edit_id = perm["toolCall"]["toolCallId"]
    assert [u.get("status") for u in turn if u.get("toolCallId") == edit_id] == ["pending"]
    assert "Edited" not in text(turn)


# -- 5. an editor restart -------------------------------------------------------------------


async def test_sessions_survive_editor_restart(run_sdk: Any, workdir: str) -> None:
    first = await run_sdk("persist_write")
    assert_sdk_saw_everything(first)
    sid = first["session_id"]
    assert ok(first, "prompt1") == ok(first, "prompt2") == {"stopReason": "end_turn"}
    live = []
    for n in range(2):
        start, end = turn_span(first, n)
        live.append(wire_updates(first, sid, start, end))
    assert "tool_call" in kinds(live[1])

    second = await run_sdk("persist_read", session_id=sid)
    assert_sdk_saw_everything(second)
    (listed,) = ok(second, "list")["sessions"]
    assert listed["sessionId"] == sid and listed["cwd"] == workdir
    assert listed["title"] == "first prompt"
    assert listed["updatedAt"].endswith("Z")

    ok(second, "load")
    _, load_id = request_index(second, "session/load")
    replay = wire_updates(second, sid, 0, response_index(second, load_id))
    assert second["updates_at_load_return"] >= len(replay)
    users = [u for u in replay if u["sessionUpdate"] == "user_message_chunk"]
    assert [u["content"] for u in users] == [
        {"type": "text", "text": "first prompt"},
        {"type": "text", "text": "tool: second prompt"},
    ]
    # The replay is the prompts, each followed by exactly what the editor saw live.
    second_user = replay.index(users[1])
    assert replay[0] == users[0]
    assert replay[1:second_user] == live[0]
    assert replay[second_user + 1 :] == live[1]
    assert text(replay) == "You said: first promptYou said: second prompt"

    # The loaded session carries on, without reusing the ids of its stored turns.
    assert ok(second, "prompt3") == {"stopReason": "end_turn"}
    start, end = turn_span(second)
    new_turn = wire_updates(second, sid, start, end)
    assert text(new_turn) == "You said: third prompt"
    old_ids = {u.get("messageId") for u in replay} | {u.get("toolCallId") for u in replay}
    new_ids = {u.get("messageId") for u in new_turn} | {u.get("toolCallId") for u in new_turn}
    assert (old_ids & new_ids) - {None} == set()


# -- 6. failure and the other stop reasons ---------------------------------------------------


async def test_failure_and_stop_reasons(run_sdk: Any) -> None:
    r = await run_sdk("stop_reasons")
    assert_sdk_saw_everything(r)
    failed = err(r, "fail")
    assert failed["code"] == -32603
    assert "failed on purpose" in failed["message"]
    assert ok(r, "refuse") == {"stopReason": "refusal"}
    assert ok(r, "max_tokens") == {"stopReason": "max_tokens"}
    assert ok(r, "max_turns") == {"stopReason": "max_turn_requests"}
    assert ok(r, "after") == {"stopReason": "end_turn"}
    sid = ok(r, "new")["sessionId"]
    start, end = turn_span(r, 1)
    assert text(wire_updates(r, sid, start, end)) == "I won't do that."


# -- 7. modes and config options ----------------------------------------------------------


async def test_set_mode_and_config_option(run_sdk: Any) -> None:
    r = await run_sdk("options")
    assert_sdk_saw_everything(r)
    sid = r["session_id"]
    assert ok(r, "set_mode") == {}
    changes = [u for u in wire_updates(r, sid) if u["sessionUpdate"] == "config_option_update"]
    (mode,) = changes[0]["configOptions"]
    assert mode["id"] == "mode" and mode["currentValue"] == "ask" and mode["type"] == "select"

    (mode,) = ok(r, "set_option")["configOptions"]
    assert mode["currentValue"] == "code"
    (mode,) = changes[1]["configOptions"]
    assert mode["currentValue"] == "code"

    bad = {"bad_value": "nonsense", "bad_mode": "nonsense", "bad_id": "no_such_option", "bool_value": "boolean"}
    for name, needle in bad.items():
        e = err(r, name)
        assert e["code"] == -32602, (name, e)
        assert needle in e["message"], (name, e)

    (mode,) = ok(r, "set_ask")["configOptions"]
    assert mode["currentValue"] == "ask"
    reload = ok(r, "reload")
    assert reload["modes"]["currentModeId"] == "ask"
    assert reload["configOptions"][0]["currentValue"] == "ask"


# -- 8. one turn at a time -------------------------------------------------------------------


async def test_second_prompt_while_turn_runs_is_refused(run_sdk: Any) -> None:
    r = await run_sdk("busy")
    assert_sdk_saw_everything(r)
    sid = ok(r, "new")["sessionId"]
    busy = err(r, "second")
    assert busy["code"] == -32600
    assert "already running a turn" in busy["message"]
    assert ok(r, "first") == {"stopReason": "end_turn"}
    start, end = turn_span(r)
    turn = wire_updates(r, sid, start, end)
    assert [u.get("status") for u in turn if u["sessionUpdate"].startswith("tool_call")] == ["pending", "completed"]
    assert text(turn) == "Edited notes.txt. You said: x"
    # The refused prompt started no turn: one user turn, one usage report.
    assert kinds(wire_updates(r, sid)).count("usage_update") == 1


# -- 9. close, and listing many sessions ----------------------------------------------------


async def test_close_then_prompt_and_list_paging(run_sdk: Any, workdir: str) -> None:
    r = await run_sdk("close_and_list", sessions=55)
    assert_sdk_saw_everything(r)
    assert ok(r, "close") in ({}, None)
    assert err(r, "prompt_closed")["code"] == -32002
    assert err(r, "close_again")["code"] == -32002

    created = r["created"]
    pages = r["pages"]
    assert len(created) == 55 and len(set(created)) == 55
    assert len(pages) >= 2 and all(pages)
    seen = [s for page in pages for s in page]
    assert len(seen) == len(set(seen)), "a session listed twice"
    assert set(seen) == set(created)  # the closed one lives in another cwd
    assert r["closed_id"] not in seen
    for n, page in enumerate(pages):
        listed = ok(r, f"list{n}")
        assert all(s["cwd"] == workdir for s in listed["sessions"])
        assert ("nextCursor" in listed) == (n < len(pages) - 1)
    assert err(r, "bad_cursor")["code"] == -32602
