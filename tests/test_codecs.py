"""Sans-I/O codecs, synchronous (no event loop): NDJSON framing, JSON-RPC, ACP.

ACP translation is checked against golden fixtures in `tests/golden/acp/`: each file
holds a canonical event (its msgspec JSON encoding), the exact ACP `session/update`
`update` object it must produce (ACP schema v1: `SessionUpdate`, `ContentBlock`, `ToolCall`), and, when the
translation is lossy, the event that reading the update back gives (`roundtrip`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from msgspec import Raw

from bridge.codecs import acp as codec
from bridge.codecs.jsonrpc import (
    Call,
    Notify,
    ProtocolError,
    Reply,
    decode_params,
    encode_lines,
    error_response,
    parse,
)
from bridge.codecs.acp_content import wire_blocks
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.codecs.option_kinds import infer_kind
from bridge.core import events as ev
from bridge.core.content import DataContent, EmbeddedResource, TextContent
from bridge.errors import (
    CODES,
    AuthRequired,
    BackAuthRequired,
    BackError,
    BackUnavailable,
    BridgeError,
    Busy,
    ConfigError,
    Forbidden,
    FrameTooLarge,
    InternalError,
    InvalidParams,
    InvalidRequest,
    MethodNotFound,
    NotFound,
    Overloaded,
    ParseError,
    PeerError,
    PromptError,
    RateLimited,
    RequestCancelled,
)
from bridge.schema import acp
from bridge.schema.jsonrpc import ErrorObject, ErrorResponse, Notification, Request, Response

GOLDEN = Path(__file__).parent / "golden" / "acp"

# -- NDJSON framing -------------------------------------------------------------------


def frames(out: list[bytes | Oversized]) -> list[Any]:
    """Lines as bytes, oversized frames as ("oversized", size)."""
    return [("oversized", f.size) if isinstance(f, Oversized) else f for f in out]


def test_one_line_split_across_many_reads() -> None:
    r = LineReader(1024)
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{"x":"\xc3\xa9"}}'
    got: list[Any] = []
    for i in range(len(line)):
        got += r.feed(line[i : i + 1])
    assert got == []
    assert r.feed(b"\n") == [line]
    assert r.feed_eof() == []


def test_split_points_everywhere() -> None:
    data = b'{"a":1}\n{"b":2}\n\n{"c":3}\n'
    for cut in range(len(data) + 1):
        r = LineReader(64)
        got = r.feed(data[:cut]) + r.feed(data[cut:]) + r.feed_eof()
        assert got == [b'{"a":1}', b'{"b":2}', b'{"c":3}'], cut


def test_many_lines_in_one_read() -> None:
    r = LineReader(1024)
    lines = [b'{"n":%d}' % i for i in range(500)]
    assert r.feed(b"\n".join(lines) + b"\n") == lines


def test_partial_tail_is_kept_for_the_next_read() -> None:
    r = LineReader(1024)
    assert r.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert r.feed(b":2}\n{") == [b'{"b":2}']
    assert r.feed(b"}\n") == [b"{}"]


def test_blank_and_whitespace_lines_are_skipped() -> None:
    r = LineReader(1024)
    assert r.feed(b"\n\n  \n\t\n{}\n\r\n\n") == [b"{}"]
    assert r.feed(b"\n") == []
    assert r.feed_eof() == []


def test_crlf_line_keeps_its_cr_for_the_json_parser() -> None:
    # JSON allows trailing whitespace, so a CR before the newline is harmless.
    r = LineReader(1024)
    (line,) = r.feed(b'{"a":1}\r\n')
    assert json.loads(line) == {"a": 1}


def test_a_line_exactly_at_the_limit_passes() -> None:
    r = LineReader(10)
    assert r.feed(b"x" * 10 + b"\n") == [b"x" * 10]
    assert r.feed(b"y" * 10) == []
    assert r.feed(b"\n") == [b"y" * 10]


def test_oversized_frame_in_the_middle_of_one_read() -> None:
    r = LineReader(10)
    out = r.feed(b"short\n" + b"x" * 50 + b"\nok\n")
    assert frames(out) == [b"short", ("oversized", 50), b"ok"]


def test_oversized_frame_at_the_end_of_a_read_then_a_good_frame() -> None:
    r = LineReader(10)
    # The tail of this read is already over the limit: it is dropped, not buffered.
    assert frames(r.feed(b"a\n" + b"x" * 30)) == [b"a"]
    assert frames(r.feed(b"x" * 5 + b"\n")) == [("oversized", 35)]
    assert r.feed(b"good\n") == [b"good"]


def test_oversized_frame_spanning_many_reads_then_a_good_frame() -> None:
    r = LineReader(10)
    assert r.feed(b"x" * 6) == []  # under the limit so far: buffered
    assert r.feed(b"x" * 6) == []  # now over: dropped, counted
    for _ in range(100):
        assert r.feed(b"x" * 1000) == []  # memory stays bounded while skipping
    assert len(r._buf) == 0
    out = r.feed(b"xxx\n{}\n")
    assert frames(out) == [("oversized", 12 + 100_000 + 3), b"{}"]
    assert r.feed(b"[1]\n") == [b"[1]"]


def test_oversized_frame_spanning_reads_ends_in_the_same_read_as_the_next_tail() -> None:
    r = LineReader(10)
    r.feed(b"x" * 20)
    assert frames(r.feed(b"x\n{")) == [("oversized", 21)]
    assert r.feed(b"}\n") == [b"{}"]


def test_two_oversized_frames_in_a_row() -> None:
    r = LineReader(4)
    assert frames(r.feed(b"aaaaaa\nbbbbbbb\nok\n")) == [("oversized", 6), ("oversized", 7), b"ok"]


def test_feed_eof_returns_a_last_line_without_newline() -> None:
    r = LineReader(1024)
    assert r.feed(b'{"a":1}\n{"last":true}') == [b'{"a":1}']
    assert r.feed_eof() == [b'{"last":true}']
    assert r.feed_eof() == []


def test_feed_eof_without_trailing_data() -> None:
    r = LineReader(1024)
    assert r.feed(b'{"a":1}\n') == [b'{"a":1}']
    assert r.feed_eof() == []
    r = LineReader(1024)
    assert r.feed_eof() == []
    r = LineReader(1024)
    r.feed(b"  \n   ")
    assert r.feed_eof() == []  # only whitespace left


def test_feed_eof_inside_an_oversized_frame() -> None:
    r = LineReader(10)
    r.feed(b"x" * 25)
    assert frames(r.feed_eof()) == [("oversized", 25)]
    assert r.feed_eof() == []


def test_oversized_repr() -> None:
    assert repr(Oversized(7)) == "Oversized(7)"


# -- JSON-RPC --------------------------------------------------------------------------


def raw_json(raw: Raw | None) -> Any:
    assert raw is not None
    return json.loads(bytes(raw))


def test_parse_request_with_int_and_string_ids() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/w","mcpServers":[]}}')
    assert isinstance(msg, Call)
    assert (msg.id, msg.method) == (1, "session/new")
    assert raw_json(msg.params) == {"cwd": "/w", "mcpServers": []}
    msg = parse(b'{"method":"x","id":"abc","jsonrpc":"2.0"}')
    assert isinstance(msg, Call) and msg.id == "abc" and msg.params is None


def test_parse_notification() -> None:
    msg = parse(b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s1"}}')
    assert isinstance(msg, Notify)
    assert msg.method == "session/cancel"
    assert raw_json(msg.params) == {"sessionId": "s1"}
    bare = parse(b'{"jsonrpc":"2.0","method":"initialized"}')
    assert isinstance(bare, Notify) and bare.params is None


def test_parse_reply_with_result() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"cancelled"}}}')
    assert isinstance(msg, Reply)
    assert msg.id == 7 and msg.error is None
    assert raw_json(msg.result) == {"outcome": {"outcome": "cancelled"}}
    null_result = parse(b'{"jsonrpc":"2.0","id":8,"result":null}')
    assert isinstance(null_result, Reply) and null_result.id == 8 and null_result.error is None


def test_parse_reply_with_error() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":"r1","error":{"code":-32603,"message":"boom","data":{"x":1}}}')
    assert isinstance(msg, Reply)
    assert msg.id == "r1" and msg.result is None
    assert msg.error == ErrorObject(code=-32603, message="boom", data={"x": 1})


def test_parse_error_reply_with_null_id_is_a_reply_not_a_protocol_error() -> None:
    # JSON-RPC 2.0 §5: id is null when the peer could not read ours. Answering it
    # with an error of our own could ping-pong between two peers forever.
    msg = parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}')
    assert isinstance(msg, Reply)
    assert msg.id is None and msg.error is not None and msg.error.code == -32700


def test_params_stay_raw_until_decoded() -> None:
    body = b'{"deep":[1,2,{"x":"\\n"}],  "spaced" : true}'
    msg = parse(b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + body + b"}")
    assert isinstance(msg, Call)
    assert bytes(msg.params) == body  # type: ignore[arg-type]


def protocol_error(line: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        parse(line)
    assert info.value.__cause__ is not None or isinstance(info.value.error, InvalidRequest)
    return info.value


@pytest.mark.parametrize("line", [b"{", b"not json", b'{"jsonrpc":"2.0",}', b"\xff\xfe", b""])
def test_bad_json_is_a_parse_error(line: bytes) -> None:
    exc = protocol_error(line)
    assert isinstance(exc.error, ParseError)
    assert exc.id is None
    assert isinstance(exc.__cause__, msgspec.DecodeError)
    assert error_response(exc.id, exc.error).error.code == -32700


@pytest.mark.parametrize("line", [b"[]", b'[{"jsonrpc":"2.0","id":1,"method":"m"}]', b"42", b'"str"', b"null", b"true"])
def test_non_object_is_an_invalid_request(line: bytes) -> None:
    # ACP has no JSON-RPC batches (ACP, Transports: JSON-RPC 2.0 without batches): an array is invalid too.
    exc = protocol_error(line)
    assert isinstance(exc.error, InvalidRequest)
    assert exc.id is None
    assert error_response(exc.id, exc.error).error.code == -32600


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":1,"method":5}',
        b'{"jsonrpc":"2.0","id":1.5,"method":"m"}',
        b'{"jsonrpc":"2.0","id":{},"method":"m"}',
        b'{"jsonrpc":2,"id":1,"method":"m"}',
        b'{"jsonrpc":"2.0","id":1,"method":"m","error":"nope"}',
    ],
)
def test_wrong_member_types_are_invalid_requests(line: bytes) -> None:
    exc = protocol_error(line)
    assert isinstance(exc.error, InvalidRequest)
    assert isinstance(exc.__cause__, msgspec.ValidationError)


@pytest.mark.parametrize(
    ("line", "rid"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":5}', 1),
        (b'{"jsonrpc":2,"id":"abc","method":"m"}', "abc"),
        (b'{"jsonrpc":"2.0","id":42}', 42),  # neither a method nor a result
        (b'{"jsonrpc":"2.0","id":1.5,"method":"m"}', None),  # an id of no valid type cannot be detected
        (b'{"jsonrpc":"2.0","id":{},"method":"m"}', None),
    ],
)
def test_an_invalid_request_is_answered_with_its_id_when_readable(line: bytes, rid: Any) -> None:
    # JSON-RPC 2.0 §5: the id is null only when it cannot be detected.
    exc = protocol_error(line)
    assert isinstance(exc.error, InvalidRequest)
    assert exc.id == rid


@pytest.mark.parametrize(
    ("line", "rid"),
    [
        (b'{"jsonrpc":"1.0","id":3,"method":"m"}', 3),
        (b'{"jsonrpc":"2.1","id":"x","method":"m"}', "x"),
        (b'{"id":4,"method":"m"}', 4),  # missing
        (b'{"jsonrpc":"1.0","method":"m"}', None),
    ],
)
def test_jsonrpc_must_be_2_0_and_the_id_is_kept_for_the_answer(line: bytes, rid: Any) -> None:
    exc = protocol_error(line)
    assert isinstance(exc.error, InvalidRequest)
    assert "2.0" in exc.error.message
    assert exc.id == rid


def test_null_id_on_a_request_is_invalid() -> None:
    exc = protocol_error(b'{"jsonrpc":"2.0","id":null,"method":"session/new","params":{}}')
    assert isinstance(exc.error, InvalidRequest)
    assert exc.id is None
    assert "null" in exc.error.message


@pytest.mark.parametrize(
    "line",
    [
        b"{}",
        b'{"jsonrpc":"2.0"}',
        b'{"jsonrpc":"2.0","id":1}',  # neither result nor error
        b'{"jsonrpc":"2.0","result":{}}',  # a result for nobody
        b'{"jsonrpc":"2.0","id":null,"result":{}}',
    ],
)
def test_neither_request_nor_reply_is_invalid(line: bytes) -> None:
    exc = protocol_error(line)
    assert isinstance(exc.error, InvalidRequest)


def test_unknown_members_are_tolerated() -> None:
    msg = parse(b'{"jsonrpc":"2.0","id":1,"method":"m","future":{"x":1}}')
    assert isinstance(msg, Call)


# decode_params


def test_decode_params_to_a_typed_struct() -> None:
    raw = Raw(b'{"sessionId":"s1","prompt":[{"type":"text","text":"hi"}],"extra":1}')
    params = decode_params(raw, acp.PromptParams)
    assert params.session_id == "s1"
    assert params.prompt == [TextContent(text="hi")]


def test_decode_params_none_is_an_empty_object() -> None:
    assert decode_params(None, acp.ListSessionsParams) == acp.ListSessionsParams()
    with pytest.raises(InvalidParams) as info:
        decode_params(None, acp.SessionIdParams)
    assert "sessionId" in info.value.message


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (b'{"sessionId":"s","prompt":[{"type":"text"}]}', "$.prompt[0]"),
        (b'{"sessionId":"s","prompt":[{"type":"text","text":"a"},{"type":"image","data":1,"mimeType":"x"}]}', "$.prompt[1].data"),
        (b'{"sessionId":"s","prompt":[{"type":"video","url":"x"}]}', "$.prompt[0].type"),
        (b'{"sessionId":5,"prompt":[]}', "$.sessionId"),
        (b'{"sessionId":"s","prompt":{}}', "$.prompt"),
    ],
)
def test_decode_params_validation_error_names_the_path(body: bytes, path: str) -> None:
    with pytest.raises(InvalidParams) as info:
        decode_params(Raw(body), acp.PromptParams)
    assert f"`{path}`" in info.value.message
    assert isinstance(info.value.__cause__, msgspec.ValidationError)
    assert error_response(1, info.value).error.code == -32602


def test_decode_params_non_object() -> None:
    with pytest.raises(InvalidParams) as info:
        decode_params(Raw(b"[1,2]"), acp.PromptParams)
    assert "`$`" in info.value.message or "Expected `object`" in info.value.message


# error_response and the code table


ALL_ERRORS: list[BridgeError] = [
    ParseError("p"),
    InvalidRequest("r"),
    FrameTooLarge("f"),
    MethodNotFound("m"),
    InvalidParams("bad `$.x`"),
    AuthRequired("a"),
    Forbidden("f"),
    NotFound("n"),
    Busy("b"),
    Overloaded("too many live sessions"),
    RateLimited("over [limits]", retry_after_s=3, limit="concurrent_turns", scope="route", route="demo"),
    RequestCancelled("c"),
    BackUnavailable("u"),
    BackAuthRequired("sign in"),
    PromptError("/review: its source is down"),
    BackError("e"),
    ConfigError(["$.x: bad"]),
    InternalError("i"),
    PeerError("peer"),
    BridgeError("base"),
]


def test_every_error_class_is_in_the_table_and_sampled() -> None:
    assert {type(e) for e in ALL_ERRORS} == set(CODES)


@pytest.mark.parametrize("exc", ALL_ERRORS, ids=lambda e: type(e).__name__)
def test_error_response_uses_the_table(exc: BridgeError) -> None:
    codes = CODES[type(exc)]
    resp = error_response(9, exc)
    assert resp == ErrorResponse(id=9, error=ErrorObject(code=codes.jsonrpc, message=exc.message, data=exc.data))
    assert error_response(9, exc, a2a=True).error.code == codes.a2a


def test_acp_codes_follow_protocols_md_1_10() -> None:
    def code(exc: BaseException) -> int:
        return error_response(1, exc).error.code

    assert code(ParseError("")) == -32700
    assert code(InvalidRequest("")) == -32600
    assert code(MethodNotFound("")) == -32601
    assert code(InvalidParams("")) == -32602
    assert code(InternalError("")) == -32603
    assert code(RequestCancelled("")) == -32800
    assert code(AuthRequired("")) == -32000
    assert code(NotFound("")) == -32002  # resource not found (session, file)


def test_codes_are_mapped_by_meaning_not_passed_through() -> None:
    # -32002 is "not found" in ACP but "task not cancelable" in A2A (ACP schema `ErrorCode`; A2A spec, error codes).
    assert error_response(1, NotFound("x"), a2a=True).error.code == -32001


def test_error_response_carries_data_and_subclasses_use_the_nearest_entry() -> None:
    class SpecialNotFound(NotFound):
        pass

    resp = error_response("r", SpecialNotFound("gone", data={"sessionId": "s"}))
    assert resp.error == ErrorObject(code=-32002, message="gone", data={"sessionId": "s"})


def test_foreign_exception_is_internal_and_does_not_leak_its_message() -> None:
    resp = error_response(None, ValueError("secret=hunter2"))
    assert resp.error.code == -32603
    assert "hunter2" not in resp.error.message
    assert resp.id is None


def test_error_response_wire_shape() -> None:
    wire = json.loads(bytes(encode_lines([error_response(None, ParseError("invalid JSON"))])))
    assert wire == {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "invalid JSON"}}


# encode_lines


def test_encode_lines_one_compact_line_per_message() -> None:
    messages: list[Any] = [
        Request(id=1, method="session/request_permission", params={"a": "multi\nline", "b": [1, {"c": None}]}),
        Notification(method="session/update", params={"sessionId": "s", "update": {"text": "x\r\ny"}}),
        Response(id="r", result={}),
        Response(id=2, result=None),
        error_response(3, NotFound("no such session")),
        Notification(method="initialized"),
    ]
    out = encode_lines(messages)
    assert isinstance(out, bytearray)
    assert out.endswith(b"\n")
    lines = bytes(out).split(b"\n")
    assert lines.pop() == b""
    assert len(lines) == len(messages)
    for line in lines:
        assert b"\n" not in line and b"\r" not in line
        assert b": " not in line and b", " not in line  # compact
        assert json.loads(line)["jsonrpc"] == "2.0"
    parsed = [json.loads(line) for line in lines]
    assert parsed[0] == {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "session/request_permission",
        "params": {"a": "multi\nline", "b": [1, {"c": None}]},
    }
    assert parsed[1]["params"]["update"]["text"] == "x\r\ny"
    assert parsed[2] == {"jsonrpc": "2.0", "id": "r", "result": {}}
    assert parsed[3] == {"jsonrpc": "2.0", "id": 2, "result": None}  # a result is always present
    assert parsed[4]["error"]["code"] == -32002
    assert parsed[5] == {"jsonrpc": "2.0", "method": "initialized"}


def test_encode_lines_appends_to_a_buffer_and_reads_back_through_the_line_reader() -> None:
    buf = bytearray(b'{"already":1}\n')
    msgs = [Notification(method="n", params={"i": i}) for i in range(100)]
    out = encode_lines(msgs, buf)
    assert out is buf
    r = LineReader(1024)
    lines = r.feed(bytes(out))
    assert lines[0] == b'{"already":1}'
    decoded = [parse(line) for line in lines[1:]]  # type: ignore[arg-type]
    assert [raw_json(m.params)["i"] for m in decoded] == list(range(100))  # type: ignore[union-attr]
    assert encode_lines([]) == bytearray()


def test_encode_lines_structs_with_wire_names() -> None:
    note = Notification(
        method="session/update",
        params=acp.SessionNotification(session_id="s1", update=acp.AgentMessageChunk(content=TextContent(text="hi"))),
    )
    (line,) = bytes(encode_lines([note])).splitlines()
    assert json.loads(line) == {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {"sessionId": "s1", "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}}},
    }


# -- ACP: golden session/update fixtures -------------------------------------------------

_update_decoder = msgspec.json.Decoder(acp.SessionUpdate)
_event_decoder = msgspec.json.Decoder(ev.Event)
_notification_decoder = msgspec.json.Decoder(acp.SessionNotification)

GOLDEN_FILES = sorted(GOLDEN.glob("*.json"))


def load_golden(path: Path) -> dict[str, Any]:
    case = json.loads(path.read_text(encoding="utf-8"))
    assert set(case) <= {"description", "event", "update", "also", "roundtrip"}, path.name
    return case


def test_golden_cases_exist_for_every_update_kind() -> None:
    kinds = {load_golden(p)["update"]["sessionUpdate"] for p in GOLDEN_FILES}
    assert kinds >= {
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "usage_update",
        "available_commands_update",
        "config_option_update",
    }
    assert any("_meta" in load_golden(p)["update"] for p in GOLDEN_FILES)


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_from_turn_matches_golden(path: Path) -> None:
    case = load_golden(path)
    event = _event_decoder.decode(json.dumps(case["event"]))
    update = codec.from_turn(event)
    assert update is not None
    updates = update if isinstance(update, list) else [update]
    assert json.loads(msgspec.json.encode(updates[0])) == case["update"]
    # Updates that follow the first one (e.g. current_mode_update after config_option_update).
    assert [json.loads(msgspec.json.encode(u)) for u in updates[1:]] == case.get("also", [])


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_to_turn_of_golden_update_round_trips(path: Path) -> None:
    case = load_golden(path)
    update = _update_decoder.decode(json.dumps(case["update"]))
    expected = _event_decoder.decode(json.dumps(case.get("roundtrip", case["event"])))
    assert codec.to_turn(update) == expected


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.stem)
def test_golden_update_inside_a_notification_tolerates_unknown_fields(path: Path) -> None:
    # Wire structs are forward compatible (STYLE.md rule 8): a newer agent's extra
    # fields, at any level we model, are ignored.
    case = load_golden(path)
    update = {**case["update"], "someFutureField": {"x": 1}}
    wire = {"sessionId": "s1", "update": update, "anotherField": 2}
    note = _notification_decoder.decode(json.dumps(wire))
    expected = _event_decoder.decode(json.dumps(case.get("roundtrip", case["event"])))
    assert note.session_id == "s1"
    assert codec.to_turn(note.update) == expected


def test_diff_for_a_new_file_always_writes_old_text_null() -> None:
    event = ev.ToolCallUpdated(
        tool_call_id="t", content=[ev.ToolCallContent(type="diff", path="/w/n.txt", new_text="x")]
    )
    wire = json.loads(msgspec.json.encode(codec.from_turn(event)))
    assert wire["content"] == [{"type": "diff", "path": "/w/n.txt", "oldText": None, "newText": "x"}]
    # ...and an absent oldText from an agent reads as a new file as well.
    update = _update_decoder.decode(
        b'{"sessionUpdate":"tool_call_update","toolCallId":"t","content":[{"type":"diff","path":"/w/n.txt","newText":"x"}]}'
    )
    back = codec.to_turn(update)
    assert isinstance(back, ev.ToolCallUpdated) and back.content is not None
    assert back.content[0].old_text is None and back.content[0].type == "diff"


def test_to_turn_fills_tool_call_defaults() -> None:
    update = _update_decoder.decode(b'{"sessionUpdate":"tool_call","toolCallId":"t","title":"x"}')
    assert codec.to_turn(update) == ev.ToolCallStarted(tool_call_id="t", title="x", kind="other", status="pending")


def test_plan_entries_from_an_agent_that_omits_defaults_still_decode() -> None:
    update = _update_decoder.decode(b'{"sessionUpdate":"plan","entries":[{"content":"a"}]}')
    assert codec.to_turn(update) == ev.PlanUpdated(entries=[ev.PlanEntry(content="a")])


def test_meta_without_our_key_gives_no_parent() -> None:
    update = _update_decoder.decode(
        b'{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"x"},"_meta":{"other":{"parentToolCallId":"p"}}}'
    )
    back = codec.to_turn(update)
    assert isinstance(back, ev.MessageChunk) and back.parent_tool_call_id is None


@pytest.mark.parametrize(
    "event",
    [
        ev.TurnStarted(turn_id="t", prompt=[TextContent(text="x")]),
        ev.QuestionAsked(question=ev.Question(id="q", kind="permission", prompt="ok?")),
        ev.QuestionAnswered(question_id="q", selected=["a"]),
        ev.TurnEnded(turn_id="t", stop_reason=ev.StopReason.END_TURN),
    ],
    ids=lambda e: type(e).__name__,
)
def test_events_without_an_acp_update(event: ev.Event) -> None:
    assert codec.from_turn(event) is None


@pytest.mark.parametrize(
    "wire",
    [
        b'{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}',
        b'{"sessionUpdate":"current_mode_update","currentModeId":"ask"}',
        b'{"sessionUpdate":"session_info_update","title":"T"}',
    ],
)
def test_updates_with_nothing_to_keep(wire: bytes) -> None:
    assert codec.to_turn(_update_decoder.decode(wire)) is None


def test_user_chunks_replay_a_stored_prompt() -> None:
    started = ev.TurnStarted(turn_id="t9", prompt=[TextContent(text="a"), TextContent(text="b")])
    wire = [json.loads(msgspec.json.encode(u)) for u in codec.user_chunks(started)]
    assert wire == [
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "a"}, "messageId": "user-t9"},
        {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "b"}, "messageId": "user-t9"},
    ]


def test_artifact_with_several_parts_keeps_every_part() -> None:
    event = ev.ArtifactUpdated(artifact_id="a", parts=[TextContent(text="one"), TextContent(text="two")])
    update = codec.from_turn(event)
    assert isinstance(update, list)
    updates = update
    assert [u.content for u in updates] == event.parts  # type: ignore[union-attr]


def test_data_blocks_are_json_resources_wherever_acp_carries_content() -> None:
    # Finding 5: a data block has no ACP block of its own; in tool call content, an
    # artifact, a replayed prompt and progress it is the same embedded JSON resource.
    data = DataContent(data={"n": 1})
    resource = {"type": "resource", "resource": {"uri": "data:application/json", "text": '{"n":1}', "mimeType": "application/json"}}
    tool = codec.from_turn(ev.ToolCallUpdated(tool_call_id="t", content=[ev.ToolCallContent(content=data)]))
    assert json.loads(msgspec.json.encode(tool))["content"] == [{"type": "content", "content": resource}]
    artifact = codec.from_turn(ev.ArtifactUpdated(artifact_id="a", parts=[TextContent(text="x"), data]))
    assert [json.loads(msgspec.json.encode(u))["content"] for u in artifact] == [{"type": "text", "text": "x"}, resource]  # type: ignore[union-attr]
    started = ev.TurnStarted(turn_id="t9", prompt=[data])
    assert json.loads(msgspec.json.encode(codec.replayed(started)))[0]["content"] == resource
    progress = codec.replayed(ev.ProgressReported(content=[TextContent(text="a"), data], message_id="p"))
    assert isinstance(progress, list)
    assert [json.loads(msgspec.json.encode(u)) for u in progress] == [
        {"sessionUpdate": "agent_thought_chunk", "_meta": {"agentBridge": {"progress": True}}, "content": c, "messageId": "p"}
        for c in ({"type": "text", "text": "a"}, resource)
    ]
    assert wire_blocks([data, TextContent(text="x")])[1] == TextContent(text="x")
    # ...and the ACP back reads it back in tool call content too.
    back = codec.to_turn(_update_decoder.decode(msgspec.json.encode(tool)))
    assert isinstance(back, ev.ToolCallUpdated) and back.content == [ev.ToolCallContent(content=data)]


@pytest.mark.parametrize(
    "resource",
    [
        {"uri": "file:///w/a.json", "text": '{"n":1}', "mimeType": "application/json"},  # a file, not inline data
        {"uri": "data:application/json", "text": '{"n":1}', "mimeType": "text/plain"},
        {"uri": "data:application/json", "text": "{not json", "mimeType": "application/json"},
        {"uri": "data:application/json", "blob": "e30=", "mimeType": "application/json"},
        {"uri": "data:application/json", "text": '{"n":1}'},
        # A peer's JSON nested past the bound, or an integer no store can keep: text, not a crash.
        {"uri": "data:application/json", "text": "[" * 1000 + "]" * 1000, "mimeType": "application/json"},
        {"uri": "data:application/json", "text": "99999999999999999999", "mimeType": "application/json"},
    ],
)
def test_resources_that_are_not_exactly_a_data_block_stay_resources(resource: dict[str, Any]) -> None:
    wire = {"sessionUpdate": "agent_message_chunk", "content": {"type": "resource", "resource": resource}}
    back = codec.to_turn(_update_decoder.decode(json.dumps(wire)))
    assert isinstance(back, ev.MessageChunk) and isinstance(back.content, EmbeddedResource)


@pytest.mark.parametrize("meta", [{"agentBridge": {"progress": "yes"}}, {"agentBridge": True}, {"other": {"progress": True}}])
def test_only_our_progress_mark_makes_a_thought_progress(meta: dict[str, Any]) -> None:
    wire = {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}, "_meta": meta}
    back = codec.to_turn(_update_decoder.decode(json.dumps(wire)))
    assert isinstance(back, ev.MessageChunk) and back.thought


def test_modes_from_the_mode_option() -> None:
    options = [
        ev.ConfigOption(id="model", name="Model", current="m", values=[ev.ConfigValue(value="m", name="M")]),
        ev.ConfigOption(
            id="mode",
            name="Mode",
            current="code",
            category="mode",
            values=[ev.ConfigValue(value="ask", name="Ask", description="asks"), ev.ConfigValue(value="code", name="Code")],
        ),
    ]
    state = codec.modes(options)
    assert state is not None
    assert json.loads(msgspec.json.encode(state)) == {
        "currentModeId": "code",
        "availableModes": [{"id": "ask", "name": "Ask", "description": "asks"}, {"id": "code", "name": "Code"}],
    }
    assert codec.modes(options[:1]) is None


# -- ACP: permission and elicitation requests ------------------------------------------

PERMISSION_OPTIONS = [
    ev.QuestionOption(id="allow", label="Allow", kind="allow_once"),
    ev.QuestionOption(id="always", label="Always allow", kind="allow_always"),
    ev.QuestionOption(id="reject", label="Reject", kind="reject_once"),
    ev.QuestionOption(id="never", label="Never", kind="reject_always"),
]


def test_permission_request_is_bound_to_its_tool_call_with_all_the_editor_was_shown() -> None:
    # Findings 1 and 2: bound to the tool call (m1-edit), not to the question (m1-edit-q),
    # and carrying every field of it (ACP: toolCall is a ToolCallUpdate).
    known: dict[str, acp.ToolCallFields] = {}
    codec.track_tool_call(
        known,
        ev.ToolCallStarted(
            tool_call_id="m1-edit", title="Edit notes.txt", kind="edit", raw_input={"path": "notes.txt"},
            locations=[ev.ToolLocation(path="notes.txt", line=1)],
        ),
    )  # fmt: skip
    diff = ev.ToolCallContent(type="diff", path="notes.txt", new_text="hello")
    codec.track_tool_call(known, ev.ToolCallUpdated(tool_call_id="m1-edit", title="Edit notes.txt (2 lines)", content=[diff]))
    codec.track_tool_call(known, ev.ToolCallStarted(tool_call_id="other", title="Other"))
    question = ev.Question(
        id="m1-edit-q", kind="permission", prompt="Edit notes.txt?", options=PERMISSION_OPTIONS, tool_call_id="m1-edit"
    )
    params = codec.permission_request("s1", question, known["m1-edit"])
    codec.track_tool_call(known, ev.ToolCallUpdated(tool_call_id="m1-edit", status="completed"))  # after it was asked
    wire = json.loads(msgspec.json.encode(params))
    assert wire == {
        "sessionId": "s1",
        "toolCall": {
            "toolCallId": "m1-edit",
            "title": "Edit notes.txt (2 lines)",
            "kind": "edit",
            "status": "pending",
            "content": [{"type": "diff", "path": "notes.txt", "oldText": None, "newText": "hello"}],
            "locations": [{"path": "notes.txt", "line": 1}],
            "rawInput": {"path": "notes.txt"},
        },
        "options": [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
            {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
            {"optionId": "never", "name": "Never", "kind": "reject_always"},
        ],
    }
    assert "sessionUpdate" not in json.dumps(wire)
    # A tool call the editor was not shown (it attached later): named by its id alone.
    bare = json.loads(msgspec.json.encode(codec.permission_request("s1", question, known["other"])))
    assert bare["toolCall"] == {"toolCallId": "m1-edit"}


def test_permission_request_without_a_tool_call_describes_the_question() -> None:
    question = ev.Question(
        id="q7",
        kind="choice",
        prompt="Which colour?",
        options=[ev.QuestionOption(id="red", label="Red"), ev.QuestionOption(id="no", label="No", kind="reject_once")],
    )
    wire = json.loads(msgspec.json.encode(codec.permission_request("s1", question)))
    assert wire == {
        "sessionId": "s1",
        "toolCall": {"toolCallId": "q7", "title": "Which colour?", "kind": "other", "status": "pending"},
        "options": [
            {"optionId": "red", "name": "Red", "kind": "allow_once"},
            {"optionId": "no", "name": "No", "kind": "reject_once"},
        ],
    }
    assert "sessionUpdate" not in wire["toolCall"]


def test_option_kinds_without_a_kind_come_from_their_words_and_are_never_an_invented_reject() -> None:
    # Finding 1: a chat or Blade-style peer's options have a label and a description only.
    question = ev.Question(
        id="m1-edit-q",
        kind="permission",
        prompt="Edit notes.txt?",
        tool_call_id="m1-edit",
        options=[
            ev.QuestionOption(id="0", label="Allow"),
            ev.QuestionOption(id="1", label="Always allow"),
            ev.QuestionOption(id="2", label="Reject"),
            ev.QuestionOption(id="3", label="Never allow"),
            ev.QuestionOption(id="4", label="Option B", description="Approve the edit"),
            ev.QuestionOption(id="5", label="Later"),
        ],
    )
    wire = json.loads(msgspec.json.encode(codec.permission_request("s1", question)))
    assert [(o["optionId"], o["kind"]) for o in wire["options"]] == [
        ("0", "allow_once"),
        ("1", "allow_always"),
        ("2", "reject_once"),
        ("3", "reject_always"),
        ("4", "allow_once"),
        ("5", "allow_once"),  # words that say nothing: never a reject kind an auto-rejecting client could pick
    ]
    assert wire["toolCall"] == {"toolCallId": "m1-edit"}


@pytest.mark.parametrize(
    ("label", "description", "kind"),
    [
        ("Allow", None, "allow_once"),
        ("Yes, proceed", None, "allow_once"),
        ("Always allow", None, "allow_always"),
        ("Allow for this session", None, "allow_always"),
        ("Yes, and don't ask again", None, "allow_always"),
        ("Don't ask again", None, "allow_always"),
        ("Reject", None, "reject_once"),
        ("No, stop", None, "reject_once"),
        ("Skip this change", None, "reject_once"),
        ("Do not allow", None, "reject_once"),
        ("Never allow", None, "reject_always"),
        ("Deny always", None, "reject_always"),
        ("Red", None, None),
        ("", None, None),
        ("Option A", "Reject the change", "reject_once"),
        ("Option A", {"not": "text"}, None),
        # Asking no more is an allow from now on (review: these read as refusals), unless it says no.
        ("Never ask again", None, "allow_always"),
        ("Stop asking", None, "allow_always"),
        ("Skip confirmation", None, "allow_always"),
        ("Do not ask again, deny", None, "reject_always"),
        ("Allow" + " " * 10_000 + "never", None, "allow_once"),  # only the first 256 characters are read
    ],
)
def test_infer_kind_reads_the_label_then_the_description(label: str, description: Any, kind: str | None) -> None:
    assert infer_kind(label, description) == kind


def test_permission_result_decodes_both_outcomes() -> None:
    dec = msgspec.json.Decoder(acp.RequestPermissionResult)
    selected = dec.decode(b'{"outcome":{"outcome":"selected","optionId":"allow"}}')
    assert selected.outcome == acp.PermissionOutcome(outcome="selected", option_id="allow")
    assert dec.decode(b'{"outcome":{"outcome":"cancelled"}}').outcome.outcome == "cancelled"


def test_elicitation_request_is_form_mode() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    question = ev.Question(id="q", kind="form", prompt="How many?", schema=schema, tool_call_id="t1")
    wire = json.loads(msgspec.json.encode(codec.elicitation_request("s1", question)))
    assert wire == {"sessionId": "s1", "mode": "form", "message": "How many?", "requestedSchema": schema, "toolCallId": "t1"}
    bare = json.loads(msgspec.json.encode(codec.elicitation_request("s1", ev.Question(id="q", kind="form", prompt="?"))))
    assert bare["requestedSchema"] == {"type": "object", "properties": {}}
    assert "toolCallId" not in bare
