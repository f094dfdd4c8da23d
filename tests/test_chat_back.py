"""The chat back against servers that misbehave: clear errors, no hang.

In-process, under trio: a session manager with the memory store runs the chat back
against small servers written here (trio-websocket for the WebSocket, a few lines
of HTTP/1.1 for `POST /api/sessions`), each scripted to fail one way: a wrong
token, a refused upgrade, a close during the handshake, garbage instead of
Engine.IO, garbage frames mid-run, silence, a server that stops pinging. Every test
has a `trio.fail_after` ceiling well above the deadlines it sets.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection, WebSocketRequest, serve_websocket

from bridge.backs import make_back
from bridge.backs.chat.back import ChatBack
from bridge.config import parse_config
from bridge.core import events as ev
from bridge.core.content import TextContent
from bridge.session import SessionManager
from bridge.store.memory import MemoryStore

CEILING_S = 15
TOKEN = "tok-never-shown"
OPEN = '0{"sid":"e1","upgrades":[],"pingInterval":25000,"pingTimeout":20000,"maxPayload":1000000}'

Handler = Callable[[WebSocketRequest], Awaitable[None]]


@asynccontextmanager
async def rest_server(status: int = 200, body: Any = None) -> AsyncIterator[str]:
    """A minimal HTTP/1.1 server for the REST half: every request gets `status` + `body`."""
    answer = json.dumps({"session_id": "remote-1"} if body is None else body).encode()

    async def handle(stream: trio.SocketStream) -> None:
        data = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0)
            while len(rest) < length:
                rest += await stream.receive_some(65536)
            reason = {200: b"OK", 401: b"Unauthorized", 404: b"Not Found"}.get(status, b"Error")
            await stream.send_all(
                b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, reason, len(answer), answer)
            )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, handle, 0)
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def ws_server(handler: Handler) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, handler, "127.0.0.1", 0, None)
        yield server.port
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def manager_for(url: str, rest: str, route: dict[str, Any] | None = None, **back: Any) -> AsyncIterator[SessionManager]:
    config = parse_config(
        {
            "routes": {
                "platform": {
                    "back": {"kind": "chat", "url": url, "rest_url": rest, "connect_timeout_s": 0.5, "reconnect_backoff_s": 0.01, **back},
                    "cancel_grace_s": 1,
                    **(route or {}),
                }
            },
            "store": {"flush_interval_s": 0.01},
        }
    )
    manager = SessionManager(config, MemoryStore(), make_back)
    async with trio.open_nursery() as nursery:
        await nursery.start(manager.run)
        yield manager
        nursery.cancel_scope.cancel()


async def one_turn(manager: SessionManager, text: str = "hello") -> ev.TurnEnded:
    session = await manager.create("platform")
    turn = session.start_turn([TextContent(text=text)])
    return await turn.wait()


async def failed_with(url: str, rest: str, **back: Any) -> str:
    async with manager_for(url, rest, **back) as manager:
        ended = await one_turn(manager)
    assert ended.stop_reason is ev.StopReason.FAILED, ended
    assert ended.error is not None
    assert TOKEN not in ended.error.message
    return ended.error.message


# -- Socket.IO servers that fail ---------------------------------------------------------------


async def sio_handshake(ws: WebSocketConnection, *, ping_ms: tuple[int, int] = (25000, 20000)) -> None:
    await ws.send_message(OPEN.replace("25000", str(ping_ms[0])).replace("20000", str(ping_ms[1])))
    connect = await ws.get_message()
    assert connect.startswith("40")
    await ws.send_message('40{"sid":"s1"}')


async def ack_subscribe(ws: WebSocketConnection) -> None:
    message = await ws.get_message()
    assert message.startswith("42"), message
    ack_id = message[2 : message.index("[")]
    await ws.send_message(f'43{ack_id}[{{"session_id":"remote-1","sequence":0}}]')


async def test_wrong_token_on_rest_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_TOKEN", TOKEN)
    with trio.fail_after(CEILING_S):
        async with rest_server(401, {"detail": "invalid or missing API key"}) as rest:
            message = await failed_with("ws://127.0.0.1:9/socket.io/", rest, dialect="socketio", token_env="PLATFORM_TOKEN")
    assert message == (
        f"route platform: the chat server at {rest}/api/sessions answered POST /api/sessions with 401 Unauthorized "
        "(check the token in $PLATFORM_TOKEN): invalid or missing API key"
    )


async def test_wrong_token_on_the_socket_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_TOKEN", TOKEN)
    seen: list[str] = []

    async def refuse(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.send_message(OPEN)
        seen.append(await ws.get_message())
        await ws.send_message('44{"message":"invalid token"}')
        await trio.sleep(5)

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(refuse) as port:
            url = f"ws://127.0.0.1:{port}/socket.io/"
            message = await failed_with(url, rest, dialect="socketio", token_env="PLATFORM_TOKEN")
            # The probe (doctor, /readyz) says the same.
            back = ChatBack("platform", parse_config({"routes": {"platform": {"back": {"kind": "chat", "url": url, "dialect": "socketio",
                                                                                       "token_env": "PLATFORM_TOKEN"}}}}).routes["platform"])  # fmt: skip
            with pytest.raises(Exception, match="refused the Socket.IO connection: invalid token"):
                await back.probe(deep=False)
    assert message == (
        f"route platform: the chat server at ws://127.0.0.1:{port}/socket.io/ refused the Socket.IO connection: "
        "invalid token (check the token in $PLATFORM_TOKEN)"
    )
    assert seen[0] == '40{"token":"%s"}' % TOKEN  # the token went in CONNECT's auth (Blade `api/websocket.md`)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("close", "closed the connection during the handshake: the socket closed (1000 NORMAL_CLOSURE)"),
        ("drop", "closed the connection during the handshake: the socket closed (1006 ABNORMAL_CLOSURE"),
        ("garbage", "does not speak Socket.IO as expected: expected the Engine.IO open packet, got 'HTTP/1.1 200 OK hello'"),
        ("silent", "did not complete the handshake within connect_timeout_s (0.5 s)"),
        ("reject", "refused the WebSocket: HTTP 403 (no token is configured: set token_env or token_file): go away"),
        ("disconnect", "ended the connection during the handshake: the server disconnected the Socket.IO session"),
    ],
)
async def test_a_server_failing_the_handshake_is_a_clear_error(mode: str, expected: str) -> None:
    async def handler(request: WebSocketRequest) -> None:
        if mode == "reject":
            await request.reject(403, body=b'{"detail": "go away"}')
            return
        ws = await request.accept()
        if mode == "close":
            await ws.aclose()
        elif mode == "drop":
            ws._stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # noqa: SLF001
            await ws._stream.aclose()  # noqa: SLF001
        elif mode == "garbage":
            await ws.send_message("HTTP/1.1 200 OK hello")
        elif mode == "disconnect":
            await ws.send_message(OPEN)
            await ws.get_message()
            await ws.send_message("41")
        await trio.sleep(5)

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            message = await failed_with(f"ws://127.0.0.1:{port}/socket.io/", rest, dialect="socketio")
    assert f"the chat server at ws://127.0.0.1:{port}/socket.io/ {expected}" in message, message
    assert message.startswith("route platform: ")


async def test_garbage_mid_run_drops_the_socket_and_a_run_that_cannot_resume_fails() -> None:
    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await sio_handshake(ws)
        await ack_subscribe(ws)
        await ws.send_message("@@@ not engine.io")
        await trio.sleep(5)

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            message = await failed_with(f"ws://127.0.0.1:{port}/socket.io/", rest, dialect="socketio", reconnect_attempts=1)
    assert message == (
        f"route platform: the connection to the chat server at ws://127.0.0.1:{port}/socket.io/ dropped during the run "
        "and could not be resumed after 1 attempts: the server sent a bad Socket.IO packet "
        "(not an Engine.IO packet: '@@@ not engine.io')"
    )


async def test_a_server_that_stops_pinging_counts_as_dropped() -> None:
    connections = 0

    async def handler(request: WebSocketRequest) -> None:
        nonlocal connections
        connections += 1
        ws = await request.accept()
        await sio_handshake(ws, ping_ms=(200, 100))
        await ack_subscribe(ws)
        await trio.sleep(5)  # no ping, ever

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            start = trio.current_time()
            message = await failed_with(f"ws://127.0.0.1:{port}/socket.io/", rest, dialect="socketio", reconnect_attempts=0)
            elapsed = trio.current_time() - start
    assert "could not be resumed after 0 attempts: no ping from the server within its pingInterval + pingTimeout (0.3 s)" in message
    assert connections == 1 and elapsed < 2


async def test_pings_are_answered_and_a_quiet_run_hits_its_deadlines() -> None:
    pongs: list[str] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await sio_handshake(ws, ping_ms=(100, 100))
        await ack_subscribe(ws)
        async with trio.open_nursery() as nursery:

            async def ping() -> None:
                while True:
                    await ws.send_message("2")
                    await trio.sleep(0.1)

            nursery.start_soon(ping)
            with contextlib.suppress(ConnectionClosed):
                while True:  # the chat:send, then pongs; never an event
                    message = await ws.get_message()
                    pongs.append(message)
            nursery.cancel_scope.cancel()

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            message = await failed_with(f"ws://127.0.0.1:{port}/socket.io/", rest, dialect="socketio", first_event_timeout_s=0.6)
    events = [json.loads(p[p.index("["):])[0] for p in pongs if p.startswith("42")]
    assert events == ["chat:send", "chat:stop"]  # the run is not left going when the turn fails
    assert pongs.count("3") >= 4 and pongs[-1] == "41"
    assert message.endswith("sent nothing within first_event_timeout_s (0.6 s) of chat:send")


# -- the "ws" dialect --------------------------------------------------------------------------


async def test_ws_garbage_frames_fail_the_turn_and_stop_the_run() -> None:
    got: list[dict[str, Any]] = []
    auth: list[Any] = []

    async def handler(request: WebSocketRequest) -> None:
        auth.append(dict(request.headers).get(b"authorization"))
        ws = await request.accept()
        sub = json.loads(await ws.get_message())
        got.append(sub)
        await ws.send_message(json.dumps({"event": "session:subscribed", "data": {"session_id": "remote-1", "sequence": 4}}))
        got.append(json.loads(await ws.get_message()))  # chat:send
        await ws.send_message('{"event": "chat:start", "data": {"session_id": "remote-1", "sequence": 5}}')
        await ws.send_message("this is not JSON")
        with trio.move_on_after(2):
            got.append(json.loads(await ws.get_message()))  # chat:stop: the run is not left going

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            message = await failed_with(f"ws://127.0.0.1:{port}/ws", rest)
    assert message.startswith(f"route platform: the chat server at ws://127.0.0.1:{port}/ws sent a frame that is not a chat frame: invalid JSON")
    assert [g["event"] for g in got] == ["session:subscribe", "chat:send", "chat:stop"]
    assert got[0]["data"] == {"session_id": "remote-1"}
    assert got[1]["data"] == {"session_id": "remote-1", "message": "hello"}
    assert auth == [None]  # no token configured, none sent


async def test_ws_subscription_refused_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLATFORM_TOKEN", TOKEN)
    auth: list[Any] = []

    async def handler(request: WebSocketRequest) -> None:
        auth.append(dict(request.headers).get(b"authorization"))
        ws = await request.accept()
        await ws.get_message()
        await ws.send_message(json.dumps({"event": "system:error", "data": {"message": "unknown session 'remote-1'", "code": "not_found",
                                                                            "session_id": "remote-1"}}))  # fmt: skip
        await trio.sleep(5)

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            message = await failed_with(f"ws://127.0.0.1:{port}/ws", rest, token_env="PLATFORM_TOKEN")
    assert message == "route platform: the chat server refused to follow session remote-1: unknown session 'remote-1'"
    assert auth == [f"Bearer {TOKEN}".encode()]


async def test_ws_unanswered_pings_count_as_dropped() -> None:
    # trio-websocket answers pings in its reader task, so the silent server is raw TCP:
    # it completes the upgrade, acknowledges the subscription and then reads nothing.
    async def raw(stream: trio.SocketStream) -> None:
        request = b""
        while b"\r\n\r\n" not in request:
            request += await stream.receive_some(65536)
        key = next(line.split(b":", 1)[1].strip() for line in request.split(b"\r\n") if line.lower().startswith(b"sec-websocket-key"))
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        ack = json.dumps({"event": "session:subscribed", "data": {"session_id": "remote-1", "sequence": 0}}).encode()
        await stream.send_all(bytes([0x81, len(ack)]) + ack)
        await trio.sleep(5)

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, raw, 0)
            port = listeners[0].socket.getsockname()[1]
            message = await failed_with(f"ws://127.0.0.1:{port}/ws", rest, ping_interval_s=0.2, reconnect_attempts=0)
            nursery.cancel_scope.cancel()
    assert message.endswith("dropped during the run and could not be resumed after 0 attempts: no pong within ping_interval_s (0.2 s)")


async def test_ws_a_turn_cut_off_by_the_session_still_says_chat_stop() -> None:
    got: list[str] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.get_message()
        await ws.send_message(json.dumps({"event": "session:subscribed", "data": {"session_id": "remote-1", "sequence": 0}}))
        await ws.get_message()  # chat:send
        await ws.send_message('{"event": "chat:start", "data": {"session_id": "remote-1", "sequence": 1}}')
        with contextlib.suppress(ConnectionClosed):
            while True:
                got.append(json.loads(await ws.get_message())["event"])

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port, manager_for(f"ws://127.0.0.1:{port}/ws", rest, {"turn_timeout_s": 0.5}) as manager:
            ended = await one_turn(manager)
            await trio.sleep(0.2)
    assert ended.stop_reason is ev.StopReason.FAILED and ended.error is not None
    assert "turn_timeout_s (0.5 s)" in ended.error.message
    assert got == ["chat:stop"]


async def test_ws_a_sub_agents_question_keeps_its_fork_as_parent() -> None:
    answers: list[dict[str, Any]] = []

    async def handler(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.get_message()
        await ws.send_message(json.dumps({"event": "session:subscribed", "data": {"session_id": "remote-1", "sequence": 0}}))
        await ws.get_message()  # chat:send
        frames = [
            {"event": "chat:start", "data": {"session_id": "remote-1", "sequence": 1}},
            {"event": "turn:start", "data": {"session_id": "remote-1", "sequence": 2, "turn_id": "child", "role": "assistant",
                                             "parent_fork_tool_call_id": "tc_fork"}},
            {"event": "turn:patch", "data": {"session_id": "remote-1", "sequence": 3, "turn_id": "child", "patch_type": "add_tool_call",
                                             "data": {"id": "ask1", "tool_name": "AskUserQuestion", "display_name": "Question", "arguments": json.dumps(
                                                 {"questions": [{"question": "Which?", "options": [{"label": "A"}, {"label": "B"}]}]})}}},
        ]  # fmt: skip
        for frame in frames:
            await ws.send_message(json.dumps(frame))
        answers.append(json.loads(await ws.get_message()))  # chat:send with askuser_answer
        await ws.send_message(json.dumps({"event": "chat:end", "data": {"session_id": "remote-1", "sequence": 4, "status": "completed"}}))
        with contextlib.suppress(ConnectionClosed):
            while True:
                await ws.get_message()

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port, manager_for(f"ws://127.0.0.1:{port}/ws", rest) as manager:
            session = await manager.create("platform")
            asked: list[ev.QuestionAsked] = []

            class Answerer:
                def deliver(self, event: ev.Event) -> None:
                    if isinstance(event, ev.QuestionAsked):
                        asked.append(event)
                        session.answer(event.question.id, selected=["1"])

                def congested(self) -> bool:
                    return False

                async def wait_uncongested(self) -> None:
                    pass

            session.subscribe(Answerer())
            ended = await session.start_turn([TextContent(text="hello")]).wait()
    assert ended.stop_reason is ev.StopReason.END_TURN, ended
    assert [(a.question.id, a.parent_tool_call_id) for a in asked] == [("ask1", "tc_fork")]
    assert answers and answers[0]["data"]["askuser_answer"]["tool_call_id"] == "ask1", answers


async def test_token_file_is_read_from_the_credentials_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    (tmp_path / "platform.token").write_text(TOKEN + "\n")
    monkeypatch.setenv("CREDENTIALS_DIRECTORY", str(tmp_path))
    auth: list[Any] = []

    async def handler(request: WebSocketRequest) -> None:
        auth.append(dict(request.headers).get(b"authorization"))
        await request.reject(401, body=b'{"detail": "expired"}')

    with trio.fail_after(CEILING_S):
        async with rest_server() as rest, ws_server(handler) as port:
            message = await failed_with(f"ws://127.0.0.1:{port}/ws", rest, token_file="platform.token")
    assert auth == [f"Bearer {TOKEN}".encode()]
    assert message.endswith("refused the WebSocket: HTTP 401 (check the token in platform.token): expired")


# -- the shared HTTP client ------------------------------------------------------------------------


async def test_the_rest_client_has_a_bounded_pool() -> None:
    """bridge/transport/http.py: without `max_connections` a client still has a bound
    (a bare `httpx.Limits()` has none), so the chat back and the A2A push sender, whose
    webhooks clients choose, cannot open connections without end (STYLE.md rule 14)."""
    from bridge.transport.http import DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_KEEPALIVE, open_client

    assert (DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_KEEPALIVE) == (100, 20)
    config = parse_config({"routes": {"platform": {"back": {"kind": "chat", "url": "ws://127.0.0.1:1", "rest_url": "http://127.0.0.1:1"}}}})
    back = make_back("platform", config.routes["platform"])
    assert isinstance(back, ChatBack)
    for client in (back.server.client, open_client(connect_timeout_s=1)):
        pool = client._transport._pool  # type: ignore[attr-defined]  # httpx.AsyncHTTPTransport -> httpcore pool
        assert (pool._max_connections, pool._max_keepalive_connections) == (100, 20)
        await client.aclose()
    # An explicit bound (the A2A back's `max_connections`) keeps every connection alive.
    client = open_client(connect_timeout_s=1, max_connections=7)
    pool = client._transport._pool  # type: ignore[attr-defined]
    assert (pool._max_connections, pool._max_keepalive_connections) == (7, 7)
    await client.aclose()
