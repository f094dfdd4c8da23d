"""Engine.IO v4 / Socket.IO v5 client framing (bridge/codecs/socketio.py), and the chat
client codec (bridge/codecs/chat_client.py): synchronous, no event loop.

Packets are checked against golden strings from the protocols' documentation and
against the official `python-socketio` / `python-engineio` packet classes, both ways,
so the codec frames what the real library frames.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from engineio import packet as eio_packet
from socketio import packet as sio_packet

from bridge.codecs import chat_client, socketio
from bridge.codecs.chat_client import ChatFollower
from bridge.codecs.socketio import ClientState, SocketIOClient, SocketIOError
from bridge.core import events as ev
from bridge.core.content import EmbeddedResource, ImageContent, ResourceContents, ResourceLink, TextContent
from bridge.errors import ParseError

OPEN = '0{"sid":"abc","upgrades":[],"pingInterval":25000,"pingTimeout":20000,"maxPayload":1000000}'


def connected(namespace: str = "/") -> SocketIOClient:
    c = SocketIOClient(namespace)
    c.receive(OPEN)
    c.connect({"token": "t"})
    prefix = "" if namespace == "/" else namespace + ","
    c.receive("40" + prefix + '{"sid":"s1"}')
    return c


# -- the handshake ------------------------------------------------------------------------


def test_open_connect_and_connected() -> None:
    c = SocketIOClient()
    assert c.state is ClientState.WAIT_OPEN
    (opened,) = c.receive(OPEN)
    assert opened == socketio.Opened(sid="abc", ping_interval_s=25.0, ping_timeout_s=20.0, max_payload=1000000)
    assert c.state is ClientState.OPEN
    assert c.connect({"token": "sk-1"}) == '40{"token":"sk-1"}'
    assert c.state is ClientState.CONNECTING
    assert c.receive('40{"sid":"s1"}') == [socketio.Connected(sid="s1")]
    assert c.state is ClientState.CONNECTED


def test_connect_without_auth_and_in_a_namespace() -> None:
    c = SocketIOClient("/chat")
    c.receive(OPEN)
    assert c.connect() == "40/chat,"
    assert c.receive('40/chat,{"sid":"x"}') == [socketio.Connected(sid="x")]
    # Another namespace's packets are not ours.
    assert c.receive('42/other,["e",{}]') == []


@pytest.mark.parametrize(
    ("packet", "message", "data"),
    [
        ('44{"message":"invalid token"}', "invalid token", None),
        ('44{"message":"nope","data":{"code":401}}', "nope", {"code": 401}),
        ('44"Unable to connect"', "Unable to connect", None),  # older servers send a string
        ("44", "connection refused", None),
    ],
)
def test_connect_error_shapes(packet: str, message: str, data: Any) -> None:
    c = SocketIOClient()
    c.receive(OPEN)
    c.connect({"token": "bad"})
    assert c.receive(packet) == [socketio.ConnectRefused(message=message, data=data)]
    assert c.state is ClientState.CLOSED


def test_pings_are_answered_with_pong_and_noops_ignored() -> None:
    c = connected()
    assert c.receive("2") == [socketio.Pinged()]
    assert c.pong() == "3"
    assert c.receive("6") == []
    assert c.receive("3") == []


# -- events and acks ---------------------------------------------------------------------------


def test_events_keep_their_data_raw() -> None:
    c = connected()
    (e,) = c.receive('42["turn:patch",{"sequence":3,"data":{"text_delta":"hé"}}]')
    assert isinstance(e, socketio.EventReceived) and e.name == "turn:patch" and e.ack_id is None
    assert json.loads(bytes(e.args[0])) == {"sequence": 3, "data": {"text_delta": "hé"}}
    (e,) = c.receive('4212["server:asks",1,2]')
    assert e.ack_id == 12 and [json.loads(bytes(a)) for a in e.args] == [1, 2]
    assert c.ack(12, {"ok": True}) == '4312[{"ok":true}]'


def test_emit_numbers_acks_and_acks_come_back() -> None:
    c = connected()
    assert c.emit("chat:send", {"session_id": "s", "message": "hi"}) == ('42["chat:send",{"session_id":"s","message":"hi"}]', None)
    text, ack = c.emit("session:subscribe", {"session_id": "s"}, ack=True)
    assert (text, ack) == ('420["session:subscribe",{"session_id":"s"}]', 0)
    assert c.emit("chat:stop", {"session_id": "s"}, ack=True)[1] == 1
    (a,) = c.receive('430[{"session_id":"s","sequence":7}]')
    assert a == socketio.AckReceived(ack_id=0, args=[msgspec.Raw(b'{"session_id":"s","sequence":7}')])
    assert c.receive("431[]") == [socketio.AckReceived(ack_id=1, args=[])]


def test_disconnects() -> None:
    c = connected()
    assert c.receive("41") == [socketio.Disconnected(reason="the server disconnected the Socket.IO session")]
    assert c.state is ClientState.CLOSED
    c = connected()
    assert c.receive("1") == [socketio.Disconnected(reason="the server closed the Engine.IO session")]
    c = connected()
    assert c.disconnect() == "41"
    assert c.state is ClientState.CLOSED


# -- the same bytes as python-socketio / python-engineio -----------------------------------------


@pytest.mark.parametrize(
    ("ptype", "data", "namespace", "ack_id"),
    [
        (sio_packet.EVENT, ["chat:send", {"session_id": "s", "message": "ü"}], None, None),
        (sio_packet.EVENT, ["session:subscribe", {"session_id": "s", "after_sequence": 4}], None, 5),
        (sio_packet.EVENT, ["chat:stop", {"session_id": "s"}], "/chat", 17),
        (sio_packet.CONNECT, {"token": "sk-blade-v3-x"}, None, None),
        (sio_packet.CONNECT, {"token": "t"}, "/chat", None),
    ],
)
def test_what_we_send_is_what_python_socketio_sends(ptype: int, data: Any, namespace: str | None, ack_id: int | None) -> None:
    theirs = "4" + sio_packet.Packet(ptype, data=data, namespace=namespace, id=ack_id).encode()
    c = SocketIOClient(namespace or "/")
    c.receive(OPEN)
    if ptype == sio_packet.CONNECT:
        ours = c.connect(data)
    else:
        c.connect()
        c.receive("40" + (f"{namespace}," if namespace else "") + '{"sid":"x"}')
        c._next_ack = ack_id or 0  # noqa: SLF001 - line the ids up with theirs
        ours, _ = c.emit(data[0], data[1], ack=ack_id is not None)
    assert _parsed(ours) == _parsed(theirs)


def _parsed(text: str) -> dict[str, Any]:
    """Compare packets by meaning (JSON spacing may differ)."""
    assert text[0] == "4"
    p = sio_packet.Packet(encoded_packet=text[1:])
    return {"type": p.packet_type, "ns": p.namespace, "id": p.id, "data": p.data}


@pytest.mark.parametrize(
    "pkt",
    [
        sio_packet.Packet(sio_packet.EVENT, data=["chat:end", {"status": "completed", "sequence": 9}]),
        sio_packet.Packet(sio_packet.EVENT, data=["turn:patch", {"x": [1, 2]}], id=3),
        sio_packet.Packet(sio_packet.ACK, data=[{"session_id": "s", "sequence": 0}], id=0),
        sio_packet.Packet(sio_packet.CONNECT, data={"sid": "z"}),
        sio_packet.Packet(sio_packet.DISCONNECT),
    ],
)
def test_what_python_socketio_sends_we_read(pkt: Any) -> None:
    c = SocketIOClient()
    c.receive(eio_packet.Packet(eio_packet.OPEN, {"sid": "a", "upgrades": [], "pingInterval": 100, "pingTimeout": 50}).encode())
    assert c.ping_interval_s == 0.1 and c.ping_timeout_s == 0.05
    c.connect()
    if pkt.packet_type != sio_packet.CONNECT:
        c.receive('40{"sid":"a"}')
    (e,) = c.receive(eio_packet.Packet(eio_packet.MESSAGE, pkt.encode()).encode())
    if pkt.packet_type == sio_packet.EVENT:
        assert e.name == pkt.data[0] and [json.loads(bytes(a)) for a in e.args] == pkt.data[1:] and e.ack_id == pkt.id
    elif pkt.packet_type == sio_packet.ACK:
        assert e.ack_id == pkt.id and [json.loads(bytes(a)) for a in e.args] == pkt.data
    elif pkt.packet_type == sio_packet.CONNECT:
        assert e == socketio.Connected(sid="z")
    else:
        assert isinstance(e, socketio.Disconnected)
    live = connected()
    assert live.receive(eio_packet.Packet(eio_packet.PING).encode()) == [socketio.Pinged()]
    assert eio_packet.Packet(encoded_packet=live.pong()).packet_type == eio_packet.PONG


# -- garbage and illegal states ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("packet", "words"),
    [
        ("", "empty"),
        ("hello", "expected the Engine.IO open packet"),
        ('0{"pingInterval":1}', "open packet is not valid"),
    ],
)
def test_a_bad_handshake_is_an_error(packet: str, words: str) -> None:
    with pytest.raises(SocketIOError, match=words):
        SocketIOClient().receive(packet)


@pytest.mark.parametrize(
    ("packet", "words"),
    [
        ("x", "not an Engine.IO packet"),
        ("9", "not an Engine.IO packet"),
        ("4x", "not a Socket.IO packet"),
        ("49", "unknown Socket.IO packet type 9"),
        ('451-["e",{"_placeholder":true,"num":0}]', "binary Socket.IO packet"),
        ("42[not json", "invalid JSON"),
        ('42{"a":1}', "not an array"),
        ("42[]", "without a name"),
        ("42[1,2]", "name is not a string"),
        ("43[]", "ACK without an ack id"),
        ("421234567890123456[]", "longer than 15 digits"),
        ('40{"sid":"again"}', "CONNECT arrived while the Socket.IO connection is connected"),
        (OPEN, "second open packet"),
    ],
)
def test_garbage_after_connecting_is_an_error(packet: str, words: str) -> None:
    with pytest.raises(SocketIOError, match=words):
        connected().receive(packet)


def test_binary_frames_and_early_or_late_packets_are_errors() -> None:
    with pytest.raises(SocketIOError, match="binary WebSocket frame"):
        connected().receive(b"\x04abc")
    c = SocketIOClient()
    c.receive(OPEN)
    with pytest.raises(SocketIOError, match="an event arrived while the Socket.IO connection is open"):
        c.receive('42["e",{}]')
    with pytest.raises(SocketIOError, match="cannot emit"):
        c.emit("e", {})
    c = connected()
    c.receive("41")
    with pytest.raises(SocketIOError, match="closed"):
        c.receive('42["e",{}]')
    with pytest.raises(SocketIOError, match="cannot send_connect"):
        connected().connect()


def test_every_transition_is_in_the_table() -> None:
    states = {s for s, _ in socketio.TRANSITIONS} | set(socketio.TRANSITIONS.values())
    assert states == set(ClientState)
    assert socketio.TRANSITIONS[(ClientState.CONNECTING, socketio._In.REFUSED)] is ClientState.CLOSED  # noqa: SLF001


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("wss://h/socket.io/", "wss://h/socket.io/?EIO=4&transport=websocket"),
        ("ws://h:8020/socket.io", "ws://h:8020/socket.io/?EIO=4&transport=websocket"),
        ("wss://h/socket.io/?tenant=a&EIO=3", "wss://h/socket.io/?tenant=a&EIO=4&transport=websocket"),
    ],
)
def test_engineio_url(url: str, expected: str) -> None:
    assert socketio.engineio_url(url) == expected


def test_namespace_is_checked() -> None:
    with pytest.raises(ValueError, match="namespace"):
        SocketIOClient("chat")


# == the chat client codec =====================================================================


def frame(event: str, **data: Any) -> bytes:
    return json.dumps({"event": event, "data": data}).encode()


def patch(seq: int, patch_type: str, turn: str = "t-a", **data: Any) -> bytes:
    return frame("turn:patch", session_id="S", sequence=seq, turn_id=turn, loop_id="root", patch_type=patch_type, data=data)


def feed_all(f: ChatFollower, frames: list[bytes]) -> list[ev.Event]:
    out: list[ev.Event] = []
    for x in frames:
        out += f.feed(x)
    return out


RUN = [
    frame("chat:start", session_id="S", sequence=1),
    frame("turn:start", session_id="S", sequence=2, turn_id="t-a", role="assistant"),
    patch(3, "add_content", type="text", content="Hi ", text_delta="Hi "),
    patch(4, "add_content", type="text", content="Hi there", text_delta="there"),
    frame("turn:end", session_id="S", sequence=5, turn_id="t-a", role="assistant", usage={"input_tokens": 1, "output_tokens": 2}),
    frame("chat:end", session_id="S", sequence=6, status="completed", finish_reason="completed"),
]


def test_follower_skips_replayed_and_foreign_frames() -> None:
    f = ChatFollower("S", last_seq=0)
    f.start_turn("T1")
    first = feed_all(f, RUN[:4])
    assert [e.content.text for e in first if isinstance(e, ev.MessageChunk)] == ["Hi ", "there"]
    # A resume after sequence 2 replays 3 and 4 again: nothing twice.
    again = feed_all(f, [RUN[2], RUN[3], *RUN[4:]])
    assert [type(e).__name__ for e in again] == ["UsageReported", "TurnEnded"]
    assert f.last_seq == 6
    assert f.feed(frame("chat:start", session_id="OTHER", sequence=99)) == [] and f.last_seq == 6


def test_follower_without_a_baseline_learns_one() -> None:
    f = ChatFollower("S")
    assert not f.known
    f.learn(None)
    assert not f.known
    f.learn(41)
    assert f.known and f.last_seq == 41
    f.learn(7)  # never backwards
    assert f.last_seq == 41
    f.skip(frame("chat:end", session_id="S", sequence=50))
    assert f.last_seq == 50


ASK = json.dumps({"questions": [{"question": "Which?", "header": "DB", "options": [{"label": "A"}, {"label": "B"}]}]})


def test_a_completed_chat_end_with_a_question_open_only_pauses() -> None:
    f = ChatFollower("S", last_seq=0)
    f.start_turn("T1")
    events = feed_all(
        f,
        [
            frame("chat:start", session_id="S", sequence=1),
            frame("turn:start", session_id="S", sequence=2, turn_id="t-a", role="assistant"),
            patch(3, "add_tool_call", id="ask1", tool_name="AskUserQuestion", display_name="Q", arguments=ASK, status="awaiting_answer"),
            patch(4, "set_status", status="paused"),
            frame("turn:end", session_id="S", sequence=5, turn_id="t-a", role="assistant", status="paused"),
            frame("chat:end", session_id="S", sequence=6, status="completed", finish_reason="completed"),
        ],
    )
    (asked,) = [e for e in events if isinstance(e, ev.QuestionAsked)]
    assert asked.question.id == "ask1" and [o.label for o in asked.question.options] == ["A", "B"]
    assert not any(isinstance(e, ev.TurnEnded) for e in events)
    assert f.paused
    # The answer goes out: the run resumes, and its result for the ask is not a tool.
    f.sent("ask1")
    assert not f.paused
    resumed = feed_all(
        f,
        [
            frame("chat:start", session_id="S", sequence=7),
            patch(8, "tool_result", turn="t-b", tool_call_id="ask1", result={"selections": {"0": [1]}}, status="done"),
            patch(9, "set_tool_status", turn="t-b", tool_call_id="ask1", status="done"),
            frame("chat:end", session_id="S", sequence=10, status="completed", finish_reason="completed"),
        ],
    )
    assert [type(e).__name__ for e in resumed] == ["TurnEnded"]
    assert resumed[0].stop_reason is ev.StopReason.END_TURN and resumed[0].turn_id == "T1"


def test_a_garbled_frame_raises_a_peer_error() -> None:
    with pytest.raises(ParseError):
        ChatFollower("S").feed(b"{not json")


def test_message_of_prompt_blocks() -> None:
    assert chat_client.message_of([TextContent(text="a"), TextContent(text="b")]) == "ab"
    items = chat_client.message_of(
        [
            TextContent(text="look"),
            ImageContent(data="iVBO", mime_type="image/png"),
            ResourceLink(uri="https://x.example/r.pdf", name="r.pdf"),
            EmbeddedResource(resource=ResourceContents(uri="file:///w/notes.md", text="hi", mime_type="text/markdown")),
        ]
    )
    assert msgspec.to_builtins(items) == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
        {"type": "text", "text": "https://x.example/r.pdf"},
        {"type": "file", "name": "notes.md", "data": "aGk=", "mime_type": "text/markdown"},
    ]


def test_outgoing_payloads() -> None:
    send = chat_client.send_message("S", [TextContent(text="hi")], mode="executing", model="m1", output_schema={"type": "object"})
    assert msgspec.to_builtins(send) == {
        "session_id": "S", "message": "hi", "headless": True, "output_schema": {"type": "object"}, "mode": "executing", "model": "m1",
    }  # fmt: skip
    assert msgspec.to_builtins(chat_client.subscribe("S", None)) == {"session_id": "S"}
    assert msgspec.to_builtins(chat_client.subscribe("S", 4)) == {"session_id": "S", "after_sequence": 4}
    q = ev.Question(id="ask1", kind="choice", prompt="Which?", options=[ev.QuestionOption(id="0", label="A"), ev.QuestionOption(id="1", label="B")], allow_text=True)
    answer = chat_client.send_answer("S", q, ev.QuestionAnswered(question_id="ask1", selected=["1"], text="and C"))
    assert msgspec.to_builtins(answer) == {
        "session_id": "S",
        "message": "B, and C",
        "askuser_answer": {"tool_call_id": "ask1", "selections": {"0": [1]}, "custom": {"0": "and C"}},
    }


def test_subscribe_acknowledgements() -> None:
    assert chat_client.subscribed_sequence(b'{"session_id":"S","sequence":12}') == (True, 12, None)
    assert chat_client.subscribed_sequence(None) == (True, None, None)
    assert chat_client.subscribed_sequence(b"true") == (True, None, None)
    assert chat_client.subscribed_sequence(b"false") == (False, None, "the server refused the subscription")
    assert chat_client.subscribed_sequence(b'{"error":"gone"}') == (False, None, "gone")
    assert chat_client.subscribed_sequence(b'{"ok":false,"message":"no"}') == (False, None, "no")


def test_a_question_shown_as_text_and_answered_in_words() -> None:
    q = ev.Question(id="a", kind="choice", prompt="Which?", header="DB",
                    options=[ev.QuestionOption(id="0", label="Postgres"), ev.QuestionOption(id="1", label="SQLite", description="small")])  # fmt: skip
    text = chat_client.question_text(q)
    assert text.startswith("DB: Which?\n  1. Postgres\n  2. SQLite — small\n")
    assert chat_client.answer_from_text(q, " 2 ").selected == ["1"]
    assert chat_client.answer_from_text(q, "sqlite").selected == ["1"]
    free = chat_client.answer_from_text(q, "MySQL please")
    assert free.selected == [] and free.text == "MySQL please"
    multi = ev.Question(id="m", kind="choice", prompt="?", multi_select=True, options=q.options)
    assert chat_client.answer_from_text(multi, "1, sqlite").selected == ["0", "1"]
    form = ev.Question(id="f", kind="form", prompt="?", schema={"type": "object", "properties": {"0": {"type": "string", "description": "Name?"}}})
    assert chat_client.answer_from_text(form, "Ada").values == {"0": "Ada"}
    assert "1. Name?" in chat_client.question_text(form)


# -- golden transcripts: what python-socketio's server sent for a run, and what it means ----------

GOLDEN = Path(__file__).resolve().parent / "golden" / "socketio"


def replay_transcript(name: str) -> list[Any]:
    """Every packet of a recorded transcript through the client and the follower."""
    c = SocketIOClient()
    f = ChatFollower("SESSION", last_seq=0)
    f.start_turn("T")
    out: list[Any] = []
    for line in (GOLDEN / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        for e in c.receive(line):
            if isinstance(e, socketio.Opened):
                c.connect({"token": "t"})
            elif isinstance(e, socketio.AckReceived):
                ok, seq, _ = chat_client.subscribed_sequence(bytes(e.args[0]))
                assert ok
                f.learn(seq)
            elif isinstance(e, socketio.EventReceived):
                for event in f.feed(chat_client.chat_frame(e.name, bytes(e.args[0]))):
                    out.append(msgspec.to_builtins(event))
                if e.name == "chat:end" and f.paused:
                    out.append({"paused": True})
                    (q,) = f.reader.open_questions()
                    f.sent(q.id)  # the recorded answer went out here
    return out


@pytest.mark.parametrize("name", ["run_fork", "run_ask"])
def test_golden_transcripts(name: str) -> None:
    expected = json.loads((GOLDEN / f"{name}.events.json").read_text(encoding="utf-8"))
    assert replay_transcript(name) == expected
