"""The A2A front's codecs without an event loop: the task projector, answers, the server wire, the card.

Golden files in tests/golden/a2a/front/ pin what the front writes for one scripted
turn (every canonical event kind) in each wire shape: `stream_v10.jsonl` (both 1.0
bindings), `stream_v03_jsonrpc.jsonl`, `stream_v03_rest.jsonl`, the final
`task_v10.json`, the merged card, and error bodies. Each written object is also
checked against the official schemas: 1.0 and 0.3-REST with a2a-sdk's protobuf
messages (strict: an unknown field fails), 0.3 JSON-RPC with its pydantic types. Set
BRIDGE_UPDATE_GOLDEN=1 to rewrite the goldens after a deliberate change.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from a2a.compat.v0_3 import a2a_v0_3_pb2 as pb03
from a2a.compat.v0_3 import types as types03
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import ParseDict

from bridge.codecs import a2a as back_codec
from bridge.codecs import a2a_server as wire
from bridge.codecs.a2a_card import CardSpec, parse_card, publish_card, skills_for
from bridge.codecs.a2a_server_rest import decode_rest, rest_request
from bridge.codecs.a2a_answer import answer_for
from bridge.codecs.a2a_task import TaskProjector, final_state
from bridge.codecs.a2a_dialect import Binding, Dialect
from bridge.codecs.a2a_v03_client import lift_event_v03, lift_task_v03
from bridge.codecs.a2a_v03_server import lower_event_rest_v03 as lower_event_rest
from bridge.codecs.a2a_v03_server import lower_event_v03 as lower_event_rpc
from bridge.codecs.a2a_v03_server import lower_task_v03 as lower_task_rpc
from bridge.core.content import DataContent, ImageContent, TextContent
from bridge.core.events import (
    ArtifactUpdated,
    CommandInfo,
    MessageChunk,
    ProgressReported,
    PlanEntry,
    PlanUpdated,
    Question,
    QuestionAnswered,
    QuestionAsked,
    QuestionOption,
    StopReason,
    ToolCallContent,
    ToolCallStarted,
    ToolCallUpdated,
    TurnEnded,
    TurnError,
    TurnStarted,
    UsageReported,
)
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

GOLDEN = Path(__file__).resolve().parent / "golden" / "a2a" / "front"
UPDATE = os.environ.get("BRIDGE_UPDATE_GOLDEN") == "1"
T0 = 1_790_000_000.0
_enc = msgspec.json.Encoder()

PERMISSION = Question(
    id="q1",
    kind="permission",
    prompt="Edit notes.txt?",
    tool_call_id="t2",
    options=[
        QuestionOption(id="allow", label="Allow", kind="allow_once"),
        QuestionOption(id="always", label="Always allow", kind="allow_always"),
        QuestionOption(id="reject", label="Reject", kind="reject_once"),
    ],
)
CHOICE = Question(
    id="q2", kind="choice", prompt="Which colours?", header="Colours", multi_select=True, allow_text=True,
    options=[QuestionOption(id="red", label="Red"), QuestionOption(id="green", label="Green"), QuestionOption(id="blue", label="Blue")],
)  # fmt: skip
FORM = Question(id="q3", kind="form", prompt="Your name?", schema={"type": "object", "properties": {"name": {"type": "string"}}})


def turn_events() -> list[Any]:
    """One turn with every kind of canonical event the front maps."""
    return [
        TurnStarted(turn_id="task-1", prompt=[TextContent(text="fix the notes")]),
        MessageChunk(content=TextContent(text="Let me look."), message_id="m1-t", thought=True),
        PlanUpdated(entries=[PlanEntry(content="Read"), PlanEntry(content="Edit")]),
        ToolCallStarted(tool_call_id="t1", title="Read notes.txt", kind="read", name="Read", raw_input={"path": "notes.txt"}),
        ToolCallUpdated(tool_call_id="t1", status="completed", content=[ToolCallContent(content=TextContent(text="old"))]),
        MessageChunk(content=TextContent(text="Reading "), message_id="m1-a"),
        MessageChunk(content=TextContent(text="done. "), message_id="m1-a"),
        MessageChunk(content=TextContent(text="sub-agent says hi"), message_id="m1-s", parent_tool_call_id="t1"),
        QuestionAsked(question=PERMISSION),
        QuestionAnswered(question_id="q1", selected=["allow"]),
        MessageChunk(content=TextContent(text="Edited."), message_id="m1-a"),
        MessageChunk(content=ImageContent(data="aGk=", mime_type="image/png"), message_id="m1-a"),
        ArtifactUpdated(artifact_id="diff", name="notes.diff", parts=[TextContent(text="-old\n+new\n")], last=True),
        UsageReported(used=10, size=100),
        TurnEnded(turn_id="task-1", stop_reason=StopReason.END_TURN),
    ]


def project(events: list[Any], *, message_ids: dict[str, str] | None = None) -> tuple[TaskProjector, list[s.StreamResponse]]:
    p = TaskProjector("task-1", "ctx-1", message_ids=message_ids or {"task-1": "client-msg-1", "q1": "client-msg-2"})
    out: list[s.StreamResponse] = []
    for i, e in enumerate(events):
        out += p.feed(e, T0 + i)
    return p, out


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed (BRIDGE_UPDATE_GOLDEN=1 rewrites it)"


def jsonl(objs: list[Any]) -> str:
    return "".join(json.dumps(json.loads(_enc.encode(o)), sort_keys=True) + "\n" for o in objs)


# -- the projector ---------------------------------------------------------------------------


def test_a_turn_projected_in_every_wire_shape_matches_its_golden() -> None:
    p, out = project(turn_events())
    check_golden("stream_v10.jsonl", jsonl(out))
    check_golden("stream_v03_jsonrpc.jsonl", jsonl([lower_event_rpc(e) for e in out]))
    check_golden("stream_v03_rest.jsonl", jsonl([lower_event_rest(e) for e in out]))
    check_golden("task_v10.json", json.dumps(json.loads(_enc.encode(p.snapshot())), indent=1, sort_keys=True) + "\n")


def test_every_written_object_is_valid_for_the_official_schemas() -> None:
    p, out = project(turn_events())
    for e in out:
        ParseDict(json.loads(_enc.encode(e)), pb.StreamResponse())  # strict: unknown fields fail
        ParseDict(json.loads(_enc.encode(lower_event_rest(e))), pb03.StreamResponse())
        types03.SendStreamingMessageSuccessResponse.model_validate({"jsonrpc": "2.0", "id": 1, "result": json.loads(_enc.encode(lower_event_rpc(e)))})
    ParseDict(json.loads(_enc.encode(p.snapshot())), pb.Task())
    types03.Task.model_validate(json.loads(_enc.encode(lower_task_rpc(p.snapshot()))))


def test_the_mapping_keeps_progress_out_of_artifacts() -> None:
    p, out = project(turn_events())
    kinds = [next(k for k in ("task", "message", "status_update", "artifact_update") if getattr(e, k) is not None) for e in out]
    assert kinds.count("artifact_update") == 6  # 4 reply chunks, the A2A-back artifact, the closing chunk
    states = [e.status_update.status.state for e in out if e.status_update]
    assert states[0] == "TASK_STATE_WORKING" and states[-1] == "TASK_STATE_COMPLETED"
    assert "TASK_STATE_INPUT_REQUIRED" in states
    reply = [e.artifact_update for e in out if e.artifact_update and e.artifact_update.artifact.artifact_id == "m1-a"]
    assert [u.append for u in reply] == [False, True, True, True, True] and reply[-1].last_chunk
    assert {u.artifact.name for u in reply} == {"response"}
    task = p.snapshot()
    assert task.status.state == "TASK_STATE_COMPLETED" and task.status.message is None
    arts = {a.artifact_id: a for a in task.artifacts or []}
    assert [x.text for x in arts["m1-a"].parts if x.text] == ["Reading done. Edited."] and arts["m1-a"].parts[1].raw == "aGk="
    assert arts["diff"].name == "notes.diff"
    history = task.history or []
    assert history[0].message_id == "client-msg-1" and history[0].role == s.ROLE_USER
    tagged = [m.metadata[back_codec.META_KEY]["kind"] for m in history if m.metadata]
    assert tagged == ["thought", "plan", "tool_call", "subagent", "question"]  # the question, where it was asked
    answer = next(m for m in history if m.message_id == "client-msg-2")
    assert answer.parts[1].data == {"selected": ["allow"]}
    assert [m.message_id for m in p.snapshot(history_length=1).history or []] == ["client-msg-2"]
    assert p.snapshot(history_length=0).history is None


def test_progress_is_a_working_status_message_and_data_a_data_part() -> None:
    p = TaskProjector("task-1", "ctx-1")
    out: list[s.StreamResponse] = []
    for i, e in enumerate([
        TurnStarted(turn_id="task-1", prompt=[TextContent(text="go")]),
        ProgressReported(content=[TextContent(text="working on it")], message_id="m1-p"),
        MessageChunk(content=TextContent(text="Which colour?"), message_id="m1-a"),
        MessageChunk(content=DataContent(data={"key": "value", "count": 42}), message_id="m1-a"),
    ]):  # fmt: skip
        out += p.feed(e, T0 + i)
    update = out[1].status_update
    assert update is not None and update.status.state == "TASK_STATE_WORKING"
    assert update.status.message is not None and update.status.message.role == s.ROLE_AGENT
    assert [x.text for x in update.status.message.parts] == ["working on it"]
    # GetTask while working shows it as the status message; the answer is not glued to it
    working = p.snapshot()
    assert working.status.message is not None and working.status.message.parts[0].text == "working on it"
    (art,) = working.artifacts or []
    assert [(x.text, x.data) for x in art.parts] == [("Which colour?", msgspec.UNSET), (None, {"key": "value", "count": 42})]
    assert b'{"data":{"key":"value","count":42}}' in _enc.encode(art)
    assert _enc.encode(lower_event_rpc(out[-1])).count(b'{"kind":"data","data":{"key":"value","count":42}}') == 1


def test_history_keeps_the_client_messages_as_sent() -> None:
    prompt = s.Message(message_id="c-1", role=s.ROLE_USER, parts=[s.Part(text="hi", metadata={"lang": "en"})],
                       metadata={"trace": "t-9"}, extensions=["https://example.com/ext/v1"])  # fmt: skip
    answer = s.Message(message_id="c-2", role=s.ROLE_USER, parts=[s.Part(text="allow")], task_id="task-1")
    p = TaskProjector("task-1", "ctx-1", sent={"task-1": prompt, "q1": answer})
    for i, e in enumerate([
        TurnStarted(turn_id="task-1", prompt=[TextContent(text="hi")]),
        QuestionAsked(question=PERMISSION),
        QuestionAnswered(question_id="q1", selected=["allow"]),
        TurnEnded(turn_id="task-1", stop_reason=StopReason.END_TURN),
    ]):  # fmt: skip
        p.feed(e, T0 + i)
    history = p.snapshot().history or []
    assert [m.message_id for m in history] == ["c-1", "q1", "c-2"]
    assert history[0].parts == prompt.parts and history[0].metadata == {"trace": "t-9"}
    assert history[0].extensions == ["https://example.com/ext/v1"]
    assert history[1].role == s.ROLE_AGENT and history[1].parts[0].text == "Edit notes.txt?"
    assert history[2].parts == [s.Part(text="allow")]  # not [{"text": "Allow"}, {"data": {"selected": ...}}]


def test_the_snapshot_is_the_same_live_and_replayed() -> None:
    live, _ = project(turn_events())
    replayed, _ = project(turn_events())
    assert _enc.encode(live.snapshot()) == _enc.encode(replayed.snapshot())


@pytest.mark.parametrize(
    ("stop", "kind", "state", "noted"),
    [
        (StopReason.END_TURN, None, "TASK_STATE_COMPLETED", None),
        (StopReason.MAX_TOKENS, None, "TASK_STATE_COMPLETED", "max_tokens"),
        (StopReason.MAX_TURN_REQUESTS, None, "TASK_STATE_COMPLETED", "max_turn_requests"),
        (StopReason.REFUSAL, None, "TASK_STATE_REJECTED", None),
        (StopReason.CANCELLED, None, "TASK_STATE_CANCELED", None),
        (StopReason.FAILED, "BackError", "TASK_STATE_FAILED", None),
        (StopReason.FAILED, "BackAuthRequired", "TASK_STATE_AUTH_REQUIRED", None),
        (StopReason.INPUT_REQUIRED, None, "TASK_STATE_INPUT_REQUIRED", None),
    ],
)
def test_stop_reasons_become_task_states(stop: StopReason, kind: str | None, state: str, noted: str | None) -> None:
    assert final_state(stop, kind) == (state, noted)
    p = TaskProjector("t", "c")
    p.feed(TurnStarted(turn_id="t", prompt=[TextContent(text="x")]), T0)
    error = TurnError(message="it broke", kind=kind) if kind else None
    [update] = p.feed(TurnEnded(turn_id="t", stop_reason=stop, error=error), T0 + 1)
    assert update.status_update.status.state == state
    assert (update.status_update.metadata or {}).get("agentBridge", {}).get("stopReason") == noted
    if error is not None:
        assert update.status_update.status.message.parts[0].text == "it broke"


def test_an_interrupted_task_continues_in_a_new_turn_and_can_be_canceled() -> None:
    p = TaskProjector("t1", "c")
    p.feed(TurnStarted(turn_id="t1", prompt=[TextContent(text="go")]), T0)
    p.feed(MessageChunk(content=TextContent(text="part one "), message_id="a"), T0)
    p.feed(TurnEnded(turn_id="t1", stop_reason=StopReason.INPUT_REQUIRED), T0 + 1)
    assert p.state == "TASK_STATE_INPUT_REQUIRED" and p.stopped
    p.feed(TurnStarted(turn_id="t2", prompt=[TextContent(text="more")]), T0 + 2)
    p.feed(MessageChunk(content=TextContent(text="part two"), message_id="a"), T0 + 2)
    p.feed(TurnEnded(turn_id="t2", stop_reason=StopReason.FAILED, error=TurnError(message="sign in", kind="BackAuthRequired")), T0 + 3)
    task = p.snapshot()
    assert p.turns == ["t1", "t2"] and task.status.state == "TASK_STATE_AUTH_REQUIRED"
    assert [m.parts[0].text for m in task.history or [] if m.role == s.ROLE_USER] == ["go", "more"]
    assert (task.artifacts or [])[0].parts[0].text == "part one part two"
    update = p.feed_canceled(T0 + 4)
    assert update.status_update.status.state == "TASK_STATE_CANCELED" and p.state == "TASK_STATE_CANCELED"


# -- answers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("question", "text", "data", "want"),
    [
        (PERMISSION, "allow", None, (["allow"], None, None)),
        (PERMISSION, "Always allow", None, (["always"], None, None)),
        (PERMISSION, "3", None, (["reject"], None, None)),
        (PERMISSION, "yes", None, (["allow"], None, None)),
        (PERMISSION, "No.", None, (["reject"], None, None)),
        (PERMISSION, None, {"selected": ["Reject"]}, (["reject"], None, None)),
        (CHOICE, "red, Blue", None, (["red", "blue"], None, None)),
        (CHOICE, "teal please", None, ([], "teal please", None)),
        (CHOICE, None, {"selected": ["green"], "text": "and teal"}, (["green"], "and teal", None)),
        (CHOICE, None, {"selections": {"0": [0, 2]}, "custom": {"0": "x"}}, (["red", "blue"], "x", None)),
        (FORM, "Ada", None, ([], "Ada", None)),
        (FORM, None, {"name": "Ada"}, ([], None, {"name": "Ada"})),
        (FORM, None, {"values": {"name": "Ada"}}, ([], None, {"name": "Ada"})),
    ],
)
def test_answers_are_read_from_ids_labels_numbers_data_or_text(question: Question, text: str | None, data: Any, want: Any) -> None:
    parts = ([s.Part(text=text)] if text is not None else []) + ([s.Part(data=data)] if data is not None else [])
    assert answer_for(question, parts) == want


def test_an_answer_that_fits_no_option_says_which_would() -> None:
    with pytest.raises(ValueError, match="'allow' \\(Allow\\)"):
        answer_for(PERMISSION, [s.Part(text="purple")])


@pytest.mark.parametrize("question", [PERMISSION, CHOICE])
def test_the_a2a_back_reads_our_questions_and_we_read_its_answers(question: Question) -> None:
    """One agent-bridge in front of another: the back's codec and the front's agree."""
    p = TaskProjector("t", "c")
    p.feed(TurnStarted(turn_id="t", prompt=[TextContent(text="x")]), T0)
    [update] = p.feed(QuestionAsked(question=question), T0)
    asked = back_codec.question_for(update.status_update.status, "t")
    assert asked.shape == "options"
    assert [(o.id, o.label) for o in asked.question.options] == [(o.id, o.label) for o in question.options]
    assert asked.question.kind == question.kind and asked.question.multi_select == question.multi_select
    picked = [question.options[-1].id]
    parts = back_codec.answer_parts(asked, QuestionAnswered(question_id=asked.question.id, selected=picked))
    assert answer_for(question, parts)[0] == picked


# -- the server wire -----------------------------------------------------------------------


def test_the_dialect_comes_from_the_version_header() -> None:
    assert wire.dialect_of(None) is Dialect.V0_3 and wire.dialect_of("") is Dialect.V0_3
    assert wire.dialect_of("1.0") is Dialect.V1_0 and wire.dialect_of("1.0.1") is Dialect.V1_0 and wire.dialect_of(" 1 ") is Dialect.V1_0
    assert wire.dialect_of("0.3.0") is Dialect.V0_3
    with pytest.raises(wire.A2AFault) as info:
        wire.dialect_of("2.0")
    assert info.value.code == -32009


def test_methods_are_looked_up_in_the_asked_dialect() -> None:
    assert wire.rpc_op("SendMessage", Dialect.V1_0) == "send" and wire.rpc_op("message/send", Dialect.V0_3) == "send"
    assert wire.rpc_op("tasks/resubscribe", Dialect.V0_3) == "subscribe"
    for method, dialect in (("SendMessage", Dialect.V0_3), ("message/send", Dialect.V1_0)):
        with pytest.raises(wire.A2AFault) as info:
            wire.rpc_op(method, dialect)
        assert info.value.name == "VersionNotSupported"
    with pytest.raises(wire.A2AFault) as info:
        wire.rpc_op("ListTasks", Dialect.V0_3)
    assert info.value.name == "VersionNotSupported"
    with pytest.raises(wire.A2AFault) as info:
        wire.rpc_op("nope", Dialect.V1_0)
    assert info.value.code == -32601


@pytest.mark.parametrize(
    ("body", "name"),
    [(b"{nope", "Parse"), (b"[]", "InvalidRequest"), (b'{"id": 1, "method": "x"}', "InvalidRequest"), (b'{"jsonrpc": "2.0", "id": 1}', "InvalidRequest")],
)
def test_bad_envelopes(body: bytes, name: str) -> None:
    with pytest.raises(wire.A2AFault) as info:
        wire.decode_envelope(body)
    assert info.value.name == name


def test_0_3_params_are_lifted_to_1_0_requests() -> None:
    env = wire.decode_envelope(json.dumps({"jsonrpc": "2.0", "id": "r", "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m", "role": "user", "parts": [{"kind": "text", "text": "hi"}, {"kind": "data", "data": {"a": 1}}],
                    "contextId": "c", "referenceTaskIds": ["t0"]},
        "configuration": {"blocking": False, "historyLength": 2,
                          "pushNotificationConfig": {"url": "https://h/x", "token": "k", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}},
    }}).encode())  # fmt: skip
    req = wire.decode_params("send", Dialect.V0_3, env.params)
    assert req.message.role == s.ROLE_USER and req.message.parts[1].data == {"a": 1} and req.message.reference_task_ids == ["t0"]
    assert req.configuration.return_immediately and req.configuration.history_length == 2
    push = req.configuration.task_push_notification_config
    assert (push.url, push.token, push.authentication.scheme, push.authentication.credentials) == ("https://h/x", "k", "Bearer", "c")
    get = wire.decode_params("get_push_config", Dialect.V0_3, msgspec.Raw(b'{"id": "t", "pushNotificationConfigId": "p"}'))
    assert (get.task_id, get.id) == ("t", "p")
    with pytest.raises(wire.A2AFault) as info:
        wire.decode_params("send", Dialect.V1_0, msgspec.Raw(b'{"message": {"parts": 3}}'))
    assert info.value.code == -32602 and "$.message.parts" in info.value.message


def test_0_3_rest_bodies_with_proto_field_names_are_read() -> None:
    """a2a-sdk's 0.3 REST client writes proto field names: `request`, `message_id`, `content`."""
    body = json.dumps({
        "request": {"message_id": "m", "context_id": "c", "role": "ROLE_USER", "content": [{"text": "hi"}, {"data": {"data": {"snake_key": 1}}}],
                    "metadata": {"keep_me": True}},
        "configuration": {"blocking": True, "history_length": 0},
    }).encode()  # fmt: skip
    req = decode_rest("send", Dialect.V0_3, body, {})
    assert req.message.message_id == "m" and req.message.context_id == "c" and req.message.parts[0].text == "hi"
    assert req.message.parts[1].data == {"snake_key": 1} and req.message.metadata == {"keep_me": True}
    assert not req.configuration.return_immediately and req.configuration.history_length is None
    push = decode_rest("create_push_config", Dialect.V0_3, json.dumps({
        "parent": "tasks/t", "config_id": "p", "config": {"push_notification_config": {"url": "https://h/x"}}}).encode(), {"id": "t"})  # fmt: skip
    assert (push.task_id, push.id, push.url) == ("t", "p", "https://h/x")


def test_answers_in_each_dialect_and_binding() -> None:
    p, _ = project(turn_events())
    task = p.snapshot(history_length=0)
    v10 = json.loads(wire.answer("send", Dialect.V1_0, Binding.JSONRPC, task))
    assert v10["task"]["id"] == "task-1"
    v03 = json.loads(wire.answer("send", Dialect.V0_3, Binding.JSONRPC, task))
    assert v03["kind"] == "task" and v03["status"]["state"] == "completed"
    types03.Task.model_validate(v03)
    assert lift_task_v03(msgspec.convert(v03, type=v.TaskV03)) == task  # lossless both ways
    rest03 = json.loads(wire.answer("send", Dialect.V0_3, Binding.HTTP_JSON, task))
    ParseDict(rest03, pb03.SendMessageResponse())
    assert json.loads(wire.rpc_result(7, b"null")) == {"jsonrpc": "2.0", "id": 7, "result": None}
    assert wire.answer("delete_push_config", Dialect.V1_0, Binding.HTTP_JSON, None) == b"{}"


def test_error_bodies_match_their_goldens() -> None:
    fault = wire.A2AFault("TaskNotFound", "unknown task 'x'")
    rpc = json.loads(wire.rpc_error("r1", fault))
    status, rest = wire.rest_error(fault, Dialect.V1_0)
    status03, rest03 = wire.rest_error(wire.A2AFault("UnsupportedOperation", "finished"), Dialect.V0_3)
    assert (status, status03) == (404, 400)
    check_golden("error_v10_jsonrpc.json", json.dumps(rpc, indent=1, sort_keys=True) + "\n")
    check_golden("error_v10_rest.json", json.dumps(json.loads(rest), indent=1, sort_keys=True) + "\n")
    check_golden("error_v03_rest.json", json.dumps(json.loads(rest03), indent=1, sort_keys=True) + "\n")
    # The A2A back reads them as the errors they are.
    from bridge.codecs.a2a_client import Wire
    from bridge.codecs.a2a_dialect import Interface

    w = Wire(Interface("http://x/", Dialect.V1_0, Binding.HTTP_JSON))
    err = w.decode_http_error(404, rest)
    assert err is not None and err.is_("TaskNotFound")


def test_stream_frames() -> None:
    p, out = project(turn_events()[:2])
    enc = wire.EventEncoder(Dialect.V1_0, Binding.JSONRPC, b'"s1"')
    frame = enc.frame(enc.payload(out[0]))
    assert frame.startswith(b'data: {"jsonrpc":"2.0","id":"s1","result":{"statusUpdate":') and frame.endswith(b"}}\n\n")
    rest = wire.EventEncoder(Dialect.V0_3, Binding.HTTP_JSON, b"null")
    assert rest.frame(rest.payload(out[0])).startswith(b'data: {"statusUpdate":')
    assert wire.EventEncoder(Dialect.V1_0, Binding.HTTP_JSON, b"null").key == enc.key  # 1.0 payloads are shared
    # A stream that cannot go on is answered with the binding's error body, under the stream's id.
    fault = wire.A2AFault("Internal", "boom")
    err = json.loads(wire.rpc_error(msgspec.json.decode(enc.rid), fault))
    assert err["id"] == "s1" and err["error"]["code"] == fault.code
    assert lift_event_v03(msgspec.json.decode(_enc.encode(lower_event_rpc(out[0])), type=v.StreamResultV03)) == out[0]


# -- the card ------------------------------------------------------------------------------


def spec(**kw: Any) -> CardSpec:
    base = dict(
        name="Demo", description="The demo", version="2.0.0", url="http://h:1/a2a/demo", streaming=True, push_notifications=True,
        extended_card=True, auth=("bearer", ""),
        skills=skills_for([CommandInfo(name="plan", description="makes a plan", hint="text")], route="demo", title="Demo", description="d"),
    )  # fmt: skip
    return CardSpec(**{**base, **kw})  # type: ignore[arg-type]


def test_the_merged_card_matches_its_golden_and_reads_as_1_0_and_0_3() -> None:
    from a2a.client.card_resolver import parse_agent_card

    doc = publish_card(spec(), legacy=True)
    check_golden("card_merged.json", json.dumps(doc, indent=1, sort_keys=True) + "\n")
    card10 = parse_agent_card(json.loads(json.dumps(doc)))
    assert [i.protocol_version for i in card10.supported_interfaces] == ["1.0", "1.0", "0.3", "0.3"]
    assert card10.security_schemes["bearer"].http_auth_security_scheme.scheme.lower() == "bearer"
    card03 = types03.AgentCard.model_validate(doc)
    assert card03.url == "http://h:1/a2a/demo" and card03.protocol_version == "0.3.0" and card03.supports_authenticated_extended_card
    plain = publish_card(spec(), legacy=False)
    ParseDict(plain, pb.AgentCard())  # strict: a plain 1.0 card has no field 1.0 does not know
    assert "url" not in plain and plain["skills"][0]["examples"] == ["/plan text"]


def test_the_a2a_back_can_use_the_fronts_card() -> None:
    from bridge.codecs.a2a_card import auth_placement, choose_interface, commands

    view = parse_card(json.dumps(publish_card(spec(auth=("api_key", "X-Key")), legacy=True)).encode(), "http://h:1/a2a/demo/.well-known/agent-card.json")
    assert choose_interface(view, "auto", "auto").dialect is Dialect.V1_0
    assert choose_interface(view, "0.3", "http+json").binding is Binding.HTTP_JSON
    assert auth_placement(view) == ("X-Key", "")
    assert [c.name for c in commands(view)] == ["plan"]


def test_rest_queries_camel_or_snake() -> None:
    req = rest_request("list_tasks", Dialect.V1_0, b"", {}, b"contextId=c&page_size=5&pageToken=10&includeArtifacts=true&history_length=0")
    assert (req.context_id, req.page_size, req.page_token, req.include_artifacts, req.history_length) == ("c", 5, "10", True, 0)
    assert rest_request("get_task", Dialect.V1_0, b"", {"id": "t"}, b"historyLength=3") == s.GetTaskRequest(id="t", history_length=3)
    for query in (b"pageSize=x", b"includeArtifacts=maybe"):
        with pytest.raises(wire.A2AFault) as info:
            rest_request("list_tasks", Dialect.V1_0, b"", {}, query)
        assert info.value.code == -32602


def test_a_selection_naming_no_option_is_refused() -> None:
    with pytest.raises(ValueError, match="names no option"):
        answer_for(PERMISSION, [s.Part(data={"selected": ["maybe"]})])


def test_the_messages_kept_as_sent_are_bounded_per_task() -> None:
    """A task's row (rewritten at each change of its state) keeps only its newest client
    messages as sent: a long exchange on one task does not make each write larger."""
    from bridge.fronts.a2a.state import SENT_BUDGET_BYTES, SENT_MAX_BYTES, SENT_MAX_MESSAGES, A2ATask

    def msg(mid: str, size: int = 10) -> s.Message:
        return s.Message(message_id=mid, role=s.ROLE_USER, parts=[s.Part(text="x" * size)])

    task = A2ATask()
    for i in range(200):  # a prompt, then answers
        assert task.keep_sent(f"key-{i}", msg(f"m-{i}"))
    assert [m.message_id for m in task.sent.values()] == [f"m-{i}" for i in range(200 - SENT_MAX_MESSAGES, 200)]
    assert not task.keep_sent("big", msg("big", SENT_MAX_BYTES + 1))

    task = A2ATask()
    for i in range(100):
        task.keep_sent(f"key-{i}", msg(f"m-{i}", SENT_MAX_BYTES - 200))
    assert len(msgspec.json.encode(task)) <= SENT_BUDGET_BYTES + 4096
    assert "key-99" in task.sent and "key-0" not in task.sent
