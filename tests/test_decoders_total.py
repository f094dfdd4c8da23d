"""Every wire decoder is total: any bytes give a value or that codec's own error.

Property tests (hypothesis) per decoder: valid messages (golden fixtures and hand-made
ones) are mutated (bits flipped, bytes inserted or deleted, invalid UTF-8, integers
beyond 64 bits, deep nesting, long strings, a field's value swapped for another type)
and the decoder must return a value or raise the error it documents, nothing else.
A value it returns must also survive what comes later: the store's MessagePack
encoder and the JSON encoder (an integer beyond 64 bits used to crash the flush).

`AGENT_BRIDGE_FUZZ_EXAMPLES` sets the examples per property (default 200); nightly
runs raise it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bridge.codecs import a2a_card, a2a_server, jsonrpc, safejson, socketio, sse
from bridge.codecs import a2a_client as a2a_wire  # Dialect, Binding, Interface come with it
from bridge.codecs import a2a_server_rest as a2a_rest
from bridge.codecs.a2a_answer import answer_for
from bridge.codecs.acp import to_turn
from bridge.codecs.acp_elicitation import content_of, question_of
from bridge.codecs.chat_client import ChatFollower, subscribed_sequence
from bridge.codecs.chat_reader import ChatReader
from bridge.codecs.ndjson import LineReader, Oversized
from bridge.core.events import Question, QuestionAnswered, QuestionOption
from bridge.errors import InvalidParams, PeerError
from bridge.schema import a2a as s
from bridge.schema import acp
from daemon_support import raw_ws

GOLDEN = Path(__file__).parent / "golden"
FUZZ = settings(
    max_examples=int(os.environ.get("AGENT_BRIDGE_FUZZ_EXAMPLES", "200")),
    deadline=None,  # no timed assertions: a slow example is not a failure here
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# -- mutations ---------------------------------------------------------------------------------

_BAD_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x82"]
_NUMBERS = [
    b"-18446744073709551616",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"9" * 5000,
    b"1e999",
    b"-0",
    b"1" * 30 + b".5",
]
_MARK = "\u0000hostile\u0000"  # a string the structural mutation swaps for raw bytes


def _deep(n: int, *, closed: bool = True) -> bytes:
    return b"[" * n + (b"]" * n if closed else b"")


_HOSTILE_RAW = [
    _deep(65),
    _deep(1000),
    _deep(100_000),
    _deep(100_000, closed=False),
    b'{"a":' * 500 + b"1" + b"}" * 500,
    b'"\xff"',
    b'"a\xed\xa0\x80"',
    b'"\\ud800"',
    b'"' + b"x" * 100_000 + b'"',
    b'"' + b'\\"' * 20_000,  # an unterminated string full of escaped quotes
    *_NUMBERS,
]

_json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
_json_value = st.recursive(_json_leaf, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3), max_leaves=8)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    return [_replace(v, rest, new) if i == head else v for i, v in enumerate(value)]


@st.composite
def _swapped(draw: st.DrawFn, seed: bytes) -> bytes:
    """A field's value (or a whole subtree) replaced by another type or a hostile value."""
    try:
        value = json.loads(seed)
    except ValueError:
        return seed
    path = draw(st.sampled_from(_paths(value)))
    if draw(st.booleans()):
        return json.dumps(_replace(value, path, draw(_json_value))).encode()
    raw = draw(st.sampled_from(_HOSTILE_RAW))
    return json.dumps(_replace(value, path, _MARK)).encode().replace(json.dumps(_MARK).encode(), raw, 1)


@st.composite
def _mutated_bytes(draw: st.DrawFn, seed: bytes) -> bytes:
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "utf8", "number", "hostile", "truncate"]))
        pos = draw(st.integers(0, len(data)))
        if op == "flip" and data:
            data[min(pos, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 16))]
        elif op == "utf8":
            data[pos:pos] = draw(st.sampled_from(_BAD_UTF8))
        elif op == "number":
            data[pos:pos] = draw(st.sampled_from(_NUMBERS))
        elif op == "hostile":
            data[pos:pos] = draw(st.sampled_from(_HOSTILE_RAW))
        else:
            del data[pos:]
    return bytes(data)


def mutations(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """Valid seeds, mutated byte-wise or structurally, plus a few hostile wholes."""
    seed = st.sampled_from(seeds)
    return st.one_of(
        seed,
        seed.flatmap(_mutated_bytes),
        seed.flatmap(_swapped),
        st.sampled_from(_HOSTILE_RAW),
        st.binary(max_size=64),
    )


def survives(value: Any) -> None:
    """A decoded value goes on to the store (MessagePack) and to peers (JSON)."""
    msgspec.msgpack.encode(value)
    msgspec.json.encode(value)


def _lines(path: Path) -> list[bytes]:
    return [line.encode() for line in path.read_text().splitlines() if line.strip()]


def _compact(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


# -- ACP (JSON-RPC over NDJSON) ---------------------------------------------------------------------

_ACP_PARAMS: dict[str, type] = {
    "initialize": acp.InitializeParams,
    "authenticate": acp.AuthenticateParams,
    "session/new": acp.NewSessionParams,
    "session/load": acp.LoadSessionParams,
    "session/list": acp.ListSessionsParams,
    "session/close": acp.SessionIdParams,
    "session/set_mode": acp.SetModeParams,
    "session/set_config_option": acp.SetConfigOptionParams,
    "session/prompt": acp.PromptParams,
    "session/cancel": acp.SessionIdParams,
    "$/cancel_request": acp.CancelRequestParams,
    "session/update": acp.SessionNotification,
    "session/request_permission": acp.RequestPermissionParams,
    "elicitation/create": acp.ElicitationParams,
}
_ACP_SEEDS = [
    _compact({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": True}}}}),
    _compact({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}}),
    _compact({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s", "_meta": {"n": 1}, "prompt": [
        {"type": "text", "text": "hi"},
        {"type": "resource_link", "uri": "file:///w/a.txt", "name": "a.txt", "size": 12},
        {"type": "resource", "resource": {"uri": "file:///w/b", "text": "b"}},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
    ]}}),
    _compact({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}}),
    _compact({"jsonrpc": "2.0", "id": 7, "result": {"outcome": {"outcome": "selected", "optionId": "allow"}}}),
    _compact({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}),
    *(_compact({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": json.loads(p.read_text())["update"]}})
      for p in sorted((GOLDEN / "acp").glob("*.json"))),
]  # fmt: skip


@FUZZ
@given(mutations(_ACP_SEEDS))
def test_acp_frames_decode_to_a_message_or_a_json_rpc_error(line: bytes) -> None:
    try:
        msg = jsonrpc.parse(line)
    except jsonrpc.ProtocolError as exc:
        assert jsonrpc.error_response(exc.id, exc.error).error.code in (-32700, -32600)
        return
    survives(msg)
    if isinstance(msg, jsonrpc.Reply):
        types = [acp.RequestPermissionResult]
    else:
        typ = _ACP_PARAMS.get(msg.method)
        types = [typ] if typ is not None else list(_ACP_PARAMS.values())[:3]
    for typ in types:
        try:
            params = jsonrpc.decode_params(msg.params if not isinstance(msg, jsonrpc.Reply) else msg.result, typ)
        except PeerError as exc:
            assert jsonrpc.error_response(None, exc).error.code in (-32700, -32602)
            continue
        survives(params)
        if isinstance(params, acp.SessionNotification):
            survives(to_turn(params.update))
        if isinstance(params, acp.ElicitationParams):
            _elicited(params)


# An agent's form question, as the matrix agent asks it (tests/peers/acp_agent_matrix.py).
_ELICIT = {"sessionId": "s", "message": "Which colours do you like?", "mode": "form", "toolCallId": "t1", "requestedSchema": {
    "type": "object", "required": ["choice"], "properties": {
        "choice": {"type": "array", "title": "Colours", "items": {"anyOf": [{"const": "red", "title": "Red"}, {"const": "blue"}]}},
        "other": {"type": "string", "title": "Other"}}}}  # fmt: skip
_ELICIT_SEEDS = [
    _compact(_ELICIT),
    _compact({**_ELICIT, "requestedSchema": {"properties": {"pick": {"type": "string", "enum": ["a", "b"], "enumNames": ["A", "B"]}}}}),
    _compact({**_ELICIT, "requestedSchema": {"properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}}}),
    _compact({"sessionId": "s", "message": "Sign in", "mode": "url", "elicitationId": "e", "url": "https://example.com/"}),
]


def _elicited(params: acp.ElicitationParams) -> None:
    """An agent's elicitation is a question or the agent's InvalidParams; its answers encode."""
    try:
        asked = question_of("q", params)
    except InvalidParams as exc:
        assert jsonrpc.error_response(None, exc).error.code == -32602
        return
    survives(asked)
    ids = [o.id for o in asked.question.options]
    for answer in (
        QuestionAnswered(question_id="q", selected=ids[:2], text="teal"),
        QuestionAnswered(question_id="q", text="words", values={"name": "x", "other": 1}),
    ):
        survives(acp.ElicitationResult(action="accept", content=content_of(asked, answer)))


@FUZZ
@given(mutations(_ELICIT_SEEDS))
def test_agent_elicitations_become_questions_or_invalid_params(body: bytes) -> None:
    try:
        params = jsonrpc.decode_params(msgspec.Raw(body), acp.ElicitationParams)
    except PeerError as exc:
        assert jsonrpc.error_response(None, exc).error.code in (-32700, -32602)
        return
    _elicited(params)


@FUZZ
@given(st.lists(mutations(_ACP_SEEDS), min_size=1, max_size=4), st.lists(st.integers(1, 300), min_size=1, max_size=8))
def test_ndjson_framing_is_bounded_whatever_the_bytes(frames: list[bytes], cuts: list[int]) -> None:
    limit = 4096
    reader = LineReader(limit)
    stream = b"\n".join(frames) + b"\n"
    out: list[bytes | Oversized] = []
    i = 0
    while i < len(stream):
        step = cuts[i % len(cuts)]
        out += reader.feed(stream[i : i + step])
        i += step
    out += reader.feed_eof()
    for item in out:
        if isinstance(item, bytes):
            assert len(item) <= limit and b"\n" not in item


# -- A2A server (JSON-RPC and HTTP+JSON, 1.0 and 0.3) ---------------------------------------------

def _request_body(name: str) -> bytes:
    return _compact(json.loads((GOLDEN / "a2a" / name).read_text())["body"])


_A2A_RPC_SEEDS = [
    _request_body("request_stream_v10_jsonrpc.json"),
    _request_body("request_stream_v03_jsonrpc.json"),
    _compact({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "t", "historyLength": 2}}),
    _compact({"jsonrpc": "2.0", "id": "x", "method": "tasks/get", "params": {"id": "t", "historyLength": 2}}),
    _compact({"jsonrpc": "2.0", "id": 4, "method": "ListTasks", "params": {"pageSize": 5}}),
    _compact({"jsonrpc": "2.0", "id": 5, "method": "tasks/pushNotificationConfig/set", "params": {"taskId": "t", "pushNotificationConfig": {"url": "https://h/x", "token": "k"}}}),
]  # fmt: skip


@FUZZ
@given(mutations(_A2A_RPC_SEEDS))
def test_a2a_json_rpc_requests_decode_or_fault(body: bytes) -> None:
    try:
        env = a2a_server.decode_envelope(body)
    except a2a_server.A2AFault:
        return
    for dialect in a2a_wire.Dialect:
        try:
            op = a2a_server.rpc_op(env.method, dialect)  # type: ignore[arg-type]
            req = a2a_server.decode_params(op, dialect, env.params)
        except a2a_server.A2AFault:
            continue
        survives(req)


_A2A_REST_SEEDS = [
    _request_body("request_stream_v10_rest.json"),
    _request_body("request_stream_v03_rest.json"),
    _compact({"url": "https://h/x", "token": "k", "authentication": {"schemes": ["Bearer"], "credentials": "c"}}),
    _compact({"config": {"pushNotificationConfig": {"url": "https://h/x"}}, "configId": "c1"}),
]
_REST_OPS = ["send", "stream", "create_push_config", "get_task", "list_tasks", "list_push_configs", "cancel"]


@FUZZ
@given(mutations(_A2A_REST_SEEDS), st.sampled_from(_REST_OPS), st.sampled_from(list(a2a_wire.Dialect)), st.binary(max_size=40))
def test_a2a_http_json_requests_decode_or_fault(body: bytes, op: str, dialect: a2a_wire.Dialect, query: bytes) -> None:
    query = query if query.count(b"=") else b"historyLength=" + query + b"&pageSize=2&includeArtifacts=true"
    try:
        req = a2a_rest.rest_request(op, dialect, body, {"id": "t"}, query)
    except a2a_server.A2AFault:
        return
    survives(req)


# -- A2A back: responses, streams, cards ----------------------------------------------------------

def _sse_payloads(name: str) -> list[bytes]:
    text = (GOLDEN / "a2a" / name).read_text()
    return [line[len("data: ") :].encode() for line in text.splitlines() if line.startswith("data: ")]


_A2A_RESPONSES = {
    (a2a_wire.Dialect.V1_0, a2a_wire.Binding.JSONRPC): _sse_payloads("stream_v10_jsonrpc_chunks.sse"),
    (a2a_wire.Dialect.V1_0, a2a_wire.Binding.HTTP_JSON): _sse_payloads("stream_v10_rest_files.sse"),
    (a2a_wire.Dialect.V0_3, a2a_wire.Binding.JSONRPC): _sse_payloads("stream_v03_jsonrpc_ask.sse"),
    (a2a_wire.Dialect.V0_3, a2a_wire.Binding.HTTP_JSON): _sse_payloads("stream_v03_rest_chunks.sse"),
}
_A2A_BACK_SEEDS = [p for ps in _A2A_RESPONSES.values() for p in ps] + [
    (GOLDEN / "a2a" / n).read_bytes() for n in ("task_v10_rest_files.json", "task_v03_jsonrpc_ask.json", "error_rest.json", "error_v10_jsonrpc.json")
]  # fmt: skip


@FUZZ
@given(mutations(_A2A_BACK_SEEDS), st.sampled_from(sorted(_A2A_RESPONSES)), st.integers(200, 599))
def test_a2a_responses_read_by_the_back_decode_or_fail_the_turn(body: bytes, key: tuple[Any, Any], status: int) -> None:
    wire = a2a_wire.Wire(a2a_wire.Interface("http://127.0.0.1:1/a2a", *key))
    for decode in (wire.decode_send, wire.decode_task, wire.decode_event):
        try:
            survives(decode(body))
        except (a2a_wire.A2AError, a2a_wire.InvalidResponse):
            pass
    error = wire.decode_http_error(status, body)
    assert error is None or isinstance(error, a2a_wire.A2AError)


_CARDS = [(GOLDEN / "a2a" / p.name).read_bytes() for p in sorted((GOLDEN / "a2a").glob("card_*.json"))]


@FUZZ
@given(mutations(_CARDS))
def test_agent_cards_parse_or_card_error(body: bytes) -> None:
    try:
        view = a2a_card.parse_card(body, "http://127.0.0.1:1/.well-known/agent-card.json")
    except a2a_card.CardError:
        return
    a2a_card.commands(view)
    try:
        a2a_card.choose_interface(view, "auto", "auto")
    except a2a_card.CardError:
        pass


@FUZZ
@given(st.lists(mutations(_A2A_BACK_SEEDS), max_size=3), st.lists(st.integers(1, 200), min_size=1, max_size=5), st.binary(max_size=64))
def test_sse_decoding_is_total(payloads: list[bytes], cuts: list[int], junk: bytes) -> None:
    stream = b"".join(b"event: x\nid: 1\nretry: " + junk[:8] + b"\ndata: " + p + b"\n\n" for p in payloads) + junk
    dec = sse.SSEDecoder(max_event_bytes=1 << 16)
    i = 0
    try:
        while i < len(stream):
            step = cuts[i % len(cuts)]
            for event in dec.feed(stream[i : i + step]):
                assert isinstance(event.data, bytes)
            i += step
        dec.feed_eof()
    except sse.EventTooLarge:
        pass


# -- A2A answers from a client (free text and data parts) ------------------------------------------

_QUESTION = Question(
    id="q", kind="choice", prompt="Pick",
    options=[QuestionOption(id="a", label="Alpha"), QuestionOption(id="b", label="Beta")],
    multi_select=True, allow_text=False,
)  # fmt: skip


@FUZZ
@given(st.one_of(st.text(max_size=30), st.sampled_from(["²", "①", "1,²", "9" * 5000, "١"])), _json_value)
def test_a2a_answers_are_read_or_refused_with_value_error(text: str, data: Any) -> None:
    parts = [s.Part(text=text), s.Part(data={"selected": data}), s.Part(data={"selections": {"0": data}})]
    for part in parts:
        try:
            answer_for(_QUESTION, [part])
        except ValueError:
            pass


# -- chat frames (the chat back reads them) ---------------------------------------------------------

_CHAT_CASES = [json.loads(p.read_text()) for p in sorted((GOLDEN / "chat" / "reverse").glob("*.json"))]
_CHAT_FRAMES = [_compact(f) for case in _CHAT_CASES for f in case["frames"]]


@FUZZ
@given(st.sampled_from(_CHAT_CASES), st.integers(0, 40), mutations(_CHAT_FRAMES))
def test_chat_frames_read_by_the_chat_back_decode_or_peer_error(case: dict[str, Any], at: int, bad: bytes) -> None:
    frames = [_compact(f) for f in case["frames"]]
    frames.insert(min(at, len(frames)), bad)
    reader = ChatReader(case["turn_id"])
    follower = ChatFollower("srv-1")
    for frame in frames:
        for target in (reader.feed, follower.feed):
            try:
                survives(target(frame))
            except PeerError:
                pass
        follower.skip(frame)
    subscribed_sequence(bad)


# -- Socket.IO / Engine.IO (the chat back's other transport) ----------------------------------------

_SIO = [line for line in (GOLDEN / "socketio" / "run_ask.txt").read_text().splitlines() if line]


@FUZZ
@example(at=1, bad=b'40["",{"":"","":0}]', as_bytes=False)  # a CONNECT whose payload is no object
@given(st.integers(0, len(_SIO)), mutations([line.encode() for line in _SIO]), st.booleans())
def test_socketio_packets_decode_or_socketio_error(at: int, bad: bytes, as_bytes: bool) -> None:
    client = socketio.SocketIOClient()
    packets: list[str | bytes] = list(_SIO)
    packets.insert(at, bad if as_bytes else bad.decode("utf-8", "replace"))
    for packet in packets:
        try:
            for event in client.receive(packet):
                survives(event)
                if isinstance(event, socketio.Opened):
                    client.connect()
        except socketio.SocketIOError:
            pass


# -- regressions the properties found or the issue reported -------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"\xff"}]}}',
        b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","_meta":{"n":-18446744073709551616},"prompt":[]}}',
        b'{"jsonrpc":"2.0","id":1,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"resource_link","uri":"f","name":"f","size":18446744073709551616}]}}',
        _deep(100_000),
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":' + b"9" * 5000 + b"}",
    ],
)
def test_acp_parse_errors_for_what_used_to_escape(line: bytes) -> None:
    with pytest.raises(jsonrpc.ProtocolError) as info:
        jsonrpc.parse(line)
    assert jsonrpc.error_response(info.value.id, info.value.error).error.code == -32700


def test_invalid_utf8_in_an_unread_field_is_still_a_parse_error() -> None:
    """msgspec skips an unknown field (and keeps `params` raw) without reading its
    bytes: they must not reach a later decode, the store or another peer."""
    with pytest.raises(jsonrpc.ProtocolError):
        jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":"\xff"},"extra":"\xc3"}')


def test_params_that_are_not_json_answer_parse_error() -> None:
    with pytest.raises(PeerError) as info:
        jsonrpc.decode_params(msgspec.Raw(b'{"sessionId":"\xff"}'), acp.SessionIdParams)
    assert jsonrpc.error_response(1, info.value).error.code == -32700


@pytest.mark.parametrize("packet", ["4²", "42²", "43" + "9" * 16 + "[]", "4" + "1" * 5000])
def test_socketio_unicode_digits_are_not_packet_types(packet: str) -> None:
    client = socketio.SocketIOClient()
    client.receive(_SIO[0])
    client.connect()
    client.receive(_SIO[1])
    with pytest.raises(socketio.SocketIOError):
        client.receive(packet)


def test_sse_retry_of_thousands_of_digits_is_ignored() -> None:
    dec = sse.SSEDecoder()
    events = dec.feed(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n")
    assert [e.data for e in events] == [b"x"] and events[0].retry is None


def test_card_with_an_unsplittable_url_is_a_card_error() -> None:
    body = _compact({"name": "x", "supportedInterfaces": [{"url": "http://[::1/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]})
    with pytest.raises(a2a_card.CardError):
        a2a_card.parse_card(body, "http://127.0.0.1:1/.well-known/agent-card.json")


@pytest.mark.parametrize("body", [b'{"config": 5}', b'{"config": "x", "url": "https://h/x"}'])
def test_a2a_rest_v03_push_config_with_a_non_object_config_is_read_or_refused(body: bytes) -> None:
    """It raised AttributeError (HTTP 500): `config` was assumed to be an object."""
    try:
        req = a2a_rest.decode_rest("create_push_config", a2a_wire.Dialect.V0_3, body, {"id": "t"})
    except a2a_server.A2AFault:
        return
    assert isinstance(req, s.TaskPushNotificationConfig)


def test_safejson_is_the_decoder_under_every_codec() -> None:
    """A regression guard: a decoder built straight from msgspec bypasses the bounds."""
    for mod in (jsonrpc, a2a_server, a2a_rest, a2a_wire, a2a_card, socketio):
        src = Path(mod.__file__ or "").read_text()
        assert "msgspec.json.Decoder(" not in src and "msgspec.json.decode(" not in src.replace("msgspec.json.decode(encoder.rid)", ""), mod.__name__
    assert safejson.max_depth() >= 8


# -- end to end: the real daemon, hostile bytes on every front ------------------------------------


async def test_the_daemon_answers_hostile_bytes_on_every_front_and_keeps_serving(
    bridge_exe: list[str], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    """Each of these used to end the daemon (the unix socket) or answer 500 / close 1011."""
    import httpx
    import trio
    from trio_websocket import ConnectionClosed, open_websocket_url

    from daemon_support import base_config, demo_route, start_daemon

    bad_utf8 = b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"text":"\xff"}]}}}'
    deep = b"[" * 100_000 + b"]" * 100_000
    json_type = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    async with start_daemon(bridge_exe, tmp_path, clean_env, base_config(tmp_path, {"demo": demo_route()})) as d:
        with trio.fail_after(60):
            assert d.acp_socket is not None
            # The unix socket: a preamble that is not UTF-8, then hostile lines after a good one.
            async with await trio.open_unix_socket(d.acp_socket) as stream:
                await stream.send_all(b'{"route":"\xff"}\n')
                assert b"error" in await stream.receive_some(65536)
            async with d.acp("demo") as acp_client:
                await acp_client.init()
                sid = await acp_client.new()
                for frame in (b'{"jsonrpc":"2.0","id":5,"method":"session/list","params":{"x":"\xc3"}}', deep,
                              b'{"jsonrpc":"2.0","id":6,"method":"session/prompt","params":{"sessionId":"' + sid.encode()
                              + b'","_meta":{"n":-18446744073709551616},"prompt":[{"type":"text","text":"x"}]}}'):  # fmt: skip
                    acp_client.responses.pop(None, None)
                    await acp_client.send.send_all(frame + b"\n")
                    await acp_client.until(lambda: None in acp_client.responses)
                    assert acp_client.responses[None]["error"]["code"] == -32700
                done = await acp_client.prompt(sid, "still here")
                assert (await acp_client.response(done))["result"] == {"stopReason": "end_turn"}
            async with httpx.AsyncClient(base_url=d.url, timeout=20) as h:
                # A2A JSON-RPC and HTTP+JSON; REST.
                for body in (bad_utf8, deep):
                    r = await h.post("/a2a/demo", content=body, headers=json_type)
                    assert r.status_code != 500 and r.json()["error"]["code"] == -32700, r.text
                r = await h.post("/a2a/demo/message:send", content=b'{"message":{"parts":[{"text":"\xff"}]}}', headers=json_type)
                assert r.status_code == 400 and r.json(), r.text
                r = await h.post("/api/sessions", content=b'{"route":"\xff"}', headers={"Content-Type": "application/json"})
                assert r.status_code == 400 and r.json(), r.text
                # /ws: invalid JSON is a system:error; bytes that are not UTF-8 close 1007 (RFC 6455 §7.4.1).
                async with open_websocket_url(d.url.replace("http://", "ws://") + "/ws") as ws:
                    await ws.send_message("{not json")
                    assert json.loads(await ws.get_message())["event"] == "system:error"
                    await ws.send_message(b'{"event":"chat:send","data":{"message":"\xff"}}')
                    assert json.loads(await ws.get_message())["event"] == "system:error"
                    with pytest.raises(ConnectionClosed) as closed:
                        await ws.get_message()
                    assert closed.value.reason.code == 1007
                # A *text* frame that is not UTF-8 is refused by the WebSocket layer itself
                # (wsproto), which must still send the close frame, 1007 (RFC 6455 §8.1).
                assert await _raw_text_frame_close_code(d.url, b'{"event":"\xff"}') == 1007
                # And a normal turn still runs.
                r = await h.post("/a2a/demo", headers=json_type, json={"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {
                    "message": {"messageId": "ok", "role": "ROLE_USER", "parts": [{"text": "alive"}]}}})  # fmt: skip
                assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", r.text
        assert d.proc.returncode is None, d.log_text()[-3000:]



async def test_agent_bridge_mcp_answers_lines_that_are_not_json_with_parse_error(
    bridge_exe: list[str], state_dir: str, clean_env: dict[str, str]
) -> None:
    """JSON-RPC 2.0 §5: -32700 with a null id; the SDK alone left them unanswered."""
    import subprocess

    import trio

    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}  # fmt: skip
    lines = [_compact(init), b'{"jsonrpc":"2.0","id":2,"method":"ping","params":{"x":"\xff"}}', b"{not json", _deep(100_000),
             b'{"jsonrpc":"2.0","id":3,"method":"ping"}']  # fmt: skip
    proc = await trio.lowlevel.open_process(
        [*bridge_exe, "mcp", "--state-dir", state_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=clean_env
    )
    try:
        with trio.fail_after(30):
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send_all(b"\n".join(lines) + b"\n")
            buf, got = b"", []
            while not any(m.get("id") == 3 for m in got):
                chunk = await proc.stdout.receive_some(65536)
                assert chunk, "agent-bridge mcp closed stdout"
                buf += chunk
                *done, buf = buf.split(b"\n")
                got += [json.loads(line) for line in done if line.strip()]
        assert [m["error"]["code"] for m in got if m.get("id") is None] == [-32700] * 3, got
        assert next(m for m in got if m.get("id") == 3)["result"] == {}
    finally:
        proc.kill()
        with trio.CancelScope(shield=True):
            await proc.wait()


async def _raw_text_frame_close_code(url: str, payload: bytes) -> int | None:
    """Send one text frame holding any bytes (no WebSocket library will), return the close code."""
    s, buf = await raw_ws(url)
    async with s:
        assert len(payload) < 126
        await s.send_all(bytes([0x81, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)  # a zero mask
        while chunk := await s.receive_some(4096):
            buf += chunk
    while len(buf) >= 2:
        opcode, n = buf[0] & 0x0F, buf[1] & 0x7F
        if opcode == 8:
            return int.from_bytes(buf[2:4], "big") if n >= 2 else None
        buf = buf[2 + n :]
    return None
