"""An agent's `elicitation/create` (ACP schema, form mode) as a canonical question and
back, and the bridge's own form questions read by another bridge as they were asked
(bridge/codecs/acp_elicitation.py); the ACP back's handler of the request.

The request shapes are the ones the official ACP Python SDK sends for
`conn.create_elicitation(message, ElicitationFormSessionMode(...))` (its serializer
leaves `"type": "object"` out, the schema's default).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from bridge.backs.acp.requests import answer_elicitation
from bridge.codecs.acp_elicitation import MAX_FIELDS, MAX_OPTIONS, AgentQuestion, answer_of, content_of, question_of, with_schema
from bridge.codecs.jsonrpc import decode_params
from bridge.core.events import Question, QuestionAnswered, QuestionOption
from bridge.errors import CODES, InvalidParams
from bridge.schema import acp

COLOURS = [{"const": "red", "title": "Red"}, {"const": "green", "title": "Green"}, {"const": "blue", "title": "Blue"}]
MATRIX = {  # tests/peers/acp_agent_matrix.py `choose:`, as the SDK puts it on the wire
    "sessionId": "s1",
    "message": "Which colours do you like?",
    "mode": "form",
    "requestedSchema": {"properties": {
        "choice": {"title": "Colours", "items": {"anyOf": COLOURS}, "type": "array"},
        "other": {"title": "Other", "type": "string"},
    }},
}  # fmt: skip


def params(**changes: Any) -> acp.ElicitationParams:
    return decode_params(msgspec.Raw(msgspec.json.encode({**MATRIX, **changes})), acp.ElicitationParams)


def schema(props: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **more}


def test_a_multi_select_with_free_text_is_a_choice_answered_in_the_agents_field_names() -> None:
    asked = question_of("q1", params())
    assert asked.question == Question(
        id="q1",
        kind="choice",
        prompt="Which colours do you like?",
        header="Colours",
        options=[QuestionOption(id="red", label="Red"), QuestionOption(id="green", label="Green"), QuestionOption(id="blue", label="Blue")],
        multi_select=True,
        allow_text=True,
    )
    answer = QuestionAnswered(question_id="q1", selected=["red", "blue"], text="teal")
    assert content_of(asked, answer) == {"choice": ["red", "blue"], "other": "teal"}
    assert content_of(asked, QuestionAnswered(question_id="q1", text="teal")) == {"other": "teal"}


def test_single_choices_from_enum_and_one_of_and_their_answers() -> None:
    enum = params(requestedSchema=schema({"size": {"type": "string", "title": "Size", "enum": ["s", "l"], "enumNames": ["Small", "Large"]}}))
    asked = question_of("q", enum)
    q = asked.question
    assert (q.kind, q.multi_select, q.allow_text, q.header) == ("choice", False, False, "Size")
    assert [(o.id, o.label) for o in q.options] == [("s", "Small"), ("l", "Large")]
    assert content_of(asked, QuestionAnswered(question_id="q", selected=["l"])) == {"size": "l"}

    one_of = params(requestedSchema=schema({"pick": {"type": "string", "oneOf": [{"const": "a", "description": "first"}, {"const": "b", "title": "Bee"}]}}))
    q = question_of("q", one_of).question
    assert [(o.id, o.label, o.description) for o in q.options] == [("a", "a", "first"), ("b", "Bee", None)]
    plain = params(requestedSchema=schema({"pick": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}}}))
    assert question_of("q", plain).question.multi_select is True


@pytest.mark.parametrize("multi", [False, True])
@pytest.mark.parametrize("text", [False, True])
def test_the_fronts_own_form_reads_back_as_the_question_it_was(multi: bool, text: bool) -> None:
    """Bridge → bridge: what our ACP front asks an editor, an ACP back asks its fronts."""
    sent = Question(
        id="m1-color",
        kind="choice",
        prompt="Which colours do you like?",
        header="Colours",
        options=[QuestionOption(id=c["const"], label=c["title"]) for c in COLOURS],
        multi_select=multi,
        allow_text=text,
        tool_call_id="t1",
    )
    wire = acp.ElicitationParams(session_id="s", mode="form", message=sent.prompt, requested_schema=with_schema(sent).schema, tool_call_id="t1")
    asked = question_of("m1-color", decode_params(msgspec.Raw(msgspec.json.encode(wire)), acp.ElicitationParams))
    assert asked.question == sent
    answer = QuestionAnswered(question_id="m1-color", selected=["red", "blue"] if multi else ["blue"], text="teal" if text else None)
    content = content_of(asked, answer)
    # ...and the agent's content, read by the front that asked, is the same answer.
    assert answer_of(sent, content) == {"selected": answer.selected, "text": answer.text}


@pytest.mark.parametrize(
    "props",
    [
        {"name": {"type": "string"}, "age": {"type": "integer"}},  # no choice at all
        {"a": {"type": "string", "enum": ["x"]}, "b": {"type": "string", "enum": ["y"]}},  # two choices
        {"a": {"type": "string", "enum": ["x"]}, "n": {"type": "number"}},  # a choice and a number
        {"a": {"type": "string", "enum": ["x"]}, "t1": {"type": "string"}, "t2": {"type": "string"}},  # two text fields
        {"a": {"type": "string", "enum": ["x", "x"]}},  # options that cannot be told apart
        {"a": {"type": "string", "enum": ["x", 1]}},  # a constant that is not a string
        {"ok": {"type": "boolean", "default": True}},
    ],
)
def test_any_other_form_is_a_form_question_with_the_agents_schema(props: dict[str, Any]) -> None:
    sent = schema(props, required=list(props)[:1])
    asked = question_of("q", params(requestedSchema=sent, toolCallId="t7"))
    assert asked.question == Question(id="q", kind="form", prompt="Which colours do you like?", schema=sent, tool_call_id="t7")
    values = {name: "v" for name in props} | {"stranger": 1}
    assert content_of(asked, QuestionAnswered(question_id="q", values=values)) == {name: "v" for name in props}


def test_a_form_of_one_field_answered_in_words_fills_that_field() -> None:
    asked = question_of("q", params(requestedSchema=schema({"answer": {"type": "string", "minLength": 1}})))
    assert asked.question.kind == "form"
    assert content_of(asked, QuestionAnswered(question_id="q", text="teal")) == {"answer": "teal"}


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"mode": "url", "url": "https://example.com/", "elicitationId": "e1"}, "mode 'url' is not offered"),
        ({"requestedSchema": None}, "needs requestedSchema"),
        ({"requestedSchema": {"type": "array", "items": {"type": "string"}}}, "must be an object schema"),
        ({"requestedSchema": {"properties": [1, 2]}}, "properties must be an object"),
        ({"requestedSchema": schema({"deep": {"type": "object", "properties": {}}})}, "properties.deep must be a primitive"),
        ({"requestedSchema": schema({"what": "string"})}, "properties.what must be a primitive"),
        ({"requestedSchema": schema({"a": {"type": "string"}}, required="a")}, "required must be a list"),
        ({"requestedSchema": schema({f"f{i}": {"type": "string"} for i in range(MAX_FIELDS + 1)})}, f"at most {MAX_FIELDS}"),
        ({"requestedSchema": schema({"a": {"type": "string", "enum": [str(i) for i in range(MAX_OPTIONS + 1)]}})}, f"at most {MAX_OPTIONS}"),
    ],
)
def test_requests_outside_the_declared_form_subset_are_invalid_params(changes: dict[str, Any], said: str) -> None:
    with pytest.raises(InvalidParams, match=said):
        question_of("q", params(**changes))
    assert CODES[InvalidParams].jsonrpc == -32602


class _Turn:
    """A turn whose user answers the next question with `answer` (or a cancel of the turn)."""

    def __init__(self, answer: dict[str, Any], *, cancel: bool = False) -> None:
        self.answer, self.cancel_requested, self.cancel = answer, False, cancel
        self.asked: list[Question] = []

    async def ask(self, question: Question) -> QuestionAnswered:
        self.asked.append(question)
        self.cancel_requested = self.cancel
        return QuestionAnswered(question_id=question.id, **self.answer)


def _host(turn: _Turn | None) -> Any:
    return SimpleNamespace(back=SimpleNamespace(name="r"), session_id="s", turn=turn, questions=0)


async def test_the_back_answers_accept_decline_or_cancel_and_declines_outside_a_turn() -> None:
    turn = _Turn({"selected": ["green"], "text": "teal"})
    host = _host(turn)
    result = await answer_elicitation(host, params())
    assert msgspec.json.decode(msgspec.json.encode(result)) == {"action": "accept", "content": {"choice": ["green"], "other": "teal"}}
    assert turn.asked[0].id == "elicitation#1" and turn.asked[0].multi_select
    # A question declined, unanswered in time or shown nowhere: the agent hears decline.
    result = await answer_elicitation(_host(_Turn({"cancelled": True, "by": "timeout"})), params(toolCallId="t3"))
    assert msgspec.json.decode(msgspec.json.encode(result)) == {"action": "decline"}
    # The turn cancelled while it waited: cancel (ACP, Prompt Turn: Cancellation).
    result = await answer_elicitation(_host(_Turn({"cancelled": True}, cancel=True)), params())
    assert result.action == "cancel" and result.content is None
    # Outside a turn nobody can answer.
    assert (await answer_elicitation(_host(None), params())).action == "decline"


async def test_the_back_refuses_what_it_did_not_declare_before_asking() -> None:
    turn = _Turn({"selected": ["red"]})
    with pytest.raises(InvalidParams):
        await answer_elicitation(_host(turn), params(mode="url", url="https://example.com/"))
    assert turn.asked == []
    assert isinstance(question_of("q", params()), AgentQuestion)
