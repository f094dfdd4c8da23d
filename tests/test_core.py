"""The canonical turn model, tested directly and synchronously (no event loop).

- `bridge.core.turn`: every legal transition of the one table, every illegal pair,
  several open questions (ANSWER_ONE vs ANSWER), cancel resolving questions.
- `bridge.core.events`: `encode_events`/`decode_events` round-trips every event type,
  with every content block type nested inside, `parent_tool_call_id` and every
  `StopReason`.
- `bridge.core.content.text_of`.
"""

from __future__ import annotations

import itertools
import typing

import msgspec
import pytest

from bridge.core import content as ct
from bridge.core import events as ev
from bridge.core.turn import TRANSITIONS, IllegalTransition, TurnInput, TurnMachine, TurnState

S, I = TurnState, TurnInput

# -- turn state machine -------------------------------------------------------------


def machine_in(state: TurnState) -> TurnMachine:
    m = TurnMachine()
    m.state = state
    return m


@pytest.mark.parametrize(
    ("src", "inp", "dst"),
    [(s, i, d) for (s, i), d in TRANSITIONS.items()],
    ids=[f"{s.value}-{i.value}" for (s, i) in TRANSITIONS],
)
def test_every_legal_transition(src: TurnState, inp: TurnInput, dst: TurnState) -> None:
    m = machine_in(src)
    assert m.apply(inp) is dst
    assert m.state is dst


def test_transition_table_matches_the_rules_in_the_docstring() -> None:
    # The rules above TRANSITIONS, restated as the exact table they imply.
    assert TRANSITIONS == {
        (S.IDLE, I.PROMPT): S.RUNNING,
        (S.RUNNING, I.ASK): S.AWAITING_ANSWER,
        (S.AWAITING_ANSWER, I.ASK): S.AWAITING_ANSWER,
        (S.AWAITING_ANSWER, I.ANSWER_ONE): S.AWAITING_ANSWER,
        (S.AWAITING_ANSWER, I.ANSWER): S.RUNNING,
        (S.RUNNING, I.CANCEL): S.CANCELLING,
        (S.AWAITING_ANSWER, I.CANCEL): S.CANCELLING,
        (S.CANCELLING, I.CANCEL): S.CANCELLING,
        (S.CANCELLING, I.ANSWER): S.CANCELLING,
        (S.CANCELLING, I.ANSWER_ONE): S.CANCELLING,
        (S.RUNNING, I.END): S.ENDED,
        (S.AWAITING_ANSWER, I.END): S.ENDED,
        (S.CANCELLING, I.END): S.ENDED,
    }


ILLEGAL = [(s, i) for s, i in itertools.product(TurnState, TurnInput) if (s, i) not in TRANSITIONS]


@pytest.mark.parametrize(("src", "inp"), ILLEGAL, ids=[f"{s.value}-{i.value}" for s, i in ILLEGAL])
def test_every_illegal_transition_raises(src: TurnState, inp: TurnInput) -> None:
    m = machine_in(src)
    with pytest.raises(IllegalTransition) as info:
        m.apply(inp)
    assert info.value.state is src
    assert info.value.event is inp
    assert inp.value in str(info.value) and src.value in str(info.value)
    assert m.state is src  # a refused input changes nothing


def test_illegal_sample_includes_the_important_ones() -> None:
    for pair in [
        (S.IDLE, I.ASK),  # no question before the turn runs
        (S.IDLE, I.END),
        (S.RUNNING, I.PROMPT),  # one turn at a time
        (S.RUNNING, I.ANSWER),  # nothing to answer
        (S.CANCELLING, I.ASK),  # no new questions once cancelling
        (S.ENDED, I.PROMPT),  # an ended turn takes no further input
        (S.ENDED, I.CANCEL),
        (S.ENDED, I.END),
    ]:
        assert pair in ILLEGAL


def test_active_states() -> None:
    assert {s for s in TurnState if machine_in(s).active} == {S.RUNNING, S.AWAITING_ANSWER, S.CANCELLING}


def test_a_full_turn_with_one_question() -> None:
    m = TurnMachine()
    assert m.state is S.IDLE and not m.active
    assert m.apply(I.PROMPT) is S.RUNNING
    assert m.ask("q1") is S.AWAITING_ANSWER
    assert m.open_questions == {"q1"}
    assert m.answer("q1") is S.RUNNING
    assert m.open_questions == set()
    assert m.apply(I.END) is S.ENDED
    assert not m.active


def test_several_open_questions_answer_one_then_the_last() -> None:
    m = TurnMachine()
    m.apply(I.PROMPT)
    m.ask("q1")
    assert m.ask("q2") is S.AWAITING_ANSWER
    assert m.ask("q3") is S.AWAITING_ANSWER
    # Answering one of several is ANSWER_ONE: still awaiting.
    assert m.answer("q2") is S.AWAITING_ANSWER
    assert m.open_questions == {"q1", "q3"}
    assert m.answer("q1") is S.AWAITING_ANSWER
    # The last one is ANSWER: running again.
    assert m.answer("q3") is S.RUNNING
    assert m.open_questions == set()


def test_answer_order_does_not_matter() -> None:
    for order in itertools.permutations(["a", "b", "c"]):
        m = TurnMachine()
        m.apply(I.PROMPT)
        for q in "abc":
            m.ask(q)
        states = [m.answer(q) for q in order]
        assert states == [S.AWAITING_ANSWER, S.AWAITING_ANSWER, S.RUNNING]


def test_answering_an_unknown_or_answered_question_raises_keyerror_and_changes_nothing() -> None:
    m = TurnMachine()
    m.apply(I.PROMPT)
    m.ask("q1")
    with pytest.raises(KeyError):
        m.answer("nope")
    assert m.state is S.AWAITING_ANSWER and m.open_questions == {"q1"}
    m.answer("q1")
    with pytest.raises(KeyError):
        m.answer("q1")
    assert m.state is S.RUNNING


def test_ask_before_prompt_is_illegal_and_records_no_question() -> None:
    m = TurnMachine()
    with pytest.raises(IllegalTransition):
        m.ask("q1")
    assert m.open_questions == set()


def test_cancel_with_open_questions_then_resolve_them_as_cancelled() -> None:
    m = TurnMachine()
    m.apply(I.PROMPT)
    m.ask("q1")
    m.ask("q2")
    assert m.apply(I.CANCEL) is S.CANCELLING
    # Open questions are resolved (as cancelled) while cancelling; the state holds.
    assert m.answer("q1") is S.CANCELLING
    assert m.answer("q2") is S.CANCELLING
    assert m.open_questions == set()
    assert m.apply(I.CANCEL) is S.CANCELLING  # a second cancel is harmless
    with pytest.raises(IllegalTransition):
        m.ask("q3")  # no new question once cancelling
    assert m.apply(I.END) is S.ENDED
    with pytest.raises(IllegalTransition):
        m.apply(I.CANCEL)


def test_cancel_while_running_without_questions() -> None:
    m = TurnMachine()
    m.apply(I.PROMPT)
    assert m.apply(I.CANCEL) is S.CANCELLING
    assert m.active
    assert m.apply(I.END) is S.ENDED


# -- events: every type round-trips through the stored encoding --------------------

ANN = ct.Annotations(audience=["user", "assistant"], priority=0.5, last_modified="2026-11-01T00:00:00Z")

BLOCKS: list[ct.ContentBlock] = [
    ct.TextContent(text="hello\nworld ✓"),
    ct.TextContent(text="annotated", annotations=ANN, meta={"k": [1, 2, {"x": None}]}),
    ct.ImageContent(data="iVBORw0KGgo=", mime_type="image/png", uri="file:///a.png", annotations=ANN),
    ct.AudioContent(data="UklGRg==", mime_type="audio/wav"),
    ct.ResourceLink(
        uri="file:///w/README.md",
        name="README.md",
        mime_type="text/markdown",
        title="Readme",
        description="the readme",
        size=1234,
        annotations=ANN,
    ),
    ct.EmbeddedResource(resource=ct.ResourceContents(uri="file:///w/a.py", text="print(1)\n", mime_type="text/x-python")),
    ct.EmbeddedResource(resource=ct.ResourceContents(uri="file:///w/a.bin", blob="AAEC", mime_type="application/octet-stream")),
    ct.DataContent(data={"key": "value", "count": 42, "ratio": 0.5, "list": [1, None, True]}),
    ct.DataContent(data=[1, 2], mime_type="application/vnd.example+json"),
]


def test_the_sample_covers_every_content_block_type() -> None:
    assert {type(b) for b in BLOCKS} == set(typing.get_args(ct.ContentBlock))


def all_events() -> list[ev.Event]:
    question = ev.Question(
        id="q1",
        kind="choice",
        prompt="Which?",
        options=[
            ev.QuestionOption(id="a", label="A", kind="allow_once", description="first"),
            ev.QuestionOption(id="b", label="B", kind="reject_always"),
            ev.QuestionOption(id="c", label="C"),
        ],
        multi_select=True,
        allow_text=True,
        tool_call_id="tc1",
        header="Pick",
    )
    form = ev.Question(
        id="q2",
        kind="form",
        prompt="Fill",
        schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    out: list[ev.Event] = [
        ev.TurnStarted(turn_id="t1", prompt=list(BLOCKS)),
        ev.TurnStarted(turn_id="t1b", prompt=BLOCKS[:1], message_id="client-m1", meta={"metadata": {"k": 1}, "extensions": ["x"]}),
        ev.ProgressReported(content=[ct.TextContent(text="working on it")], message_id="status-1"),
        *[ev.MessageChunk(content=b, message_id=f"m{i}") for i, b in enumerate(BLOCKS)],
        ev.MessageChunk(content=BLOCKS[0], thought=True, parent_tool_call_id="parent-1"),
        ev.ToolCallStarted(
            tool_call_id="tc1",
            title="Edit a.py",
            kind="edit",
            status="in_progress",
            name="Edit",
            raw_input={"path": "a.py", "n": [1, 2.5, None, True]},
            content=[
                *[ev.ToolCallContent(content=b) for b in BLOCKS],
                ev.ToolCallContent(type="diff", path="/w/a.py", old_text=None, new_text="new"),
                ev.ToolCallContent(type="diff", path="/w/b.py", old_text="old", new_text="new"),
                ev.ToolCallContent(type="terminal", terminal_id="term-1"),
            ],
            locations=[ev.ToolLocation(path="/w/a.py", line=3), ev.ToolLocation(path="/w/b.py")],
            parent_tool_call_id="parent-1",
        ),
        ev.ToolCallStarted(tool_call_id="tc0", title="minimal"),
        ev.ToolCallUpdated(tool_call_id="tc1"),
        ev.ToolCallUpdated(
            tool_call_id="tc1",
            title="Edited a.py",
            kind="edit",
            status="failed",
            raw_input="x",
            raw_output={"error": "denied"},
            content=[],
            locations=[],
            parent_tool_call_id="parent-1",
        ),
        ev.PlanUpdated(
            entries=[
                ev.PlanEntry(content="one", priority="high", status="completed"),
                ev.PlanEntry(content="two"),
                ev.PlanEntry(content="three", priority="low", status="in_progress"),
            ]
        ),
        ev.PlanUpdated(entries=[]),
        ev.QuestionAsked(question=question),
        ev.QuestionAsked(question=form, parent_tool_call_id="parent-1"),
        ev.QuestionAnswered(question_id="q1", selected=["a", "c"], text="also D", by="user"),
        ev.QuestionAnswered(question_id="q2", values={"n": 3}, by="policy"),
        ev.QuestionAnswered(question_id="q3", cancelled=True, by="timeout"),
        ev.ArtifactUpdated(artifact_id="art1", parts=list(BLOCKS), name="report", append=True, last=True),
        ev.ArtifactUpdated(artifact_id="art2", parts=[]),
        ev.UsageReported(used=10, size=200_000, input_tokens=3, output_tokens=7, cost_amount=0.0125, cost_currency="EUR"),
        ev.UsageReported(),
        ev.CommandsAvailable(
            commands=[ev.CommandInfo(name="plan", description="make a plan", hint="goal"), ev.CommandInfo(name="x")]
        ),
        ev.OptionsChanged(
            options=[
                ev.ConfigOption(
                    id="mode",
                    name="Mode",
                    current="code",
                    values=[ev.ConfigValue(value="ask", name="Ask", description="asks"), ev.ConfigValue(value="code", name="Code")],
                    description="how it works",
                    category="mode",
                )
            ]
        ),
    ]
    for reason in ev.StopReason:
        error = ev.TurnError(message="boom", kind="BackError", data={"code": 7}) if reason is ev.StopReason.FAILED else None
        out.append(ev.TurnEnded(turn_id="t1", stop_reason=reason, error=error))
    for seq, e in enumerate(out, start=1):
        e.seq = seq
    return out


def test_the_sample_covers_every_event_type() -> None:
    assert {type(e) for e in all_events()} == set(typing.get_args(ev.Event))


def test_every_event_round_trips_in_one_batch() -> None:
    events = all_events()
    decoded = ev.decode_events(ev.encode_events(events))
    assert decoded == events
    assert [type(e) for e in decoded] == [type(e) for e in events]


@pytest.mark.parametrize("event", all_events(), ids=lambda e: f"{e.seq}-{type(e).__name__}")
def test_each_event_round_trips_alone(event: ev.Event) -> None:
    (back,) = ev.decode_events(ev.encode_events([event]))
    assert back == event
    assert type(back) is type(event)
    assert back.seq == event.seq
    assert back.parent_tool_call_id == event.parent_tool_call_id


def test_nested_content_keeps_its_concrete_types() -> None:
    started = next(e for e in all_events() if isinstance(e, ev.ToolCallStarted) and e.content)
    (back,) = ev.decode_events(ev.encode_events([started]))
    assert isinstance(back, ev.ToolCallStarted) and back.content is not None
    assert [type(c.content) for c in back.content if c.type == "content"] == [type(b) for b in BLOCKS]
    diffs = [c for c in back.content if c.type == "diff"]
    assert [d.old_text for d in diffs] == [None, "old"]
    assert back.parent_tool_call_id == "parent-1"


def test_stop_reason_decodes_as_the_enum() -> None:
    ended = [e for e in ev.decode_events(ev.encode_events(all_events())) if isinstance(e, ev.TurnEnded)]
    assert [e.stop_reason for e in ended] == list(ev.StopReason)
    assert all(isinstance(e.stop_reason, ev.StopReason) for e in ended)
    failed = next(e for e in ended if e.stop_reason is ev.StopReason.FAILED)
    assert failed.error == ev.TurnError(message="boom", kind="BackError", data={"code": 7})
    assert {r.value for r in ev.StopReason} == {
        "end_turn",
        "max_tokens",
        "max_turn_requests",
        "refusal",
        "cancelled",
        "failed",
        "input_required",
    }


def test_empty_batch_round_trips() -> None:
    assert ev.decode_events(ev.encode_events([])) == []


def test_decoding_a_foreign_blob_fails_loudly() -> None:
    with pytest.raises(msgspec.DecodeError):
        ev.decode_events(msgspec.msgpack.encode([{"event": "nope", "seq": 1}]))


def test_defaults_are_not_stored() -> None:
    # omit_defaults keeps stored batches small: an unset parent or seq costs nothing.
    small = msgspec.msgpack.decode(ev.encode_events([ev.MessageChunk(content=ct.TextContent(text="x"))]))
    assert small == [{"event": "message_chunk", "content": {"type": "text", "text": "x"}}]


# -- content ------------------------------------------------------------------------


def test_text_of_joins_text_and_embedded_text() -> None:
    assert ct.text_of([]) == ""
    assert ct.text_of([ct.TextContent(text="a"), ct.TextContent(text="b ")]) == "ab "
    blocks = [
        ct.TextContent(text="see "),
        ct.EmbeddedResource(resource=ct.ResourceContents(uri="file:///x", text="FILE")),
        ct.EmbeddedResource(resource=ct.ResourceContents(uri="file:///y", blob="AAAA")),  # binary: no text
        ct.ImageContent(data="AAAA", mime_type="image/png"),
        ct.AudioContent(data="AAAA", mime_type="audio/wav"),
        ct.TextContent(text=" end"),
    ]
    assert ct.text_of(blocks) == "see FILE end"


def test_text_of_resource_link_contributes_its_uri() -> None:
    # A link has no place in plain text, so it travels as its URI (bridge/core/content.py, `text_of`).
    link = ct.ResourceLink(uri="https://example.com/a", name="a")
    assert ct.text_of([ct.TextContent(text="read "), link]) == "read https://example.com/a"


def test_content_blocks_use_acp_wire_names() -> None:
    image = msgspec.json.decode(msgspec.json.encode(BLOCKS[2]))
    assert image == {
        "type": "image",
        "data": "iVBORw0KGgo=",
        "mimeType": "image/png",
        "uri": "file:///a.png",
        "annotations": {"audience": ["user", "assistant"], "priority": 0.5, "lastModified": "2026-11-01T00:00:00Z"},
    }
    meta = msgspec.json.decode(msgspec.json.encode(BLOCKS[1]))
    assert meta["_meta"] == {"k": [1, 2, {"x": None}]}
