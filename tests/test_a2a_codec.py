"""The A2A codec without an event loop: SSE framing, the wire of both dialects and both
bindings, the agent card, the canonical translation, questions, and the card cache.

Golden files in tests/golden/a2a/: `stream_*.sse`, `task_*.json`, `error_*.json` and
`card_*.json` were captured from the a2a-sdk 1.3 test peer (`card_v03_legacy.json` is
a pre-1.0 card written by hand); `request_*.json` are our own requests, pinned.
Every captured wire object is round-tripped through its Struct: nothing it says is
dropped or changed on the way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from bridge.backs.a2a.cache import CardCache, freshness
from bridge.codecs import a2a as codec
from bridge.codecs.a2a_card import CardError, auth_placement, choose_interface, commands, parse_card
from bridge.codecs.a2a_client import A2AError, InvalidResponse, Wire
from bridge.codecs.a2a_dialect import Binding, Dialect, Interface
from bridge.codecs.a2a_tracker import TaskTracker
from bridge.codecs.sse import EventTooLarge, SSEDecoder, SSEEvent
from bridge.core.content import AudioContent, DataContent, EmbeddedResource, ImageContent, ResourceContents, ResourceLink, TextContent
from bridge.core.events import ArtifactUpdated, MessageChunk, ProgressReported, QuestionAnswered, StopReason
from bridge.schema import a2a as s
from bridge.schema import a2a_v03 as v

GOLDEN = Path(__file__).resolve().parent / "golden" / "a2a"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def sse_data(name: str) -> list[bytes]:
    dec = SSEDecoder()
    events = dec.feed(golden(name))
    assert dec.feed_eof()
    return [e.data for e in events]


def wire(dialect: str, binding: str, url: str = "https://agent.example.com/a2a") -> Wire:
    return Wire(Interface(url, Dialect(dialect), Binding.JSONRPC if binding == "jsonrpc" else Binding.HTTP_JSON))


def run_stream(w: Wire, name: str) -> tuple[TaskTracker, list[Any]]:
    t = TaskTracker()
    out: list[Any] = []
    for data in sse_data(name):
        out += t.feed(w.decode_event(data))
    return t, out


def texts(events: list[Any]) -> list[str]:
    """The reply's text, and status text (ProgressReported) marked `progress:`."""
    return [
        e.content.text if isinstance(e, MessageChunk) else f"progress:{e.content[0].text}" if isinstance(e, ProgressReported) else e.parts[0].text
        for e in events
    ]


# == SSE ===================================================================================


def test_sse_basic_fields_and_comments() -> None:
    d = SSEDecoder()
    out = d.feed(b": ping\r\nevent: error\r\nid: 7\r\nretry: 1500\r\ndata: {\"a\":\r\ndata:  1}\r\n\r\ndata:x\n\n")
    assert out == [SSEEvent(b'{"a":\n 1}', "error", "7", 1500), SSEEvent(b"x", "message", "7", None)]
    assert d.comments == 1
    assert d.feed_eof()


@pytest.mark.parametrize("name", ["stream_v10_jsonrpc_chunks.sse", "stream_v03_jsonrpc_ask.sse", "stream_v10_rest_files.sse"])
def test_sse_any_split_gives_the_same_events(name: str) -> None:
    body = golden(name)
    whole = SSEDecoder().feed(body)
    for size in (1, 2, 3, 7, 64):
        d = SSEDecoder()
        got: list[SSEEvent] = []
        for i in range(0, len(body), size):
            got += d.feed(body[i : i + size])
        assert got == whole, size
        assert d.feed_eof()


def test_sse_crlf_split_across_reads_is_one_line_end() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: a\r") == []
    assert d.feed(b"\n\r") == [SSEEvent(b"a")]  # CR LF, then a lone CR: the blank line
    assert d.feed(b"\ndata: b\r\n\r\n") == [SSEEvent(b"b")]  # that CR's LF is not a second one


def test_sse_end_of_input_drops_a_half_event() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: whole\n\ndata: half") == [SSEEvent(b"whole")]
    assert d.feed_eof() is False
    d2 = SSEDecoder()
    d2.feed(b"data: x\n")
    assert d2.feed_eof() is False  # data without its blank line is not an event


def test_sse_bounded_event_size() -> None:
    d = SSEDecoder(max_event_bytes=1024)
    with pytest.raises(EventTooLarge):
        d.feed(b"data: " + b"x" * 600 + b"\ndata: " + b"y" * 600 + b"\n")
    with pytest.raises(EventTooLarge):
        SSEDecoder(max_event_bytes=1024).feed(b"data: " + b"z" * 2000)  # no line end yet


# == golden round trips ======================================================================

ROUND_TRIPS = [
    ("stream_v10_jsonrpc_chunks.sse", s.RpcResponse[s.StreamResponse], "result"),
    ("stream_v03_jsonrpc_ask.sse", s.RpcResponse[v.StreamResultV03], "result"),
    ("stream_v10_rest_files.sse", s.StreamResponse, None),
    ("stream_v03_rest_chunks.sse", v.RestStreamResponseV03, None),
]


@pytest.mark.parametrize(("name", "typ", "member"), ROUND_TRIPS)
def test_captured_streams_round_trip(name: str, typ: Any, member: str | None) -> None:
    for data in sse_data(name):
        original = json.loads(data)
        obj = msgspec.json.decode(data, type=typ)
        if member:
            obj, original = getattr(obj, member), original[member]
        assert json.loads(msgspec.json.encode(obj)) == original


@pytest.mark.parametrize(
    ("name", "typ"),
    [
        ("task_v10_rest_files.json", s.Task),
        ("card_merged.json", s.AgentCard),
        ("card_v10_bearer.json", s.AgentCard),
        ("card_v03_legacy.json", v.AgentCardV03),
        ("error_rest.json", s.RestError),
    ],
)
def test_captured_objects_round_trip(name: str, typ: Any) -> None:
    original = json.loads(golden(name))
    obj = msgspec.json.decode(golden(name), type=typ)
    encoded = json.loads(msgspec.json.encode(obj))
    if typ is s.AgentCard:  # the merged card also holds 0.3 keys the 1.0 struct ignores
        original = {k: val for k, val in original.items() if k in encoded}
        for sch in (original.get("securitySchemes") or {}).values():
            for k in ("in", "name", "type", "scheme"):
                sch.pop(k, None)
        for req in original.get("securityRequirements") or ():
            for k in list(req["schemes"]):
                req["schemes"][k] = req["schemes"][k] or {}
    assert encoded == original


def test_task_v03_round_trips() -> None:
    env = json.loads(golden("task_v03_jsonrpc_ask.json"))
    task = msgspec.json.decode(golden("task_v03_jsonrpc_ask.json"), type=s.RpcResponse[v.TaskV03]).result
    assert json.loads(msgspec.json.encode(task)) == env["result"]


# == our requests (pinned) ======================================================================

BLOCKS = [
    TextContent(text="Summarize this"),
    ImageContent(data=PNG, mime_type="image/png"),
    ResourceLink(uri="file:///w/README.md", name="README.md", mime_type="text/markdown", size=120),
    EmbeddedResource(resource=ResourceContents(uri="file:///w/notes.txt", text="note", mime_type="text/plain")),
]


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
@pytest.mark.parametrize("binding", ["jsonrpc", "rest"])
def test_streaming_send_request(dialect: str, binding: str) -> None:
    msg = codec.user_message(BLOCKS, message_id="m-1", context_id="ctx-1")
    call = wire(dialect, binding).send(msg, stream=True)
    doc = {"method": call.method, "url": call.url, "headers": call.headers, "body": json.loads(call.body or b"")}
    assert doc == json.loads(golden(f"request_stream_v{dialect.replace('.', '')}_{binding}.json"))


@pytest.mark.parametrize("theirs", ["x", {"inReplyTo": "their-question"}, ["a"], None])
def test_a_clients_metadata_passes_on_except_our_own_key(theirs: Any) -> None:
    """A client's (or an upstream bridge's) `agentBridge` key is never ours: not passed on,
    never read back as the question our answer is bound to."""
    client = {"metadata": {"trace": "t-1", codec.META_KEY: theirs}, "extensions": ["https://ext.example/x", 7]}
    plain = codec.user_message([TextContent(text="hi")], message_id="m", client=client)
    assert plain.metadata == {"trace": "t-1"} and plain.extensions == ["https://ext.example/x"]
    answer = codec.user_message([TextContent(text="yes")], message_id="m", task_id="t", in_reply_to="q1", client=client)
    assert answer.metadata == {"trace": "t-1", codec.META_KEY: {"inReplyTo": "q1"}}


def test_the_other_calls_per_dialect_and_binding() -> None:
    msg = codec.user_message([TextContent(text="hi")], message_id="m")
    w10 = wire("1.0", "jsonrpc")
    body = json.loads(w10.send(msg, stream=False, return_immediately=True).body or b"")
    assert body["method"] == "SendMessage" and body["params"]["configuration"] == {"returnImmediately": True}
    assert json.loads(w10.get_task("t/1").body or b"")["params"] == {"id": "t/1"}
    assert json.loads(w10.cancel("t").body or b"")["method"] == "CancelTask"
    assert json.loads(w10.subscribe("t").body or b"")["method"] == "SubscribeToTask"
    w03 = wire("0.3", "jsonrpc")
    assert json.loads(w03.send(msg, stream=False, return_immediately=True).body or b"")["params"]["configuration"] == {"blocking": False}
    assert json.loads(w03.get_task("t").body or b"")["method"] == "tasks/get"
    assert json.loads(w03.cancel("t").body or b"")["method"] == "tasks/cancel"
    assert json.loads(w03.subscribe("t").body or b"")["method"] == "tasks/resubscribe"
    r10 = wire("1.0", "rest", "https://a.example/x/")
    get = r10.get_task("t/1", history_length=3)
    assert (get.method, get.url, get.params, get.body) == ("GET", "https://a.example/x/tasks/t%2F1", {"historyLength": "3"}, None)
    assert "Content-Type" not in get.headers and get.headers["A2A-Version"] == "1.0"
    assert r10.cancel("t").url == "https://a.example/x/tasks/t:cancel"
    assert (r10.subscribe("t").method, r10.subscribe("t").url) == ("POST", "https://a.example/x/tasks/t:subscribe")
    r03 = wire("0.3", "rest", "https://a.example/x")
    assert r03.send(msg, stream=False).url == "https://a.example/x/v1/message:send"
    assert "A2A-Version" not in r03.cancel("t").headers
    # JSON-RPC ids count up per wire
    assert [json.loads(w10.get_task("t").body or b"")["id"] for _ in range(2)] == [5, 6]


# == replies, lifted to 1.0 ====================================================================


def test_v10_jsonrpc_stream_to_canonical() -> None:
    t, out = run_stream(wire("1.0", "jsonrpc"), "stream_v10_jsonrpc_chunks.sse")
    # The WORKING status message is status text beside the reply, never part of it.
    assert texts(out) == ["progress:Working on chunks. ", "c0 ", "c1 ", "c2 ", "Done."]
    arts = [e for e in out if isinstance(e, ArtifactUpdated)]
    assert [(a.artifact_id, a.append, a.last, a.name) for a in arts] == [
        ("stream", False, False, "answer"),
        ("stream", True, False, "answer"),
        ("stream", True, True, "answer"),
    ]
    assert t.state == s.TaskState.COMPLETED and t.finished() and t.context_id and t.task_id
    assert codec.stop_reason(t.state) is StopReason.END_TURN


def test_v03_jsonrpc_stream_lifts_states_and_parts() -> None:
    t, out = run_stream(wire("0.3", "jsonrpc"), "stream_v03_jsonrpc_ask.sse")
    assert texts(out) == ["progress:Working on ask. "]  # the question is not chat
    assert t.state == s.TaskState.INPUT_REQUIRED and t.finished()
    assert t.status is not None and t.status.message is not None
    asked = codec.question_for(t.status, t.task_id or "")
    assert asked.shape == "options"
    assert [(o.id, o.label, o.kind) for o in asked.question.options] == [
        ("yes", "Yes, proceed", "allow_once"),
        ("no", "No, stop", "reject_once"),
    ]
    # the question we just answered is old news until the agent moves on
    assert not t.finished(stale=t.status.message.message_id)


def test_v10_rest_stream_files_map_to_blocks() -> None:
    t, out = run_stream(wire("1.0", "rest"), "stream_v10_rest_files.sse")
    blocks = [e.parts[0] for e in out if isinstance(e, ArtifactUpdated)]
    assert blocks[0] == TextContent(text="Here are the files.")
    assert blocks[1] == ImageContent(data=PNG, mime_type="image/png")
    assert blocks[2] == ResourceLink(uri="https://example.com/report.pdf", name="report.pdf", mime_type="application/pdf")
    # a2a-sdk prints the Struct number 2 as `2.0` (a protobuf Value holds doubles): it
    # arrives as data, and as the integer it is.
    assert b'"rows": 2.0' in golden("stream_v10_rest_files.sse")
    assert blocks[3] == DataContent(data={"rows": 2, "ok": True})
    assert type(blocks[3].data["rows"]) is int
    # the same task read later (GetTask) adds nothing: every piece already went out
    again = t.feed_task(wire("1.0", "rest").decode_task(golden("task_v10_rest_files.json")))
    assert again == []


def test_v03_rest_stream_lifts() -> None:
    t, out = run_stream(wire("0.3", "rest"), "stream_v03_rest_chunks.sse")
    assert texts(out) == ["progress:Working on chunks. ", "c0 ", "c1 ", "Done."]
    assert t.state == s.TaskState.COMPLETED


def test_v03_task_snapshot_reconciles_with_what_was_streamed() -> None:
    w = wire("0.3", "jsonrpc")
    t, _ = run_stream(w, "stream_v03_jsonrpc_ask.sse")
    assert t.feed_task(w.decode_task(golden("task_v03_jsonrpc_ask.json"))) == []


def test_errors_decode_with_their_reason() -> None:
    with pytest.raises(A2AError) as e10:
        wire("1.0", "jsonrpc").decode_task(golden("error_v10_jsonrpc.json"))
    assert e10.value.is_("TaskNotFound") and e10.value.reason == "TASK_NOT_FOUND"
    assert str(e10.value) == "Task not found (-32001 TASK_NOT_FOUND)"
    with pytest.raises(A2AError) as e03:
        wire("0.3", "jsonrpc").decode_task(golden("error_v03_jsonrpc.json"))
    assert e03.value.is_("TaskNotFound") and e03.value.reason is None
    err = wire("1.0", "rest").decode_http_error(404, golden("error_rest.json"))
    assert err is not None and err.is_("TaskNotFound") and err.status == 404 and err.code == -32001
    assert wire("1.0", "rest").decode_http_error(502, b"<html>bad gateway</html>") is None


def test_invalid_replies_say_what_is_wrong() -> None:
    with pytest.raises(InvalidResponse, match="not valid JSON"):
        wire("1.0", "jsonrpc").decode_send(b"{nope")
    with pytest.raises(InvalidResponse, match="does not match the A2A schema"):
        wire("1.0", "rest").decode_task(b'{"id": 5}')
    with pytest.raises(InvalidResponse, match="neither a task nor a message"):
        wire("1.0", "rest").decode_send(b"{}")
    with pytest.raises(InvalidResponse, match="neither result nor error"):
        wire("1.0", "jsonrpc").decode_task(b'{"jsonrpc": "2.0", "id": 1}')


def test_a_bare_message_reply_ends_the_turn() -> None:
    body = b'{"jsonrpc":"2.0","id":1,"result":{"message":{"messageId":"r1","role":"ROLE_AGENT","contextId":"c9","parts":[{"text":"hi"}]}}}'
    msg = wire("1.0", "jsonrpc").decode_send(body)
    t = TaskTracker()
    assert texts(t.feed_message(msg)) == ["hi"]  # type: ignore[arg-type]
    assert t.finished() and t.context_id == "c9" and t.task_id is None


# == the tracker: each piece exactly once ============================================================


def _art(aid: str, *texts_: str, append: bool = False, last: bool = False) -> s.StreamResponse:
    art = s.Artifact(artifact_id=aid, parts=[s.Part(text=x) for x in texts_])
    return s.StreamResponse(artifact_update=s.TaskArtifactUpdateEvent(task_id="t", context_id="c", artifact=art, append=append, last_chunk=last))


def _task(state: str, artifacts: dict[str, list[str]], history: list[s.Message] | None = None, status_msg: s.Message | None = None) -> s.Task:
    return s.Task(
        id="t",
        context_id="c",
        status=s.TaskStatus(state=state, message=status_msg),
        artifacts=[s.Artifact(artifact_id=a, parts=[s.Part(text=x) for x in ps]) for a, ps in artifacts.items()],
        history=history,
    )


def _msg(mid: str, text: str, role: str = s.ROLE_AGENT) -> s.Message:
    return s.Message(message_id=mid, role=role, parts=[s.Part(text=text)])


def test_snapshot_after_a_break_adds_only_what_was_missed() -> None:
    t = TaskTracker()
    got: list[Any] = []
    got += t.feed(_art("a", "c0 "))
    got += t.feed(_art("a", "c1 ", append=True))
    status = s.StreamResponse(status_update=s.TaskStatusUpdateEvent(task_id="t", status=s.TaskStatus(state=s.TaskState.WORKING, message=_msg("w1", "working"))))
    got += t.feed(status)
    # the stream broke; the re-subscription starts with a snapshot
    snap = _task(s.TaskState.WORKING, {"a": ["c0 ", "c1 ", "c2 ", "c3 "], "b": ["other"]}, history=[_msg("u", "hi", s.ROLE_USER), _msg("w1", "working"), _msg("w2", "missed")])
    got += t.feed_task(snap)
    got += t.feed(_art("a", "c4 ", append=True, last=True))
    assert texts(got) == ["c0 ", "c1 ", "progress:working", "progress:missed", "c2 ", "c3 ", "other", "c4 "]
    assert t.feed_task(snap) == []  # idempotent


def test_text_resent_whole_yields_only_its_tail() -> None:
    t = TaskTracker()
    out = t.feed(_art("a", "Hel")) + t.feed(_art("a", "Hello")) + t.feed(_art("a", "Hello, world"))
    assert texts(out) == ["Hel", "lo", ", world"]


def test_quiet_states_keep_their_message_out_of_the_chat() -> None:
    t = TaskTracker()
    for state in (s.TaskState.FAILED, s.TaskState.INPUT_REQUIRED, s.TaskState.AUTH_REQUIRED):
        ev = s.StreamResponse(status_update=s.TaskStatusUpdateEvent(task_id="t", status=s.TaskStatus(state=state, message=_msg(state, "q"))))
        assert t.feed(ev) == []
    # and a later snapshot does not bring them back through the history
    assert t.feed_task(_task(s.TaskState.WORKING, {}, history=[_msg(s.TaskState.FAILED, "q")])) == []


def test_stop_reasons() -> None:
    assert codec.stop_reason(s.TaskState.COMPLETED) is StopReason.END_TURN
    assert codec.stop_reason(s.TaskState.CANCELED) is StopReason.CANCELLED
    assert codec.stop_reason(s.TaskState.REJECTED) is StopReason.REFUSAL
    assert codec.stop_reason(s.TaskState.FAILED) is None
    assert codec.stop_reason(s.TaskState.WORKING) is None


# == content ================================================================================


def test_data_parts_are_data_both_ways_and_integers_stay_integers() -> None:
    # What a2a-sdk writes for {"key": "value", "count": 42} (ProtoJSON of a protobuf Value).
    sdk = b'{"data": {"key": "value", "count": 42.0, "ratio": 0.5, "big": 1e300, "list": [1.0, null, true]}, "mediaType": "application/json"}'
    block = codec.block_from_part(msgspec.json.decode(sdk, type=s.Part))
    assert block == DataContent(data={"key": "value", "count": 42, "ratio": 0.5, "big": 1e300, "list": [1, None, True]}, mime_type="application/json")
    assert [type(x) for x in (block.data["count"], block.data["list"][0], block.data["big"])] == [int, int, float]
    # and out again as a data part, 42 written as 42, in 1.0 and in 0.3 (an object there)
    (part,) = codec.parts_from_blocks([DataContent(data={"key": "value", "count": 42})])
    assert msgspec.json.encode(part) == b'{"data":{"key":"value","count":42}}'
    from bridge.codecs.a2a_v03_message import lower_part_v03

    assert msgspec.json.encode(lower_part_v03(part)) == b'{"kind":"data","data":{"key":"value","count":42}}'
    (scalar,) = codec.parts_from_blocks([DataContent(data=[1, 2])])
    assert msgspec.json.encode(lower_part_v03(scalar)) == b'{"kind":"data","data":{"value":[1,2]}}'


def test_content_both_ways() -> None:
    parts = codec.parts_from_blocks(BLOCKS + [AudioContent(data="AAA=", mime_type="audio/wav")])
    assert [(p.text, p.raw is not None, p.url, p.media_type) for p in parts] == [
        ("Summarize this", False, None, None),
        (None, True, None, "image/png"),
        (None, False, "file:///w/README.md", "text/markdown"),
        ("note", False, None, "text/plain"),
        (None, True, None, "audio/wav"),
    ]
    back = codec.blocks_from_parts(parts)
    assert back[:2] == BLOCKS[:2]
    assert back[2] == ResourceLink(uri="file:///w/README.md", name="README.md", mime_type="text/markdown", size=120)
    assert back[3] == BLOCKS[3]
    assert back[4] == AudioContent(data="AAA=", mime_type="audio/wav")
    blob = EmbeddedResource(resource=ResourceContents(uri="file:///w/a.bin", blob="AQI=", mime_type="application/octet-stream"))
    (p,) = codec.parts_from_blocks([blob])
    assert (p.raw, p.filename) == ("AQI=", "a.bin")
    assert codec.block_from_part(p) == blob
    assert codec.block_from_part(s.Part(raw="AQI=")) == EmbeddedResource(resource=ResourceContents(uri="attachment:file", blob="AQI="))


# == questions ==============================================================================


def _status(*parts: s.Part, mid: str = "q1") -> s.TaskStatus:
    return s.TaskStatus(state=s.TaskState.INPUT_REQUIRED, message=s.Message(message_id=mid, role=s.ROLE_AGENT, parts=list(parts)))


def test_options_question_and_its_answer() -> None:
    opts = {"options": [{"id": "go", "label": "Go ahead"}, {"id": "deny", "label": "Deny"}], "allowText": True}
    asked = codec.question_for(_status(s.Part(text="Deploy?"), s.Part(data=opts)), "t1")
    q = asked.question
    assert (q.kind, q.prompt, q.allow_text, q.id) == ("choice", "Deploy?", True, "a2a-t1-q1")
    assert [o.kind for o in q.options] == ["allow_once", "reject_once"]
    parts = codec.answer_parts(asked, QuestionAnswered(question_id=q.id, selected=["go"], text="carefully"))
    assert parts == [s.Part(text="Go ahead, carefully"), s.Part(data={"selected": ["go"], "text": "carefully"})]
    assert codec.answer_from_text(asked, "2").selected == ["deny"]
    assert codec.answer_from_text(asked, "go ahead").selected == ["go"]
    assert codec.answer_from_text(asked, "maybe later").text == "maybe later"
    assert "1. Go ahead\n2. Deny" in codec.question_text(asked)


def test_options_with_acp_kinds_make_a_permission() -> None:
    opts = {"options": [{"id": "a", "label": "Always", "kind": "allow_always"}, {"id": "n", "label": "Never", "kind": "reject_always"}]}
    q = codec.question_for(_status(s.Part(text="Run ls?"), s.Part(data=opts)), "t").question
    assert q.kind == "permission" and [o.kind for o in q.options] == ["allow_always", "reject_always"]


def test_chat_style_questions() -> None:
    one = {"questions": [{"question": "Which colour?", "header": "Colour", "options": [{"label": "Red"}, {"label": "Blue"}], "multiSelect": True}]}
    asked = codec.question_for(_status(s.Part(data=one)), "t")
    q = asked.question
    assert (q.kind, q.prompt, q.header, q.multi_select, q.allow_text) == ("choice", "Which colour?", "Colour", True, True)
    assert [o.id for o in q.options] == ["0", "1"]
    parts = codec.answer_parts(asked, QuestionAnswered(question_id=q.id, selected=["1", "0"]))
    assert parts[1] == s.Part(data={"selections": {"0": [1, 0]}, "custom": {}})
    two = {"questions": [{"question": "A?", "options": [{"label": "x"}, {"label": "y"}]}, {"question": "B?", "options": ["p", "q"], "multiSelect": True}]}
    asked2 = codec.question_for(_status(s.Part(text="Two things"), s.Part(data=two)), "t")
    assert asked2.question.kind == "form"
    assert set(asked2.question.schema["properties"]) == {"q0", "q0_custom", "q1", "q1_custom"}  # type: ignore[index]
    values = {"q0": "1", "q1": ["0", "1"], "q1_custom": "also r"}
    parts2 = codec.answer_parts(asked2, QuestionAnswered(question_id="x", values=values))
    assert parts2 == [s.Part(text="y | p; q; also r"), s.Part(data={"selections": {"0": [1], "1": [0, 1]}, "custom": {"1": "also r"}})]


def test_plain_text_question_is_a_form_with_one_field() -> None:
    asked = codec.question_for(_status(s.Part(text="Your name?")), "t")
    assert asked.shape == "text" and asked.question.kind == "form"
    assert asked.question.schema["required"] == ["answer"]  # type: ignore[index]
    parts = codec.answer_parts(asked, QuestionAnswered(question_id="x", values={"answer": "Ada"}))
    assert parts == [s.Part(text="Ada")]


def test_auth_url() -> None:
    assert codec.auth_url(_status(s.Part(text="Sign in at https://id.example.com/x."))) == "https://id.example.com/x"
    assert codec.auth_url(_status(s.Part(text="go"), s.Part(url="https://id.example.com/y"))) == "https://id.example.com/y"
    assert codec.auth_url(_status(s.Part(text="no link"))) is None


def test_answer_message_is_bound_to_the_question() -> None:
    m = codec.user_message([], message_id="m", context_id="c", task_id="t", in_reply_to="q1", extra_parts=[s.Part(text="yes")])
    assert json.loads(msgspec.json.encode(m)) == {
        "messageId": "m",
        "role": "ROLE_USER",
        "parts": [{"text": "yes"}],
        "contextId": "c",
        "taskId": "t",
        "metadata": {"agentBridge": {"inReplyTo": "q1"}},
    }


# == the card =================================================================================


def test_merged_card_prefers_1_0_and_honours_the_binding() -> None:
    view = parse_card(golden("card_merged.json"), "http://x/.well-known/agent-card.json")
    assert (view.name, view.version, view.streaming) == ("Research Agent", "2.5.0", True)
    assert choose_interface(view, "auto", "auto") == Interface("http://127.0.0.1:39299/", Dialect.V1_0, Binding.JSONRPC)
    assert choose_interface(view, "0.3", "http+json").dialect is Dialect.V0_3
    assert choose_interface(view, "auto", "http+json").url.endswith("/rest")
    assert [c.name for c in commands(view)] == ["summarize", "web-search"]


def test_legacy_0_3_card() -> None:
    view = parse_card(golden("card_v03_legacy.json"), "https://legacy.example.com/.well-known/agent-card.json")
    assert (view.name, view.streaming) == ("Legacy Agent", False)
    assert choose_interface(view, "auto", "auto") == Interface("https://legacy.example.com/a2a", Dialect.V0_3, Binding.HTTP_JSON)
    assert choose_interface(view, "auto", "jsonrpc").url == "https://legacy.example.com/a2a/jsonrpc"
    with pytest.raises(CardError, match=r"offers no interface agent-bridge can use \(A2A 1.0\).*HTTP\+JSON 0.3 at"):
        choose_interface(view, "1.0", "auto")
    assert auth_placement(view) == ("Authorization", "Bearer ")
    assert commands(view)[0].hint == "e.g. translate hello to French"


def test_security_schemes_place_the_token() -> None:
    assert auth_placement(parse_card(golden("card_v10_bearer.json"), "http://x/")) == ("Authorization", "Bearer ")
    view = parse_card(golden("card_v03_apikey.json"), "http://x/")
    assert auth_placement(view) == ("X-API-Key", "")
    assert auth_placement(view, header_override="X-Other") == ("X-Other", "")
    query = json.loads(golden("card_v03_apikey.json"))
    query["securitySchemes"]["key"] = {"apiKeySecurityScheme": {"location": "query", "name": "key"}}
    with pytest.raises(CardError, match="only sends secrets in headers"):
        auth_placement(parse_card(json.dumps(query).encode(), "http://x/"))


def test_bad_cards() -> None:
    with pytest.raises(CardError, match="not valid JSON"):
        parse_card(b"<html>", "http://x/")
    with pytest.raises(CardError, match="names no interface"):
        parse_card(b'{"name": "n"}', "http://x/")
    with pytest.raises(CardError, match="does not match"):
        parse_card(b'{"supportedInterfaces": 3}', "http://x/")
    odd = parse_card(b'{"name":"n","supportedInterfaces":[{"url":"/a2a","protocolBinding":"GRPC","protocolVersion":"1.0"},{"url":"/b","protocolBinding":"JSONRPC","protocolVersion":"2.1"}]}', "http://h:1/card")
    with pytest.raises(CardError, match=r"it offers: GRPC 1.0 at http://h:1/a2a, JSONRPC 2.1 at http://h:1/b"):
        choose_interface(odd, "auto", "auto")


# == the card cache =========================================================================


def test_freshness_rules() -> None:
    assert freshness({}, 300) == 300
    assert freshness({"cache-control": "public, max-age=60"}, 300) == 60
    assert freshness({"cache-control": "max-age=60", "age": "50"}, 300) == 10
    assert freshness({"cache-control": "no-cache"}, 300) == 0
    assert freshness({"cache-control": "no-store, max-age=60"}, 300) is None
    assert freshness({"cache-control": "private"}, 300) == 300


def test_cache_revalidates_with_the_etag() -> None:
    c = CardCache(300)
    assert not c.fresh(0) and c.conditional_headers() == {}
    c.stored("u", b"{}", {"etag": 'W/"1"', "cache-control": "max-age=10"}, now=100)
    assert c.fresh(105) and not c.fresh(111)
    assert c.conditional_headers() == {"If-None-Match": 'W/"1"'}
    c.revalidated({"cache-control": "max-age=20"}, now=111)
    assert c.fresh(130) and c.revalidations == 1 and c.body == b"{}"
    c.stored("u", b"{}", {"etag": 'W/"2"', "cache-control": "no-store"}, now=200)
    assert not c.fresh(200) and c.conditional_headers() == {}


def test_a_client_message_id_reaches_the_agent_once_per_session() -> None:
    """A client's retry (or two clients choosing one id) never sends one messageId twice."""
    from types import SimpleNamespace

    from bridge.backs.a2a.turn import A2ASession
    from bridge.backs.base import SessionContext

    ctx = SessionContext(session_id="s", route="r", cwd="/", options={}, back_ref="ctx-1")
    session = A2ASession(SimpleNamespace(name="r"), None, ctx)  # type: ignore[arg-type]

    def sent(mid: str | None) -> str:
        turn = SimpleNamespace(prompt=[TextContent(text="hi")], message_id=mid, message_meta=None)
        return session._first_message(turn, None).message_id  # type: ignore[arg-type]

    assert sent("client-1") == "client-1"
    retry, other, none = sent("client-1"), sent("client-2"), sent(None)
    assert retry not in ("client-1", "") and other == "client-2" and none
    assert sent(retry) != retry  # a minted id is taken too
    assert len({"client-1", retry, other, none}) == 4
