"""A route tool's result (bridge/fronts/mcp/tools.py): structured output beside the bridge's keys."""

from __future__ import annotations

import json

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
