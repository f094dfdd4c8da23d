"""A route tool's result (bridge/fronts/mcp/tools.py): structured output beside the bridge's keys."""

from __future__ import annotations

import json

import pytest
import trio
from mcp.shared.exceptions import MCPError

from bridge.core.content import DataContent
from bridge.core.events import MessageChunk, Question, QuestionOption
from bridge.fronts.mcp.elicit import answer_of, form_of
from bridge.fronts.mcp.tools import _Collector


def test_the_bridges_session_id_wins_over_an_agents_key_and_the_data_stays_whole() -> None:
    """An agent's data with its own `session_id` must not steer the client into another
    session: structuredContent keeps ours, the text block keeps the agent's value whole."""
    c = _Collector()
    c.deliver(MessageChunk(content=DataContent(data={"session_id": "someone-elses", "stop_reason": "x", "n": 42})))
    result = c.result({"session_id": "s-1", "stop_reason": "end_turn"})
    assert result.structured_content == {"session_id": "s-1", "stop_reason": "end_turn", "n": 42}
    assert [json.loads(b.text) for b in result.content if b.text.startswith("{")] == [
        {"session_id": "someone-elses", "stop_reason": "x", "n": 42}
    ]


def test_options_that_share_a_label_are_told_apart_in_the_elicitation() -> None:
    """Two options labelled alike: the label the client picks names exactly one of them."""
    q = Question(id="q", kind="permission", prompt="Run it?", options=[
        QuestionOption(id="yes-once", label="Yes", kind="allow_once"),
        QuestionOption(id="yes-always", label="Yes", kind="allow_always"),
        QuestionOption(id="no", label="No", kind="reject_once"),
    ])  # fmt: skip
    assert form_of(q)["properties"]["choice"]["enum"] == ["Yes", "Yes (2)", "No"]
    assert answer_of(q, "accept", {"choice": "Yes (2)"})["selected"] == ["yes-always"]
    assert answer_of(q, "accept", {"choice": "Yes"})["selected"] == ["yes-once"]


async def test_calls_refused_by_limits_leave_no_session_behind() -> None:
    """A caller over `[limits]` calling a tool again and again: each call is refused
    (-32005) before any turn, and none leaves an empty session in the store (each one
    used to be stored, and made room among the live ones, for a turn that never ran)."""
    from bridge.backs import make_back
    from bridge.config import parse_config
    from bridge.core.identity import Identity
    from bridge.fronts.mcp.tools import call
    from bridge.session import SessionManager
    from bridge.store.memory import MemoryStore

    route = {"back": {"kind": "demo"}, "limits": {"per_identity_requests_per_minute": 1}}
    store = MemoryStore()
    manager = SessionManager(parse_config({"routes": {"r": route}}), store, lambda name, r: make_back(name, r))
    who = Identity(subject="mallory", via="token")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(manager.run)
            manager.limits.admit("r", who)()  # the caller's turn of this minute, taken
            for _ in range(20):
                with pytest.raises(MCPError) as caught:
                    await call(manager, "r", {"prompt": "hello"}, None, 60.0, who)
                assert caught.value.code == -32005
            assert (await store.list_sessions(limit=100))[1] == 0
            nursery.cancel_scope.cancel()
