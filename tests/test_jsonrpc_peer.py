"""The sans-I/O JSON-RPC peer (bridge/codecs/jsonrpc_peer.py), driven without an event loop."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bridge.codecs.jsonrpc_peer import (
    Call,
    CancelRequested,
    JsonRpcPeer,
    Notify,
    ProtocolError,
    RequestError,
    RequestResult,
    UnknownReply,
)
from bridge.errors import InternalError, InvalidParams, MethodNotFound


def _lines(peer: JsonRpcPeer) -> list[dict]:
    return [json.loads(line) for line in peer.data_to_send().splitlines()]


def test_requests_are_numbered_and_batched_into_one_write() -> None:
    peer = JsonRpcPeer()
    a = peer.request("session/request_permission", {"x": 1}, context="q1")
    b = peer.request("elicitation/create")
    peer.notify("session/update", {"sessionId": "s"})
    assert (a.id, b.id) == (1, 2) and a.context == "q1"
    assert _lines(peer) == [
        {"jsonrpc": "2.0", "id": 1, "method": "session/request_permission", "params": {"x": 1}},
        {"jsonrpc": "2.0", "id": 2, "method": "elicitation/create"},
        {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}},
    ]
    assert peer.data_to_send() == b""
    assert sorted(peer.pending) == [1, 2]


def test_a_result_settles_its_request_once() -> None:
    peer = JsonRpcPeer()
    req = peer.request("elicitation/create", {})
    out = peer.receive(b'{"jsonrpc":"2.0","id":1,"result":{"action":"cancel"}}')
    assert isinstance(out, RequestResult) and out.request is req
    assert out.decode(dict) == {"action": "cancel"}
    again = peer.receive(b'{"jsonrpc":"2.0","id":1,"result":{}}')
    assert isinstance(again, UnknownReply) and again.id == 1
    assert not peer.pending


def test_an_error_settles_its_request_as_an_error() -> None:
    peer = JsonRpcPeer()
    peer.request("fs/read_text_file", {})
    out = peer.receive(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"no such file"}}')
    assert isinstance(out, RequestError) and out.error.code == -32002 and out.request.method == "fs/read_text_file"


def test_a_string_id_does_not_settle_the_integer_request() -> None:
    peer = JsonRpcPeer()
    peer.request("x")
    assert isinstance(peer.receive(b'{"jsonrpc":"2.0","id":"1","result":null}'), UnknownReply)
    assert list(peer.pending) == [1]


def test_a_null_id_error_is_an_unknown_reply_never_answered() -> None:
    peer = JsonRpcPeer()
    out = peer.receive(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}')
    assert isinstance(out, UnknownReply) and out.id is None and out.error is not None
    assert peer.data_to_send() == b""


def test_result_that_does_not_fit_is_invalid_params() -> None:
    peer = JsonRpcPeer()
    peer.request("x")
    out = peer.receive(b'{"jsonrpc":"2.0","id":1,"result":[1]}')
    assert isinstance(out, RequestResult)
    with pytest.raises(InvalidParams):
        out.decode(dict)


def test_cancel_withdraws_a_pending_request_with_cancel_request() -> None:
    peer = JsonRpcPeer()
    req = peer.request("session/request_permission", {})
    peer.data_to_send()
    assert peer.cancel(req.id) is req
    assert peer.cancel(req.id) is None  # once
    assert _lines(peer) == [{"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 1}}]
    assert isinstance(peer.receive(b'{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"x"}}'), UnknownReply)


def test_forget_and_fail_all_send_nothing() -> None:
    peer = JsonRpcPeer()
    a = peer.request("a")
    peer.request("b")
    peer.data_to_send()
    assert peer.forget(a.id) is a
    assert [p.method for p in peer.fail_all()] == ["b"]
    assert not peer.pending and peer.data_to_send() == b""


def test_incoming_requests_notifications_and_cancellations() -> None:
    peer = JsonRpcPeer()
    call = peer.receive(b'{"jsonrpc":"2.0","id":"a","method":"session/new","params":{"cwd":"/"}}')
    assert isinstance(call, Call) and call.id == "a" and call.method == "session/new"
    note = peer.receive(b'{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}}')
    assert isinstance(note, Notify) and note.method == "session/cancel"
    cancel = peer.receive(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":7}}')
    assert isinstance(cancel, CancelRequested) and cancel.request_id == 7
    odd = peer.receive(b'{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":[]}}')
    assert isinstance(odd, Notify)  # not a request id: ignored like any notification


@pytest.mark.parametrize(
    ("line", "code", "rid"),
    [(b"{nope", -32700, None), (b'{"jsonrpc":"2.0","id":1}', -32600, 1), (b'"\xff"', -32700, None), (b"[" * 500, -32700, None)],
)
def test_a_frame_that_is_not_json_rpc_raises_protocol_error(line: bytes, code: int, rid: Any) -> None:
    peer = JsonRpcPeer()
    with pytest.raises(ProtocolError) as info:
        peer.receive(line)
    peer.respond_error(info.value.id, info.value.error)
    (answer,) = _lines(peer)
    assert answer["error"]["code"] == code and answer["id"] == rid  # null only when it cannot be read


def test_responses_map_errors_by_meaning() -> None:
    sent: list = []
    peer = JsonRpcPeer(sent.append)
    peer.respond(3, {"ok": True})
    peer.respond_error(4, MethodNotFound("method not found: x"))
    peer.respond_error(5, RuntimeError("our bug"))
    peer.respond_error(6, InternalError("internal error"))
    assert [getattr(m, "result", None) for m in sent[:1]] == [{"ok": True}]
    assert [m.error.code for m in sent[1:]] == [-32601, -32603, -32603]
    assert sent[2].error.message == "internal error"  # never the text of our bug
