"""`agent-bridge ask`'s parts without a process: answers from flags and typed lines
(total on any input, always an answer the session takes), forms read from any schema,
every canonical event rendered, and the status line on an emulated terminal."""

from __future__ import annotations

import io
import re
import typing
from typing import Any

import pyte
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.ask_answers import AnswerFlags, Field, Retry, answer_by_flags, form_fields, parse_field, parse_reply
from bridge.core import events as ev
from bridge.core.content import DataContent, ImageContent, ResourceLink, TextContent
from bridge.errors import InvalidParams
from bridge.render import JsonLines, Renderer
from bridge.session.turn import check_answer
from bridge.status_line import StatusLine

KINDS = st.sampled_from([None, "allow_once", "allow_always", "reject_once", "reject_always"])
OPTIONS = st.lists(
    st.builds(ev.QuestionOption, id=st.text(min_size=1, max_size=8), label=st.text(max_size=12), kind=KINDS),
    max_size=6,
    unique_by=lambda o: o.id,
)
QUESTIONS = st.builds(
    ev.Question,
    id=st.just("q"),
    kind=st.sampled_from(["permission", "choice", "form"]),
    prompt=st.text(max_size=20),
    options=OPTIONS,
    multi_select=st.booleans(),
    allow_text=st.booleans(),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def _takes(q: ev.Question, answer: dict[str, Any]) -> None:
    """The session takes it (bridge/session/turn.py `check_answer`)."""
    if not answer.get("cancelled"):
        check_answer(q, answer.get("selected", []), answer.get("text"), answer.get("values"))


@given(QUESTIONS, st.text(max_size=60))
@settings(max_examples=400, deadline=None)
def test_a_typed_line_is_an_answer_the_session_takes_or_a_retry(q: ev.Question, line: str) -> None:
    if q.kind == "form" and not q.options:
        return  # forms are asked a field at a time
    reply = parse_reply(q, line)
    if isinstance(reply, Retry):
        assert reply.message and len(reply.message) < 200
    else:
        _takes(q, reply)


def test_a_retry_quotes_at_most_a_bounded_part_of_what_was_typed() -> None:
    # Control and astral characters spell out as up to ten in a repr: the echo is bounded
    # after quoting, not before (hypothesis found a 60-character line that made 200+).
    one = ev.Question(id="q", kind="choice", prompt="?", options=[ev.QuestionOption(id="a", label="A")])
    reply = parse_reply(one, "000" + "\x1f" * 8 + "\U00010756" * 20)
    assert isinstance(reply, Retry) and len(reply.message) < 200, reply


@given(QUESTIONS, st.sampled_from([None, "allow", "reject", "first"]), st.lists(st.text(max_size=8), max_size=3), st.none() | st.text(max_size=20))
@settings(max_examples=400, deadline=None)
def test_flags_give_an_answer_the_session_takes_or_none(q: ev.Question, policy: Any, options: list[str], text: str | None) -> None:
    answer = answer_by_flags(q, AnswerFlags(policy=policy, options=tuple(options), text=text))
    if answer is not None:
        _takes(q, answer)


def test_flags_pick_what_they_name() -> None:
    opts = [ev.QuestionOption(id="red", label="Red"), ev.QuestionOption(id="blue", label="Blue")]
    many = ev.Question(id="q", kind="choice", prompt="?", options=opts, multi_select=True, allow_text=True)
    assert answer_by_flags(many, AnswerFlags(options=("2", "RED", "mauve"), text="teal")) == {"selected": ["blue", "red"], "text": "teal"}
    one = ev.Question(id="q", kind="choice", prompt="?", options=opts)
    assert answer_by_flags(one, AnswerFlags(options=("blue", "red"))) == {"selected": ["blue"]}
    free = ev.Question(id="q", kind="choice", prompt="?", allow_text=True)
    assert answer_by_flags(free, AnswerFlags(policy="first")) is None  # nothing is made up
    assert answer_by_flags(free, AnswerFlags(text="Ada")) == {"text": "Ada"}
    form = ev.Question(id="q", kind="form", prompt="?", schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    assert answer_by_flags(form, AnswerFlags(text="7")) == {"values": {"n": 7}}
    assert answer_by_flags(form, AnswerFlags(text="seven")) is None
    assert answer_by_flags(form, AnswerFlags(text='{"n": 1, "m": 2}')) == {"values": {"n": 1, "m": 2}}


@given(JSON)
@settings(max_examples=300, deadline=None)
def test_form_fields_of_any_schema(schema: Any) -> None:
    fields = form_fields(schema if isinstance(schema, dict) else None)
    for f in fields:
        assert f.type in ("string", "number", "integer", "boolean", "array")


@given(
    st.builds(Field, name=st.just("f"), title=st.just("F"), type=st.sampled_from(["string", "number", "integer", "boolean", "array"]),
              required=st.booleans(), options=st.lists(st.builds(ev.QuestionOption, id=st.text(min_size=1, max_size=4),
              label=st.text(max_size=6)), max_size=3).map(tuple), default=st.none() | st.integers()),
    st.text(max_size=80),
)  # fmt: skip
@settings(max_examples=400, deadline=None)
def test_a_field_parses_or_says_why_not(field: Field, text: str) -> None:
    try:
        parse_field(field, text)
    except ValueError as exc:
        assert str(exc)


def test_field_values() -> None:
    number = Field(name="n", title="N", type="integer", required=True)
    assert parse_field(number, " 12345678901234567890 ") == 12345678901234567890
    assert parse_field(number, "2e3") == 2000
    for bad in ("", "1.5", "1e999", "x"):
        with pytest.raises(ValueError):
            parse_field(number, bad)
    colours = Field(name="c", title="C", type="array", options=(ev.QuestionOption(id="r", label="Red"), ev.QuestionOption(id="b", label="Blue")))
    assert parse_field(colours, "2, red, 2") == ["b", "r"]
    assert parse_field(Field(name="u", title="U", type="boolean"), "No") is False


def _one_of_each() -> list[ev.Event]:
    q = ev.Question(id="q", kind="choice", prompt="Pick", header="H", options=[ev.QuestionOption(id="a", label="A")])
    return [
        ev.TurnStarted(turn_id="t", prompt=[TextContent(text="hi")]),
        ev.MessageChunk(content=TextContent(text="thinking\x1b]52;c;c3RvbGVu\x07"), thought=True),
        ev.MessageChunk(content=ImageContent(data="AAAA", mime_type="image/png")),
        ev.ProgressReported(content=[TextContent(text="busy")]),
        ev.ToolCallStarted(tool_call_id="c", title="Run", kind="execute"),
        ev.ToolCallUpdated(tool_call_id="c", content=[ev.ToolCallContent(type="terminal", terminal_id="t1")]),
        ev.ToolCallUpdated(tool_call_id="c", status="completed"),
        ev.PlanUpdated(entries=[ev.PlanEntry(content="x", status="completed")]),
        ev.QuestionAsked(question=q),
        ev.QuestionAnswered(question_id="q", selected=["a"]),
        ev.ArtifactUpdated(artifact_id="a", parts=[TextContent(text="art "), DataContent(data={"k": 1}), ResourceLink(uri="file:///x", name="x")]),
        ev.UsageReported(used=1, size=2, input_tokens=3, output_tokens=4, cost_amount=0.5, cost_currency="USD"),
        ev.CommandsAvailable(commands=[ev.CommandInfo(name="plan")]),
        ev.OptionsChanged(options=[ev.ConfigOption(id="mode", name="Mode", current="ask")]),
        ev.TurnEnded(turn_id="t", stop_reason=ev.StopReason.FAILED, error=ev.TurnError(message="boom")),
    ]


def test_every_event_kind_is_rendered() -> None:
    events = _one_of_each()
    assert {type(e) for e in events} == set(typing.get_args(ev.Event))  # a new kind must be added here, and rendered
    out, err = io.StringIO(), io.StringIO()
    asked: list[ev.Question] = []
    r = Renderer(out, err=err, color=True, on_question=asked.append)
    shown = []
    for e in events:
        before = len(out.getvalue()) + len(err.getvalue())
        r.deliver(e)
        shown.append(len(out.getvalue()) + len(err.getvalue()) > before)
    assert shown == [not isinstance(e, ev.TurnStarted) for e in events]  # the prompt typed is not echoed
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    for needle in ("[image image/png", "… Run [terminal t1]", "✓ Run", "? [H] Pick", "  1. A", "answer (user): a", "art ",
                   '"k": 1', "[link file:///x]", "usage: 3 in / 4 out, 0.5 USD", "commands: /plan", "options: mode=ask",
                   "error: boom", "[failed]"):  # fmt: skip
        assert needle in text, needle
    assert "busy" in err.getvalue() and "busy" not in text
    assert "\x1b]52" not in out.getvalue() and "\x07" not in out.getvalue()  # an agent cannot set the clipboard through the terminal
    assert [q.id for q in asked] == ["q"]
    raw = io.BytesIO()
    j = JsonLines(raw)
    for e in events:
        j.deliver(e)
    assert len(raw.getvalue().splitlines()) == len(events)


class _TtyErr(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_notes_on_a_terminal_are_safe_when_stdout_is_not_one() -> None:
    """`ask ... > answer.txt`: stdout is a file, stderr the terminal. The agent's progress
    text goes to stderr: no escape sequence of its reaches the terminal."""
    out, err = io.StringIO(), _TtyErr()
    r = Renderer(out, err=err, color=False)
    r.deliver(ev.ProgressReported(content=[TextContent(text="busy\x1b]52;c;c3RvbGVu\x07\x1b[2J\x1b]0;title\x07\x9b1A")]))
    assert err.getvalue() == "busy]52;c;c3RvbGVu[2J]0;title1A\n"  # the controls go, the rest is plain text
    r.deliver(ev.MessageChunk(content=TextContent(text="raw \x1b[2J")))
    assert out.getvalue() == "raw \x1b[2J"  # a pipe or a file gets the agent's text as it is


class _TtyBytes(io.BytesIO):
    def isatty(self) -> bool:
        return True


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=40))
def test_json_lines_on_a_terminal_carry_no_control_it_would_obey(text: str) -> None:
    """`ask --json` read on a terminal: JSON escapes C0 controls (ESC) but may carry C1
    ones (CSI is U+009B) as they are; there they are escaped too, the JSON the same."""
    import json

    event = ev.MessageChunk(content=TextContent(text=text + "\x9b2J\x1b]52;c;eA==\x07"))
    tty, pipe = _TtyBytes(), io.BytesIO()
    JsonLines(tty).deliver(event)
    JsonLines(pipe).deliver(event)
    raw = tty.getvalue()
    assert not re.search(rb"[\x00-\x1f\x7f]|\xc2[\x80-\x9f]", raw[:-1]), raw
    assert json.loads(raw) == json.loads(pipe.getvalue())
    assert b"\xc2\x9b" in pipe.getvalue()  # a pipe gets the canonical bytes


class _Tty(io.StringIO):
    def fileno(self) -> int:
        raise OSError("not a real terminal")  # 80 columns


def _screen(raw: str) -> list[str]:
    screen = pyte.Screen(80, 10)
    pyte.Stream(screen).feed(raw.replace("\n", "\r\n"))
    return [row.rstrip() for row in screen.display]


def test_the_status_line_stays_below_the_reply_and_goes_when_it_ends() -> None:
    out = _Tty()
    s = StatusLine(out, enabled=True, color=False, clock=lambda: 1.0)
    s.note("writing")
    s.write("hello ")
    s.tick()
    assert _screen(out.getvalue())[:2] == ["hello", "⠙ 0.0s · writing"]
    before = len(out.getvalue())
    s.write("world")  # stays on the line: the status line is left alone
    assert out.getvalue()[before:] == "world"
    s.write(" " + "x" * 80 + "\nnext line\n")  # wraps and ends lines: erased, written, drawn again
    assert _screen(out.getvalue())[:5] == ["hello world " + "x" * 68, "x" * 12, "next line", "", "⠹ 0.0s · writing"]
    s.write("y" * 80)  # the cursor waits at the right margin: not drawn there
    assert not s.drawn
    s.tick()
    assert not s.drawn
    s.write("z\n")
    s.close()
    assert "·" not in "".join(_screen(out.getvalue()))


def test_a_wide_character_at_the_margin_makes_the_column_unknown_until_the_next_line() -> None:
    """A double-width character that starts in the last column is wrapped by some
    terminals and not by others: the cursor may wait at the margin, where a drawn status
    line would lose the pending wrap (the next character overwriting the last). Not drawn
    there, nor anywhere on that line; drawn again from the next one."""
    out = _Tty()
    s = StatusLine(out, enabled=True, color=False, clock=lambda: 1.0)
    s.write("x" * 79)
    s.write("中")
    assert s.column is None and not s.drawn
    s.tick()
    s.write("yz")
    assert not s.drawn and "·" not in out.getvalue()
    s.write("\nnext")
    s.tick()
    assert s.drawn and s.column == 4
    s.write(" 中文 fits")  # wide characters away from the margin: counted, two cells each
    assert s.column == 4 + 1 + 4 + 5


def test_the_status_line_is_not_drawn_when_disabled() -> None:
    out = _Tty()
    s = StatusLine(out, enabled=False)
    s.write("hi\n")
    s.tick()
    assert out.getvalue() == "hi\n"


def test_invalid_answers_are_refused_by_the_session() -> None:
    q = ev.Question(id="q", kind="choice", prompt="?", options=[ev.QuestionOption(id="a", label="A")])
    with pytest.raises(InvalidParams):
        check_answer(q, ["zzz"], None, None)
