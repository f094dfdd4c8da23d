"""End to end: nothing lost in translation on the ACP front (issue 15).

The real `agent-bridge acp demo`, driven by the official ACP Python SDK in its own
process (tests/peers/acp_sdk_client.py, scenario `fidelity`), one bridge for the whole
story: a prompt of two blocks titles its session with both; structured data, an image,
a file link and progress reach the editor each as ACP says (data as an embedded JSON
resource, progress as a marked thought, never the answer); a permission option picked
by kind does what its kind says; an editor that declares forms but answers
`elicitation/create` with an error is asked the question another way; and
`session/load` replays every kind exactly as it was shown live.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from acp_sdk_support import (
    assert_sdk_saw_everything,
    incoming,
    ok,
    request_index,
    response_index,
    run_sdk_client,
    text,
    turn_span,
    wire_updates,
)

from bridge.backs.demo.back import DATA, PIXEL_PNG


@pytest.fixture
async def report(bridge_exe: list[str], state_dir: str, clean_env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    workdir = tmp_path / "project"
    workdir.mkdir()
    command = [*bridge_exe, "acp", "demo", "--state-dir", state_dir]
    return await run_sdk_client("fidelity", bridge=command, env=clean_env, cwd=str(workdir), log=tmp_path / "bridge.log")


def turn_updates(r: dict[str, Any], sid: str, nth: int) -> list[dict[str, Any]]:
    return wire_updates(r, sid, *turn_span(r, nth))


async def test_every_kind_reaches_the_editor_as_acp_says_and_replays_the_same(report: dict[str, Any]) -> None:
    r = report
    assert_sdk_saw_everything(r)
    sid = r["session_id"]
    for name in ("two_blocks", "kinds", "never", "choose", "choose_again"):
        assert ok(r, name) == {"stopReason": "end_turn"}, name

    # Finding 14: the title puts a space between the prompt's blocks.
    (listed,) = ok(r, "list")["sessions"]
    assert listed["sessionId"] == sid and listed["title"] == "hello second message"

    # Finding 5: data is an embedded JSON resource (42 stays an integer), progress a
    # thought marked as progress; neither is in the answer. Images and links pass unchanged.
    live = turn_updates(r, sid, 1)
    (progress,) = [u for u in live if u["sessionUpdate"] == "agent_thought_chunk"]
    assert progress["_meta"] == {"agentBridge": {"progress": True}}
    assert progress["content"] == {"type": "text", "text": "Working on it."}
    answer = [u["content"] for u in live if u["sessionUpdate"] == "agent_message_chunk"]
    resource, image, link = answer[:3]
    assert resource["type"] == "resource"
    assert {k: v for k, v in resource["resource"].items() if k != "text"} == {
        "uri": "data:application/json",
        "mimeType": "application/json",
    }
    value = json.loads(resource["resource"]["text"])
    assert value == DATA and type(value["count"]) is int
    assert image == {"type": "image", "data": PIXEL_PNG, "mimeType": "image/png"}
    assert link == {"type": "resource_link", "uri": "file:///README.md", "name": "README.md", "mimeType": "text/markdown"}
    assert text(live) == "You said: hello"

    # Finding 6: the demo's fourth option arrives with its kind; picked by kind, it rejects.
    (never, choose, choose_again) = r["permissions"]
    assert [(o["optionId"], o["name"], o["kind"]) for o in never["options"]] == [
        ("allow", "Allow", "allow_once"),
        ("allow_always", "Always allow", "allow_always"),
        ("reject", "Reject", "reject_once"),
        ("reject_always", "Never allow", "reject_always"),
    ]
    assert never["answer"]["outcome"] == {"outcome": "selected", "optionId": "reject_always"}
    asked = turn_updates(r, sid, 2)
    edit_id = never["toolCall"]["toolCallId"]
    assert [u.get("status") for u in asked if u.get("toolCallId") == edit_id] == ["pending", "failed"]
    assert text(asked) == "Understood, I left notes.txt alone. You said: x"

    # Finding 10: elicitation/create answered with an error falls back to a permission
    # request (options whose kinds their words do not tell are never an allow), the
    # error is logged, and the next question goes straight there.
    (elicit,) = incoming(r, "elicitation/create")
    (reply,) = [w["msg"] for w in r["wire"] if w["dir"] == "out" and "method" not in w["msg"] and w["msg"].get("id") == elicit[1]["id"]]
    assert reply["error"]["code"] == -32601
    assert "editor answered elicitation/create with an error" in r["bridge_log"]
    start, end = turn_span(r, 3)
    assert start < elicit[0] < end
    for perm, said in ((choose, "You chose: Red. You said: hello"), (choose_again, "You chose: Red. You said: again")):
        assert perm["toolCall"]["title"] == "Which colours do you like?"
        # A choice's options say neither allow nor reject: never a reject kind an
        # auto-rejecting client could pick (bridge/codecs/acp.py, permission_request).
        assert [(o["name"], o["kind"]) for o in perm["options"]] == [
            ("Red", "allow_once"),
            ("Green", "allow_once"),
            ("Blue", "allow_once"),
        ]
    assert text(turn_updates(r, sid, 3)) == "You chose: Red. You said: hello"
    assert text(turn_updates(r, sid, 4)) == "You chose: Red. You said: again"

    # session/load replays each turn as it was shown live, new kinds included.
    i, load_id = request_index(r, "session/load")
    replay = wire_updates(r, sid, i, response_index(r, load_id))
    users = [n for n, u in enumerate(replay) if u["sessionUpdate"] == "user_message_chunk"]
    assert [replay[n]["content"]["text"] for n in users] == [
        "hello",
        "second message",
        "progress: data: image: hello",
        "ask: x",
        "choose: hello",
        "choose: again",
    ]
    assert replay[users[2] + 1 : users[3]] == live
    assert replay[users[3] + 1 : users[4]] == asked
